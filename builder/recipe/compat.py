"""Compatibility data: which CUDA, cuDNN, NCCL and Python versions each framework release fits.

The facts live in ``builder/data/compat.yaml``, each entry citing its official source (framework release tables,
NVIDIA's CUDA image manifests); this module only loads them into frozen typed models and answers questions.
Versions are compared with `packaging`, never as strings.
"""

from __future__ import annotations

import datetime
from functools import cache
from importlib import resources
from typing import Literal

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, field_validator

FrameworkName = Literal["pytorch", "tensorflow", "jax"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _check_version(value: str) -> str:
    try:
        Version(value)
    except InvalidVersion as exc:
        raise ValueError(f"not a version: {value!r}") from exc
    return value


class OperatingSystem(_Frozen):
    """An OS the images are built on: its CPU base image and the Python versions its apt provides."""

    cpu_image: str | None = None
    python: tuple[str, ...]
    source: str


class CudaImage(_Frozen):
    """One CUDA minor line as NVIDIA publishes it in ``nvidia/cuda`` (container-images/cuda manifests)."""

    image_version: str  # the full version in the tag, e.g. 13.0.2 (NVIDIA supports only the newest patch)
    os: tuple[str, ...]
    cudnn: str | None = None  # cuDNN in the -cudnn- images
    nccl: str | None = None  # libnccl2 in the runtime/devel images
    source: str

    @field_validator("image_version")
    @classmethod
    def _full_version(cls, v: str) -> str:
        return _check_version(v)


class WheelVariant(_Frozen):
    """What a framework's CUDA build pins: cuDNN and NCCL come as pip wheels inside the framework's install."""

    cudnn: str
    nccl: str
    nccl_wheel: str  # nvidia-nccl-cu12 / nvidia-nccl-cu13
    pip_index: str | None = None  # extra index the CUDA build comes from; None: PyPI
    pip_extra: str | None = None  # e.g. and-cuda (tensorflow), cuda13 (jax)


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


class Framework(_Frozen):
    pip_name: str
    releases: tuple[FrameworkRelease, ...]


class Nccl(_Frozen):
    minimum: str  # the Reduction Server's floor (seed 003)
    source: str


class Compat(_Frozen):
    operating_systems: dict[str, OperatingSystem]
    cuda: dict[str, CudaImage]
    frameworks: dict[FrameworkName, Framework]
    nccl: Nccl
    hypertune: tuple[str, ...]

    def release(self, framework: FrameworkName, version: str) -> FrameworkRelease | None:
        """The release line that `version` belongs to (same major.minor), or None when trainimg has no data."""
        v = Version(version)
        for rel in self.frameworks[framework].releases:
            rv = Version(rel.version)
            if (rv.major, rv.minor) == (v.major, v.minor):
                return rel
        return None

    def known_versions(self, framework: FrameworkName) -> list[str]:
        return sorted((r.version for r in self.frameworks[framework].releases), key=Version)


@cache
def load_compat() -> Compat:
    """The project's compatibility data, parsed once per process (it never changes while running)."""
    text = resources.files(__package__).joinpath("data/compat.yaml").read_text(encoding="utf-8")
    return Compat.model_validate(yaml.safe_load(text))


def minor_of(version: str) -> str:
    """``13.0.2`` -> ``13.0``: CUDA lines are named by major.minor throughout the data."""
    v = Version(version)
    return f"{v.major}.{v.minor}"
