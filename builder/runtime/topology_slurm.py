"""A Slurm job step as ``srun --nodes R --ntasks-per-node N`` starts it: every task a process of its own, the tasks
of a node sharing that node's hostname, each task told its place with the ``SLURM_*`` variables of ``srun(1)``.

Why every task is a replica here: Slurm, not the image, starts the processes, so a replay must too (the launcher
then keeps their ranks and starts nothing). Node hostnames end in digits (``<job>-node0``), so the node lists
compress as Slurm writes them (``<job>-node[0-3]``, `hostlist.compress`). The variables the launcher reads are
named by `platforms.slurm`; the others below are what ``srun`` sets besides (step 0 of the batch job, whose
allocation is the step's nodes), each one checked against a real ``srun``'s (tests/data/slurm_env_samples.json).
Standard library only.
"""

from __future__ import annotations

import zlib

from .hostlist import compress, compress_counts
from .platforms import slurm
from .topology_spec import ReplicaSpec
from .world import node_role

JOB_NODELIST, NODELIST = "SLURM_JOB_NODELIST", "SLURM_NODELIST"
NNODES, JOB_NUM_NODES, STEP_NUM_NODES = "SLURM_NNODES", "SLURM_JOB_NUM_NODES", "SLURM_STEP_NUM_NODES"
STEP_ID, STEPID, JOBID, JOB_NAME = "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_JOBID", "SLURM_JOB_NAME"
STEP_NUM_TASKS, NPROCS = "SLURM_STEP_NUM_TASKS", "SLURM_NPROCS"
TOPOLOGY_ADDR, TOPOLOGY_PATTERN, GTIDS = "SLURM_TOPOLOGY_ADDR", "SLURM_TOPOLOGY_ADDR_PATTERN", "SLURM_GTIDS"
JOB_IDS = range(1_000_000, 10_000_000)  # the job ids a replay gives: seven digits, as a busy cluster's


def job_number(job: str) -> int:
    """A Slurm job id for the job named `job`: the same name gives the same id, another run's name another one."""
    return JOB_IDS[zlib.crc32(job.encode()) % len(JOB_IDS)]


def slurm_tasks(nodes: int, tasks_per_node: int, job: str, job_id: int) -> list[ReplicaSpec]:
    """Every task of the step, node by node; task ``node * tasks_per_node + local`` runs on node ``node``."""
    job_id_variable, procid, ntasks, nodeid, localid, step_nodelist = slurm.REQUIRED
    step_tasks, job_tasks, ntasks_per_node = slurm.TASK_COUNTS
    hosts = [f"{job}-node{k}" for k in range(nodes)]
    total, counts = nodes * tasks_per_node, compress_counts([tasks_per_node] * nodes)
    step = {
        job_id_variable: str(job_id), JOBID: str(job_id), JOB_NAME: job, STEP_ID: "0", STEPID: "0",
        step_nodelist: compress(hosts), JOB_NODELIST: compress(hosts), NODELIST: compress(hosts),
        NNODES: str(nodes), JOB_NUM_NODES: str(nodes), STEP_NUM_NODES: str(nodes),
        ntasks: str(total), NPROCS: str(total), STEP_NUM_TASKS: str(total),
        step_tasks: counts, job_tasks: counts, ntasks_per_node: str(tasks_per_node), TOPOLOGY_PATTERN: "node",
    }
    specs = []
    for node, host in enumerate(hosts):
        on_node = [node * tasks_per_node + local for local in range(tasks_per_node)]
        for local, task in enumerate(on_node):
            env = {**step, procid: str(task), nodeid: str(node), localid: str(local), TOPOLOGY_ADDR: host,
                   GTIDS: ",".join(map(str, on_node))}
            role, index = node_role(task)
            specs.append(ReplicaSpec(f"task-{task}", role, index, node, env, host))
    return specs
