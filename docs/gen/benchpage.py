"""The project's benchmarks page, from the results of every full `make bench` run (benchmarks/results/bench/, one
file per run, benchmarks/records.py): the newest run's table, its GPU figures when it measured them, and each
figure's history across runs."""

from __future__ import annotations

import sys
from pathlib import Path

from md import header, prose

BENCHMARKS = Path(__file__).resolve().parent.parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # as when bench.py runs: its own folder is on the path

import records  # noqa: E402
from gpu import render_gpu_table  # noqa: E402


def page() -> str:
    runs = records.read_runs()
    latest = runs[-1]
    out = [header("benchmarks/results/bench/*.json (one file per `make bench` run)"), "# Benchmarks\n",
           prose("`make bench` measures what trainimg promises (shared build stages, cache reuse, image size, push "
                 "bytes, CI on an empty runner, arm64 under emulation, ...) on one machine, one figure per line, "
                 "each against its goal; every full run writes its results to `benchmarks/results/bench/` and "
                 "this page is rendered from those files (`make docs-reference`). A goal is an upper bound."),
           "", "## The newest run\n", records.run_table(latest)]
    if latest.get("recovered_from"):
        out.append(prose(f"Recovered from {latest['recovered_from']}.") + "\n")
    if latest.get("gpu"):
        out.append(render_gpu_table(latest["gpu"]) + "\n")
    out += ["## History\n", "Each figure in every run, newest first; a missed goal is in bold.\n",
            records.history_table(runs)]
    recovered = [run["date"] for run in runs if run.get("recovered_from")]
    if recovered:
        out.append(prose(f"The runs of {', '.join(recovered)} were recovered from the README's tables of their "
                         "commits (`recovered_from` in their files).") + "\n")
    return "\n".join(out)


def pages() -> dict[str, str]:
    return {"project/benchmarks.md": page()}
