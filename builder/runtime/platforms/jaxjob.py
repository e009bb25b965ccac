"""Kubeflow Training Operator v1 ``JAXJob``: one container per replica (kubeflow/training-operator v1.9
``pkg/controller.v1/jax/envvar.go``): ``COORDINATOR_ADDRESS`` = ``<job>-worker-0`` (a host, no port),
``COORDINATOR_PORT`` (6666), ``NUM_PROCESSES`` (the replicas), ``PROCESS_ID`` (this replica). Node-level: the
launcher starts ``--nproc-per-node`` processes per replica and gives each its JAX process id.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..contract import JAXJOB
from ..shm import POD, NodeShm
from ..world import ClusterInfo, below, host, integer, node_role, port, present, require
from ..topology_spec import OPERATOR_ENV, Job, ReplicaSpec, node_spec

NAME = JAXJOB
STARTS = None  # the launcher starts them
PORT = 6666  # the Training Operator's JAXJob default port
NO_TF_CONFIG: str | None = "a JAXJob gives TensorFlow no TF_CONFIG"  # why TensorFlow is refused
NOT_EMULATED: str | None = None  # selftest emulates it on 127.0.0.1
SHM: NodeShm = POD  # its /dev/shm: a pod's (`shm.POD`)
REQUIRED = ("COORDINATOR_ADDRESS", "COORDINATOR_PORT", "NUM_PROCESSES", "PROCESS_ID")
RECOGNISED = REQUIRED  # what `platforms.VARIABLES` gathers


def claims(env: Mapping[str, str]) -> tuple[str, ...]:
    return present(env, REQUIRED)


def read(env: Mapping[str, str], *, reduction_server: bool = False) -> ClusterInfo:
    got = require(env, NAME, REQUIRED)
    nodes = integer("NUM_PROCESSES", got["NUM_PROCESSES"], least=1)
    node = integer("PROCESS_ID", got["PROCESS_ID"])
    below("PROCESS_ID", node, nodes, "NUM_PROCESSES")
    role, index = node_role(node)
    return ClusterInfo(
        platform=NAME, role=role, index=index, rank=node, world_size=nodes,
        master_addr=host("COORDINATOR_ADDRESS", got["COORDINATOR_ADDRESS"]),
        master_port=port("COORDINATOR_PORT", got["COORDINATOR_PORT"]), trial=None, tf_config=None,
        variables=REQUIRED,
    )


# -- the replay (`topology.replica_specs`) --------------------------------------------------------------------
def replicas(job: Job) -> list[ReplicaSpec]:
    """A JAXJob: workers ``<job>-worker-<i>``, worker 0 the coordinator (a host without port, and the port)."""
    address, coordinator_port, processes, process_id = REQUIRED
    specs = []
    for i in range(job.replicas):
        env = {**OPERATOR_ENV, coordinator_port: str(job.port), address: f"{job.name}-worker-0",
               processes: str(job.replicas), process_id: str(i)}
        specs.append(node_spec(f"worker-{i}", i, env, f"{job.name}-worker-{i}", ()))
    return specs
