"""Reference pages of the files trainimg writes for others to read: the conformance report (`--json`, `--junit`)
and the release lockfile (`images.lock`).

Each from its typed model (the `Suite` and `Check` dataclasses, `LockEntry`) with the comments beside their
fields, and an example written by the real writer (`report.json_report`, `report.junit_xml`,
`lockfile.dumps_lock`) from a sample value, so the example has the shape the writer gives today.
"""

from __future__ import annotations

from md import cell, code, fenced, header, prose, table
from sourcefacts import Field, fields, first_paragraph, paragraphs
from trainimg.publish import lockfile
from trainimg.publish.lockfile import LOCK_FORMAT, LockEntry, dumps_lock
from trainimg.runtime import report
from trainimg.runtime.report import Check, Suite, json_report, junit_xml

SAMPLE_VARIANT = "pytorch-2.13.0-cpu-py3.11"
SAMPLE_TAG = "trainimg/pytorch:2.13.0-cpu-py3.11"
SAMPLE_DIGEST = "sha256:" + "1" * 64
SAMPLE_IMAGE_ID = "sha256:" + "2" * 64


def field_rows(found: list[Field]) -> list[list[str]]:
    return [[code(f.name), code(f.type), code(f.default) if f.default else "required", cell(f.comment) or "–"]
            for f in found]


FIELD_HEADERS = ("Key", "Type", "Default", "What")


def sample_suite() -> Suite:
    return Suite(SAMPLE_VARIANT, SAMPLE_TAG, SAMPLE_IMAGE_ID, "vertex", 2, checks=[
        Check("python", "passed", "3.11 as the recipe asks", 0.01),
        Check("gpu", "skipped", "no GPU", 0.0),
    ])


def report_page() -> str:
    suite = sample_suite()
    extra = sorted(set(suite.to_json()) - {f.name for f in fields(Suite)})
    return "\n".join([
        header("builder/runtime/report.py (Suite, Check, json_report, junit_xml)"),
        "# Conformance report format\n",
        *[prose(p) + "\n" for p in paragraphs(report)],
        "## JSON (`--json`)\n",
        prose(first_paragraph(json_report)) + " An object with `passed` (every suite passed) and `suites`, one per "
        "image tested:\n",
        "### A suite\n", prose(first_paragraph(Suite)) + "\n", table(FIELD_HEADERS, field_rows(fields(Suite))),
        prose(f"Written besides: {', '.join(f'`{k}`' for k in extra)} (whether it passed, and the count of each "
              "status).") + "\n",
        "### A check\n", table(FIELD_HEADERS, field_rows(fields(Check))),
        prose(f"`status` is one of {', '.join(f'`{s}`' for s in report.STATUSES)}.") + "\n",
        "### Example\n", fenced(json_report([suite]), "json"),
        "## JUnit XML (`--junit`)\n", prose(first_paragraph(junit_xml)) + "\n",
        fenced(junit_xml([suite]), "xml"),
    ])


def sample_entry() -> LockEntry:
    return LockEntry(variant=SAMPLE_VARIANT, recipe="recipes/pytorch.yaml", tag=SAMPLE_TAG,
                     image_id=SAMPLE_IMAGE_ID, base_image="debian:bookworm-slim",
                     base_digest="sha256:" + "3" * 64, versions={"python": "3.11.2", "framework": "2.13.0"},
                     pushed={f"registry.example/team/{SAMPLE_TAG}": SAMPLE_DIGEST},
                     conformance={"passed": True, "platform": "vertex", "replicas": 2}, size=1_100_000_000,
                     released="2026-11-29T13:14:00Z")


def lockfile_page() -> str:
    return "\n".join([
        header("builder/publish/lockfile.py (LockEntry, dumps_lock)"),
        "# images.lock format\n",
        *[prose(p) + "\n" for p in paragraphs(lockfile)[:3]],
        prose(f"The file is an object: `format` ({LOCK_FORMAT}, the only one this trainimg reads) and `variants`, "
              "one entry per released variant and architecture, keyed by its name (`<variant>@<arch>` for an "
              "architecture other than amd64).") + "\n",
        "## An entry\n", prose(first_paragraph(LockEntry)) + "\n",
        table(FIELD_HEADERS, field_rows(fields(LockEntry))),
        "## Example\n", fenced(dumps_lock({SAMPLE_VARIANT: sample_entry()}), "json"),
    ])


def pages() -> dict[str, str]:
    return {"reference/report-format.md": report_page(), "reference/lockfile.md": lockfile_page()}
