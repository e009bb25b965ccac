"""The options of the verbs that keep images current: `compat add`, `outdated`, `bump` (upstream/)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserInputError
from . import PYPI_SIMPLE, IntLimit, LockOptions


@dataclass(frozen=True, kw_only=True)
class CompatAddOptions:
    """`trainimg compat add FRAMEWORK==VERSION`: the index read, whether to write, whether to read GPU archs."""

    index_url: str = PYPI_SIMPLE
    dry_run: bool = False  # print the entry and the comparison; write nothing
    archs: bool = True  # read the GPU architectures where a wheel states them (torch: ~17 MB of ranges per build)


WARN_DAYS = IntLimit(0, 3650)  # `outdated --warn-days`


@dataclass(frozen=True, kw_only=True)
class OutdatedOptions:
    """`trainimg outdated`: the index, the lockfile of the released images checked, days of warning before a date."""

    index_url: str = PYPI_SIMPLE
    lock_path: str | None = None
    warn_days: int = 90

    def __post_init__(self) -> None:
        WARN_DAYS.check(self.warn_days, "--warn-days", " days")


BUMP_MODES = ("move", "beside")  # `bump --mode`: the old version replaced, or kept beside the new one


@dataclass(frozen=True, kw_only=True)
class BumpOptions:
    """`trainimg bump [VARIANT...]`: which variants move, how, the index, the lock's sources, the summary's file."""

    variants: tuple[str, ...] = ()
    mode: str = BUMP_MODES[0]
    index_url: str = PYPI_SIMPLE
    lock: LockOptions = field(default_factory=LockOptions)
    summary: Path | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "variants", tuple(self.variants))
        if self.mode not in BUMP_MODES:
            raise UserInputError(f"{self.mode!r}: use {' or '.join(BUMP_MODES)}", where="--mode")
