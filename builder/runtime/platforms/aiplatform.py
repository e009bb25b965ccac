"""AI Platform Training (shut down on 2025-01-31, kept for the images still run on it): ``CLUSTER_SPEC`` with
``master``/``worker``/``ps``, and ``TF_CONFIG`` on every replica, its chief the deprecated ``master`` (TensorFlow 2
rejects it) unless the job set ``useChiefInTfConfig`` (seed 001).

Why a module of its own although `tfconfig` reads its env: see `vertex`.
"""

from __future__ import annotations

import json

from ..contract import AIPLATFORM
from ..shm import NodeShm
from ..topology_spec import CLUSTER_SPEC, TF_CONFIG, Job, ReplicaSpec
from . import tfconfig

NAME = AIPLATFORM
READER = tfconfig  # CLUSTER_SPEC and TF_CONFIG are read by the TF_CONFIG family's one parser
STARTS = None  # the launcher starts them (TensorFlow: one per replica)
PORT = tfconfig.PORT
NO_TF_CONFIG: str | None = None  # it runs TensorFlow
NOT_EMULATED: str | None = None  # selftest emulates it on 127.0.0.1
#: Its /dev/shm (`shm.NodeShm`): a ReplicaConfig has no field for it and AI Platform states no size.
SHM = NodeShm(default=None, default_said="not documented: AI Platform Training stated no /dev/shm size",
              setting=None,
              source="ml.v1.json's ReplicaConfig has no such field; "
                     "https://github.com/GoogleCloudPlatform/cloudml-samples/issues/451 (DataLoader workers died of "
                     "a bus error: insufficient shm, and no docker run flag to give)")
SIDE_ROLES = ("ps", "evaluator")  # the roles outside the all-reduce group it has
#: The one platform whose TF_CONFIG may say ``master``: a replay takes ``use_chief_in_tf_config`` for it only.
CHIEF_IN_TF_CONFIG_OPTIONAL = True
# Its CLUSTER_SPEC always says master; an evaluator's task type is not in its cluster.
_SPEC_TYPE = {"chief": "master", "worker": "worker", "ps": "ps", "evaluator": "evaluator"}


def replicas(job: Job) -> list[ReplicaSpec]:
    """``CLUSTER_SPEC`` (master, worker, ps) and ``TF_CONFIG`` on every replica; the service's default ``master``
    in TF_CONFIG unless the job opts in (`topology`'s module doc)."""
    return tfconfig.cloud(job, _SPEC_TYPE, spec_roles=("chief", "worker", "ps"),
                          tf_chief="chief" if job.use_chief_in_tf_config else "master", always_tf_config=True)


_SPEC = {
    "cluster": {
        "master": ["master-0.job:2222"],
        "worker": ["worker-0.job:2222", "worker-1.job:2222", "worker-2.job:2222"],
        "ps": ["ps-0.job:2222"],
    },
    "environment": "cloud",
    "task": {"type": "worker", "index": 2, "trial": "7"},
}
#: (label, env, expected facts) the probe's cluster-parsing check reads back (`probe_platform`).
SAMPLES: tuple[tuple[str, dict[str, str], dict[str, object]], ...] = (
    (NAME, {CLUSTER_SPEC: json.dumps(_SPEC), TF_CONFIG: json.dumps(_SPEC)},
     {"platform": NAME, "role": "worker", "index": 2, "rank": 3, "world_size": 4,
      "master_addr": "master-0.job", "master_port": 2222}),
)
