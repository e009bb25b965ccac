"""The advisory audit of variants: every pin of each variant's requirements lock and its ``extras``, against one
source of OSV records, judged with the committed waivers; what `trainimg audit` reports and what `build` and
`release` run before they build.

A pin is affected when a record of the source affects its version (`osv.Advisory.fixes`); a service's word that
a record affects a pin counts even where the record's ranges, read here, say otherwise (the audit errs towards a
finding). Findings that alias each other (a PYSEC and a GHSA record of one flaw) are one finding. Then each
finding is open, waived or expired (`runtime.waivers.judge`); the audit passes only when none is open or
expired. Waivers that matched nothing in the run are reported unused. Each variant's result is a check named
``advisories`` in the conformance report (and JUnit); `--skip-audit` makes it a skipped check saying so.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CheckFailed, UserInputError
from ..options import AuditOptions
from ..plan.requirements import lock_path
from ..recipe.loading import Variant
from ..runtime.contract import AUDIT_SKIPPED, AUDITED, NOT_AUDITED
from ..runtime.lockpins import pins as lock_pins
from ..runtime.manifest import distribution_key
from ..runtime.report import Check, Suite
from ..runtime.waivers import Finding, Judged, Waiver, is_os_waiver, judge, summary
from .sources import Answer, Pin, ask, check_age
from .vex import audit_document
from .waiverfile import canonical_version, read_waivers

CHECK_NAME = "advisories"
SKIPPED_REASON = "not audited: --skip-audit"


def variant_pins(root: Path, v: Variant) -> dict[str, str]:
    """Normalised name -> version of every pin of `v`: its requirements lock under `root` and its ``extras``.
    A variant without a lock has pins nobody can know yet: bad input, `trainimg lock` it."""
    path = lock_path(root, v.name)
    if not path.is_file():
        raise UserInputError(f"{v.name} has no requirements lock ({path.name}): run `trainimg lock {v.name}`")
    found = lock_pins(path.read_text(encoding="utf-8"))
    if not found:
        raise UserInputError(f"{v.name}: its lock pins nothing (not lockable here?): `trainimg lock {v.name}` "
                             "where its indexes answer")
    for extra in v.extras:
        name, _, version = extra.partition("==")
        found.setdefault(distribution_key(name), version)
    return found


def findings(pins: Mapping[str, str], answer: Answer) -> list[Finding]:
    """The records of `answer` that affect `pins`, aliases merged."""
    out: list[Finding] = []
    for name, version in sorted(pins.items()):
        for advisory in answer.records.get((name, version), ()):
            fixes = advisory.fixes(name, version)
            if fixes is None and not answer.asserted:
                continue
            finding = Finding(advisory.id, name, canonical_version(version), fixes or (), advisory.aliases,
                              advisory.summary, answer.source)
            same = next((f for f in out if f.package == name and f.names() & finding.names()), None)
            if same is None:
                out.append(finding)
    return out


@dataclass
class AuditResult:
    """One run: the source and its date, each variant's judged findings, the waivers nothing matched."""

    state: str
    source: str = ""
    date: str = ""
    dated_by: str = ""
    max_age_days: int | None = None
    judged: dict[str, list[Judged]] = field(default_factory=dict)
    pins: dict[str, int] = field(default_factory=dict)
    unused: list[Waiver] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(j.state == "waived" for js in self.judged.values() for j in js)

    def check(self, variant: str) -> Check:
        if self.state != AUDITED:
            return Check(CHECK_NAME, "skipped", SKIPPED_REASON, details=self.summary(variant))
        ok, line = summary(self.judged[variant], self.unused, "known vulnerability")
        said = f"{self.pins[variant]} pins against {self.source} (data of {self.date}): {line}"
        return Check(CHECK_NAME, "passed" if ok else "failed", said, details=self.summary(variant))

    def suites(self, variants: Iterable[str]) -> list[Suite]:
        return [Suite(v, "", "", "audit", 0, [self.check(v)]) for v in variants]

    def summary(self, variant: str) -> dict[str, Any]:
        """The run for one variant, as the conformance report and the release record keep it."""
        if self.state != AUDITED:
            return {"state": self.state}
        return {"state": self.state, "source": self.source, "data_date": self.date, "dated_by": self.dated_by,
                "max_age_days": self.max_age_days, "pins": self.pins.get(variant, 0),
                "findings": [j.to_json() for j in self.judged.get(variant, [])],
                "unused_waivers": [w.to_json() for w in self.unused]}

    def document(self, variant: str) -> str:
        """The file the variant's SBOM step reads (`vex.audit_document`)."""
        return audit_document(self.state, self.judged.get(variant, []))

    def lines(self) -> list[str]:
        """What a person reads: each open, expired and waived finding by variant, then the unused waivers."""
        out = []
        for variant, judged in self.judged.items():
            out += [f"{variant}: {j.state.upper()} {j.line()}" for j in judged]
        out += [f"unused waiver: {w.id} ({w.package} {w.version}, expires {w.expires.isoformat()})"
                for w in self.unused]
        return out


def skipped() -> AuditResult:
    return AuditResult(AUDIT_SKIPPED)


def not_audited() -> AuditResult:
    return AuditResult(NOT_AUDITED)


def audit(root: Path, variants: list[Variant], opts: AuditOptions,
          now: datetime.datetime | None = None) -> AuditResult:
    """Audit every pin of `variants` (their locks under `root`) as `opts` says. Raises CheckFailed when the
    source cannot be read or is too old; the findings themselves are the result's (`passed`)."""
    if opts.skip:
        return skipped()
    source = opts.source
    if source is None:
        raise UserInputError("give --advisories DIR|URL, or --skip-audit to build without an audit (recorded)")
    now = now or datetime.datetime.now(datetime.timezone.utc)
    waivers = [w for w in read_waivers(opts.waivers) if not is_os_waiver(w)]
    pins = {v.name: variant_pins(root, v) for v in variants}
    wanted: set[Pin] = {pin for p in pins.values() for pin in p.items()}
    answer = _ask(source, wanted, given=opts.advisories is not None)
    check_age(answer, opts.max_age_days, now)
    result = AuditResult(AUDITED, answer.source, f"{answer.date:%Y-%m-%d}", answer.dated_by, opts.max_age_days)
    used: set[Waiver] = set()
    for name, found in pins.items():
        judged, unused = judge(findings(found, answer), waivers, now.date())
        used.update(w for w in waivers if w not in unused)
        result.judged[name], result.pins[name] = judged, len(found)
    result.unused = [w for w in waivers if w not in used]
    return result


class DefaultUnanswered(CheckFailed):
    """The default source (`AuditOptions.default`: OSV's public API) could not be read: the audit fails, and the
    verb's line adds the choices it offers (another source, or skipping the audit on purpose)."""


def _ask(source: str, wanted: set[Pin], *, given: bool) -> Answer:
    """The source's answer; a default source (not `given` by --advisories) that does not answer is named as the
    default it is."""
    try:
        return ask(source, wanted)
    except CheckFailed as err:
        if given:
            raise
        raise DefaultUnanswered(f"{err}; {source} is the default advisory source (OSV's public API)") from None


def refuse(result: AuditResult) -> None:
    """Raise CheckFailed naming every open and expired finding when the audit did not pass."""
    if not result.passed:
        bad = [f"{v}: {j.line()}" for v, js in result.judged.items() for j in js if j.state != "waived"]
        raise CheckFailed(f"{len(bad)} known vulnerabilit{'y' if len(bad) == 1 else 'ies'} without a holding waiver: {'; '.join(bad)}")
