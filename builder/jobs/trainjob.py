"""Kubeflow Trainer v2 (``trainer.kubeflow.org/v1alpha1``): a namespaced `TrainingRuntime` for the image and the
`TrainJob` that runs it, laid out as kubeflow/trainer v2.3.0 reads them.

* The runtime's JobSet template has one replicatedJob and one container, both named `NODE`: Trainer's torch and
  jax plugins inject their environment (``PET_*``; ``JAX_*``) only into the container named ``node`` of the
  replicatedJob labelled `ANCESTOR_LABEL` = ``trainer``, and a TrainJob's ``spec.trainer`` (image, command,
  nodes, resources) overrides that same container. The runtime's webhook requires that container and
  ``replicas: 1``.
* ``mlPolicy`` names the plugin: ``torch`` for PyTorch (torchrun's ``PET_*``), ``jax`` for JAX (one process per
  node). In v2.3.0 the processes per node are the TrainJob's ``trainer.numProcPerNode`` (the torch policy has no
  such field any more); without it torch picks ``auto`` (the GPUs, else the CPUs), so trainimg writes it.
* TensorFlow has no Trainer v2 runtime: `manifests` refuses it and names Training Operator's TFJob.
* Trainer names the JobSet after the TrainJob, so the TrainJob's name is held to JobSet's pod-name limit.
"""

from __future__ import annotations

from typing import Any

from ..runtime.contract import TRAINJOB
from ..runtime.platforms.trainjob import TRAINER_NODE
from ..runtime.topology import TENSORFLOW_HOMES
from .jobset import check_pod_names, indexed_job, name_limit
from .jobplatform import kubernetes_platform
from .k8s_shape import K8sJob
from .kubernetes import K8S_FLAGS, ManifestInputError, container, gpu_resources, metadata

PLATFORM = TRAINJOB
FLAGS = K8S_FLAGS  # the `spec` flags it reads (`flagdecl`)
GROUP = "trainer.kubeflow.org"
API_VERSION = f"{GROUP}/v1alpha1"
RUNTIME_KIND = "TrainingRuntime"
KIND = "TrainJob"
NODE = TRAINER_NODE  # kubeflow/trainer pkg/constants: the trainer's replicatedJob and container
ANCESTOR_LABEL = f"{GROUP}/trainjob-ancestor-step"
ANCESTOR_TRAINER = "trainer"
FRAMEWORK_LABEL = f"{GROUP}/framework"
# trainimg framework -> the mlPolicy plugin (also the runtime's framework label, as Trainer's own runtimes have it)
POLICIES = {"pytorch": "torch", "jax": "jax"}
NAME_LIMIT = name_limit(NODE)  # Trainer names the JobSet (and so its pods) after the TrainJob


def manifests(job: K8sJob) -> list[dict[str, Any]]:
    """The `TrainingRuntime`, then the `TrainJob` that names it (both ``job.name``, in ``job.namespace``)."""
    policy = POLICIES.get(job.framework)
    if policy is None:
        homes = " or ".join(f"--platform {name} ({what})" for name, what in TENSORFLOW_HOMES.items())
        raise ManifestInputError(f"Kubeflow Trainer v2 has no {job.framework} runtime; use {homes}",
                                 where="--platform")
    check_pod_names(job.name, NODE, job.nodes)
    return [training_runtime(job, policy), train_job(job)]


def training_runtime(job: K8sJob, policy: str) -> dict[str, Any]:
    """The runtime: `policy` with ``numNodes``, and the JobSet template of the trainer's `NODE` container."""
    node = container(NODE, job.image, job.command, job.gpus_per_node, job.env_vars)
    template = {"metadata": {"labels": {ANCESTOR_LABEL: ANCESTOR_TRAINER}}, **indexed_job(node, job.nodes, job.shm)}
    replicated = {"name": NODE, "replicas": 1, "template": template}
    meta = metadata(job.name, job.namespace)
    meta["labels"] = {FRAMEWORK_LABEL: policy}
    return {
        "apiVersion": API_VERSION,
        "kind": RUNTIME_KIND,
        "metadata": meta,
        "spec": {"mlPolicy": {"numNodes": job.nodes, policy: {}},
                 "template": {"spec": {"replicatedJobs": [replicated]}}},
    }


def train_job(job: K8sJob) -> dict[str, Any]:
    """The TrainJob: the runtime by reference, and the trainer's image, command, nodes and GPUs stated."""
    trainer: dict[str, Any] = {"image": job.image, "command": list(job.command), "numNodes": job.nodes}
    if job.framework == "pytorch":
        trainer["numProcPerNode"] = job.nproc
    if job.gpus_per_node:
        trainer["resourcesPerNode"] = gpu_resources(job.gpus_per_node)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata(job.name, job.namespace),
        "spec": {"runtimeRef": {"apiGroup": GROUP, "kind": RUNTIME_KIND, "name": job.name}, "trainer": trainer},
    }


#: What `trainimg spec` reads of it (`jobplatform`).
JOB = kubernetes_platform(PLATFORM, FLAGS, manifests, NAME_LIMIT)
