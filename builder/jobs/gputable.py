"""``data/gpus.yaml``: the GPUs trainimg knows and their compute capabilities, and each platform's section naming
the GPU behind its own accelerator, instance or VM names.

Why its own module: `gpucheck` holds the one rule (the GPU asked for against the image's architectures) and
dispatches to the platform modules for their names; the platform modules read their own section here. Keeping the
table below both lets them import it without an import cycle, and keeps the table's type free of platform names:
a platform's section is validated as the type its module asks for (`section`).
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, TypeAdapter

from ..recipe.gpuarch import Capability, parse_capability


class GpuTable(BaseModel):
    """GPU -> compute capability, the GPUs whose machines are arm64 (`grace`); every other top-level key is a
    platform module's section (`section`)."""

    model_config = ConfigDict(frozen=True, extra="allow")
    gpus: dict[str, str]
    grace: tuple[str, ...] = ()


@cache
def _raw() -> dict[str, Any]:
    text = resources.files(__package__).joinpath("data/gpus.yaml").read_text(encoding="utf-8")
    return dict(yaml.safe_load(text))


@cache
def gpu_table() -> GpuTable:
    return GpuTable.model_validate(_raw())


def capability(gpu: str) -> Capability:
    return parse_capability(gpu_table().gpus[gpu])


def machine_arch(gpu: str) -> str:
    """The CPU architecture of the machines carrying `gpu`: arm64 for a Grace superchip, else amd64."""
    return "arm64" if gpu in gpu_table().grace else "amd64"


@cache
def section(key: str, kind: Any) -> Any:
    """The table's `key` section, validated as `kind` (``dict[str, str]``); a missing or malformed one fails loudly
    at first use (the data file ships with the package, so that is a packaging bug, not user input)."""
    return TypeAdapter(kind).validate_python(_raw()[key])
