"""What every `trainimg spec` platform module gives (`JobPlatform`, its ``JOB``), so nothing outside it names it.

Why one interface: the code that checks and writes a job (`spec`, `clusterspec`, `gpucheck`, `specflags`, the CLI)
used to branch on platform names (``if opts.platform == NAME``) and keep one dict per fact (writers, name
limits); a new platform touched each. Now a platform module declares, in one `JobPlatform`, its flags, its name
limit, how it writes its job, and the hooks the shared checks call; every hook has a default that says "nothing to
add", so a platform names only what it does differently. `platforms.MODULES` imports them by the contract's names.

Two kinds of writer: a cluster platform's `write` takes the shared options and the `ClusterJob` that
`clusterspec` resolved (name, nodes, GPUs per node, launcher command) and returns the file's text; a cloud
platform's `body` lays a validated `shape.JobShape` out as its API request, in the ``rest`` or ``gcloud`` form.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .flagdecl import Flag
from .k8s_shape import K8sJob
from .kubernetes import NAMESPACE, dump_yaml
from .node import ENV, job_env
from .shape import JobShape, SpecOptions


@dataclass(frozen=True, kw_only=True)
class ClusterJob:
    """What `clusterspec` resolved for a cluster platform's writer: the job's `name`, `nodes`, `gpus` per node
    (0: a CPU job), the container `command` (the program behind trainimg's launcher) and the image's `framework`
    (None: unknown or none)."""

    name: str
    image: str
    nodes: int
    gpus: int
    command: Sequence[str]
    framework: str | None


def _no_request(opts: SpecOptions) -> tuple[str, str] | None:
    return None


def _no_gpu(name: str) -> str | None:
    return None


def _no_check(opts: SpecOptions) -> None:
    return None


def _as_asked(opts: SpecOptions, gpus: int) -> int:
    return gpus


def _as_made(name: str) -> str:
    return name


def _any_name(name: str) -> None:
    return None


def _no_notes(opts: SpecOptions, body: dict[str, Any]) -> tuple[str, ...]:
    return ()


@dataclass(frozen=True, kw_only=True)
class JobPlatform:
    """One platform's facts and hooks (its module's ``JOB``).

    `flags`: the ``spec`` flags it reads besides `flagdecl.COMMON` (any other is refused, `specflags`).
    `name_limit`: the longest job name trainimg makes up for it (None: the cloud APIs' own rule, `spec._name`).
    `write` (cluster platforms) or `body` (cloud platforms): the job, see the module docstring. `manifests`: a
    Kubernetes platform's objects for a `K8sJob` (what its `write` dumps).
    `notes`: lines for stderr after a cloud body is written. `gpus_per_node`: the processes per node from the
    options and ``--gpus`` (a platform whose machine names its GPUs says them), `gpus_flag` the flag a refusal of
    that count names. `gpu_request`: (flag, name) of what names the job's GPU, `gpu_of`: the GPU behind such a name
    (None: no CUDA GPU), `check_names`: refuse a machine name the platform's table does not know (`gpucheck`).
    `made_name`: trainimg's made-up cloud job name in the platform's grammar, `check_name`: refuse a given one
    that the platform's grammar does not take (`spec`; the length limit is the cloud APIs' shared one).
    """

    name: str
    flags: tuple[Flag, ...]
    name_limit: int | None = None
    write: Callable[[SpecOptions, ClusterJob], str] | None = None
    body: Callable[[JobShape, str], dict[str, Any]] | None = None
    manifests: Callable[[K8sJob], list[dict[str, Any]]] | None = None
    notes: Callable[[SpecOptions, dict[str, Any]], tuple[str, ...]] = _no_notes
    gpus_per_node: Callable[[SpecOptions, int], int] = _as_asked
    gpus_flag: str = "--gpus"
    gpu_request: Callable[[SpecOptions], tuple[str, str] | None] = _no_request
    gpu_of: Callable[[str], str | None] = _no_gpu
    check_names: Callable[[SpecOptions], None] = _no_check
    made_name: Callable[[str], str] = _as_made
    check_name: Callable[[str], None] = _any_name


def kubernetes_platform(name: str, flags: tuple[Flag, ...], manifests: Callable[[K8sJob], list[dict[str, Any]]],
                        name_limit: int) -> JobPlatform:
    """A Kubernetes platform's ``JOB``: it reads `flags` (`kubernetes.K8S_FLAGS`) and writes `manifests` as one
    multi-document YAML (a job of unknown framework is laid out as PyTorch's)."""

    def write(opts: SpecOptions, job: ClusterJob) -> str:
        return dump_yaml(manifests(K8sJob(name=job.name, image=job.image, nodes=job.nodes, gpus_per_node=job.gpus,
                                          command=job.command, framework=job.framework or "pytorch",
                                          namespace=opts.flag(NAMESPACE), env=job_env(opts.flag(ENV)))))

    return JobPlatform(name=name, flags=flags, name_limit=name_limit, write=write, manifests=manifests)
