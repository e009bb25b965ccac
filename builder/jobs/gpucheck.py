"""The GPU a job asks for against the image that runs on it: a GPU its framework build has kernels for, named in
the platform's own tables.

Why: every platform accepts ``NVIDIA_TESLA_V100`` with a CUDA 13 PyTorch image, ``ml.p3.2xlarge`` with it on
SageMaker and ``Standard_NC6s_v3`` on Azure ML; the job queues for its GPUs and then fails at its first kernel
(CUDA 13 builds have no Volta kernels). And a mistyped ``--machine-type``, ``--instance-type`` or ``--vm-size`` is
a valid-looking string that fails only at submission, or, for Azure (where the job names a cluster, not the size),
quietly turns a GPU job into a CPU one. The facts are tables with their sources: the GPU behind each platform's
accelerator name and its compute capability (``data/gpus.yaml``), the architectures each framework build holds
(compat data, `recipe.gpuarch`, which also holds the one rule that says what runs where).

`check_gpus` is what `spec` calls, on every platform; an image whose architectures are unknown (a reference known
only by ``--framework``) is let through, as `clusterimage.check_gpu_image` lets an unknown CUDA through.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import cache
from importlib import resources

import yaml
from pydantic import BaseModel, ConfigDict

from ..errors import UserInputError
from ..recipe.gpuarch import Capability, archs_of, describe, parse_capability, runs_on, show, why_missing
from ..recipe.loading import Variant
from ..runtime.contract import AZUREML, CUDA_ARCHS_LABEL, FRAMEWORK_LABEL, RECIPE_VERSION_PREFIX, SAGEMAKER, VERSION_PREFIX
from . import azureml, sagemaker
from .machines import machines
from .nearest import did_you_mean
from .shape import ImageFacts, SpecOptions

GOOGLE = ("vertex", "aiplatform")


class GpuTable(BaseModel):
    """``data/gpus.yaml``: GPU -> compute capability, and each platform's names -> GPU."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    gpus: dict[str, str]
    google: dict[str, str | None]
    sagemaker: dict[str, str]
    azureml_gpu_prefix: str
    google_other_series: tuple[str, ...]


@cache
def gpu_table() -> GpuTable:
    text = resources.files(__package__).joinpath("data/gpus.yaml").read_text(encoding="utf-8")
    return GpuTable.model_validate(yaml.safe_load(text))


def capability(gpu: str) -> Capability:
    return parse_capability(gpu_table().gpus[gpu])


def gpu_of(platform: str, name: str) -> str | None:
    """The GPU behind `name` on `platform` (an accelerator type, an instance type, a VM size), or None for a name
    with no CUDA GPU (a TPU, a CPU instance or size)."""
    table = gpu_table()
    if platform in GOOGLE:
        return table.google.get(name)
    if platform == SAGEMAKER:
        return table.sagemaker.get(name.rpartition(".")[0])
    if platform == AZUREML:
        carried = azureml.vm_sizes().get(name.lower())
        return carried[0] if carried else None
    return None


def requested(opts: SpecOptions) -> tuple[str, str] | None:
    """(flag, name) of what names the job's GPU on its platform, or None where nothing does."""
    if opts.platform in GOOGLE and isinstance(opts.accelerator, str):
        return "--accelerator", opts.accelerator.partition(":")[0]
    if opts.platform == SAGEMAKER and opts.instance_type:
        return "--instance-type", opts.instance_type
    if opts.platform == AZUREML and opts.vm_size:
        return "--vm-size", opts.vm_size
    return None


def check_gpus(opts: SpecOptions) -> None:
    """Refuse an unknown machine type, instance type or VM size (with the nearest names), then a GPU the image's
    framework build cannot run (naming both capabilities and a variant that runs on it)."""
    check_names(opts)
    asked = requested(opts)
    if asked is None:
        return
    flag, name = asked
    gpu = gpu_of(opts.platform, name)
    facts = opts.facts
    if gpu is None or facts is None or facts.archs is None:
        return
    cc = capability(gpu)
    if runs_on(facts.archs, cc):
        return
    image = facts.name or opts.image
    fits = [other for other, archs in facts.alternatives if runs_on(archs, cc)]
    instead = f"{' or '.join(fits[:2])} runs on it" if fits else "no variant here runs on it"
    raise UserInputError(f"{name} is compute capability {show(cc)} ({gpu}); {image} runs on {describe(facts.archs)}"
                         f"{why_missing(facts.cuda, cc)}; {instead}", where=flag)


def check_names(opts: SpecOptions) -> None:
    """The machine type (Google), instance type (SageMaker) or VM size (Azure ML) must be one the tables know."""
    if opts.platform in GOOGLE and isinstance(opts.machine_type, str):
        _check_machine_series(opts.machine_type)
    if opts.platform == SAGEMAKER and opts.instance_type:
        sagemaker.check_instance_type(opts.instance_type)
    if opts.platform == AZUREML and opts.vm_size:
        _check_vm_size(opts.vm_size)


def _check_machine_series(machine_type: str) -> None:
    """A Google machine type belongs to a series the machine table names or a CPU series training runs."""
    known = machines()
    series = {name.partition("-")[0] for name in known} | set(gpu_table().google_other_series)
    if machine_type in known or machine_type.partition("-")[0] in series:
        return
    hint = did_you_mean(machine_type, [*known, *(f"{s}-standard-8" for s in gpu_table().google_other_series)])
    raise UserInputError(f"{machine_type!r} is no Google Cloud machine type training runs (series: "
                         f"{', '.join(sorted(series))}){'; ' + hint if hint else ''}", where="--machine-type")


def _check_vm_size(vm_size: str) -> None:
    """An Azure N-series (GPU) size must be in the VM size table; other series carry no GPU and pass."""
    prefix = gpu_table().azureml_gpu_prefix
    if not vm_size.lower().startswith(prefix.lower()) or gpu_of(AZUREML, vm_size) is not None:
        return
    text = resources.files(__package__).joinpath("data/azure_vm_sizes.yaml").read_text(encoding="utf-8")
    sizes = list(yaml.safe_load(text)["sizes"])
    raise UserInputError(f"{vm_size} is no Azure GPU VM size trainimg knows (jobs/data/azure_vm_sizes.yaml); "
                         f"{did_you_mean(vm_size, sizes, fallback=sizes)}", where="--vm-size")


def with_alternatives(resolved: tuple[str, ImageFacts | None], variants: Mapping[str, Variant]
                      ) -> tuple[str, ImageFacts | None]:
    """`resolved` with its facts knowing the other GPU variants of its framework and their architectures, so a
    refusal can name one that runs on the GPU asked for."""
    reference, facts = resolved
    if facts is None or facts.archs is None:
        return resolved
    others = []
    for name, v in sorted(variants.items()):
        archs = archs_of(v.framework, v.version, v.cuda)
        if name != facts.name and v.framework == facts.framework and archs is not None:
            others.append((name, archs))
    return reference, replace(facts, alternatives=tuple(others))


def archs_from_labels(labels: Mapping[str, str]) -> tuple[str, ...] | None:
    """A built image's architectures: its `CUDA_ARCHS_LABEL` (read from the framework by the build), else from the
    framework and versions its labels record (held, else asked) and compat data."""
    if labels.get(CUDA_ARCHS_LABEL):
        return tuple(labels[CUDA_ARCHS_LABEL].split(","))

    def version(key: str) -> str | None:
        value = labels.get(VERSION_PREFIX + key) or labels.get(RECIPE_VERSION_PREFIX + key)
        return None if value in (None, "none") else value

    cuda = version("cuda")
    line = ".".join(cuda.split(".")[:2]) if cuda else None
    return archs_of(labels.get(FRAMEWORK_LABEL, "none"), version("framework"), line)
