"""Kubeflow Training Operator v1 ``TFJob`` (kubeflow/training-operator v1.9 ``pkg/controller.v1/tensorflow``): pods
and Services ``<job>-<role>-<i>`` with lower-case roles, ``TF_CONFIG`` naming the Services'
``<job>-<role>-<i>.<namespace>.svc:<port>``, evaluators outside the cluster, only for more than one replica.

Why a module of its own although `tfconfig` reads its env: see `vertex`. It is also the platform the others point
TensorFlow to where they give it no TF_CONFIG (``TENSORFLOW_HOME``).
"""

from __future__ import annotations

from ..contract import TFJOB
from ..shm import POD, NodeShm
from ..topology_spec import TF_CONFIG, Job, ReplicaSpec, tf_config_json
from ..world import format_address
from . import tfconfig

NAME = TFJOB
READER = tfconfig  # TF_CONFIG is read by the TF_CONFIG family's one parser
STARTS = None  # the launcher starts them (TensorFlow: one per replica)
PORT = tfconfig.PORT  # the TFJob's default port
NO_TF_CONFIG: str | None = None  # it runs TensorFlow
NOT_EMULATED: str | None = None  # selftest emulates it on 127.0.0.1
SHM: NodeShm = POD  # its /dev/shm: a pod's (`shm.POD`)
SIDE_ROLES = ("ps", "evaluator")  # the roles outside the all-reduce group it has
#: Where a platform that gives TensorFlow no TF_CONFIG sends a TensorFlow job (`topology.refusal`).
TENSORFLOW_HOME = "Training Operator v1 TFJob"
NAMESPACE = "default"  # where a replayed TFJob's Services live


def replicas(job: Job) -> list[ReplicaSpec]:
    """One chief, `replicas - 1` workers, `ps`, `evaluators`; ``TF_CONFIG`` names every Service but the
    evaluators', and only when the job has more than one replica of any role."""
    counts = {"chief": 1, "worker": job.replicas - 1, "ps": job.ps or 0, "evaluator": job.evaluators}
    hosts = {role: [f"{job.name}-{role}-{i}" for i in range(count)] for role, count in counts.items()}

    def service(host: str) -> str:
        return f"{host}.{NAMESPACE}.svc"

    cluster = {role: [format_address(service(h), job.port) for h in hosts[role]]
               for role in ("chief", "worker", "ps") if hosts[role]}
    distributed = sum(counts.values()) > 1
    return [ReplicaSpec(f"{role}-{i}", role, i, None,
                        {TF_CONFIG: tf_config_json(cluster, role, i, None)} if distributed else {},
                        host, (service(host),))
            for role, names in hosts.items() for i, host in enumerate(names)]
