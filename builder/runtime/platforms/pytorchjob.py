"""Kubeflow Training Operator v1 ``PyTorchJob``: one container per replica, node-level variables.

The operator (kubeflow/training-operator v1.9 ``pkg/controller.v1/pytorch/envvar.go``, ``master.go``) gives every
container ``MASTER_ADDR`` = ``PET_MASTER_ADDR`` = ``<job>-master-0``, ``MASTER_PORT`` (23456 by default),
``WORLD_SIZE`` = replicas x ``nprocPerNode`` (replicas alone in older versions), ``RANK`` = ``PET_NODE_RANK`` = the
replica's **node** index (master 0, worker i at i + 1), ``PET_NNODES`` and, when the job sets ``nprocPerNode``,
``PET_NPROC_PER_NODE``. ``RANK``/``WORLD_SIZE`` therefore mix node and process meanings (kubeflow/trainer#1790):
the launcher reads them as the node view and starts ``PET_NPROC_PER_NODE`` processes per node itself.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..contract import PYTORCHJOB
from ..shm import POD, NodeShm
from ..world import ClusterError, ClusterInfo, below, host, integer, node_role, port, present, require
from .starts import SAYS, Starts
from ..topology_spec import OPERATOR_ENV, Job, ReplicaSpec, node_spec

NAME = PYTORCHJOB
STARTS = Starts(SAYS)  # PET_NPROC_PER_NODE
PORT = 23456  # the Training Operator's PyTorchJob default port
NO_TF_CONFIG: str | None = "a PyTorchJob gives TensorFlow no TF_CONFIG"  # why TensorFlow is refused
NOT_EMULATED: str | None = None  # selftest emulates it on 127.0.0.1
SHM: NodeShm = POD  # its /dev/shm: a pod's (`shm.POD`)
REQUIRED = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "PET_NNODES")
OPTIONAL = ("PET_NODE_RANK", "PET_NPROC_PER_NODE", "PET_MASTER_ADDR", "PET_MASTER_PORT")
RECOGNISED = (*REQUIRED, *OPTIONAL)  # what `platforms.VARIABLES` gathers


def claims(env: Mapping[str, str]) -> tuple[str, ...]:
    """Its signature is RANK or WORLD_SIZE beside torchrun's PET_ variables (Trainer v2 gives PET_ alone)."""
    if not (present(env, ("RANK", "WORLD_SIZE")) and present(env, ("PET_NNODES", "PET_NODE_RANK"))):
        return ()
    return present(env, (*REQUIRED, *OPTIONAL))


def read(env: Mapping[str, str], *, reduction_server: bool = False) -> ClusterInfo:
    got = require(env, NAME, REQUIRED)
    if ":" in got["PET_NNODES"]:
        raise ClusterError("PET_NNODES", f"{got['PET_NNODES']!r} is an elastic range (min:max): an elastic "
                                         "PyTorchJob needs torchrun's own rendezvous; run torchrun as the command")
    nodes = integer("PET_NNODES", got["PET_NNODES"], least=1)
    node = integer("RANK", got["RANK"])
    below("RANK", node, nodes, "PET_NNODES")
    if env.get("PET_NODE_RANK", "").strip() and integer("PET_NODE_RANK", env["PET_NODE_RANK"]) != node:
        raise ClusterError("PET_NODE_RANK", f"{env['PET_NODE_RANK']} differs from RANK {node}: the operator sets both "
                                            "to the replica's node index")
    world = integer("WORLD_SIZE", got["WORLD_SIZE"], least=1)
    nproc = env.get("PET_NPROC_PER_NODE", "").strip() or None
    if nproc is not None and nproc != "auto":
        per_node = integer("PET_NPROC_PER_NODE", nproc, least=1)
        if world not in (nodes * per_node, nodes):
            raise ClusterError("WORLD_SIZE", f"{world} is neither PET_NNODES x PET_NPROC_PER_NODE ({nodes} x "
                                             f"{per_node}) nor PET_NNODES")
    elif world % nodes:
        raise ClusterError("WORLD_SIZE", f"{world} is not a multiple of PET_NNODES {nodes}")
    else:
        nproc = nproc or str(world // nodes)
    role, index = node_role(node)
    return ClusterInfo(
        platform=NAME, role=role, index=index, rank=node, world_size=nodes,
        master_addr=host("MASTER_ADDR", got["MASTER_ADDR"]), master_port=port("MASTER_PORT", got["MASTER_PORT"]),
        trial=None, tf_config=None, variables=(*REQUIRED, *present(env, OPTIONAL)), platform_nproc=nproc,
    )


# -- the replay (`topology.replica_specs`) --------------------------------------------------------------------
def replicas(job: Job) -> list[ReplicaSpec]:
    """A PyTorchJob: ``<job>-master-0`` and workers ``<job>-worker-<i>``, `nproc` processes per node."""
    master_addr, master_port, world_size, rank, nnodes = REQUIRED
    node_rank, nproc_per_node, pet_master_addr, pet_master_port = OPTIONAL
    names = ["master-0", *(f"worker-{i}" for i in range(job.replicas - 1))]
    master = f"{job.name}-{names[0]}"
    specs = []
    for node, name in enumerate(names):
        env = {**OPERATOR_ENV, master_addr: master, pet_master_addr: master, master_port: str(job.port),
               pet_master_port: str(job.port), world_size: str(job.replicas * job.nproc), rank: str(node),
               node_rank: str(node), nnodes: str(job.replicas), nproc_per_node: str(job.nproc)}
        specs.append(node_spec(name, node, env, f"{job.name}-{name}", ()))
    return specs


#: (label, env, expected facts) the probe's cluster-parsing check reads back (`probe_platform`).
SAMPLES: tuple[tuple[str, dict[str, str], dict[str, object]], ...] = (
    (NAME, {"MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456", "WORLD_SIZE": "8", "RANK": "1",
            "PET_NPROC_PER_NODE": "4", "PET_NNODES": "2", "PET_NODE_RANK": "1"},
     {"platform": NAME, "rank": 1, "world_size": 2, "nproc_per_node": 4, "world_size_processes": 8,
      "master_addr": "job-master-0"}),
)
