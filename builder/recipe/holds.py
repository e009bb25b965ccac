"""A variant held back on purpose, with why: the recipe's `held` field.

Why: `trainimg outdated` watches every variant for a newer framework release and for a base near its end of life,
and the scheduled pipeline bumps whatever it reports. Some variants stay behind for a reason that no index can see
(the release's build is served only by an index this machine cannot reach; the variant is the one this machine can
build; the OS is past its regular security support but still under long-term support). Such a variant says so in
its recipe, as data: what is held (a kind of `outdated` item: `HOLD_KINDS`), the reason, the source that backs
it, and optionally until when. `outdated` then shows the item as held with that reason (and its exit status is 0
when only held items remain); `bump` leaves a variant held for `framework` where it is. An `os` hold ends, at the
latest, on the OS's end of long-term support (`upstream/data/bases.yaml`): `outdated` applies that date.

    held:
      os:
        reason: the demo's base; bookworm is under Debian LTS
        source: https://wiki.debian.org/LTS
        until: 2028-06-30
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from typing import Any

from ..errors import RecipeError

#: What can be held: `outdated`'s item kinds that are about one variant (a newer framework release, its base's end
#: of life).
HOLD_KINDS = ("framework", "os")
_KEYS = ("reason", "source", "until")
_TEXT_RE = re.compile(r"\A[^\x00-\x1f\x7f]{1,600}\Z")  # one line of text
_SOURCE_RE = re.compile(r"\A(?:https?://[^\s]{1,500}|[A-Za-z0-9_./-]{1,300})\Z")  # a URL or a file of the checkout


@dataclass(frozen=True)
class Hold:
    """One held kind of a variant: why, what backs it, until when (None: until the recipe changes)."""

    kind: str
    reason: str
    source: str
    until: datetime.date | None = None

    def in_force(self, today: datetime.date, end: datetime.date | None = None) -> bool:
        """Whether the hold still stands on `today`; `end` is a limit the data sets (an OS's LTS end)."""
        last = self.ends(end)
        return last is None or today <= last

    def ends(self, end: datetime.date | None = None) -> datetime.date | None:
        """The last day the hold stands: its own `until`, or `end`, whichever comes first."""
        days = [d for d in (self.until, end) if d is not None]
        return min(days) if days else None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason, "source": self.source,
                "until": str(self.until) if self.until else None}


def holds_of(raw: Any, where: str) -> tuple[Hold, ...]:
    """The `held` field (a mapping of kind -> {reason, source, until}), checked; `where` names it in errors."""
    if raw is None:
        return ()
    if not isinstance(raw, dict) or not raw:
        raise RecipeError(f"expected a mapping of what is held ({', '.join(HOLD_KINDS)}) to its reason, source and "
                          "until", where=where)
    out = []
    for kind, body in raw.items():
        at = f"{where}.{kind}"
        if kind not in HOLD_KINDS:
            raise RecipeError(f"{kind!r} cannot be held; one of {', '.join(HOLD_KINDS)}", where=where)
        if not isinstance(body, dict):
            raise RecipeError("expected reason, source and optionally until", where=at)
        unknown = [k for k in body if k not in _KEYS]
        if unknown:
            raise RecipeError(f"unknown key {unknown[0]!r}; a hold has {', '.join(_KEYS)}", where=at)
        out.append(Hold(kind, _text(body, "reason", _TEXT_RE, "one line saying why", at),
                        _text(body, "source", _SOURCE_RE, "a URL or a file of the checkout that backs the reason", at),
                        _date(body.get("until"), f"{at}.until")))
    return tuple(sorted(out, key=lambda h: HOLD_KINDS.index(h.kind)))


def _text(body: dict[str, Any], key: str, regex: re.Pattern[str], what: str, where: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not regex.match(value.strip()):
        raise RecipeError(f"{key}: expected {what}", where=f"{where}.{key}")
    return value.strip()


def _date(value: Any, where: str) -> datetime.date | None:
    if value is None or (isinstance(value, datetime.date) and not isinstance(value, datetime.datetime)):
        return value
    if isinstance(value, str):
        try:
            return datetime.date.fromisoformat(value)
        except ValueError:
            pass
    raise RecipeError(f"{value!r} is not a date; write YYYY-MM-DD", where=where)
