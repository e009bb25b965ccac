#!/usr/bin/env python3
"""Where a test run's minutes went, from the JUnit file `.ci/run` keeps in /var/log/trainimg-ci/.

CI keeps no output of a run that passed, so a slow CI run can only be read back from that file. Prints each lane's
sum (the xdist group a test ran in: `engine`, `engine-beside`, or the tiers that go to any free worker) and the
modules that cost the most; the suite's wall time is at least the lanes' sum over the two workers.

    python3 .ci/durations.py [FILE.xml] [--top N]      (default: the newest run kept)
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

HISTORY = Path("/var/log/trainimg-ci")


def module_of(classname: str) -> str:
    """`tests.test_x` or `tests.test_x.TestY` -> `tests.test_x`: a class's tests count to their module."""
    parts = classname.split(".")
    ends = [i for i, part in enumerate(parts) if part.startswith("test_")]
    return ".".join(parts[: ends[0] + 1]) if ends else classname


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("file", nargs="?", type=Path, help="a JUnit XML file (default: the newest in " f"{HISTORY})")
    parser.add_argument("--top", type=int, default=15, help="how many modules to list (default 15)")
    args = parser.parse_args()
    path = args.file or max(HISTORY.glob("*.xml"), default=None)
    if path is None:
        print(f"durations: no JUnit file in {HISTORY} (.ci/run writes one per run)", file=sys.stderr)
        return 2
    lanes: Counter[str] = Counter()
    modules: Counter[str] = Counter()
    for case in ET.parse(path).getroot().iter("testcase"):
        seconds = float(case.get("time") or 0)
        name = case.get("name", "")
        grouped = name.rfind("@") > name.rfind("]")  # xdist's own rule: a parameter may hold an "@"
        lanes[name.rpartition("@")[2] if grouped else "tiers"] += seconds
        modules[module_of(case.get("classname", "?"))] += seconds
    print(f"{path}: {sum(lanes.values()):.0f} s of tests")
    for lane, seconds in lanes.most_common():
        print(f"  lane {lane}: {seconds:.0f} s")
    for module, seconds in modules.most_common(args.top):
        print(f"  {seconds:7.1f} s  {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
