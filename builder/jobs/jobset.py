"""A JobSet (``jobset.x-k8s.io/v1alpha2``, kubernetes-sigs/jobset): the bare Kubernetes way to run a job on N nodes.

JobSet gives pods nothing about the world but its labels and a hostname, so the pod's container gets the
``JOBSET_*`` variables that trainimg's launcher reads to know the world (``runtime/platforms/jobset.py``, whose
table of them this module writes from, so the two sides cannot drift apart).

Layout: one replicatedJob named `REPLICATED_JOB`, ``replicas: 1``, whose Indexed Job runs one pod per node
(``completions = parallelism = nodes``, ``backoffLimit: 0``, see `indexed_job`). ``network.enableDNSHostnames``
makes pod ``i`` reachable as ``<jobset>-node-0-<i>.<subdomain>``; the subdomain is the JobSet's name (JobSet's
default, written out so ``JOBSET_SUBDOMAIN`` and the spec cannot disagree). Kubernetes itself sets
``JOB_COMPLETION_INDEX`` (the pod's index) in Indexed Job pods.
"""

from __future__ import annotations

from typing import Any

from ..runtime.contract import JOBSET
from ..runtime.platforms import jobset as launcher
from ..runtime.platforms.jobset import REPLICATED_JOB as JOBSET_REPLICATED_JOB
from ..runtime.world import DEFAULT_MASTER_PORT
from .jobplatform import kubernetes_platform
from .k8s_shape import K8sJob
from .kubernetes import INDEX_DIGITS, K8S_FLAGS, MAX_LABEL, container, derived_name, metadata, pod_template

PLATFORM = JOBSET
FLAGS = K8S_FLAGS  # the `spec` flags it reads (`flagdecl`)
API_VERSION = "jobset.x-k8s.io/v1alpha2"
KIND = "JobSet"
REPLICATED_JOB = JOBSET_REPLICATED_JOB  # the same the gate replays (runtime/platforms/jobset.py)
PORT = DEFAULT_MASTER_PORT  # the rendezvous port: torch.distributed's customary default, as Kubeflow Trainer's

# The launcher's contract (runtime/platforms/jobset.py reads it): each variable -> the pod label JobSet's controller
# sets (api/jobset/v1alpha2/jobset_types.go), copied in by the downward API; the rest are values written here.
LABEL_ENV = {name: label for name, label in launcher.VARIABLES.items() if label is not None}
JOBSET_PODS_PER_JOB = "JOBSET_PODS_PER_JOB"
JOBSET_SUBDOMAIN = "JOBSET_SUBDOMAIN"
JOBSET_PORT = "JOBSET_PORT"
# JobSet's webhook checks the longest pod name with this stand-in for the 5-character random suffix of a pod name
# (pkg/webhooks/jobset_webhook.go); a JobSet whose pod names would exceed a DNS label is refused at creation.
_POD_SUFFIX_STAND_IN = "-abcde"


def name_limit(replicated_job: str) -> int:
    """The longest JobSet name whose pod names (``<name>-<replicated_job>-0-<i>-abcde``) stay DNS labels."""
    return MAX_LABEL - len(f"-{replicated_job}-0-") - INDEX_DIGITS - len(_POD_SUFFIX_STAND_IN)


NAME_LIMIT = name_limit(REPLICATED_JOB)


def manifests(job: K8sJob) -> list[dict[str, Any]]:
    """The JobSet, alone: ``kubectl apply -f`` it where the JobSet controller runs."""
    check_pod_names(job.name, REPLICATED_JOB, job.nodes)
    env: list[dict[str, Any]] = [
        *({"name": var, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{label}']"}}}
          for var, label in LABEL_ENV.items()),
        {"name": JOBSET_PODS_PER_JOB, "value": str(job.nodes)},
        {"name": JOBSET_SUBDOMAIN, "value": job.name},
        {"name": JOBSET_PORT, "value": str(PORT)},
        *job.env_vars,
    ]
    node = container(REPLICATED_JOB, job.image, job.command, job.gpus_per_node, env)
    replicated = {"name": REPLICATED_JOB, "replicas": 1, "template": indexed_job(node, job.nodes, job.shm)}
    return [{
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata(job.name, job.namespace),
        "spec": {"network": {"enableDNSHostnames": True, "subdomain": job.name}, "replicatedJobs": [replicated]},
    }]


def indexed_job(node: dict[str, Any], nodes: int, shm: int = 0) -> dict[str, Any]:
    """A ``JobTemplateSpec`` running the `node` container once per node, pod ``i`` with completion index ``i``, its
    /dev/shm `shm` bytes (`kubernetes.pod_template`).

    A failed pod is not restarted (``restartPolicy: Never``, ``backoffLimit: 0``): its peers are blocked in a
    collective that a restarted rank cannot rejoin, so the job fails at once and frees its GPUs.
    """
    return {"spec": {"completionMode": "Indexed", "completions": nodes, "parallelism": nodes, "backoffLimit": 0,
                     "template": pod_template(node, restart_policy="Never", shm=shm)}}


def check_pod_names(jobset: str, replicated_job: str, nodes: int) -> None:
    """Refuse a JobSet name whose last pod name (job 0, pod ``nodes - 1``) would not be a DNS label."""
    longest = f"{jobset}-{replicated_job}-0-{nodes - 1}{_POD_SUFFIX_STAND_IN}"
    derived_name(jobset, longest, "the last pod's name", "name")


#: What `trainimg spec` reads of it (`jobplatform`).
JOB = kubernetes_platform(PLATFORM, FLAGS, manifests, NAME_LIMIT)
