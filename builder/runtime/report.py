"""Conformance reports: every check passed, failed, skipped or warned, with its reason and duration.

Skipped is never passed: a check that could not run (no GPU, a component declared absent) says so. The same
report is written as JSON and as JUnit XML (failures as <failure>, skips as <skipped>, warnings as passes
with the warning in <system-out>), the formats CI systems read.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PASSED, FAILED, SKIPPED, WARNING = "passed", "failed", "skipped", "warning"
STATUSES = (PASSED, FAILED, SKIPPED, WARNING)


class ReportPathError(ValueError):
    """A report path that cannot be written: bad input (the CLI raises it as a UserInputError, selftest exits 2).
    Standard library only, so the runtime cannot raise the host's error itself."""


@dataclass
class Check:
    name: str
    status: str
    reason: str = ""
    duration: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown check status {self.status!r}")


@dataclass
class Suite:
    """The checks run on one image (one `trainimg test`, or one variant of a release)."""

    name: str
    image: str
    image_id: str
    platform: str
    replicas: int
    checks: list[Check] = field(default_factory=list)
    # The image's files the gate's processes read, first-read order (runtime/reads.py): an eStargz push's prefetch.
    prefetch: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status == "failed"]

    @property
    def passed(self) -> bool:
        return bool(self.checks) and not self.failed

    def counts(self) -> dict[str, int]:
        return {s: sum(c.status == s for c in self.checks) for s in STATUSES}

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["passed"] = self.passed
        data["counts"] = self.counts()
        return data


def json_report(suites: list[Suite]) -> str:
    """The JSON report of `suites` (what `--json` prints or writes)."""
    data = {"passed": all(s.passed for s in suites), "suites": [s.to_json() for s in suites]}
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def write_json(suites: list[Suite], path: str) -> None:
    _write(path, json_report(suites))


def junit_xml(suites: list[Suite]) -> str:
    """JUnit XML in the shape Jenkins' schema accepts: testsuites > testsuite > testcase."""
    root = ET.Element("testsuites", name="trainimg conformance")
    total = {"tests": 0, "failures": 0, "skipped": 0, "time": 0.0}
    for suite in suites:
        counts = suite.counts()
        seconds = sum(c.duration for c in suite.checks)
        el = ET.SubElement(root, "testsuite", name=suite.name, tests=str(len(suite.checks)),
                           failures=str(counts["failed"]), errors="0", skipped=str(counts["skipped"]),
                           time=f"{seconds:.3f}")
        props = ET.SubElement(el, "properties")
        for key, value in (("image", suite.image), ("image_id", suite.image_id), ("platform", suite.platform),
                           ("replicas", str(suite.replicas))):
            ET.SubElement(props, "property", name=key, value=value)
        for check in suite.checks:
            case = ET.SubElement(el, "testcase", name=check.name, classname=f"trainimg.{suite.name}",
                                 time=f"{check.duration:.3f}")
            if check.status == "failed":
                ET.SubElement(case, "failure", message=check.reason[:1000], type="ConformanceFailure").text = (
                    json.dumps(check.details, sort_keys=True)[:10000])
            elif check.status == "skipped":
                ET.SubElement(case, "skipped", message=check.reason[:1000])
            elif check.status == "warning":
                ET.SubElement(case, "system-out").text = f"warning: {check.reason}"
        total["tests"] += len(suite.checks)
        total["failures"] += counts["failed"]
        total["skipped"] += counts["skipped"]
        total["time"] += seconds
    root.set("tests", str(total["tests"]))
    root.set("failures", str(total["failures"]))
    root.set("errors", "0")
    root.set("time", f"{total['time']:.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(suites: list[Suite], path: str) -> None:
    _write(path, junit_xml(suites))


def _write(path: str, text: str) -> None:
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    except OSError as exc:  # a report path the user gave that cannot be written: bad input, one line
        raise ReportPathError(f"cannot write {path}: {exc.strerror or exc}; choose a file you can write") from None
