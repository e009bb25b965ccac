"""The GPU a job asks for against the image that runs on it: a GPU its framework build has kernels for, named in
the platform's own tables.

Why: every platform accepts a Volta GPU's name (``NVIDIA_TESLA_V100``, an ``ml.p3`` instance type, a
``Standard_NC6s_v3`` VM size) with a CUDA 13 PyTorch image; the job queues for its GPUs and then fails at its first
kernel (CUDA 13 builds have no Volta kernels). And a mistyped machine type, instance type or VM size is a
valid-looking string that fails only at submission, or, where the job names a cluster rather than the size,
quietly turns a GPU job into a CPU one. The facts are tables with their sources: the GPU behind each platform's
accelerator name and its compute capability (``data/gpus.yaml``, `gputable`), the architectures each framework
build holds (compat data, `recipe.gpuarch`, which also holds the one rule that says what runs where). Which flag
names the GPU, the GPU behind a name and the check of a name are each platform module's hooks
(`jobplatform.JobPlatform`): this module holds the rule, not the platforms.

`check_gpus` is what `spec` calls, on every platform; an image whose architectures are unknown (a reference known
only by ``--framework``) is let through, as `clusterimage.check_gpu_image` lets an unknown CUDA through.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from ..errors import UserInputError
from ..recipe.gpuarch import archs_of, describe, runs_on, show, why_missing
from ..recipe.loading import Variant
from ..runtime.contract import CUDA_ARCHS_LABEL, FRAMEWORK_LABEL, RECIPE_VERSION_PREFIX, VERSION_PREFIX
from .gputable import capability, machine_arch
from .platforms import job_platform
from .shape import ImageFacts, SpecOptions


def gpu_of(platform: str, name: str) -> str | None:
    """The GPU behind `name` on `platform` (an accelerator type, an instance type, a VM size), or None for a name
    with no CUDA GPU (a TPU, a CPU instance or size)."""
    return job_platform(platform).gpu_of(name)


def requested(opts: SpecOptions) -> tuple[str, str] | None:
    """(flag, name) of what names the job's GPU on its platform, or None where nothing does."""
    return job_platform(opts.platform).gpu_request(opts)


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
    if gpu is None or facts is None:
        return
    check_platform(flag, name, gpu, facts, opts.image)
    if facts.archs is None:
        return
    cc = capability(gpu)
    if runs_on(facts.archs, cc):
        return
    image = facts.name or opts.image
    fits = [other for other, archs in facts.alternatives if runs_on(archs, cc)]
    instead = f"{' or '.join(fits[:2])} runs on it" if fits else "no variant here runs on it"
    raise UserInputError(f"{name} is compute capability {show(cc)} ({gpu}); {image} runs on {describe(facts.archs)}"
                         f"{why_missing(facts.cuda, cc)}; {instead}", where=flag)


def check_platform(flag: str, name: str, gpu: str, facts: ImageFacts, image: str) -> None:
    """The machines carrying `gpu` are arm64 (a Grace superchip) or amd64 (`gputable.machine_arch`): refuse an
    image whose index holds no image of that architecture, naming a variant of its framework that has one (and
    whose CUDA build runs on the GPU). An image whose architectures are unknown is let through."""
    arch = machine_arch(gpu)
    if facts.platforms is None or arch in facts.platforms:
        return
    cc = capability(gpu)
    kernels = dict(facts.alternatives)
    fits = [other for other, plats in facts.platform_alternatives
            if arch in plats and (other not in kernels or runs_on(kernels[other], cc))]
    instead = f"{' or '.join(fits[:2])} runs on it" if fits else f"no variant here has an {arch} image"
    what = "a Grace superchip: its machines are arm64" if arch != "amd64" else "in amd64 (x86-64) machines"
    raise UserInputError(f"{name} is {gpu}, {what}; {facts.name or image} holds {', '.join(facts.platforms)} "
                         f"only; {instead}", where=flag)


def check_names(opts: SpecOptions) -> None:
    """The machine type (Google), instance type or VM size must be one the platform's tables know."""
    job_platform(opts.platform).check_names(opts)


def with_alternatives(resolved: tuple[str, ImageFacts | None], variants: Mapping[str, Variant]
                      ) -> tuple[str, ImageFacts | None]:
    """`resolved` with its facts knowing the other GPU variants of its framework and their architectures, so a
    refusal can name one that runs on the GPU asked for."""
    reference, facts = resolved
    if facts is None:
        return resolved
    others = []
    for name, v in sorted(variants.items()):
        archs = archs_of(v.framework, v.version, v.cuda)
        if name != facts.name and v.framework == facts.framework and archs is not None:
            others.append((name, archs))
    plats = tuple((name, v.arch) for name, v in sorted(variants.items())
                  if name != facts.name and v.framework == facts.framework and v.gpu)
    return reference, replace(facts, alternatives=tuple(others) if facts.archs is not None else (),
                              platform_alternatives=plats)


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
