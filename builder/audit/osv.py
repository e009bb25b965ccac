"""OSV records, and whether one affects a PyPI package version, evaluated exactly as the OSV schema defines it.

The schema (ossf.github.io/osv-schema, "Evaluation"): a version is affected by a record when one of its
``affected`` entries names the package (ecosystem ``PyPI``, the name compared as PEP 503 normalises it) and either
lists the version in ``versions`` or has an ``ECOSYSTEM`` (or ``SEMVER``) range that includes it. A range's
events are sorted by version (``introduced: "0"`` first) and walked: an ``introduced`` at or below the version sets
affected, a ``fixed`` at or below it clears it, a ``last_affected`` below it clears it; at one version an
``introduced`` comes before what closes it, so ``introduced: 1.0, fixed: 1.0`` affects nothing. ``GIT`` ranges
name commits, not releases: they are not evaluated (the PyPA records carry ECOSYSTEM ranges and versions lists for
the same facts). A record with ``withdrawn`` set is no advisory. PyPI versions are PEP 440 (`packaging`), so
``2015.04.28`` and ``2015.4.28`` are one version.

A range event PEP 440 cannot read is not skipped: the record cannot be evaluated, and the audit fails naming it
(`OsvError`), as any source it could not read. A ``versions`` entry it cannot read (a legacy release such as
``0.7.10p1``) is compared as written: no pin PEP 440 reads can be it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..errors import CheckFailed

ECOSYSTEM = "PyPI"
EVALUATED_RANGES = ("ECOSYSTEM", "SEMVER")  # SEMVER's order is PEP 440's for the versions PyPI allows
_EVENT_ORDER = {"introduced": 0, "fixed": 1, "last_affected": 1, "limit": 2}


class OsvError(CheckFailed):
    """A record that cannot be read or evaluated: the audit could not look, so it fails (exit 1)."""


def version_of(text: str, where: str) -> Version:
    try:
        return Version(str(text))
    except InvalidVersion:
        raise OsvError(f"{where}: {text!r} is not a PEP 440 version: the record cannot be evaluated") from None


@dataclass(frozen=True)
class Advisory:
    """One OSV record, reduced to what the audit reads."""

    id: str
    aliases: tuple[str, ...]
    modified: str
    summary: str
    affected: tuple[dict[str, Any], ...]
    withdrawn: bool = False

    @classmethod
    def from_json(cls, data: Any, where: str) -> Advisory:
        if not isinstance(data, dict) or not isinstance(data.get("id"), str) or not data["id"]:
            raise OsvError(f"{where}: not an OSV record (no id)")
        affected = data.get("affected") or []
        if not isinstance(affected, list) or not all(isinstance(a, dict) for a in affected):
            raise OsvError(f"{where}: {data['id']}: 'affected' is not a list of objects")
        summary = str(data.get("summary") or data.get("details") or "").strip().splitlines()
        return cls(data["id"], tuple(str(a) for a in data.get("aliases") or ()), str(data.get("modified") or ""),
                   summary[0][:200] if summary else "", tuple(affected), bool(data.get("withdrawn")))

    def packages(self) -> set[str]:
        """The normalised PyPI names this record has an ``affected`` entry for."""
        return {canonicalize_name(str(a.get("package", {}).get("name", ""))) for a in self.affected
                if isinstance(a.get("package"), dict) and a["package"].get("ecosystem") == ECOSYSTEM}

    def fixes(self, package: str, version: str) -> tuple[str, ...] | None:
        """None when the record does not affect `package` `version`; else the ``fixed`` versions above it of the
        ranges that include it, ascending: the first is the first fixed version (none: no fix published)."""
        if self.withdrawn:
            return None
        v = version_of(version, f"pin {package}")
        hit, fixed = False, set()  # type: bool, set[Version]
        for entry in self.affected:
            pkg = entry.get("package")
            if not isinstance(pkg, dict) or pkg.get("ecosystem") != ECOSYSTEM or \
                    canonicalize_name(str(pkg.get("name", ""))) != canonicalize_name(package):
                continue
            where = f"{self.id} ({package})"
            if any(_listed(str(x), version, v) for x in entry.get("versions") or ()):
                hit = True
            for rng in entry.get("ranges") or ():
                if isinstance(rng, dict) and rng.get("type") in EVALUATED_RANGES:
                    inside, closing = includes(rng.get("events") or [], v, where)
                    hit = hit or inside
                    fixed.update(closing if inside else ())
        if not hit:
            return None
        above = sorted(f for f in fixed if f > v)
        return tuple(str(f) for f in above)


def _listed(text: str, pinned: str, v: Version) -> bool:
    """A ``versions`` entry names the pin: equal as PEP 440 versions, or, for an entry PEP 440 cannot read (a
    legacy release such as ``0.7.10p1``), equal as written: the schema lists versions as the ecosystem spells them."""
    try:
        return Version(text) == v
    except InvalidVersion:
        return text == pinned


def _events(events: list[Any], where: str) -> list[tuple[Version | None, int, str]]:
    """(version, order, kind) of each event, sorted as the schema walks them; None is ``introduced: "0"``."""
    out = []
    for event in events:
        if not isinstance(event, dict) or len(event) != 1:
            raise OsvError(f"{where}: an event must have one key, got {event!r}")
        kind, text = next(iter(event.items()))
        if kind not in _EVENT_ORDER:
            raise OsvError(f"{where}: unknown event {kind!r}")
        version = None if kind == "introduced" and str(text) == "0" else version_of(str(text), where)
        out.append((version, _EVENT_ORDER[kind], kind))
    return sorted(out, key=lambda e: (e[0] is not None, e[0] or Version("0"), e[1]))


def includes(events: list[Any], v: Version, where: str) -> tuple[bool, list[Version]]:
    """(whether the range includes `v`, the range's ``fixed`` versions) by the schema's walk."""
    affected = False
    fixed = []
    for version, _, kind in _events(events, where):
        if kind == "fixed":
            fixed.append(version)
        if kind == "introduced" and (version is None or v >= version):
            affected = True
        elif kind == "fixed" and version is not None and v >= version:
            affected = False
        elif kind == "last_affected" and version is not None and v > version:
            affected = False
    return affected, [f for f in fixed if f is not None]
