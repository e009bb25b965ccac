"""Waivers: a finding a person looked at and accepted, for one package version, until a date. Standard library
only: the host's advisory audit (``trainimg audit``, ``release``) and the in-image gate's OS check (``selftest
--os-fixes``) judge findings with the same rule.

A waiver names an advisory (its id or any alias), the package and the version it accepts, why, who approved it and
when it expires (the last day it holds). A finding a matching waiver covers is waived while the waiver holds and
fails once it expired; a waiver that matches no finding is reported unused, so a file does not fill up with waivers
nobody needs. The optional ``justification`` is CycloneDX's (``impactAnalysisJustification``): with one, the SBOM
states the finding ``not_affected`` for that reason; without one, ``exploitable`` with the response
``will_not_fix`` until the waiver expires (an accepted risk, not a denial), so a scanner reading the SBOM's VEX
sees what the team decided.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

#: The keys of a waiver, as the committed file spells them; all required.
WAIVER_KEYS = ("id", "package", "version", "reason", "approved-by", "expires")
JUSTIFICATION = "justification"
#: CycloneDX 1.6 ``impactAnalysisJustification`` (bom-1.6.schema.json): what a waiver may give as its reason kind.
JUSTIFICATIONS = ("code_not_present", "code_not_reachable", "requires_configuration", "requires_dependency",
                  "requires_environment", "protected_by_compiler", "protected_at_runtime", "protected_at_perimeter",
                  "protected_by_mitigating_control")
OPEN, WAIVED, EXPIRED = "open", "waived", "expired"  # a finding's state once judged
#: The OS check's advisory id is its security suite (``bookworm-security``): a waiver for one ends so.
OS_SUITE_SUFFIX = "-security"


@dataclass(frozen=True)
class Waiver:
    id: str
    package: str
    version: str
    reason: str
    approved_by: str
    expires: datetime.date
    justification: str | None = None

    def to_json(self) -> dict[str, str]:
        data = {"id": self.id, "package": self.package, "version": self.version, "reason": self.reason,
                "approved-by": self.approved_by, "expires": self.expires.isoformat()}
        if self.justification:
            data[JUSTIFICATION] = self.justification
        return data


@dataclass(frozen=True)
class Finding:
    """One advisory that affects one installed or pinned package version. `fixed` lists the versions that fix it,
    the first one above the affected version first (empty: no fix published); `source` says where it came from
    (an advisory database, an OS security suite)."""

    id: str
    package: str
    version: str
    fixed: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    summary: str = ""
    source: str = ""

    @property
    def first_fixed(self) -> str | None:
        return self.fixed[0] if self.fixed else None

    def names(self) -> set[str]:
        return {self.id, *self.aliases}

    def line(self) -> str:
        """``PYSEC-2023-135 (CVE-2023-37920): certifi 2022.12.7, fixed in 2023.7.22``: what a person reads."""
        also = f" ({', '.join(self.aliases)})" if self.aliases else ""
        fix = f"fixed in {self.first_fixed}" if self.first_fixed else "no fixed version published"
        return f"{self.id}{also}: {self.package} {self.version}, {fix}"

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "aliases": list(self.aliases), "package": self.package, "version": self.version,
                "fixed": list(self.fixed), "summary": self.summary, "source": self.source}


@dataclass(frozen=True)
class Judged:
    finding: Finding
    state: str  # OPEN, WAIVED or EXPIRED
    waiver: Waiver | None = None

    def line(self) -> str:
        if self.waiver is None:
            return self.finding.line()
        held = "waived until" if self.state == WAIVED else "its waiver EXPIRED on"
        return f"{self.finding.line()}; {held} {self.waiver.expires.isoformat()} ({self.waiver.approved_by}: " \
               f"{self.waiver.reason})"

    def to_json(self) -> dict[str, Any]:
        return {**self.finding.to_json(), "state": self.state,
                "waiver": self.waiver.to_json() if self.waiver else None}


def _date(value: object, where: str) -> datetime.date:
    if isinstance(value, datetime.datetime):
        return value.date()
    if isinstance(value, datetime.date):
        return value
    try:
        return datetime.date.fromisoformat(str(value))
    except ValueError:
        raise ValueError(f"{where}: {value!r} is not a date (YYYY-MM-DD)") from None


def parse_waivers(data: object, where: str) -> list[Waiver]:
    """A list of waiver mappings (from the YAML file, or the JSON the host hands an image) -> `Waiver` objects.
    Raises ValueError ``WHERE[i].key: reason`` for the first mistake: a missing or empty key, an unknown one, a
    date that is not one, a justification CycloneDX does not know."""
    if not isinstance(data, list):
        raise ValueError(f"{where}: expected a list of waivers")
    waivers = []
    for index, item in enumerate(data):
        at = f"{where}[{index}]"
        if not isinstance(item, dict):
            raise ValueError(f"{at}: expected a mapping with {', '.join(WAIVER_KEYS)}")
        unknown = sorted(set(item) - {*WAIVER_KEYS, JUSTIFICATION})
        if unknown:
            raise ValueError(f"{at}.{unknown[0]}: unknown key (a waiver has {', '.join(WAIVER_KEYS)}, "
                             f"and optionally {JUSTIFICATION})")
        for key in WAIVER_KEYS:
            if item.get(key) is None or (key != "expires" and not str(item[key]).strip()):
                raise ValueError(f"{at}.{key}: missing; every waiver says {', '.join(WAIVER_KEYS)}")
        justification = item.get(JUSTIFICATION)
        if justification is not None and justification not in JUSTIFICATIONS:
            raise ValueError(f"{at}.{JUSTIFICATION}: {justification!r} is not one of {', '.join(JUSTIFICATIONS)}")
        waivers.append(Waiver(str(item["id"]).strip(), str(item["package"]).strip(), str(item["version"]).strip(),
                              str(item["reason"]).strip(), str(item["approved-by"]).strip(),
                              _date(item["expires"], f"{at}.expires"), justification))
    return waivers


def is_os_waiver(waiver: Waiver) -> bool:
    """A waiver of a pending OS fix (its id is a security suite), not of a Python advisory."""
    return waiver.id.endswith(OS_SUITE_SUFFIX)


def covers(waiver: Waiver, finding: Finding) -> bool:
    """The waiver names this advisory (its id or an alias), this package and this version. Names and versions are
    compared as given: the host normalises Python ones (PEP 503 names, PEP 440 versions) on both sides first."""
    return (waiver.id in finding.names() and waiver.package.lower() == finding.package.lower()
            and waiver.version == finding.version)


def judge(findings: list[Finding], waivers: list[Waiver], today: datetime.date) -> tuple[list[Judged], list[Waiver]]:
    """Each finding with its state (a holding waiver wins over an expired one), and the waivers nothing matched."""
    judged, used = [], set()
    for finding in findings:
        matching = [w for w in waivers if covers(w, finding)]
        used.update(matching)
        holding = [w for w in matching if w.expires >= today]
        if holding:
            judged.append(Judged(finding, WAIVED, max(holding, key=lambda w: w.expires)))
        elif matching:
            judged.append(Judged(finding, EXPIRED, max(matching, key=lambda w: w.expires)))
        else:
            judged.append(Judged(finding, OPEN))
    return judged, [w for w in waivers if w not in used]


def summary(judged: list[Judged], unused: list[Waiver], what: str) -> tuple[bool, str]:
    """(passed, one line) for a report: the open and expired findings fail, the waived and unused are said."""
    bad = [j for j in judged if j.state != WAIVED]
    waived = [j for j in judged if j.state == WAIVED]
    parts = [j.line() for j in bad] or [f"no {what} without a waiver" if waived else f"no {what}"]
    if waived:
        parts.append(f"{len(waived)} waived: " + ", ".join(f"{j.finding.id} ({j.finding.package} "
                                                             f"{j.finding.version})" for j in waived))
    if unused:
        parts.append(f"{len(unused)} waiver(s) unused: " + ", ".join(f"{w.id} ({w.package} {w.version})"
                                                                      for w in unused))
    return not bad, "; ".join(parts)
