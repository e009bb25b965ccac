"""Compatibility data: which CUDA, cuDNN, NCCL and Python versions each framework release fits.

The facts live in ``builder/data/compat.yaml``, each entry citing its official source (framework release tables,
NVIDIA's CUDA image manifests); this module only loads them into frozen typed models and answers questions.
Versions are compared with `packaging`, never as strings.
"""

from __future__ import annotations

import datetime
from functools import cache
from pathlib import Path
from importlib import resources
from typing import Literal

import yaml
from packaging.specifiers import InvalidSpecifier, Specifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..runtime.frameworks import FrameworkName



class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _check_version(value: str) -> str:
    try:
        Version(value)
    except InvalidVersion as exc:
        raise ValueError(f"not a version: {value!r}") from exc
    return value


class OperatingSystem(_Frozen):
    """An OS the images are built on: its CPU base image (and the architectures that tag holds) and the Python
    versions its apt provides."""

    cpu_image: str | None = None
    arches: tuple[str, ...] = ("amd64",)  # the platforms the cpu_image tag's index holds
    python: tuple[str, ...]
    glibc: str  # its C library's version: the manylinux platform a variant's lock is resolved for
    source: str


class CudaImage(_Frozen):
    """One CUDA minor line as NVIDIA publishes it in ``nvidia/cuda`` (container-images/cuda manifests)."""

    image_version: str  # the full version in the tag, e.g. 13.0.2 (NVIDIA supports only the newest patch)
    os: tuple[str, ...]
    cudnn: str | None = None  # cuDNN in the -cudnn- images
    nccl: str | None = None  # libnccl2 in the runtime/devel images
    arches: tuple[str, ...] = ("amd64",)  # the platforms its tags' indexes hold
    source: str

    @field_validator("image_version")
    @classmethod
    def _full_version(cls, v: str) -> str:
        return _check_version(v)


def _check_specifier(value: str) -> str:
    try:
        SpecifierSet(value)
    except InvalidSpecifier as exc:
        raise ValueError(f"not a specifier set: {value!r}") from exc
    if not value:
        raise ValueError("an empty specifier set allows anything; write the wheels' requirement")
    return value


def as_constraint(spec: str) -> str:
    """A requirement as a recipe states it: ``==2.30.7`` is the pin ``2.30.7``; a range stays a specifier set."""
    specs = list(SpecifierSet(spec))
    if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
        return specs[0].version
    return ",".join(part.strip() for part in spec.split(","))


def spoken(constraint: str) -> str:
    """A constraint as messages say it: ``>=2.27.7,<3.0`` -> ``>= 2.27.7, < 3.0``; a pin stays ``2.30.7``."""
    if is_pin(constraint):
        return constraint
    return ", ".join(f"{s.operator} {s.version}" for s in map(Specifier, constraint.split(",")))


def floor_of(constraint: str) -> Version | None:
    """The lowest version a constraint can give (its pin or its >= / > / ~= bound), or None if unbounded below."""
    lows = [Version(s.version.rstrip(".*")) for s in constraint_spec(constraint)
            if s.operator in ("==", "===", ">=", ">", "~=")]
    return max(lows) if lows else None


def constraint_spec(constraint: str) -> SpecifierSet:
    """The specifier set a recipe constraint stands for: a bare version is a pin (``==``)."""
    return SpecifierSet(f"=={constraint}" if constraint[:1].isdigit() else constraint)


def is_pin(constraint: str) -> bool:
    return constraint[:1].isdigit()


class Tested(_Frozen):
    """Versions the framework's makers built and tested this CUDA build with (release notes, CI), with the source.
    A missing value means no source says it: the default is then the newest wheel in the required range."""

    cudnn: str | None = None
    nccl: str | None = None
    source: str

    @field_validator("cudnn", "nccl")
    @classmethod
    def _version(cls, v: str | None) -> str | None:
        return None if v is None else _check_version(v)


class WheelVariant(_Frozen):
    """One CUDA build of a framework: what its wheels REQUIRE (their Requires-Dist, as PEP 440 specifier sets)
    and what was TESTED together. cuDNN and NCCL come as pip wheels inside the framework's install."""

    cudnn: str  # e.g. "==9.24.0.43" (torch pins) or ">=9.3.0.75,<10.0" (TensorFlow, JAX: ranges)
    nccl: str
    cuda_lines: str  # CUDA major.minor lines a base may carry, from the wheels' CUDA runtime requirement
    cudnn_wheel: str  # nvidia-cudnn-cu12 / nvidia-cudnn-cu13
    nccl_wheel: str  # nvidia-nccl-cu12 / nvidia-nccl-cu13
    tested: Tested | None = None
    pip_index: str | None = None  # extra index the CUDA build comes from; None: PyPI
    pip_extra: str | None = None  # e.g. and-cuda (tensorflow), cuda13 (jax)

    @field_validator("cudnn", "nccl", "cuda_lines")
    @classmethod
    def _specifier(cls, v: str) -> str:
        return _check_specifier(v)

    def default(self, kind: Literal["cudnn", "nccl"]) -> str:
        """The constraint a recipe gets when it sets none: the tested version where a source gives one, else
        the required range itself (pip then installs the newest wheel in it), never the floor by accident."""
        tested = getattr(self.tested, kind, None) if self.tested else None
        return tested or as_constraint(getattr(self, kind))

    def allows(self, kind: Literal["cudnn", "nccl"], version: str) -> bool:
        return Version(version) in SpecifierSet(getattr(self, kind))

    def runs_on(self, line: str) -> bool:
        """Whether a base of CUDA `line` (major.minor) fits what these wheels require."""
        return Version(line) in SpecifierSet(self.cuda_lines)


class FrameworkRelease(_Frozen):
    """One framework release line (major.minor) as its official compatibility table states it."""

    version: str  # the newest patch release trainimg ships for this line, e.g. 2.14.1
    released: datetime.date
    python: str  # a PEP 440 specifier set, e.g. ">=3.10,<3.15"
    cpu: bool = True
    cpu_pip_name: str | None = None  # tensorflow-cpu: CPU builds under another name
    cpu_pip_index: str | None = None
    cuda: dict[str, WheelVariant] = Field(default_factory=dict)  # CUDA major.minor -> what that build pins
    source: str

    @field_validator("python")
    @classmethod
    def _spec(cls, v: str) -> str:
        try:
            SpecifierSet(v)
        except InvalidSpecifier as exc:
            raise ValueError(f"not a specifier set: {v!r}") from exc
        return v

    @property
    def python_spec(self) -> SpecifierSet:
        return SpecifierSet(self.python)

    @property
    def line(self) -> str:
        v = Version(self.version)
        return f"{v.major}.{v.minor}"


    def build_for(self, line: str) -> tuple[str, WheelVariant] | None:
        """The CUDA build to install on a base of CUDA `line`: the build made for that line, else the newest
        build whose wheels run on it (TensorFlow 2.21, built for 12.5, brings CUDA 12.x wheels: 12.6 fits)."""
        if line in self.cuda:
            return line, self.cuda[line]
        fits = [(key, w) for key, w in self.cuda.items() if w.runs_on(line)]
        return max(fits, key=lambda kw: Version(kw[0])) if fits else None


class Framework(_Frozen):
    pip_name: str
    releases: tuple[FrameworkRelease, ...]


class Nccl(_Frozen):
    minimum: str  # the Reduction Server's floor (seed 003)
    source: str


class ArchBuild(_Frozen):
    """The GPU architectures (``sm_XY`` SASS, ``compute_XY`` PTX) the CUDA builds `cuda` of the `versions` releases
    of `framework` hold kernels for, with the build file or wheel that says so (`gpuarch` applies the rule)."""

    framework: FrameworkName
    versions: str  # PEP 440 specifier set of release versions
    cuda: str  # PEP 440 specifier set of CUDA build lines
    archs: tuple[str, ...]
    arch: str = "amd64"  # the CPU architecture of the wheels it was read from (recipe/arches.py)
    source: str


class ArchBuilds(_Frozen):
    """Which builds of a framework's `versions` exist for CPU architecture `arch` (every build under `frameworks` is
    amd64's: the wheels' x86_64 tags), with the source that says so. `cpu_pip_name` is the CPU build's name there
    where it differs from amd64's (tensorflow-cpu has no aarch64 wheel: `tensorflow` is that build); `cuda` is a
    PEP 440 specifier set of the CUDA build lines with wheels for `arch`, None for none; `note` is the fact a
    refusal quotes."""

    framework: FrameworkName
    versions: str
    arch: str
    cpu: bool
    cpu_pip_name: str | None = None
    cuda: str | None = None
    note: str
    source: str

    def holds(self, version: str) -> bool:
        return Version(version) in SpecifierSet(self.versions)

    def has_cuda(self, line: str) -> bool:
        return self.cuda is not None and Version(line) in SpecifierSet(self.cuda)


class Compat(_Frozen):
    operating_systems: dict[str, OperatingSystem]
    cuda: dict[str, CudaImage]
    frameworks: dict[FrameworkName, Framework]
    nccl: Nccl
    hypertune: tuple[str, ...]
    gpu_archs: tuple[ArchBuild, ...] = ()
    architectures: tuple[ArchBuilds, ...] = ()

    def arch_builds(self, framework: FrameworkName, version: str, arch: str) -> ArchBuilds | None:
        """What compat data says of `framework` `version`'s builds for `arch` (not amd64), None: nothing."""
        return next((a for a in self.architectures if a.framework == framework and a.arch == arch
                     and a.holds(version)), None)

    def cpu_pip_name(self, framework: FrameworkName, version: str, arch: str) -> str:
        """The distribution a CPU variant of `framework` `version` installs on `arch` (validated before)."""
        found = self.arch_builds(framework, version, arch) if arch != "amd64" else None
        if found is not None and found.cpu_pip_name:
            return found.cpu_pip_name
        release = self.release(framework, version)
        return (release.cpu_pip_name if release else None) or self.frameworks[framework].pip_name

    def release(self, framework: FrameworkName, version: str) -> FrameworkRelease | None:
        """The release line that `version` belongs to (same major.minor), or None when trainimg has no data."""
        v = Version(version)
        for rel in self.frameworks[framework].releases:
            rv = Version(rel.version)
            if (rv.major, rv.minor) == (v.major, v.minor):
                return rel
        return None

    def build(self, framework: FrameworkName, version: str, cuda: str) -> tuple[str, WheelVariant]:
        """The (CUDA build line, wheels) a validated GPU variant installs."""
        found = self.release(framework, version)
        build = found.build_for(cuda) if found else None
        if build is None:
            raise ValueError(f"no CUDA build of {framework} {version} runs on CUDA {cuda}: validate the recipe first")
        return build

    def known_versions(self, framework: FrameworkName) -> list[str]:
        return sorted((r.version for r in self.frameworks[framework].releases), key=Version)


def compat_file() -> Path:
    """builder/recipe/data/compat.yaml: the file the compatibility data is read from (and `compat add` writes)."""
    return Path(str(resources.files(__package__).joinpath("data/compat.yaml")))


@cache
def load_compat() -> Compat:
    """The project's compatibility data, parsed once per process (it never changes while running)."""
    return Compat.model_validate(yaml.safe_load(compat_file().read_text(encoding="utf-8")))


def minor_of(version: str) -> str:
    """``13.0.2`` -> ``13.0``: CUDA lines are named by major.minor throughout the data."""
    v = Version(version)
    return f"{v.major}.{v.minor}"
