"""Kubeflow Trainer v2 ``TrainJob``: one pod per node, the runtime's ML policy writes the node's variables.

Only into the container named ``node`` (kubeflow/trainer v2.3 ``pkg/runtime/framework/plugins``):

* torch runtime (``torch.go``): ``PET_NNODES``, ``PET_NPROC_PER_NODE`` (a count, or ``auto``: the node's GPUs),
  ``PET_NODE_RANK`` (the pod's job-completion index), ``PET_MASTER_ADDR`` = ``<trainjob>-node-0-0.<trainjob>``,
  ``PET_MASTER_PORT`` = 29500. These are torchrun's flag defaults: torchrun, when the runtime's command is
  torchrun, starts the processes (`torchrun` reads that layer); otherwise the launcher starts torchrun with them.
* JAX runtime (``jax.go``): ``JAX_NUM_PROCESSES`` (the nodes), ``JAX_PROCESS_ID`` (the completion index),
  ``JAX_COORDINATOR_ADDRESS`` = ``<trainjob>-node-0-0.<trainjob>:29500``; one process per node.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..contract import TRAINJOB
from ..shm import POD, NodeShm
from ..world import DEFAULT_MASTER_PORT, ClusterError, ClusterInfo, below, format_address, host, integer, node_role, \
    port, present, require, split_address
from ..frameworks import JAX as JAX_FRAMEWORK
from .starts import TORCHRUN, Starts
from ..topology_spec import Job, ReplicaSpec, node_spec
from . import jobset

NAME = TRAINJOB
STARTS = Starts(TORCHRUN, unless=(JAX_FRAMEWORK,))  # the torch runtime's command is torchrun
PORT = DEFAULT_MASTER_PORT  # Trainer's ContainerTrainerPort
NO_TF_CONFIG: str | None = "Kubeflow Trainer v2 has no TensorFlow runtime"  # why TensorFlow is refused
NOT_EMULATED: str | None = None  # selftest emulates it on 127.0.0.1
SHM: NodeShm = POD  # its /dev/shm: a pod's (`shm.POD`)
TRAINER_NODE = "node"  # kubeflow/trainer pkg/constants Node: the trainer's replicatedJob (and container)
TORCH = ("PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT")
TORCH_OPTIONAL = ("PET_NPROC_PER_NODE",)
JAX = ("JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "JAX_COORDINATOR_ADDRESS")
#: Its pods are an Indexed Job's: the index alone -> what would give the world (`platforms.detect`'s rule 4).
STRAYS = {jobset.INDEX: "a TrainJob's pods need its runtime's PET_* (or JAX_*)"}
RECOGNISED = (*TORCH, *TORCH_OPTIONAL, *JAX)  # what `platforms.VARIABLES` gathers


def claims(env: Mapping[str, str]) -> tuple[str, ...]:
    """PET_* or JAX's world (a process count or id): a job script's own JAX_COORDINATOR_ADDRESS alone is no
    TrainJob, it is that script's choice of rendezvous (Slurm honours it)."""
    if not present(env, (*TORCH, *TORCH_OPTIONAL, "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")):
        return ()
    return present(env, (*TORCH, *TORCH_OPTIONAL, *JAX))


def read(env: Mapping[str, str], *, reduction_server: bool = False) -> ClusterInfo:
    torch, jax = present(env, (*TORCH, *TORCH_OPTIONAL)), present(env, JAX)
    if torch and jax:
        raise ClusterError(torch[0], f"is set beside {jax[0]}: a TrainJob runs the torch or the JAX runtime, "
                                     "not both")
    return _jax(env) if jax else _torch(env)


def _torch(env: Mapping[str, str]) -> ClusterInfo:
    got = require(env, NAME, TORCH)
    nodes = integer("PET_NNODES", got["PET_NNODES"], least=1)
    node = integer("PET_NODE_RANK", got["PET_NODE_RANK"])
    below("PET_NODE_RANK", node, nodes, "PET_NNODES")
    nproc = env.get("PET_NPROC_PER_NODE", "").strip() or "1"  # torchrun's default
    if nproc != "auto":
        integer("PET_NPROC_PER_NODE", nproc, least=1)
    role, index = node_role(node)
    return ClusterInfo(
        platform=NAME, role=role, index=index, rank=node, world_size=nodes,
        master_addr=host("PET_MASTER_ADDR", got["PET_MASTER_ADDR"]),
        master_port=port("PET_MASTER_PORT", got["PET_MASTER_PORT"]), trial=None, tf_config=None,
        variables=(*TORCH, *present(env, TORCH_OPTIONAL)), platform_nproc=nproc,
    )


def _jax(env: Mapping[str, str]) -> ClusterInfo:
    got = require(env, NAME, JAX)
    nodes = integer("JAX_NUM_PROCESSES", got["JAX_NUM_PROCESSES"], least=1)
    node = integer("JAX_PROCESS_ID", got["JAX_PROCESS_ID"])
    below("JAX_PROCESS_ID", node, nodes, "JAX_NUM_PROCESSES")
    addr, number = split_address("JAX_COORDINATOR_ADDRESS", got["JAX_COORDINATOR_ADDRESS"])
    role, index = node_role(node)
    return ClusterInfo(
        platform=NAME, role=role, index=index, rank=node, world_size=nodes, master_addr=addr, master_port=number,
        trial=None, tf_config=None, variables=JAX,
    )


# -- the replay (`topology.replica_specs`) --------------------------------------------------------------------
def replicas(job: Job) -> list[ReplicaSpec]:
    """A TrainJob of `replicas` nodes: the torch runtime's ``PET_*`` (`nproc` per node), or for a JAX image the JAX
    runtime's ``JAX_*``; pod i's completion index is its node rank."""
    pods = [jobset.pod(job.name, TRAINER_NODE, i) for i in range(job.replicas)]
    master = pods[0][1][0]
    nnodes, node_rank, master_addr, master_port = TORCH
    (nproc_per_node,) = TORCH_OPTIONAL
    processes, process_id, coordinator = JAX
    specs = []
    for i, (at, aliases) in enumerate(pods):
        if job.framework == JAX_FRAMEWORK:
            env = {processes: str(job.replicas), process_id: str(i), coordinator: format_address(master, job.port)}
        else:
            env = {nnodes: str(job.replicas), nproc_per_node: str(job.nproc), node_rank: str(i), master_addr: master,
                   master_port: str(job.port)}
        specs.append(node_spec(f"{TRAINER_NODE}-0-{i}", i, {**env, jobset.INDEX: str(i)}, at, aliases))
    return specs


#: (label, env, expected facts) the probe's cluster-parsing check reads back (`probe_platform`).
SAMPLES: tuple[tuple[str, dict[str, str], dict[str, object]], ...] = (
    (NAME, {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "2", "PET_NODE_RANK": "1",
            "PET_MASTER_ADDR": "tj-node-0-0.tj", "PET_MASTER_PORT": "29500"},
     {"platform": NAME, "rank": 1, "world_size": 2, "world_size_processes": 4, "master_addr": "tj-node-0-0.tj"}),
)
