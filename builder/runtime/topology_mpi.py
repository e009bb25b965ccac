"""A job ``mpirun`` starts, laid out as Kubeflow Trainer's MPI runtime lays it out, for the host to replay.

The Trainer's MPI (and DeepSpeed) runtime runs pods ``<trainjob>-node-0-<i>`` (subdomain ``<trainjob>``) that wait
in ``sshd``, and a launcher pod whose ``mpirun`` reaches them over ssh with the hostfile ``/etc/mpi/hostfile``
(`hostfile.format_hostfile`: ``<host> slots=<numProcPerNode>`` per node) and ``OMPI_MCA_orte_default_hostfile``,
``OMPI_MCA_orte_keep_fqdn_hostnames=true`` and ``OMPI_MCA_orte_set_default_slots`` in its env
(kubeflow/trainer ``pkg/runtime/framework/plugins/mpi/mpi.go``). Two replays:

* `mpirun_job`: the real thing, for an image that holds Open MPI and sshd: one container per node running sshd,
  and the launcher (role ``chief``) running ``mpirun``; rank 0's host reaches the ranks through
  ``OMPI_MCA_mca_base_env_list`` (`platforms.ompi`), since the hostfile is on the launcher only.
* `mpi_ranks`: every rank as a container of its own with the variables a real ``mpirun`` gives it (read off Open
  MPI 4.1's ranks), the ranks of a node sharing its host, as Slurm's tasks do: for any image, and for
  ``selftest``, which has no ssh to start ranks with.

Standard library only.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from .hostfile import format_hostfile
from .platforms import jobset, ompi
from .platforms.slurm import RENDEZVOUS
from .topology_spec import ReplicaSpec
from .world import node_role

HOSTFILE_PATH = "/etc/mpi/hostfile"  # where the Trainer mounts the hostfile ConfigMap in the launcher pod
NODE_RANK = "OMPI_COMM_WORLD_NODE_RANK"  # mpirun sets it too: the process's index among its node's processes
NODE, LAUNCHER = "node", "launcher"  # the Trainer's replicatedJob names
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
    return {ompi.HOSTFILE: HOSTFILE_PATH, ompi.KEEP_FQDN: "true", ompi.DEFAULT_SLOTS: str(nproc),
            master_addr: master, master_port: str(port), ompi.ENV_LIST: f"{master_addr};{master_port}"}


def mpirun_job(replicas: int, nproc: int, job: str, port: int) -> MpirunJob:
    """The nodes (role ``node``: not ranks themselves, so no verdict reads them) and the launcher."""
    hosts = node_hosts(job, replicas)
    nodes = [ReplicaSpec(f"{NODE}-0-{i}", NODE, i, None, {}, host, aliases) for i, (host, aliases) in enumerate(hosts)]
    env = trainer_env(nproc, hosts[0][1][0], port)
    launcher = ReplicaSpec(f"{LAUNCHER}-0-0", "chief", 0, None, env, f"{job}-{LAUNCHER}-0-0")
    return MpirunJob(nodes, launcher, format_hostfile([aliases[0] for _, aliases in hosts], nproc))


def mpi_ranks(replicas: int, nproc: int, job: str, port: int) -> list[ReplicaSpec]:
    """Every rank of `replicas` nodes x `nproc`, node by node, each with what ``mpirun`` gives it on the node."""
    hosts = node_hosts(job, replicas)
    job_id = (zlib.crc32(job.encode()) % 2**19 + 1) * 2**12  # Open MPI's job families are multiples of 2**12
    size = replicas * nproc
    shared = {**trainer_env(nproc, hosts[0][1][0], port), ompi.SIZE: str(size),
              ompi.LOCAL_SIZE: str(nproc), ompi.HNP_URI: f"{job_id}.0;tcp://{_REPLAY_HNP}:{40000 + job_id % 20000}"}
    del shared[ompi.ENV_LIST]  # the launcher's setting: mpirun has already applied it
    specs = []
    for node, (host, aliases) in enumerate(hosts):
        for local in range(nproc):
            rank = node * nproc + local
            env = {**shared, ompi.RANK: str(rank), ompi.LOCAL_RANK: str(local), NODE_RANK: str(local)}
            role, index = node_role(rank)  # unique per replica, as Slurm's tasks
            specs.append(ReplicaSpec(f"rank-{rank}", role, index, node, env, host, aliases))
    return specs
