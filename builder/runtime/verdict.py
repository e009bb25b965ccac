"""The all-reduce verdict: passed only if every chief/worker process exited 0 and reported the exact sum.

One judge for every way the all-reduce runs: `trainimg test`'s replica containers, `selftest`'s local processes
and the replicas of a ``spec --conformance`` job. Each run is described by `RankRun`s (a replica or a local
launcher: its role, exit code, whether it timed out, and its output holding the JSON lines the ranks printed).

Standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from .cause import reason as cause_of
from .report import Check


class RankRun(Protocol):
    """What the judge reads from one replica (or one local launcher) of an all-reduce run."""

    @property
    def name(self) -> str: ...
    @property
    def role(self) -> str: ...  # chief, worker, ps or evaluator: only chief and worker ranks are judged
    @property
    def exit_code(self) -> int | None: ...
    @property
    def timed_out(self) -> bool: ...
    @property
    def logs(self) -> str: ...  # stdout (and stderr) of the replica: the ranks' JSON lines, one per line


def replica_records(results: Sequence[RankRun]) -> dict[str, dict[str, Any]]:
    """The JSON line each replica's all-reduce printed, by replica name."""
    out: dict[str, dict[str, Any]] = {}
    for r in results:
        for line in r.logs.splitlines():
            line = line.strip()
            if line.startswith("{") and '"framework"' in line:
                try:
                    out.setdefault(r.name, {}).setdefault("lines", []).append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    return out


def judge_allreduce(name: str, results: Sequence[RankRun], world: int, seconds: float) -> Check:
    """Passed only if every chief/worker process exited 0 and reported the exact expected sum."""
    expected = world * (world + 1) // 2
    records = replica_records(results)
    details: dict[str, Any] = {"world_size": world, "expected": expected, "replicas": {}}
    problems = []
    for r in results:
        lines = records.get(r.name, {}).get("lines", [])
        details["replicas"][r.name] = {"exit_code": r.exit_code, "timed_out": r.timed_out,
                                       "results": lines, "log_tail": r.logs.strip().splitlines()[-5:]}
        if r.exit_code not in (0, None):
            details["replicas"][r.name]["cause"] = cause_of(r.logs)
        if r.role not in ("chief", "worker"):
            continue
        # A rank that timed out reports got=None: that is a timeout (exit code below), not a wrong sum.
        wrong = [line["got"] for line in lines if line.get("got") is not None and line["got"] != expected]
        if r.timed_out:
            problems.append(f"{r.name} timed out")
        elif wrong:
            problems.append(f"{r.name} got {wrong}, expected {expected}")
        elif r.exit_code is None:
            problems.append(f"{r.name} did not finish")
        elif r.exit_code != 0:
            # The first line naming the error, read through torchrun's and XLA's wrappers (`cause`).
            problems.append(f"{r.name} exited {r.exit_code}: {cause_of(r.logs)}")
        elif not lines or not all(line.get("ok") for line in lines):
            problems.append(f"{r.name} reported no result, expected {expected}")
    ranks = sorted(line.get("rank") for r in results if r.role in ("chief", "worker")
                   for line in records.get(r.name, {}).get("lines", []) if line.get("rank") is not None)
    if not problems and ranks != list(range(world)):
        problems.append(f"ranks {ranks} reported, expected 0..{world - 1}")
    if problems:
        return Check(name, "failed", "; ".join(problems)[:1000], round(seconds, 3), details)
    return Check(name, "passed", f"sum {expected} on all {world} ranks", round(seconds, 3), details)
