#!/usr/bin/env python3
"""trainimg's benchmarks, measured on this machine in one run.

Prints one ``name: value`` line per figure on stdout (the names are a contract), how each figure was measured
and any ``goal missed: NAME`` on stderr, writes the same to ``reports/bench.json`` and the run's results file to
``benchmarks/results/bench/<date>.json`` (benchmarks/records.py), from which `make docs-reference` renders the
documentation site's benchmarks page.

"Cold" means cold: before every cold build the BuildKit cache is pruned (``docker builder prune -af``) and the
bench images (tags starting ``trainimg-bench/``, no others) are removed. One cold build is noise on a shared
machine (``matrix_build_ratio`` read 0.44, 0.53 and 0.72 on the same code), so every cold build is run
``COLD_RUNS`` times and its median is used, with the spread printed. That slows every other build on the engine,
so ``--quick`` prunes nothing: it skips the builds that need a cold cache (each variant built alone and the naive
baseline) and ``ci_rebuild_ratio``, prints their figures as ``skipped``, and writes ``reports/bench-quick.json``
and no results file. ``ci_rebuild_ratio`` plays ephemeral CI runners on engines of their own
(benchmarks/runner.py: each a second dockerd on an empty data root, beside the machine's).

The figures come in families (benchmarks/harness.py's FAMILIES, measured in that order: the matrix figures in
benchmarks/core.py, the install figures in benchmarks/installs.py, the CI fleet in benchmarks/cifleet.py, ...,
then ``ci_rebuild_ratio`` in benchmarks/runner.py); this module is the command line, the printed lines, the report and the
results file.

``ci_noop_release``, ``ci_noop_layer_bytes`` and ``ci_one_change`` (benchmarks/cifleet.py) release a small fleet to
a private registry with its access log on, empty the runner (by default only the bench's own images and new cache
records; ``TRAINIMG_BENCH_PRUNE_ALL=1``: ``docker system prune -af`` and ``docker builder prune -af``), release
again with nothing changed, then with one pin changed; ``--ci`` measures only those.

Exit status: 0 when every figure was measured (goals missed or not), 1 when a measurement itself failed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from figures import FIGURES, GOALS, format_goal, format_value, machine_line
from harness import FAMILIES, FAMILY, ROOT, Harness, StepFailed, log, machine_info
from installs import INSTALLS_VARIANT, run_installs
from records import run_record, write_run

REPORT = ROOT / "reports" / "bench.json"
QUICK_REPORT = ROOT / "reports" / "bench-quick.json"
# The families measured alone by a flag of their own name (--ci-rebuild: ci_rebuild), and whether that run keeps
# the trainimg-bench/* images (the CI fleet removes its own, so another bench's stay).
ALONE: tuple[tuple[str, bool], ...] = (("arm64", False), ("audit", True), ("signing", True), ("ci_rebuild", True),
                                       ("ci", True), ("grammar", True))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true",
                        help="prune nothing; skip the alone-cold and naive builds (their figures print `skipped`); "
                             "write reports/bench-quick.json and no results file")
    parser.add_argument("--keep-images", action="store_true", help="keep the trainimg-bench/* images at the end")
    parser.add_argument("--gpu", action="store_true",
                        help="also build, gate and push the GPU image of each framework and report its size, "
                             "compressed size as pushed and size / (base + payload) (downloads gigabytes cold)")
    parser.add_argument("--installs", metavar="VARIANT", nargs="*",
                        help="measure only uv_vs_pip and uv_vs_pip_warm for each VARIANT (the worst is the figure) "
                             "and reproducible_package_diffs for the first (default "
                             f"{INSTALLS_VARIANT}); prunes nothing shared; writes reports/bench-installs.json")
    parser.add_argument("--ci", action="store_true",
                        help="measure only ci_noop_release, ci_noop_layer_bytes and ci_one_change (prunes only "
                             "the bench's own images and cache unless TRAINIMG_BENCH_PRUNE_ALL=1); writes "
                             "reports/bench-ci.json")
    parser.add_argument("--coldstart", metavar="IMAGE", nargs="+",
                        help="measure only cold_import_ratio on these built images (benchmarks/coldstart.py); "
                             "writes reports/bench-coldstart.json")
    parser.add_argument("--nodestart", metavar="IMAGE", nargs="+",
                        help="measure only node_start_zstd_vs_gzip on these built images (benchmarks/nodestart.py: "
                             "containerd of its own, gzip and zstd pushes); writes reports/bench-nodestart.json")
    parser.add_argument("--lazystart", metavar="IMAGE", nargs="+",
                        help="measure only the lazy node-start figures on these built images, CPU or GPU "
                             "(benchmarks/lazystart.py: a containerd of its own with stargz-snapshotter, the gate "
                             "run on each, gzip and eStargz pushes); writes reports/bench-lazystart.json")
    parser.add_argument("--arm64", action="store_true",
                        help="measure only the arm64 figures (benchmarks/arm64.py: the JAX CPU variant's arm64 build "
                             "and gate under emulation against amd64's); writes reports/bench-arm64.json")
    parser.add_argument("--audit", action="store_true",
                        help="measure only audit_s_per_variant (benchmarks/audit.py; no engine); writes "
                             "reports/bench-audit.json")
    parser.add_argument("--signing", action="store_true",
                        help="measure only sign_s_per_variant (benchmarks/signing.py; a local registry, no build); "
                             "writes reports/bench-signing.json")
    parser.add_argument("--grammar", action="store_true",
                        help="measure only registry_refusal_ms and reference_near_miss_ms (benchmarks/grammar.py; "
                             "in-process, no engine); writes reports/bench-grammar.json")
    parser.add_argument("--ci-rebuild", action="store_true",
                        help="measure only ci_rebuild_ratio (benchmarks/runner.py: builds on empty engines, each a second "
                             "dockerd beside this machine's, which it leaves alone); writes "
                             "reports/bench-ci-rebuild.json")
    parser.add_argument("--layers", metavar="ARG", nargs=argparse.REMAINDER,
                        help="only the layer figures (benchmarks/layers.py VARIANT [--allow-missing C]); run on an "
                             "engine of its own (DOCKER_HOST): it removes the variant's images there")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.layers:
        import layers
        return layers.main(args.layers)
    if args.installs is not None:
        return installs_only(args.installs or [INSTALLS_VARIANT])
    if args.coldstart:
        from coldstart import measure_images
        return figures_only(FAMILY["coldstart"].figures, "--coldstart", lambda b: measure_images(b, args.coldstart),
                            ROOT / "reports" / "bench-coldstart.json", {"images": args.coldstart}, keep_images=True)
    if args.nodestart:
        from nodestart import measure_images as measure_starts
        return figures_only(FAMILY["nodestart"].figures, "--nodestart", lambda b: measure_starts(b, args.nodestart),
                            ROOT / "reports" / "bench-nodestart.json", {"images": args.nodestart}, keep_images=True)
    if args.lazystart:
        from lazystart import measure_images as measure_lazy
        return figures_only(FAMILY["lazystart"].figures, "--lazystart", lambda b: measure_lazy(b, args.lazystart),
                            ROOT / "reports" / "bench-lazystart.json", {"images": args.lazystart}, keep_images=True)
    for family, keep_images in ALONE:  # a flag of its own: that family alone
        if getattr(args, family):
            return figures_only(FAMILY[family].figures, f"--{family.replace('_', '-')}", FAMILY[family].run,
                                ROOT / "reports" / f"bench-{family.replace('_', '-')}.json", {}, keep_images)

    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    bench = Harness(quick=args.quick, keep_images=args.keep_images)
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = machine_info(bench.env)
    log(f"bench: {date}, {machine_line(machine)}{' (--quick)' if args.quick else ''}")
    started = time.monotonic()
    try:
        setup_error = measure_all(bench)
    except KeyboardInterrupt:
        log("bench: interrupted")
        bench.cleanup()
        return 130
    gpu_rows = measure_gpu(bench) if args.gpu else {}
    bench.cleanup()
    total = time.monotonic() - started
    missed, failed = print_figures(bench, args.quick, gpu_rows if args.gpu else None)
    report = {
        "date": date, "machine": machine, "quick": args.quick, "total_seconds": round(total, 1),
        "figures": {name: row["value"] for name, row in bench.figures.items()},
        "goals": {f.name: f.goal for f in FIGURES},
        "status": {name: row["status"] for name, row in bench.figures.items()},
        "met": {name: row["met"] for name, row in bench.figures.items()},
        "how": {name: row["how"] for name, row in bench.figures.items()},
        "missed": missed, "failed": failed, "error": setup_error, "details": bench.details,
    }
    if args.gpu:
        report["gpu"] = gpu_rows
        failed += [f"gpu.{name}" for name, row in gpu_rows.items() if "error" in row]
    write_outputs(report, args.quick, run_record(bench.figures, date, machine, total, gpu_rows if args.gpu else None),
                  total)
    return 1 if failed else 0


def measure_all(bench: Harness) -> str | None:
    """Every family, in FAMILIES' order. A failed figure is marked and the run goes on; a failed setup step
    (StepFailed out of a family) stops it, and every figure not yet measured is marked failed with its reason,
    which is returned."""
    try:
        for family in FAMILIES:
            family.run(bench)
    except StepFailed as exc:
        log(f"bench: stopped: {exc}")
        for name, fig in bench.figures.items():
            if fig["status"] == "skipped" and not fig["how"]:
                bench.fail(name, f"not measured: {exc}")
        return str(exc)
    return None


def measure_gpu(bench: Harness) -> dict[str, dict[str, Any]]:
    """--gpu: benchmarks/core.py's gpu_figures; a failure of the whole is one error row."""
    from core import gpu_figures

    try:
        return gpu_figures(bench)
    except (StepFailed, OSError, ValueError, KeyError) as exc:
        log(f"bench: --gpu figures failed: {exc}")
        return {"error": {"error": str(exc)[:300]}}


def print_figures(bench: Harness, quick: bool,
                  gpu_rows: Mapping[str, Mapping[str, Any]] | None) -> tuple[list[str], list[str]]:
    """stdout: one `name: value` line per figure (the contract), then the GPU lines; stderr: how each was
    measured, the goals missed and the figures not measured. Returns (missed, failed)."""
    for fig in FIGURES:
        row = bench.figures[fig.name]
        print(f"{fig.name}: {format_value(row['value'], fig.unit, row['status'])}", flush=True)
    if gpu_rows is not None:
        from gpu import figure_lines

        for line in figure_lines(gpu_rows):
            print(line, flush=True)
    for fig in FIGURES:
        log(f"how {fig.name}: {bench.figures[fig.name]['how'] or 'not measured'}")
    missed = [f.name for f in FIGURES if bench.figures[f.name]["met"] is False]
    failed = [f.name for f in FIGURES if bench.figures[f.name]["status"] == "failed"]
    for name in missed:
        row = bench.figures[name]
        note = " (--quick: not a cold measurement)" if quick and name == "noop_rebuild_ratio" else ""
        log(f"goal missed: {name} ({format_value(row['value'], GOALS[name].unit)}, goal "
            f"{format_goal(name)}){note}")
    for name in failed:
        log(f"not measured: {name}: {bench.figures[name]['how']}")
    return missed, failed


def write_outputs(report: Mapping[str, Any], quick: bool, record: Mapping[str, Any], total: float) -> None:
    """reports/bench.json (bench-quick.json under --quick), and the run's results file unless --quick (a quick run
    measures nothing cold: it is no result)."""
    path = QUICK_REPORT if quick else REPORT
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    log(f"bench: wrote {path.relative_to(ROOT)} in {total:.0f} s total")
    if not quick:
        written = write_run(record)
        log(f"bench: wrote {written.relative_to(ROOT)}; `make docs-reference` renders it into the benchmarks page")
    else:
        log("bench: --quick writes no results file")


def installs_only(variants: Sequence[str]) -> int:
    """`--installs VARIANT...`: the install figures alone (cold without pruning: benchmarks/installs.py)."""
    return figures_only(FAMILY["installs"].figures, f"--installs {' '.join(variants)}",
                        lambda bench: run_installs(bench, variants), ROOT / "reports" / "bench-installs.json",
                        {"variants": list(variants)}, keep_images=False)


def figures_only(names: Sequence[str], what: str, measure: Callable[[Harness], None], path: Path,
                 extra: Mapping[str, Any], keep_images: bool) -> int:
    """Some figures alone (`what`: the option that asked, for the log): measured by `measure`, printed, written
    to `path` with `extra` (no results file: a full run is one); the trainimg-bench/* images removed unless `keep_images`.
    Exit status as main's."""
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    bench = Harness(quick=False, keep_images=keep_images)
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = machine_info(bench.env)
    log(f"bench {what}: {date}, {machine_line(machine)}")
    try:
        measure(bench)
    finally:
        bench.cleanup()
    for name in names:
        row = bench.figures[name]
        print(f"{name}: {format_value(row['value'], GOALS[name].unit, row['status'])}", flush=True)
        log(f"how {name}: {row['how'] or 'not measured'}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"date": date, "machine": machine, **extra,
                                "figures": {n: bench.figures[n] for n in names}, "details": bench.details},
                               indent=2, sort_keys=True) + "\n", encoding="utf-8")
    log(f"bench: wrote {path.relative_to(ROOT)}")
    return 1 if any(bench.figures[n]["status"] == "failed" for n in names) else 0


if __name__ == "__main__":
    sys.exit(main())
