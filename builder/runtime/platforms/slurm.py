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
"""

from __future__ import annotations

from collections.abc import Mapping

from ..contract import SLURM
from ..hostlist import expand, expand_counts
from ..world import ClusterError, ClusterInfo, below, format_address, host, integer, node_role, port, present, \
    require, split_address
from .starts import PLATFORM, Starts

NAME = SLURM
FORCED_BY = (NAME,)
STARTS = Starts(PLATFORM)  # srun starts one task per process
REQUIRED = ("SLURM_JOB_ID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_NODEID", "SLURM_LOCALID", "SLURM_STEP_NODELIST")
TASK_COUNTS = ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE")
RENDEZVOUS = ("MASTER_ADDR", "MASTER_PORT")  # optional: a job script's own choice wins
JAX_PORT = "JAX_COORDINATOR_PORT"  # optional, the same for JAX: jax._src.clusters.ClusterEnv reads it before its own
JAX_ADDRESS = "JAX_COORDINATOR_ADDRESS"  # optional: jax.distributed.initialize takes a script's own before detecting
VARIABLES = (*REQUIRED, *TASK_COUNTS)
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
