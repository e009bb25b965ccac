"""Kubeflow Training Operator v1 ``JAXJob``: one container per replica (kubeflow/training-operator v1.9
``pkg/controller.v1/jax/envvar.go``): ``COORDINATOR_ADDRESS`` = ``<job>-worker-0`` (a host, no port),
``COORDINATOR_PORT`` (6666), ``NUM_PROCESSES`` (the replicas), ``PROCESS_ID`` (this replica). Node-level: the
launcher starts ``--nproc-per-node`` processes per replica and gives each its JAX process id.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..contract import JAXJOB
from ..world import ClusterInfo, below, host, integer, node_role, port, present, require

NAME = JAXJOB
FORCED_BY = (NAME,)
STARTS = None  # the launcher starts them
REQUIRED = ("COORDINATOR_ADDRESS", "COORDINATOR_PORT", "NUM_PROCESSES", "PROCESS_ID")


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
