"""Vertex AI custom jobs: ``CLUSTER_SPEC`` on every replica, its pools ``workerpool0`` (the one primary replica),
``workerpool1`` (workers), ``workerpool2`` (parameter or Reduction Server replicas), ``workerpool3`` (evaluators);
``TF_CONFIG`` only for multi-replica jobs (seeds 000, 003).

Why a module of its own although `tfconfig` reads its env: the TF_CONFIG family shares one parser (``READER``), so
detection asks it once, but what is Vertex's alone (its replay, its side roles, the sample the probe parses) lives
here, so that nothing outside its modules names the platform.
"""

from __future__ import annotations

import json

from ..contract import VERTEX, VERTEX_POOLS
from ..shm import NodeShm
from ..topology_spec import CLUSTER_SPEC, Job, ReplicaSpec
from . import tfconfig

NAME = VERTEX
READER = tfconfig  # CLUSTER_SPEC is read by the TF_CONFIG family's one parser
STARTS = None  # the launcher starts them (TensorFlow: one per replica)
PORT = tfconfig.PORT
NO_TF_CONFIG: str | None = None  # it runs TensorFlow
NOT_EMULATED: str | None = None  # selftest emulates it on 127.0.0.1
#: Its /dev/shm (`shm.NodeShm`): a CustomJob has no field for it and Vertex AI states no size.
SHM = NodeShm(default=None, default_said="not documented: Vertex AI states no /dev/shm size for a CustomJob's containers",
              setting=None,
              source="Vertex AI's v1 WorkerPoolSpec and ContainerSpec messages have no such field; "
                     "https://github.com/googleapis/python-aiplatform/issues/3434 (NCCL on several GPUs of a "
                     "CustomJob failed for want of shared memory; the API gives no --shm-size)")
SIDE_ROLES = ("ps", "evaluator")  # the roles outside the all-reduce group it has
POOLS = {role: pool for pool, role in VERTEX_POOLS.items()}  # role -> its workerpool


def replicas(job: Job) -> list[ReplicaSpec]:
    """Pools ``workerpool0..3`` in ``CLUSTER_SPEC`` (evaluators in the cluster), ``TF_CONFIG`` for more than one
    replica (`topology`'s module doc)."""
    return tfconfig.cloud(job, POOLS, spec_roles=tuple(POOLS), tf_chief="chief", always_tf_config=False)


_SPEC = {
    "cluster": {
        "workerpool0": ["cmle-training-workerpool0-1a2b3c-0:2222"],
        "workerpool1": ["cmle-training-workerpool1-1a2b3c-0:2222", "cmle-training-workerpool1-1a2b3c-1:2222"],
        "workerpool2": ["cmle-training-workerpool2-1a2b3c-0:2222"],
        "workerpool3": ["cmle-training-workerpool3-1a2b3c-0:2222"],
    },
    "environment": "cloud",
    "task": {"type": "workerpool1", "index": 1},
    "job": '{"python_module":"","package_uris":[],"job_args":[]}',
}
#: (label, env, expected facts) the probe's cluster-parsing check reads back (`probe_platform`).
SAMPLES: tuple[tuple[str, dict[str, str], dict[str, object]], ...] = (
    (NAME, {CLUSTER_SPEC: json.dumps(_SPEC)},
     {"platform": NAME, "role": "worker", "index": 1, "rank": 2, "world_size": 3,
      "master_addr": "cmle-training-workerpool0-1a2b3c-0", "master_port": 2222}),
    (f"{NAME}_ps", {CLUSTER_SPEC: json.dumps({**_SPEC, "task": {"type": "workerpool2", "index": 0}})},
     {"platform": NAME, "role": "ps", "index": 0, "rank": None, "world_size": 3,
      "master_addr": "cmle-training-workerpool0-1a2b3c-0", "master_port": 2222}),
)
