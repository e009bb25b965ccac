"""Slurm: ``srun`` starts every task (one process each) and tells it its place with ``SLURM_*`` (``srun(1)``).

The launcher keeps Slurm's process-level ranks and never starts a second layer of processes: ``RANK`` is
``SLURM_PROCID``, ``WORLD_SIZE`` is ``SLURM_NTASKS``, ``LOCAL_RANK`` is ``SLURM_LOCALID``, the node is
``SLURM_NODEID`` of the hosts in ``SLURM_STEP_NODELIST`` (hostlist syntax, `hostlist`), and this node's task count
comes from ``SLURM_STEP_TASKS_PER_NODE`` (``4(x2)`` form). The rendezvous is the step's first host, as JAX's
``SlurmCluster`` and Lightning's ``SLURMEnvironment`` both choose it:

* torch: ``MASTER_ADDR``/``MASTER_PORT`` when the job script exported them (a common sbatch idiom), else the first
  host and Lightning's port, ``15000 +`` the job id's last four digits;
* JAX: the first host and JAX's own port, ``SLURM_JOB_ID % 4096 + 61440``, or ``JAX_COORDINATOR_PORT`` where the
  job script exported it (JAX's detection reads it first), so a script calling ``jax.distributed.initialize()``
  without arguments meets the same coordinator;
* TensorFlow: every task a worker at ``host:8888 + SLURM_LOCALID``, the ports TensorFlow's
  ``SlurmClusterResolver`` gives.

A batch script runs once, on the first node, outside any step (no ``SLURM_STEP_NODELIST``): it must start the
tasks with ``srun``, so the launcher refuses there instead of waiting for peers that never come.

The replay: a Slurm job step as ``srun --nodes R --ntasks-per-node N`` starts it: every task a process of its own,
the tasks of a node sharing that node's hostname, each task told its place with the ``SLURM_*`` variables of
``srun(1)``.

Why every task is a replica here: Slurm, not the image, starts the processes, so a replay must too (the launcher
then keeps their ranks and starts nothing). Node hostnames end in digits (``<job>-node0``), so the node lists
compress as Slurm writes them (``<job>-node[0-3]``, `hostlist.compress`). The variables the launcher reads are
named by this module; the others below are what ``srun`` sets besides (step 0 of the batch job, whose
allocation is the step's nodes), each one checked against a real ``srun``'s (tests/data/slurm_env_samples.json).
Standard library only.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping

from ..contract import SLURM
from ..shm import NODE_OWN, NodeShm
from ..hostlist import expand, expand_counts
from ..world import ClusterError, ClusterInfo, below, format_address, host, integer, node_role, port, present, \
    require, split_address
from .starts import PLATFORM, Starts
import zlib
from ..hostlist import compress, compress_counts
from ..topology_spec import Job, ReplicaSpec

NAME = SLURM
STARTS = Starts(PLATFORM)  # srun starts one task per process
PORT = None  # derived from the job id, as SlurmClusterResolver and the launcher derive it
PORT_REFUSED = "derives its ports from the job id: pass job_id, not port"  # a replay given a port
NO_TF_CONFIG: str | None = None  # it runs TensorFlow
NOT_EMULATED: str | None = None  # selftest emulates it on 127.0.0.1
#: Its /dev/shm (`shm.NodeShm`): srun's tasks run on the node (or in containers that share its /dev).
SHM = NodeShm(default=None, default_said=f"{NODE_OWN}; srun's tasks share it (pyxis/enroot and apptainer keep the "
              "host's /dev/shm; trainimg's docker runtime runs each task with --ipc host)",
              setting=None,
              source="tmpfs(5) (size: half of RAM by default); Apptainer's and enroot's default mounts (not re-read "
                     "here); trainimg's jobs/slurm.py passes --ipc host")
REQUIRED = ("SLURM_JOB_ID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_NODEID", "SLURM_LOCALID", "SLURM_STEP_NODELIST")
TASK_COUNTS = ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE")
RENDEZVOUS = ("MASTER_ADDR", "MASTER_PORT")  # optional: a job script's own choice wins
JAX_PORT = "JAX_COORDINATOR_PORT"  # optional, the same for JAX: jax._src.clusters.ClusterEnv reads it before its own
JAX_ADDRESS = "JAX_COORDINATOR_ADDRESS"  # optional: jax.distributed.initialize takes a script's own before detecting
VARIABLES = (*REQUIRED, *TASK_COUNTS)
RECOGNISED = (*VARIABLES, *RENDEZVOUS, JAX_PORT, JAX_ADDRESS)  # what `platforms.VARIABLES` gathers
LIGHTNING_PORT_BASE = 15000  # lightning.fabric.plugins.environments.slurm: 15000 + last 4 digits of the job id
JAX_PORT_BASE, JAX_PORT_SPAN = 61440, 4096  # jax._src.clusters.slurm_cluster: job id % 4096 + 61440
TF_PORT_BASE = 8888  # tensorflow SlurmClusterResolver's port_base


def claims(env: Mapping[str, str]) -> tuple[str, ...]:
    return present(env, VARIABLES)


def read(env: Mapping[str, str], *, reduction_server: bool = False) -> ClusterInfo:
    if not env.get("SLURM_STEP_NODELIST", "").strip() and env.get("SLURM_JOB_ID", "").strip():
        raise ClusterError("SLURM_STEP_NODELIST", "is not set: this is a Slurm job but not an srun task (a batch "
                                                  "script runs once, on the first node); start the tasks with srun")
    got = require(env, NAME, REQUIRED)
    job_id = integer("SLURM_JOB_ID", got["SLURM_JOB_ID"])
    ntasks = integer("SLURM_NTASKS", got["SLURM_NTASKS"], least=1)
    procid = integer("SLURM_PROCID", got["SLURM_PROCID"])
    below("SLURM_PROCID", procid, ntasks, "SLURM_NTASKS")
    try:
        hosts = [host("SLURM_STEP_NODELIST", name) for name in expand(got["SLURM_STEP_NODELIST"])]
    except ValueError as err:  # a ClusterError (a host no resolver should be handed) is one too
        raise ClusterError("SLURM_STEP_NODELIST", str(err).removeprefix("SLURM_STEP_NODELIST: ")) from None
    node = integer("SLURM_NODEID", got["SLURM_NODEID"])
    below("SLURM_NODEID", node, len(hosts), "hosts in SLURM_STEP_NODELIST")
    counts, counts_from = _task_counts(env, len(hosts), ntasks)
    local = integer("SLURM_LOCALID", got["SLURM_LOCALID"])
    below("SLURM_LOCALID", local, counts[node], f"tasks on node {node} per {counts_from}")
    first = hosts[0]
    addr = host("MASTER_ADDR", env["MASTER_ADDR"]) if env.get("MASTER_ADDR", "").strip() else first
    master_port = port("MASTER_PORT", env["MASTER_PORT"]) if env.get("MASTER_PORT", "").strip() else \
        LIGHTNING_PORT_BASE + int(str(job_id)[-4:])
    jax_port = port(JAX_PORT, env[JAX_PORT]) if env.get(JAX_PORT, "").strip() else \
        job_id % JAX_PORT_SPAN + JAX_PORT_BASE
    coordinator = format_address(*split_address(JAX_ADDRESS, env[JAX_ADDRESS])) if env.get(JAX_ADDRESS, "").strip() \
        else format_address(first, jax_port)
    role, index = node_role(node)
    workers = [format_address(h, TF_PORT_BASE + i) for h, n in zip(hosts, counts) for i in range(n)]
    return ClusterInfo(
        platform=NAME, role=role, index=index, rank=node, world_size=len(hosts), master_addr=addr,
        master_port=master_port, trial=None,
        tf_config={"cluster": {"worker": workers}, "task": {"type": "worker", "index": procid}},
        nnodes=len(hosts), node_rank=node, nproc_per_node=counts[node], world_size_processes=ntasks,
        variables=(*REQUIRED, counts_from, *present(env, (*RENDEZVOUS, JAX_PORT, JAX_ADDRESS))), started_by=NAME,
        process_rank=procid, local_rank=local,
        jax_coordinator=coordinator,
    )


def _task_counts(env: Mapping[str, str], nodes: int, ntasks: int) -> tuple[list[int], str]:
    """Tasks on each node of the step, and the variable they came from; they must add up to SLURM_NTASKS."""
    given = present(env, TASK_COUNTS)
    if not given:
        raise ClusterError(TASK_COUNTS[0], f"is not set (nor {', '.join(TASK_COUNTS[1:])}): srun sets it for "
                                           "every task")
    variable = given[0]
    try:
        counts = expand_counts(env[variable])
    except ValueError as err:
        raise ClusterError(variable, str(err)) from None
    if variable == "SLURM_NTASKS_PER_NODE" and len(counts) == 1:
        counts *= nodes  # --ntasks-per-node N: the same N on every node
    if len(counts) != nodes:
        raise ClusterError(variable, f"{env[variable]!r} counts {len(counts)} node(s), SLURM_STEP_NODELIST {nodes}")
    if sum(counts) != ntasks:
        raise ClusterError(variable, f"{env[variable]!r} adds up to {sum(counts)} tasks, SLURM_NTASKS is {ntasks}")
    return counts, variable


# -- the replay (`topology.replica_specs`) --------------------------------------------------------------------
JOB_NODELIST, NODELIST = "SLURM_JOB_NODELIST", "SLURM_NODELIST"
NNODES, JOB_NUM_NODES, STEP_NUM_NODES = "SLURM_NNODES", "SLURM_JOB_NUM_NODES", "SLURM_STEP_NUM_NODES"
STEP_ID, STEPID, JOBID, JOB_NAME = "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_JOBID", "SLURM_JOB_NAME"
STEP_NUM_TASKS, NPROCS = "SLURM_STEP_NUM_TASKS", "SLURM_NPROCS"
TOPOLOGY_ADDR, TOPOLOGY_PATTERN, GTIDS = "SLURM_TOPOLOGY_ADDR", "SLURM_TOPOLOGY_ADDR_PATTERN", "SLURM_GTIDS"
JOB_IDS = range(1_000_000, 10_000_000)  # the job ids a replay gives: seven digits, as a busy cluster's


def job_number(job: str) -> int:
    """A Slurm job id for the job named `job`: the same name gives the same id, another run's name another one."""
    return JOB_IDS[zlib.crc32(job.encode()) % len(JOB_IDS)]


def replicas(job: Job) -> list[ReplicaSpec]:
    return tasks(job.replicas, job.nproc, job.name, job_number(job.name) if job.job_id is None else job.job_id)


def emulation(job: str, processes: int, port_free: Callable[[int], bool], tries: int = 50) -> dict[str, int]:
    """How ``selftest`` emulates a job of `processes` tasks on this one machine (`topology.replica_specs`'s
    arguments): every task on one node (its host list is this one host), with a job id whose ports (torch's and
    JAX's rendezvous, derived from it as `read` derives them) are free here, else the last of `tries`; TensorFlow's
    task ports differ by local id, so one node's tasks never clash. A platform module without ``emulation`` is
    emulated with its replicas as given and a free port."""
    job_id = 0
    for _ in range(tries):
        job_id = random.choice(JOB_IDS)
        info = read(tasks(1, 1, job, job_id)[0].env)
        jax_port = int((info.jax_coordinator or "").rpartition(":")[2])
        if port_free(info.master_port) and port_free(jax_port):
            break
    return {"replicas": 1, "nproc_per_node": processes, "job_id": job_id}


def tasks(nodes: int, tasks_per_node: int, job: str, job_id: int) -> list[ReplicaSpec]:
    """Every task of the step, node by node; task ``node * tasks_per_node + local`` runs on node ``node``."""
    job_id_variable, procid, ntasks, nodeid, localid, step_nodelist = REQUIRED
    step_tasks, job_tasks, ntasks_per_node = TASK_COUNTS
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
    for node, at in enumerate(hosts):
        on_node = [node * tasks_per_node + local for local in range(tasks_per_node)]
        for local, task in enumerate(on_node):
            env = {**step, procid: str(task), nodeid: str(node), localid: str(local), TOPOLOGY_ADDR: at,
                   GTIDS: ",".join(map(str, on_node))}
            role, index = node_role(task)
            specs.append(ReplicaSpec(f"task-{task}", role, index, node, env, at))
    return specs


#: (label, env, expected facts) the probe's cluster-parsing check reads back (`probe_platform`).
SAMPLES: tuple[tuple[str, dict[str, str], dict[str, object]], ...] = (
    (NAME, {"SLURM_JOB_ID": "77", "SLURM_PROCID": "3", "SLURM_NTASKS": "8", "SLURM_NODEID": "1",
            "SLURM_LOCALID": "3", "SLURM_STEP_NODELIST": "node[01-02]", "SLURM_STEP_TASKS_PER_NODE": "4(x2)"},
     {"platform": NAME, "process_rank": 3, "world_size_processes": 8, "local_rank": 3, "rank": 1,
      "master_addr": "node01"}),
)
