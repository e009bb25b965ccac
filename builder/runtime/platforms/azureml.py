"""Azure Machine Learning command jobs: the three ``distribution`` types, each read by the module that reads its
variables elsewhere, and marked as Azure ML by the run's own ``AZUREML_*`` variables.

What Azure ML gives a job's processes (Azure ML docs "Distributed GPU training guide", how-to-train-distributed-gpu,
SDK v2 and v1 pages; the Azure ML cheatsheet's "Environment variables from Open MPI", as DeepSpeed's
``deepspeed/comm/comm.py`` ``patch_aml_env_for_torch_nccl_backend`` reproduces it):

* ``pytorch`` (``process_count_per_instance``): Azure ML starts **every** process with ``MASTER_ADDR`` (the first
  instance's IP), ``MASTER_PORT`` (6105 by default), ``WORLD_SIZE`` (all processes), ``NODE_RANK``, the process's own
  ``RANK`` and ``LOCAL_RANK``: an ``env://`` world (`envworld`), whose ranks the launcher keeps, starting nothing more.
  No ``LOCAL_WORLD_SIZE`` comes with them: the processes per node are ``WORLD_SIZE / AZUREML_NODE_COUNT`` (the job's
  ``instance_count``, which Azure ML gives every job), never guessed from the ranks.
* ``tensorflow`` (``worker_count``, ``parameter_server_count``): one process per worker or ps with ``TF_CONFIG``
  (``{"cluster": {"worker": [...], "ps": [...]}, "task": {...}, "environment": "cloud"}``): `tfconfig`.
* ``mpi`` (``process_count_per_instance``): ``mpirun`` starts every process with Open MPI's ``OMPI_COMM_WORLD_RANK``,
  ``_SIZE``, ``_LOCAL_RANK``, ``_LOCAL_SIZE`` (`mpi`), and the rendezvous host comes from
  ``AZ_BATCH_MASTER_NODE=ADDR:PORT`` (Azure Batch's multi-instance primary, multi-node jobs only) or, on one node,
  ``AZ_BATCHAI_MPI_MASTER_NODE`` (a host alone). The cheatsheet's torch rendezvous is that host with ``MASTER_PORT``
  when the job sets it, else 6105 (multi-node; ``AZ_BATCH_MASTER_NODE``'s own port belongs to Batch's MPI
  bootstrap), and 54965 on one node.

What marks the process as Azure ML's: the run's variables, which azureml-core's ``Run.get_context()`` and the
azureml-dataprep / azureml-mlflow clients read (``AZUREML_RUN_ID``, ``AZUREML_ARM_SUBSCRIPTION``,
``AZUREML_ARM_RESOURCEGROUP``, ``AZUREML_ARM_WORKSPACE_NAME``, ``AZUREML_ARM_PROJECT_NAME``,
``AZUREML_SERVICE_ENDPOINT``; DeepSpeed's ``in_aml()`` tests ``AZUREML_EXPERIMENT_ID``). Their presence beside a
distribution's variables makes this claim a strict superset of the ``env://``, ``TF_CONFIG`` and Open MPI claims,
so detection picks Azure ML; ``--platform azureml`` forces it. A run with its markers and no distribution
variable is a single-process command job: one process, as Azure ML runs it.

The replay: an Azure ML command job's processes as Azure ML starts them, for the host (and selftest) to replay.

Why its own layout: Azure ML's ``pytorch`` distribution starts every process itself (``process_count_per_instance``
on each of ``instance_count`` nodes), each with its process-level ``RANK`` and ``LOCAL_RANK``, so a replay starts a
container per process, the processes of a node sharing that node's host, as Slurm's tasks do; its ``tensorflow``
distribution starts one process per worker with ``TF_CONFIG`` (workers only, ``"environment": "cloud"``). A JAX
image runs under the ``pytorch`` distribution too: Azure ML has no JAX distribution, and the launcher turns the
``env://`` world into JAX's coordinator. The variable names come from this module and `envworld`, which read them back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import ModuleType

from ..contract import AZUREML, MPI
from ..shm import NodeShm
from ..world import ClusterError, ClusterInfo, format_address, host, integer, local_world, node_role, port, present, \
    require, split_address
from ..frameworks import TENSORFLOW
from .starts import PLATFORM, Starts
from . import envworld, mpi, tfconfig
import zlib
from ..topology_spec import TF_CONFIG, Job, ReplicaSpec, tf_config_json

NAME = AZUREML
STARTS = Starts(PLATFORM, unless=(TENSORFLOW,))  # its pytorch and mpi distributions start every process
NODE_COUNT = "AZUREML_NODE_COUNT"  # the job's instance_count
MARKERS = ("AZUREML_RUN_ID", NODE_COUNT, "AZUREML_EXPERIMENT_ID", "AZUREML_ARM_SUBSCRIPTION",
           "AZUREML_ARM_RESOURCEGROUP",
           "AZUREML_ARM_WORKSPACE_NAME", "AZUREML_ARM_PROJECT_NAME", "AZUREML_SERVICE_ENDPOINT")
MULTI_NODE_MASTER = "AZ_BATCH_MASTER_NODE"  # ADDR:PORT, on multi-node jobs
SINGLE_NODE_MASTER = "AZ_BATCHAI_MPI_MASTER_NODE"  # ADDR, on one node
MPI_MASTERS = (MULTI_NODE_MASTER, SINGLE_NODE_MASTER)
DEFAULT_MASTER_PORT = 6105  # the pytorch distribution's MASTER_PORT, and the mpi cheatsheet's multi-node port
PORT = DEFAULT_MASTER_PORT  # what a replay gives where the job names none
NO_TF_CONFIG: str | None = None  # it runs TensorFlow
NOT_EMULATED: str | None = None  # selftest emulates it on 127.0.0.1
#: Its /dev/shm (`shm.NodeShm`): the command job's resources.shm_size sets it.
SHM = NodeShm(default=None, default_said="not confirmed here: Microsoft Learn's command job reference lists "
              "resources.shm_size, its default not re-read",
              setting="the command job's resources.shm_size (<number><b|k|m|g>; trainimg spec writes it)",
              source="https://learn.microsoft.com/azure/machine-learning/reference-yaml-job-command (resources); "
                     "azure-ai-ml's JobResourceConfiguration.shm_size, which its load_job reads")
SINGLE_NODE_PORT = 54965  # the mpi cheatsheet's port on one node
VARIABLES = (*MARKERS, *MPI_MASTERS)
RECOGNISED = VARIABLES  # what `platforms.VARIABLES` gathers
#: Azure ML's distribution type -> the module whose claim says it made the env, in the order preferred: a pytorch
#: process started through mpirun also holds the OMPI_* variables, and its own RANK is what torch reads.
DISTRIBUTIONS: dict[str, ModuleType] = {"pytorch": envworld, MPI: mpi, "tensorflow": tfconfig}


def claims(env: Mapping[str, str]) -> tuple[str, ...]:
    """The run's markers and every variable of the distributions: nothing without a marker."""
    markers = present(env, MARKERS)
    if not markers:
        return ()
    claimed = [name for module in DISTRIBUTIONS.values() for name in module.claims(env)]
    return tuple(dict.fromkeys((*markers, *claimed, *present(env, MPI_MASTERS))))


def distribution(env: Mapping[str, str]) -> str | None:
    """Which distribution made `env` (None: a single-process job); two at once is the job's fault, named."""
    found = [name for name, module in DISTRIBUTIONS.items() if module.claims(env)]
    if "tensorflow" in found and len(found) > 1:
        raise ClusterError("environment", f"holds the variables of Azure ML's {' and '.join(sorted(found))} "
                                          "distributions at once; a command job has one distribution")
    return found[0] if found else None  # pytorch before mpi: see DISTRIBUTIONS


def read(env: Mapping[str, str], *, reduction_server: bool = False) -> ClusterInfo:
    markers = present(env, MARKERS)
    kind = distribution(env)
    if kind is None:
        if not markers:
            raise ClusterError(MARKERS[0], "is not set, nor any distribution's variables (RANK, TF_CONFIG, "
                                           "OMPI_COMM_WORLD_RANK): nothing says this is an Azure ML job")
        return replace(local_world(), platform=NAME, variables=markers)
    if kind == MPI:
        got = require(env, NAME, mpi.RANKS)
        size, local_size = (integer(name, got[name], least=1) for name in (mpi.SIZE, mpi.LOCAL_SIZE))
        info = mpi.world(env, NAME, *mpi_master(env, single_node=size == local_size))
    else:
        view = _with_local_world(env) if kind == "pytorch" else env
        info = DISTRIBUTIONS[kind].read(view, reduction_server=reduction_server)
    variables = tuple(v for v in info.variables if v in env and v not in markers)  # not the derived local world
    return replace(info, platform=NAME, variables=(*markers, *variables),
                   started_by=None if info.started_by is None else NAME)


def mpi_master(env: Mapping[str, str], single_node: bool) -> tuple[str, int, tuple[str, ...]]:
    """(host, port, variables read) of the mpi distribution's torch rendezvous, as the cheatsheet derives it."""
    if single_node and not env.get(MULTI_NODE_MASTER, "").strip():
        if not env.get(SINGLE_NODE_MASTER, "").strip():
            raise ClusterError(SINGLE_NODE_MASTER, f"is not set (nor {MULTI_NODE_MASTER}): Azure ML's mpi "
                                                   "distribution names its master node with one of them")
        return host(SINGLE_NODE_MASTER, env[SINGLE_NODE_MASTER]), SINGLE_NODE_PORT, (SINGLE_NODE_MASTER,)
    if not env.get(MULTI_NODE_MASTER, "").strip():
        raise ClusterError(MULTI_NODE_MASTER, "is not set, but Azure ML's mpi distribution sets it on every "
                                              "process of a multi-node job")
    name, _batch_port = split_address(MULTI_NODE_MASTER, env[MULTI_NODE_MASTER].strip())
    if env.get("MASTER_PORT", "").strip():
        return name, port("MASTER_PORT", env["MASTER_PORT"]), (MULTI_NODE_MASTER, "MASTER_PORT")
    return name, DEFAULT_MASTER_PORT, (MULTI_NODE_MASTER,)


def _with_local_world(env: Mapping[str, str]) -> Mapping[str, str]:
    """The pytorch distribution's env with the ``LOCAL_WORLD_SIZE`` its node count implies (see the module doc)."""
    local = envworld.OPTIONAL[1]
    if env.get(local, "").strip() or not present(env, ("LOCAL_RANK", "NODE_RANK")):
        return env
    if not env.get(NODE_COUNT, "").strip():
        raise ClusterError(NODE_COUNT, "is not set: with LOCAL_RANK and NODE_RANK but no LOCAL_WORLD_SIZE, Azure "
                                       "ML's node count is what says how many processes each node runs")
    nodes = integer(NODE_COUNT, env[NODE_COUNT], least=1)
    world = integer("WORLD_SIZE", env.get("WORLD_SIZE", "").strip() or "1", least=1)
    if world % nodes:
        raise ClusterError(NODE_COUNT, f"{nodes} node(s) do not divide WORLD_SIZE {world}: Azure ML starts the same "
                                       "process_count_per_instance on every node")
    return {**env, local: str(world // nodes)}


# -- the replay (`topology.replica_specs`) --------------------------------------------------------------------
RUN_ID, _, EXPERIMENT_ID = MARKERS[:3]


def node_host(job: str, node: int) -> str:
    """The host name a replay gives node `node` of job `job` (Azure ML gives IP addresses; names stand in)."""
    return f"{job}-node{node}"


def replicas(job: Job) -> list[ReplicaSpec]:
    return _processes(job.replicas, job.nproc, job.name, job.port, job.framework)


def _processes(replicas: int, nproc: int, job: str, port: int, framework: str) -> list[ReplicaSpec]:
    """Every process of a `replicas`-node job: `nproc` per node under the pytorch distribution, one per node for
    TensorFlow."""
    run = {RUN_ID: f"{job}_{zlib.crc32(job.encode()):08x}", EXPERIMENT_ID: f"{zlib.crc32(job.encode()[::-1]):08x}",
           NODE_COUNT: str(replicas)}
    hosts = [node_host(job, k) for k in range(replicas)]
    if framework == "tensorflow":
        workers = [format_address(h, port) for h in hosts]
        return [ReplicaSpec(f"worker-{k}", "worker", k, None,
                            {**run, TF_CONFIG: tf_config_json({"worker": workers}, "worker", k, None)}, h)
                for k, h in enumerate(hosts)]
    master_addr, master_port, world_size, rank = envworld.REQUIRED
    local_rank, _local_world, node_rank = envworld.OPTIONAL
    shared = {**run, master_addr: hosts[0], master_port: str(port), world_size: str(replicas * nproc)}
    specs = []
    for node, at in enumerate(hosts):
        for local in range(nproc):
            process = node * nproc + local
            role, index = node_role(process)  # unique per replica, as Slurm's tasks
            env = {**shared, node_rank: str(node), rank: str(process), local_rank: str(local)}
            specs.append(ReplicaSpec(f"rank-{process}", role, index, node if nproc > 1 else None, env, at))
    return specs
