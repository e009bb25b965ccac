"""The audit's figure: the seconds `trainimg audit` adds per variant (`audit_s_per_variant`), every pin of the shipped
lockable variants against the PyPA advisory database (../shared/advisories, or TRAINIMG_ADVISORY_DATA), the data's
age allowed explicitly (the snapshot is older than any sensible --max-age). Measured for one variant alone (the
folder's records are read once per run: a fixed cost) and for all of them at once; the figure is the per-variant
share of the whole run, both in the details. No engine: `python3 benchmarks/bench.py --audit` measures it alone.
"""

from __future__ import annotations

import datetime
import os
import statistics
from pathlib import Path

from harness import ROOT, Harness, log, step

SAMPLES = 3
SNAPSHOT = datetime.date(2024, 10, 10)  # ../shared/advisories/README.md


def advisory_data() -> Path:
    for path in (Path(os.environ.get("TRAINIMG_ADVISORY_DATA", "/nonexistent")),
                 ROOT.parent / "shared" / "advisories" / "pypa-advisory-database",
                 Path("/work/shared/advisories/pypa-advisory-database")):
        if (path / "vulns").is_dir():
            return path
    raise FileNotFoundError("the PyPA advisory database is not beside the checkout (../shared/advisories)")


def lockable_variants() -> list[str]:
    return sorted(p.parent.name for p in ROOT.glob("images/*/requirements.lock")
                  if "# not lockable here" not in p.read_text(encoding="utf-8"))


def measure_audit(bench: Harness) -> None:
    data, variants = advisory_data(), lockable_variants()
    allowance = str((datetime.date.today() - SNAPSHOT).days + 1)

    def seconds(names: list[str]) -> float:
        return statistics.median(bench.trainimg("audit", *names, "--advisories", str(data), "--max-age",
                                                allowance).seconds for _ in range(SAMPLES))

    one, every = seconds(variants[:1]), seconds(variants)
    bench.details["audit"] = {"variants": variants, "one_variant_s": one, "all_variants_s": every, "data": str(data)}
    log(f"  audit: {one:.2f} s for {variants[0]}, {every:.2f} s for {len(variants)} variants")
    bench.set("audit_s_per_variant", round(every / len(variants), 3),
              f"`trainimg audit` of the {len(variants)} lockable shipped variants against the PyPA database "
              f"(2024-10-10, its age allowed), median of {SAMPLES}: {every:.2f} s / {len(variants)}; one variant "
              f"alone {one:.2f} s (the folder's records are read once per run)")


def measure(bench: Harness) -> None:
    step("audit_s_per_variant", bench, lambda: measure_audit(bench))
