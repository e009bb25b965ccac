"""What every Kubernetes manifest trainimg writes shares: the name grammars, a GPU container, metadata, the
Training Operator's replica layout and the multi-document YAML a person hands to ``kubectl apply -f``.

Why one module: the grammars and the GPU resource name are Kubernetes' own facts (apimachinery's
``IsDNS1035Label``/``IsDNS1123Label``, NVIDIA's device plugin), and every writer (`trainjob`, `pytorchjob`, `tfjob`,
`jobset`) must apply them identically. It knows nothing of trainimg's job types, so `k8s_shape` can validate with
it and the writers can lay out with it, with no import cycle.

Names are checked twice: the object's own name (a DNS-1035 label, what the Training Operator's webhook and the
TrainJob CRD's CEL rules demand), and the longest name a controller will derive from it (a pod, a Service, a pod
hostname): those must be labels too, or the controller fails after the job was accepted.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from typing import Any

import yaml

from ..errors import UserInputError
from ..runtime.shm import PATH as SHM_PATH
from .flagdecl import GPUS, Flag
from .node import ENV

NAMESPACE = Flag("--namespace", "The namespace (default: kubectl's).", metavar="NAME")
#: The `spec` flags every Kubernetes platform reads (each writer's ``FLAGS``).
K8S_FLAGS = (GPUS, NAMESPACE, ENV)
GPU_RESOURCE = "nvidia.com/gpu"  # the NVIDIA device plugin's extended resource
MAX_LABEL = 63  # apimachinery validation.DNS1035LabelMaxLength == DNS1123LabelMaxLength
# Digits a made-up job name leaves room for in the pod and Service names derived from it (nodes up to 9999).
INDEX_DIGITS = 4
# apimachinery validation.dns1035LabelFmt and dns1123LabelFmt, anchored
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# Training Operator v1: a failed replica's pod is restarted in place (kubeflow.org/v1 ReplicaSpec.restartPolicy).
OPERATOR_RESTART_POLICY = "OnFailure"
OPERATOR_API_VERSION = "kubeflow.org/v1"  # Training Operator v1: PyTorchJob, TFJob
SHM_VOLUME = "dshm"  # the memory-backed emptyDir mounted over /dev/shm


class ManifestInputError(UserInputError, ValueError):
    """A job Kubernetes would refuse. A `UserInputError` (the CLI prints its one line and exits 2) and a
    `ValueError`, as any plain caller of the writers expects for a bad value."""


def dns1035_label(value: str, where: str) -> str:
    """`value` when it is an RFC 1035 label (a Service, a JobSet, a TrainJob, a Training Operator job name)."""
    return _label(value, where, _DNS1035_LABEL, "a lower-case letter first, then a-z, 0-9 or '-', ending in a-z or 0-9")


def dns1123_label(value: str, where: str) -> str:
    """`value` when it is an RFC 1123 label (a namespace)."""
    return _label(value, where, _DNS1123_LABEL, "a-z, 0-9 or '-', starting and ending in a-z or 0-9")


def derived_name(name: str, longest: str, what: str, where: str) -> None:
    """Refuse `name` when `longest`, the longest `what` a controller derives from it, is over `MAX_LABEL`."""
    if len(longest) > MAX_LABEL:
        room = MAX_LABEL - (len(longest) - len(name))
        raise ManifestInputError(f"{name!r} is too long: {what} {longest!r} would be {len(longest)} characters "
                                 f"(at most {MAX_LABEL}); use at most {room} characters", where=where)


def _label(value: str, where: str, grammar: re.Pattern[str], rule: str) -> str:
    if not isinstance(value, str) or not grammar.fullmatch(value):
        raise ManifestInputError(f"{value!r} is not a DNS label: {rule}", where=where)
    if len(value) > MAX_LABEL:
        raise ManifestInputError(f"{value!r} is {len(value)} characters; at most {MAX_LABEL}", where=where)
    return value


def metadata(name: str, namespace: str | None) -> dict[str, Any]:
    """An object's ``metadata``: without a namespace, ``kubectl apply`` puts it in the context's namespace."""
    return {"name": name} if namespace is None else {"name": name, "namespace": namespace}


def container(name: str, image: str, command: Sequence[str], gpus: int,
              env: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """One container running `command` (the full command: the image's ENTRYPOINT is replaced), `gpus` NVIDIA GPUs.

    GPUs are extended resources: a limit alone is the request, and a CPU container (0) asks for none.
    """
    spec: dict[str, Any] = {"name": name, "image": image, "command": list(command)}
    if env:
        spec["env"] = list(env)
    if gpus > 0:
        spec["resources"] = gpu_resources(gpus)
    return spec


def gpu_resources(gpus: int) -> dict[str, Any]:
    """``ResourceRequirements`` for `gpus` NVIDIA GPUs; the quantity as a string, its canonical form (what the API
    server gives back, and what the Kubeflow SDK's models keep as written)."""
    return {"limits": {GPU_RESOURCE: str(gpus)}}


def pod_template(main: dict[str, Any], restart_policy: str | None = None, shm: int = 0) -> dict[str, Any]:
    """A ``PodTemplateSpec`` with one container; no `restart_policy` where the controller sets the pods' own (the
    Training Operator copies its replica's ``restartPolicy`` into each pod). `shm` bytes (0: none) of /dev/shm: a
    memory-backed emptyDir over it (`runtime.shm.POD`), where a pod's containers otherwise get the runtime's 64 MiB."""
    spec: dict[str, Any] = {} if restart_policy is None else {"restartPolicy": restart_policy}
    if shm:
        main = {**main, "volumeMounts": [{"name": SHM_VOLUME, "mountPath": SHM_PATH}]}
        spec["volumes"] = [{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": quantity(shm)}}]
    return {"spec": {**spec, "containers": [main]}}


def quantity(size: int) -> str:
    """Bytes as a Kubernetes quantity, in the largest binary unit that divides them (``8Gi``, ``512Mi``)."""
    for unit, suffix in ((1 << 30, "Gi"), (1 << 20, "Mi"), (1 << 10, "Ki")):
        if size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)


def operator_replicas(name: str, roles: Sequence[tuple[str, int]], template: dict[str, Any]) -> dict[str, Any]:
    """Training Operator v1 ``*ReplicaSpecs`` for job `name`: role -> replicas of `template`.

    A role with 0 replicas is left out (PyTorchJob's webhook refuses a Worker with ``replicas: 0``). The operator
    names replica ``i``'s pod and Service ``<name>-<role>-<i>`` (role lower-cased), so the last one must fit a label.
    """
    for role, count in roles:
        if count > 0:
            derived_name(name, f"{name}-{role.lower()}-{count - 1}", f"the {role} Service", "name")
    return {role: {"replicas": count, "restartPolicy": OPERATOR_RESTART_POLICY, "template": copy.deepcopy(template)}
            for role, count in roles if count > 0}


def operator_name_limit(roles: Sequence[str]) -> int:
    """The longest name a Training Operator job of `roles` may take so ``<name>-<role>-<i>`` stays a label."""
    return MAX_LABEL - max(len(f"-{role.lower()}-") for role in roles) - INDEX_DIGITS


def operator_job(kind: str, job_name: str, namespace: str | None, replicas_key: str, replicas: dict[str, Any],
                 **spec: Any) -> dict[str, Any]:
    """A Training Operator v1 (``kubeflow.org/v1``) job of `kind`: its ``*ReplicaSpecs`` under `replicas_key`
    beside the `spec` fields of that kind (a PyTorchJob's ``nprocPerNode``)."""
    return {"apiVersion": OPERATOR_API_VERSION, "kind": kind, "metadata": metadata(job_name, namespace),
            "spec": {**spec, replicas_key: replicas}}


class _PlainDumper(yaml.SafeDumper):
    """Writes a repeated object out again instead of as a YAML alias (``&id001``/``*id001``): people read these."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_yaml(manifests: Sequence[dict[str, Any]]) -> str:
    """The manifests as one multi-document YAML stream, keys in the order written (``kind`` near the top)."""
    return yaml.dump_all(list(manifests), Dumper=_PlainDumper, sort_keys=False, default_flow_style=False)
