"""One thing `trainimg outdated` found: what is newer (or ending) upstream, where it touches the recipes, its source
and date, and what to run. The JSON form is the contract outside checks read (`outdated --json`: a list of these,
each with its `source` URL, and `held`: null, or why the recipes hold it back)."""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from ..recipe.fields import Hold
from ..recipe.variant import Variant

#: The kinds, in the order `outdated` reports them.
KINDS = ("framework", "compat", "wheel", "hypertune", "uv", "cuda", "base-eol", "os-security")


@dataclass(frozen=True)
class Item:
    """What is newer than the recipes, locks or compat data (or a base's end of life), with its source."""

    kind: str
    name: str  # the project, OS or CUDA line
    current: str | None  # what the recipes, locks or data hold
    newest: str | None  # what is out (a date's event for base-eol)
    date: str | None  # ISO date the newer release came out, or the end-of-life / tag-deletion date
    source: str  # where it was read: an index page, a data file's cited source, a Packages index
    where: tuple[str, ...] = ()  # the recipe files, variants or lock files it touches
    action: str = ""  # what to run about it
    warning: bool = False  # an end-of-life or deletion date is near or past
    detail: tuple[str, ...] = field(default_factory=tuple)  # e.g. the packages with pending security fixes
    # Held on purpose (the variants' recipe says why: recipe/fields.py `held`): kind, reason, source, until. None: not held.
    held: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["where"], data["detail"] = list(self.where), list(self.detail)
        return data

    def line(self) -> str:
        """One line: ``framework torch 2.13.0 -> 2.15.0 (2026-10-28): recipes/pytorch.yaml ...; run ...``."""
        change = f"{self.current} -> {self.newest}" if self.current else f"{self.newest}"
        when = f" ({self.date})" if self.date else ""
        if self.kind == "base-eol":
            change, when = f"({self.current}): {self.newest}", ""
        where = f": {', '.join(self.where)}" if self.where else ""
        action = f"; {self.action}" if self.action else ""
        mark = "warning: " if self.warning else ""
        if self.held:  # why, in place of what to run: the recipe holds it back
            until = f", until {self.held['until']}" if self.held.get("until") else ""
            mark, action = "held: ", f"; {self.held['reason']} ({self.held['source']}{until})"
        return f"{mark}{self.kind} {self.name} {change}{when}{where}{action} [{self.source}]"


# Which of an item's variants their recipes hold back (recipe/fields.py `held`), and the item's `held` field: both
# the release items (`outdated`) and the base items (`bases`) split their variants this way.


def held_by(variants: Iterable[Variant], kind: str, today: datetime.date, end: datetime.date | None = None
            ) -> dict[Hold | None, list[str]]:
    """The variants' names by their hold of `kind` in force on `today` (None: not held); `end` is the data's limit
    on such holds (an OS's end of long-term support)."""
    out: dict[Hold | None, list[str]] = {}
    for v in variants:
        hold = v.hold(kind)
        out.setdefault(hold if hold is not None and hold.in_force(today, end) else None, []).append(v.name)
    return out


def hold_json(hold: Hold | None, end: datetime.date | None = None) -> dict[str, Any] | None:
    """An item's `held`: the hold, with the day it ends (its own `until`, or the data's `end`, the earlier)."""
    if hold is None:
        return None
    ends = hold.ends(end)
    return {**hold.to_json(), "until": str(ends) if ends else None}
