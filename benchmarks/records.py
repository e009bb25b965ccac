"""The results of a full `make bench` run as data: one JSON file per run in benchmarks/results/bench/, and the tables
the documentation site's benchmarks page is rendered from (docs/gen/benchpage.py).

Why files and not a table in a page: a measurement is a fact of one run on one machine, so it is kept as that run
wrote it (its date, the machine, each figure with its value, goal, whether it met it, what it measures and how),
never edited; the page shows the newest run and the history of every figure across runs, and is regenerated from
these files, so it cannot disagree with them.

A run's file holds each figure's goal, unit and description as they were when it ran, so an older run reads as it
was measured even after a goal changes. Runs recovered from the README's tables of earlier commits say so in
`recovered_from` (their "how" was not kept).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from figures import FIGURES, format_value, goal_text, machine_line

RESULTS = Path(__file__).resolve().parent / "results" / "bench"
DATE_FORMAT = "%Y-%m-%d %H:%M UTC"  # how bench.py writes a run's date
FILE_FORMAT = "%Y-%m-%dT%H%MZ.json"  # the run's file name, from its date (sorts as the dates do)


def run_record(rows: Mapping[str, Mapping[str, Any]], date: str, machine: Mapping[str, Any],
               total_seconds: float | None = None, gpu: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The results file of one run: `rows` are the harness's figures (value, status, met, how) by name."""
    record: dict[str, Any] = {"command": "make bench", "date": date, "machine": dict(machine), "figures": {
        fig.name: {"value": rows[fig.name]["value"], "status": rows[fig.name]["status"],
                   "met": rows[fig.name]["met"], "how": rows[fig.name]["how"], "goal": fig.goal, "unit": fig.unit,
                   "what": fig.what} for fig in FIGURES if fig.name in rows}}
    if total_seconds is not None:
        record["total_seconds"] = round(total_seconds, 1)
    if gpu is not None:
        record["gpu"] = dict(gpu)
    return record


def file_name(date: str) -> str:
    return datetime.strptime(date, DATE_FORMAT).strftime(FILE_FORMAT)


def write_run(record: Mapping[str, Any], folder: Path = RESULTS) -> Path:
    """Write a run's file (a run is never rewritten: a second run in the same minute is refused)."""
    path = folder / file_name(str(record["date"]))
    if path.exists():
        raise FileExistsError(f"{path} exists: a run's results are kept as written")
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def read_runs(folder: Path = RESULTS) -> list[dict[str, Any]]:
    """Every run's record, oldest first; a file whose name is not its date's is refused."""
    runs = []
    for path in sorted(folder.glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if file_name(record["date"]) != path.name:
            raise ValueError(f"{path}: its date {record['date']!r} names another file")
        runs.append(record)
    return runs


def value_text(row: Mapping[str, Any]) -> str:
    return format_value(row.get("value"), row["unit"], row.get("status", "skipped"))


def met_text(met: bool | None) -> str:
    return "yes" if met is True else "**no**" if met is False else "–"


def run_table(run: Mapping[str, Any]) -> str:
    """When and where, then one row per figure: value, goal, met, what it measures."""
    lines = [f"Measured {run['date']} on {machine_line(run['machine'])} by `{run['command']}`.", "",
             "| figure | value | goal | met | what |", "|---|---|---|---|---|"]
    for name, row in _ordered(run["figures"]):
        lines.append(f"| `{name}` | {value_text(row)} | {goal_text(row['goal'], row['unit'])} | "
                     f"{met_text(row.get('met'))} | {row['what']} |")
    return "\n".join(lines) + "\n"


def history_table(runs: Sequence[Mapping[str, Any]]) -> str:
    """One row per figure any run measured, one column per run (newest first); a missed goal in bold."""
    newest = list(reversed(runs))
    names = [name for name, _ in _ordered({n: r for run in runs for n, r in run["figures"].items()})]
    lines = ["| figure | " + " | ".join(run["date"].removesuffix(" UTC") for run in newest) + " |",
             "|---|" + "---|" * len(newest)]
    for name in names:
        cells = []
        for run in newest:
            row = run["figures"].get(name)
            text = value_text(row) if row else "–"
            cells.append(f"**{text}**" if row and row.get("met") is False else text)
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _ordered(figures: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """Figures in FIGURES' order, then any a run had that the bench no longer measures."""
    known = [f.name for f in FIGURES]
    return sorted(figures.items(), key=lambda item: (known.index(item[0]) if item[0] in known else len(known),
                                                     item[0]))
