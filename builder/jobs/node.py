"""What a job says of the node it lands on: its environment (where a node's NCCL and network variables belong) and
the shared memory its local ranks need.

Why one module: every platform module writes these into its own job format, and `spec` says on stderr what a
platform gives no way to set; the facts themselves are tables elsewhere, each with its sources: a platform's
``/dev/shm`` in its runtime module's ``SHM`` (`runtime.shm`), the node variables in `recipe.nodeenv`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import UserInputError
from ..options import ENV_NAME
from ..runtime.platforms import trait
from ..runtime.shm import NCCL_ADVICE, show, size_for
from .flagdecl import Flag

#: `spec`'s job environment: named in the FLAGS of each platform whose job format has one (AI Platform's has none).
ENV = Flag("--env", "A variable of every replica's environment (repeatable): where a node's NCCL and network "
           "variables (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, ...) go, never into the image.", multiple=True,
           metavar="NAME=VALUE")
_MAX_VALUE = 512  # the tightest platform's limit (SageMaker's Environment values), held for every platform alike


def job_env(values: Sequence[str] | None) -> tuple[tuple[str, str], ...]:
    """``--env NAME=VALUE`` flags as (name, value) pairs, each name once, in the order given."""
    pairs: dict[str, str] = {}
    for item in values or ():
        name, eq, value = str(item).partition("=")
        if not eq or not ENV_NAME.fullmatch(name):
            raise UserInputError(f"expected NAME=VALUE (NAME in [A-Za-z_][A-Za-z0-9_]*), got {item!r}", where="--env")
        if name in pairs:
            raise UserInputError(f"{name} is given twice", where="--env")
        if len(value) > _MAX_VALUE or not value.isprintable():
            raise UserInputError(f"the value of {name} must be printable, at most {_MAX_VALUE} characters",
                                 where="--env")
        pairs[name] = value
    return tuple(pairs.items())


def env_list(pairs: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """Pairs as a list of ``{"name", "value"}`` (Kubernetes' EnvVar, Vertex's EnvVar)."""
    return [{"name": name, "value": value} for name, value in pairs]


def shm_note(platform: str, ranks: int) -> str | None:
    """The stderr line for a job of `ranks` local ranks on a platform whose job cannot set /dev/shm (None where it
    can, or where one rank needs none)."""
    row = trait(platform, "SHM")
    if ranks < 2 or row.setting is not None:
        return None
    return (f"{platform} gives a job no way to set /dev/shm ({row.default_said}); its {ranks} local ranks need "
            f"{show(size_for(ranks))} (NCCL: {NCCL_ADVICE}); `--conformance` checks a node's")
