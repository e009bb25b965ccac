"""Training Operator v1 (``kubeflow.org/v1``, kubeflow/training-operator v1.9) ``TFJob``.

One Chief and ``nodes - 1`` Workers (the Worker role is left out for one node), each one pod running the container
named `CONTAINER`: the operator writes ``TF_CONFIG`` (lower-case roles, ``<job>-<role>-<i>.<ns>.svc:2222``) only
into the container of that name, and only when the job has more than one replica.
"""

from __future__ import annotations

from typing import Any

from ..runtime.contract import TFJOB
from .jobplatform import kubernetes_platform
from .k8s_shape import K8sJob
from .kubernetes import K8S_FLAGS, container, operator_name_limit, operator_job, operator_replicas, pod_template

PLATFORM = TFJOB
FLAGS = K8S_FLAGS  # the `spec` flags it reads (`flagdecl`)
KIND = "TFJob"
CONTAINER = "tensorflow"
CHIEF = "Chief"
WORKER = "Worker"
NAME_LIMIT = operator_name_limit((CHIEF, WORKER))  # the last replica's Service name is a DNS label


def manifests(job: K8sJob) -> list[dict[str, Any]]:
    """The TFJob, alone."""
    template = pod_template(container(CONTAINER, job.image, job.command, job.gpus_per_node, job.env_vars),
                            shm=job.shm)
    replicas = operator_replicas(job.name, [(CHIEF, 1), (WORKER, job.nodes - 1)], template)
    return [operator_job(KIND, job.name, job.namespace, "tfReplicaSpecs", replicas)]


#: What `trainimg spec` reads of it (`jobplatform`).
JOB = kubernetes_platform(PLATFORM, FLAGS, manifests, NAME_LIMIT)
