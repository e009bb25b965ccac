"""Training Operator v1 (``kubeflow.org/v1``, kubeflow/training-operator v1.9) ``PyTorchJob``.

One Master and ``nodes - 1`` Workers (the Worker role is left out for one node), each one pod running the
container named `CONTAINER`: the operator sets its env (``MASTER_ADDR``, ``RANK`` = the node index, ``WORLD_SIZE``,
``PET_*``) only in the container of that name, and its webhook refuses a replica without one. ``nprocPerNode``
(a string in the CRD) is the processes per node: one per GPU, 1 on a CPU node.
"""

from __future__ import annotations

from typing import Any

from ..runtime.contract import PYTORCHJOB
from .jobplatform import kubernetes_platform
from .k8s_shape import K8sJob
from .kubernetes import K8S_FLAGS, container, operator_name_limit, operator_job, operator_replicas, pod_template

PLATFORM = PYTORCHJOB
FLAGS = K8S_FLAGS  # the `spec` flags it reads (`flagdecl`)
KIND = "PyTorchJob"
CONTAINER = "pytorch"
MASTER = "Master"
WORKER = "Worker"
NAME_LIMIT = operator_name_limit((MASTER, WORKER))  # the last replica's Service name is a DNS label


def manifests(job: K8sJob) -> list[dict[str, Any]]:
    """The PyTorchJob, alone."""
    template = pod_template(container(CONTAINER, job.image, job.command, job.gpus_per_node, job.env_vars),
                            shm=job.shm)
    replicas = operator_replicas(job.name, [(MASTER, 1), (WORKER, job.nodes - 1)], template)
    return [operator_job(KIND, job.name, job.namespace, "pytorchReplicaSpecs", replicas, nprocPerNode=str(job.nproc))]


#: What `trainimg spec` reads of it (`jobplatform`).
JOB = kubernetes_platform(PLATFORM, FLAGS, manifests, NAME_LIMIT)
