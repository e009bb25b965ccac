"""The NVIDIA driver a GPU image needs: one table (``data/drivers.yaml``, with its sources) and the rules read from it.

Why: a driver older than the image's CUDA fails at the first CUDA call, after the job queued for its GPUs, or the
NVIDIA container runtime refuses the container at start because of the base image's ``NVIDIA_REQUIRE_CUDA``
(nvidia-container-toolkit#940: a 12.8 image refused on a 12.7 driver). trainimg's images carry the CUDA their
framework's wheels bring (TensorFlow's CUDA 12.5 build installs the newest 12.x runtime), not the base's, so the
base's variable states the wrong thing. Under NVIDIA's minor-version compatibility a CUDA X.y runtime runs on any
driver of the X family from the family's floor on; that floor is what an image needs, written as its
``trainimg.cuda.driver_min`` label and as ``NVIDIA_REQUIRE_CUDA=cuda>=X.0`` (the container runtime's own terms for the same driver).
"""

from __future__ import annotations

from functools import cache
from importlib import resources

import yaml
from pydantic import BaseModel, ConfigDict

REQUIRE_CUDA = "NVIDIA_REQUIRE_CUDA"  # the variable the NVIDIA container runtime checks when a container starts


class Floor(BaseModel):
    """A CUDA major's row: the oldest driver its minor-version compatibility covers, and that driver's branch."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    driver: str
    branch: str


class DriverTable(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    source: str
    release_notes: str
    majors: dict[str, Floor]


@cache
def driver_table() -> DriverTable:
    """``data/drivers.yaml``, parsed once."""
    text = resources.files(__package__).joinpath("data/drivers.yaml").read_text(encoding="utf-8")
    return DriverTable.model_validate(yaml.safe_load(text))


def major_of(cuda: str) -> str:
    """``12`` of ``12.9``, ``12.9.79`` or ``12``."""
    return cuda.split(".", 1)[0]


def floor_for(cuda: str) -> Floor:
    """The driver a CUDA `cuda` runtime (``13.0``, ``12.9.79``) needs; KeyError naming the table for a major it lacks
    (a CUDA line in compat data with no row here is a data bug, caught by the tests over every variant)."""
    major = major_of(cuda)
    try:
        return driver_table().majors[major]
    except KeyError:
        raise KeyError(f"recipe/data/drivers.yaml has no row for CUDA {major}") from None


def require_cuda(cuda: str) -> str:
    """``NVIDIA_REQUIRE_CUDA`` for a CUDA `cuda` runtime: the major's first minor, which only drivers of the
    major's floor branch or newer report (the variable is compared with the driver's CUDA version)."""
    return f"cuda>={major_of(cuda)}.0"
