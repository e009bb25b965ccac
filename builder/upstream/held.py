"""Which of an `outdated` item's variants their recipes hold back (recipe/holds.py), and the item's `held` field.

Why apart: both the release items (`outdated`) and the base items (`bases`) split their variants this way.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any

from ..recipe.holds import Hold
from ..recipe.variant import Variant


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
