"""Open MPI's ``mpirun``: plain, or from the launcher pod of Kubeflow Trainer's MPI and DeepSpeed runtimes.

``mpirun`` starts every process and tells it its place with ``OMPI_COMM_WORLD_RANK``, ``_SIZE``, ``_LOCAL_RANK``
and ``_LOCAL_SIZE``; the launcher keeps those ranks and never starts a second layer. ``OMPI_COMM_WORLD_NODE_RANK``
is *not* a node index (it counts the job's processes on this node, like the local rank): the node is
``rank // local size``, which holds because ``mpirun`` fills each host's slots before the next (``--map-by slot``,
its default) and gives every node the same count; a layout that breaks either is refused, never guessed.

Rank 0 runs on the first host of the hostfile, and torch's rendezvous must be there. In order:

1. ``MASTER_ADDR`` (and ``MASTER_PORT``, else torch's 29500) when the job exported them to the ranks:
   ``mpirun -x MASTER_ADDR=...``, or ``OMPI_MCA_mca_base_env_list=MASTER_ADDR`` beside ``MASTER_ADDR`` in the
   launcher's env (Open MPI forwards what that list names; the gate runs the Trainer shape that way);
2. the first host of ``OMPI_MCA_orte_default_hostfile`` where this node can read it (Kubeflow Trainer writes
   ``/etc/mpi/hostfile``, ``<host> slots=N`` lines, but mounts it in the launcher pod only);
3. on one node (``_LOCAL_SIZE == _SIZE``), this node: 127.0.0.1;
4. otherwise exit 2 naming the two ways above.

JAX's coordinator is ``JAX_COORDINATOR_ADDRESS`` when exported, else rank 0's host on the port JAX's own
``OmpiCluster`` derives from ``OMPI_MCA_orte_hnp_uri``'s job id (or ``JAX_COORDINATOR_PORT``). JAX's own detection
takes ``mpirun``'s host from that URI instead: right where ``mpirun`` runs on the first node, wrong on the
Trainer's separate launcher pod, where no rank runs.

Azure ML's ``mpi`` distribution gives the same ``OMPI_*`` variables with its own master: it calls `world`.

The replay: a job ``mpirun`` starts, laid out as Kubeflow Trainer's MPI runtime lays it out, for the host to replay.

The Trainer's MPI (and DeepSpeed) runtime runs pods ``<trainjob>-node-0-<i>`` (subdomain ``<trainjob>``) that wait
in ``sshd``, and a launcher pod whose ``mpirun`` reaches them over ssh with the hostfile ``/etc/mpi/hostfile``
(`hostfile.format_hostfile`: ``<host> slots=<numProcPerNode>`` per node) and ``OMPI_MCA_orte_default_hostfile``,
``OMPI_MCA_orte_keep_fqdn_hostnames=true`` and ``OMPI_MCA_orte_set_default_slots`` in its env
(kubeflow/trainer ``pkg/runtime/framework/plugins/mpi/mpi.go``). Two replays:

* `mpirun_job`: the real thing, for an image that holds Open MPI and sshd: one container per node running sshd,
  and the launcher (role ``chief``) running ``mpirun``; rank 0's host reaches the ranks through
  ``OMPI_MCA_mca_base_env_list``, since the hostfile is on the launcher only.
* `ranks`: every rank as a container of its own with the variables a real ``mpirun`` gives it (read off Open
  MPI 4.1's ranks), the ranks of a node sharing its host, as Slurm's tasks do: for any image, and for
  ``selftest``, which has no ssh to start ranks with.

Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..contract import MPI
from ..shm import NODE_OWN, NodeShm
from ..hostfile import read_hostfile
from ..world import DEFAULT_MASTER_ADDR, DEFAULT_MASTER_PORT, ClusterError, ClusterInfo, below, format_address, \
    host, integer, node_role, port, present, require, split_address
from .starts import PLATFORM, Starts
from .slurm import JAX_ADDRESS, JAX_PORT, RENDEZVOUS
import zlib
from dataclasses import dataclass
from ..hostfile import format_hostfile
from ..topology_spec import Job, ReplicaSpec
from . import jobset

NAME = MPI
STARTS = Starts(PLATFORM)  # mpirun starts every rank
PORT = DEFAULT_MASTER_PORT
NO_TF_CONFIG: str | None = "mpirun gives TensorFlow no TF_CONFIG"  # why TensorFlow is refused
NOT_EMULATED: str | None = None  # selftest emulates it on 127.0.0.1
#: Its /dev/shm (`shm.NodeShm`): mpirun's ranks run on the node (Kubeflow's MPI runtime: pods, the POD row).
SHM = NodeShm(default=None, default_said=f"{NODE_OWN} (under Kubeflow Trainer's MPI runtime: a pod's, see the "
              "Kubernetes platforms)", setting=None, source="tmpfs(5); Open MPI's mpirun starts ranks as host processes")
RANK, SIZE, LOCAL_RANK, LOCAL_SIZE = RANKS = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                              "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")
HNP_URI = "OMPI_MCA_orte_hnp_uri"  # "<jobid>.0;tcp://<mpirun's addresses>:<port>": set only under mpirun
HOSTFILE = "OMPI_MCA_orte_default_hostfile"
KEEP_FQDN = "OMPI_MCA_orte_keep_fqdn_hostnames"  # Kubeflow sets it: hostfile names stay whole
DEFAULT_SLOTS = "OMPI_MCA_orte_set_default_slots"
ENV_LIST = "OMPI_MCA_mca_base_env_list"  # variables mpirun forwards to every rank, as -x does
OPTIONAL = (HNP_URI, HOSTFILE, KEEP_FQDN, DEFAULT_SLOTS)
VARIABLES = (*RANKS, *OPTIONAL)
RECOGNISED = VARIABLES  # what `platforms.VARIABLES` gathers
#: jax._src.clusters.ompi_cluster: port ``jobid // 2**12 % 2**12 + 65535 - 2**12 + 1`` of the URI's job id.
JAX_PORT_SPAN = 2**12
_JOB_ID = re.compile(r"([0-9]{1,12})\.")


def claims(env: Mapping[str, str]) -> tuple[str, ...]:
    """The world ``mpirun`` gives its ranks; its MCA settings alone (a launcher pod's env) make no world."""
    if not present(env, RANKS):
        return ()
    return present(env, VARIABLES)


def read(env: Mapping[str, str], *, reduction_server: bool = False) -> ClusterInfo:
    got = require(env, NAME, RANKS)
    size, local_size = integer(SIZE, got[SIZE], least=1), integer(LOCAL_SIZE, got[LOCAL_SIZE], least=1)
    master_addr, master_port, used = rendezvous(env, single_node=size == local_size)
    return world(env, NAME, master_addr, master_port, used)


def rendezvous(env: Mapping[str, str], *, single_node: bool) -> tuple[str, int, tuple[str, ...]]:
    """(rank 0's host, torch's port, the variables read) by the order in the module docstring."""
    master_addr, master_port = RENDEZVOUS
    number = port(master_port, env[master_port]) if env.get(master_port, "").strip() else DEFAULT_MASTER_PORT
    ported = present(env, (master_port,))
    if env.get(master_addr, "").strip():
        return host(master_addr, env[master_addr]), number, (master_addr, *ported)
    path = env.get(HOSTFILE, "").strip()
    hosts = read_hostfile(path, HOSTFILE) if path else None
    if hosts:
        return hosts[0][0], number, (HOSTFILE, *ported)
    if single_node:
        return DEFAULT_MASTER_ADDR, number, ported
    where = f"{HOSTFILE} names {path}, which this node cannot read" if path else f"{HOSTFILE} is not set"
    raise ClusterError(master_addr, f"is not set and {where}: nothing here names rank 0's host; export it to "
                                    "the ranks (mpirun -x MASTER_ADDR=<first host of the hostfile>, or "
                                    f"{ENV_LIST}=MASTER_ADDR beside MASTER_ADDR in mpirun's env)")


def world(env: Mapping[str, str], platform: str, master_addr: str, master_port: int,
          variables: tuple[str, ...]) -> ClusterInfo:
    """The `ClusterInfo` of a process ``mpirun`` started, with the rendezvous the caller found.

    Azure ML's ``mpi`` distribution (``platforms.azureml``) calls this with ``AZ_BATCH_MASTER_NODE``'s host
    instead of reading the ``OMPI_COMM_WORLD_*`` variables a second time; `variables` are added to those read.
    """
    got = require(env, platform, RANKS)
    size = integer(SIZE, got[SIZE], least=1)
    rank = integer(RANK, got[RANK])
    below(RANK, rank, size, SIZE)
    local_size = integer(LOCAL_SIZE, got[LOCAL_SIZE], least=1)
    local = integer(LOCAL_RANK, got[LOCAL_RANK])
    below(LOCAL_RANK, local, local_size, LOCAL_SIZE)
    if size % local_size:
        raise ClusterError(LOCAL_SIZE, f"{local_size} processes on this node do not divide {SIZE} {size}: give "
                                       "every node the same number of slots")
    node = rank // local_size
    if rank % local_size != local:
        raise ClusterError(LOCAL_RANK, f"{local} on rank {rank} of {local_size} per node: the ranks are not laid "
                                       "out node by node (mpirun --map-by slot, its default)")
    role, index = node_role(node)
    jax_used = present(env, (JAX_ADDRESS, JAX_PORT, HNP_URI))
    return ClusterInfo(
        platform=platform, role=role, index=index, rank=node, world_size=size // local_size,
        master_addr=master_addr, master_port=master_port, trial=None, tf_config=None, nnodes=size // local_size,
        node_rank=node, nproc_per_node=local_size, world_size_processes=size,
        variables=tuple(dict.fromkeys((*RANKS, *variables, *jax_used))), started_by=platform, process_rank=rank,
        local_rank=local, jax_coordinator=jax_coordinator(env, master_addr),
    )


def jax_coordinator(env: Mapping[str, str], master_addr: str) -> str | None:
    """``host:port`` of JAX's coordinator (module docstring); None where nothing gives JAX a port."""
    if env.get(JAX_ADDRESS, "").strip():
        return format_address(*split_address(JAX_ADDRESS, env[JAX_ADDRESS].strip()))
    if env.get(JAX_PORT, "").strip():
        return format_address(master_addr, port(JAX_PORT, env[JAX_PORT]))
    match = _JOB_ID.match(env.get(HNP_URI, "").strip())
    if match is None:
        return None
    job_id = int(match.group(1)) // JAX_PORT_SPAN
    return format_address(master_addr, job_id % JAX_PORT_SPAN + 65535 - JAX_PORT_SPAN + 1)


# -- the replay (`topology.replica_specs`) --------------------------------------------------------------------
HOSTFILE_PATH = "/etc/mpi/hostfile"  # where the Trainer mounts the hostfile ConfigMap in the launcher pod
NODE_RANK = "OMPI_COMM_WORLD_NODE_RANK"  # mpirun sets it too: the process's index among its node's processes
NODE, LAUNCHER_JOB = "node", "launcher"  # the Trainer's replicatedJob names
# Where a replay's mpirun would listen: no launcher runs beside `mpi_ranks`, so the URI names a documentation
# address (RFC 5737), which nothing connects to: the ranks read only its job id.
_REPLAY_HNP = "192.0.2.1"


@dataclass(frozen=True)
class MpirunJob:
    """The replay of one Trainer MPI job: the node pods, the launcher, and the hostfile the launcher mounts."""

    nodes: list[ReplicaSpec]
    launcher: ReplicaSpec
    hostfile: str


def node_hosts(job: str, replicas: int) -> list[tuple[str, tuple[str, ...]]]:
    """(hostname, DNS aliases) of each node pod: ``<job>-node-0-<i>``, reached as ``<job>-node-0-<i>.<job>``."""
    names = [jobset.hostname(job, NODE, 0, i, job) for i in range(replicas)]
    return [(name.partition(".")[0], (name,)) for name in names]


def trainer_env(nproc: int, master: str, port: int) -> dict[str, str]:
    """The launcher pod's env: the Trainer's Open MPI settings, and rank 0's host handed on to every rank."""
    master_addr, master_port = RENDEZVOUS
    return {HOSTFILE: HOSTFILE_PATH, KEEP_FQDN: "true", DEFAULT_SLOTS: str(nproc),
            master_addr: master, master_port: str(port), ENV_LIST: f"{master_addr};{master_port}"}


def mpirun_job(replicas: int, nproc: int, job: str, port: int) -> MpirunJob:
    """The nodes (role ``node``: not ranks themselves, so no verdict reads them) and the launcher."""
    hosts = node_hosts(job, replicas)
    nodes = [ReplicaSpec(f"{NODE}-0-{i}", NODE, i, None, {}, at, aliases) for i, (at, aliases) in enumerate(hosts)]
    env = trainer_env(nproc, hosts[0][1][0], port)
    launcher = ReplicaSpec(f"{LAUNCHER_JOB}-0-0", "chief", 0, None, env, f"{job}-{LAUNCHER_JOB}-0-0")
    return MpirunJob(nodes, launcher, format_hostfile([aliases[0] for _, aliases in hosts], nproc))


def replicas(job: Job) -> list[ReplicaSpec]:
    return ranks(job.replicas, job.nproc, job.name, job.port)


def ranks(replicas: int, nproc: int, job: str, port: int) -> list[ReplicaSpec]:
    """Every rank of `replicas` nodes x `nproc`, node by node, each with what ``mpirun`` gives it on the node."""
    hosts = node_hosts(job, replicas)
    job_id = (zlib.crc32(job.encode()) % 2**19 + 1) * 2**12  # Open MPI's job families are multiples of 2**12
    size = replicas * nproc
    shared = {**trainer_env(nproc, hosts[0][1][0], port), SIZE: str(size),
              LOCAL_SIZE: str(nproc), HNP_URI: f"{job_id}.0;tcp://{_REPLAY_HNP}:{40000 + job_id % 20000}"}
    del shared[ENV_LIST]  # the launcher's setting: mpirun has already applied it
    specs = []
    for node, (at, aliases) in enumerate(hosts):
        for local in range(nproc):
            rank = node * nproc + local
            env = {**shared, RANK: str(rank), LOCAL_RANK: str(local), NODE_RANK: str(local)}
            role, index = node_role(rank)  # unique per replica, as Slurm's tasks
            specs.append(ReplicaSpec(f"rank-{rank}", role, index, node, env, at, aliases))
    return specs
