"""The figures `make bench` reports and the pure helpers around them: their goals, how each value is printed, the
median and spread of cold runs, and the parsers of what the measured commands print (a run's results file and
its tables are benchmarks/records.py).

Kept apart from bench.py (which runs the engine) so tests/test_bench_units.py checks them without an engine, and so
the figure names, a contract other checks read, live in one place.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

BENCH_PREFIX = "trainimg-bench/"


@dataclass(frozen=True)
class Figure:
    name: str
    goal: float
    unit: str  # "ratio", "bytes", "count", "ms" or "s"
    what: str


FIGURES: tuple[Figure, ...] = (
    Figure("matrix_build_ratio", 0.5, "ratio", "cold matrix build / sum of each variant built alone, cold"),
    Figure("noop_rebuild_ratio", 0.05, "ratio", "rebuild with nothing changed / cold matrix build"),
    Figure("pin_change_rebuild_ratio", 0.4, "ratio", "rebuild after one extra pin changed / that variant cold"),
    Figure("size_vs_naive", 0.8, "ratio", "image size / naive single-stage image with the same payload"),
    Figure("size_overhead", 1.10, "ratio", "image size / (base image + /opt/venv + python apt packages)"),
    Figure("allreduce_4_vs_1", 2.0, "ratio", "`trainimg test --replicas 4` / `--replicas 1` wall time"),
    Figure("repush_bytes", 0, "bytes", "layer bytes uploaded pushing an unchanged image again"),
    Figure("render_ms_per_variant", 10.0, "ms", "render the shipped matrix, best of 5, per variant"),
    Figure("ci_rebuild_ratio", 0.2, "ratio",
           "rebuild on a pruned engine with `--cache-from` the pushed image / the same variant cold"),
    Figure("uv_vs_pip", 0.9, "ratio", "cold build installing the lock with uv / with pip (fresh base, empty wheel cache)"),
    Figure("uv_vs_pip_warm", 1.0, "ratio", "the same with the wheel cache mount warm: uv no slower than pip"),
    Figure("reproducible_package_diffs", 0, "count",
           "lock, `pip freeze` and SBOM lines differing between two cold builds of one variant"),
    Figure("ci_noop_release", 2.0, "s",
           "`release` of small variants on an emptied runner, nothing changed: seconds per variant"),
    Figure("ci_noop_layer_bytes", 0, "bytes", "layer bytes that `release` pulled from the registry (its access log)"),
    Figure("ci_one_change", 0, "count",
           "one extra pin changed: variants built or skipped other than exactly that one and its children"),
    Figure("cold_import_ratio", 0.5, "ratio",
           "first framework import in a fresh container / the same with the image's .pyc deleted (worst CPU image)"),
    Figure("node_start_zstd_vs_gzip", 0.9, "ratio",
           "`ctr images pull` to the end of the framework's import on a fresh containerd, zstd-3 / gzip-6 (worst CPU image)"),
    Figure("lazy_import_vs_whole", 0.35, "ratio",
           "pull start to the end of `import torch` (CPU PyTorch image), eStargz lazily with the gate's order / gzip "
           "whole, on one containerd with stargz-snapshotter"),
    Figure("lazy_import_gpu_vs_whole", 0.2, "ratio", "the same for the GPU PyTorch image (`import torch` on CPU)"),
    Figure("lazy_allreduce_vs_whole", 0.5, "ratio",
           "pull start to the end of a one-process all-reduce, lazily / whole (worst image)"),
    Figure("lazy_order_vs_none", 0.9, "ratio",
           "pull start to the end of the framework's import, lazily with the gate's prefetch order / without one "
           "(worst image)"),
    Figure("lazy_bytes_before_import", 0.5, "ratio",
           "layer bytes the registry served before the lazy import ended / the eStargz image's size (worst image)"),
    Figure("audit_s_per_variant", 5.0, "s",
           "seconds `trainimg audit` adds per variant (every pin of the shipped locks, PyPA database folder)"),
    Figure("sign_s_per_variant", 1.0, "s",
           "seconds `--sign-key` adds per variant (signature and SLSA provenance, `promote` of staged variants)"),
    Figure("arm64_build_ratio", 10.0, "ratio",
           "the JAX CPU variant's arm64 build under emulation / its amd64 build, every step anew"),
    Figure("arm64_gate_ratio", 5.0, "ratio", "its arm64 gate (`trainimg test`) under emulation / its amd64 gate"),
    Figure("arm64_layer_diffs", 0, "count", "layers differing between two arm64 builds without cache"),
    Figure("registry_refusal_ms", 10.0, "ms",
           "refusing a hostile `--registry` value (1000 of them, each its best of 5): the slowest"),
    Figure("reference_near_miss_ms", 50.0, "ms",
           "the reference grammar on a 100,000-character near miss, best of 5: the slowest of 4"),
)
FIGURE_NAMES = tuple(f.name for f in FIGURES)
GOALS = {f.name: f for f in FIGURES}


def below_the_install(stages: Sequence[Any]) -> list[str]:
    """Keys of the parent stages under a variant's lock install: the stages a bench copy must share with the shipped
    variant (the install steps and the stage slicing the lock hold the lock and name the recipe's extras, the
    bench's pinned extra included, so they differ)."""
    from trainimg.plan.installer import LOCKS_STAGE

    return [s.key for s in stages if all(b.name not in ("packages", LOCKS_STAGE) for b in s.blocks)]


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either is unknown or the denominator is not positive."""
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def format_value(value: float | int | None, unit: str = "ratio", status: str = "ok") -> str:
    """How a figure is printed: ratios with 3 decimals, ms and s with 2, bytes and counts as integers; else the
    status."""
    if value is None:
        return status if status != "ok" else "skipped"
    if unit in ("bytes", "count"):
        return str(int(value))
    if unit in ("ms", "s"):
        return f"{value:.2f}"
    return f"{value:.3f}"


def median_spread(values: Sequence[float]) -> tuple[float, float, float]:
    """The median of `values`, and their min and max: the figure, and how far one run could have strayed."""
    if not values:
        raise ValueError("no runs to take the median of")
    ordered = sorted(values)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return median, ordered[0], ordered[-1]


def spread_note(values: Sequence[float]) -> str:
    """How a cold figure's runs spread, for the "how" line: median, min-max, and the range as % of the median."""
    median, low, high = median_spread(values)
    share = f", {100 * (high - low) / median:.0f}% of the median" if median > 0 else ""
    return f"median of {len(values)} cold runs {median:.1f} s (spread {low:.1f}-{high:.1f} s{share})"


def goal_met(name: str, value: float | int | None) -> bool | None:
    """Whether `value` meets the goal of figure `name` (every goal is an upper bound); None if not measured."""
    if value is None:
        return None
    return value <= GOALS[name].goal


def format_goal(name: str) -> str:
    return goal_text(GOALS[name].goal, GOALS[name].unit)


def goal_text(goal: float, unit: str) -> str:
    """A goal as the tables print it: an exact count or byte figure, else an upper bound."""
    if unit in ("bytes", "count"):
        return f"{int(goal)}"
    return f"≤ {goal:g}"


_PUSH_RE = re.compile(r"^pushed \S+ \((\d+) bytes uploaded\)\s*$", re.MULTILINE)


def parse_pushed_bytes(output: str) -> int:
    """Layer bytes a `trainimg push` reported, summed over its "pushed REF@DIGEST (N bytes uploaded)" lines."""
    found = _PUSH_RE.findall(output)
    if not found:
        raise ValueError(f"no 'pushed ... (N bytes uploaded)' line in the push output: {output.strip()[-300:]!r}")
    return sum(int(n) for n in found)


def change_pin(recipe_text: str, old: str, new: str) -> str:
    """The recipe text with pin `old` replaced by `new`; exactly one occurrence, quoted or not."""
    count = recipe_text.count(old)
    if count != 1:
        raise ValueError(f"expected {old!r} once in the recipe, found it {count} times")
    return recipe_text.replace(old, new)


def manifest_bytes(manifest: Mapping[str, Any]) -> int:
    """Compressed bytes of an image as a registry holds it: its config blob plus every layer blob, from its
    (Docker v2 or OCI) manifest."""
    try:
        return int(manifest["config"]["size"]) + sum(int(layer["size"]) for layer in manifest["layers"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not an image manifest with sized blobs: {exc}") from None


def parse_meminfo(text: str) -> int:
    """MemTotal from /proc/meminfo, in bytes."""
    match = re.search(r"^MemTotal:\s+(\d+)\s*kB", text, re.MULTILINE)
    if not match:
        raise ValueError("no MemTotal in /proc/meminfo")
    return int(match.group(1)) * 1024


def parse_du_total(output: str) -> int:
    """Bytes from the last line of `du -sb` / `du -sbc` output ("12345\\ttotal" or "12345\\t/path")."""
    lines = [line for line in output.strip().splitlines() if line.strip()]
    if not lines:
        raise ValueError("empty du output")
    first = lines[-1].split()[0]
    if not first.isdigit():
        raise ValueError(f"unexpected du output: {lines[-1]!r}")
    return int(first)


def machine_line(machine: Mapping[str, Any]) -> str:
    mem = machine.get("memory_bytes")
    mem_text = f"{mem / 2**30:.1f} GiB" if isinstance(mem, int) else "unknown"
    return (f"{machine.get('nproc', '?')} CPUs (nproc), {mem_text} memory, Docker engine "
            f"{machine.get('docker_server', '?')} (client {machine.get('docker_client', '?')}), "
            f"{machine.get('kernel', '?')}")


def bench_refs(listing: str, prefix: str = BENCH_PREFIX) -> list[str]:
    """Image references to remove from `docker images --format '{{.Repository}}:{{.Tag}}'` output: only those
    whose repository starts with `prefix` (never another image; `<none>` tags are skipped)."""
    refs = []
    for line in listing.splitlines():
        ref = line.strip()
        repo, _, tag = ref.rpartition(":")
        if repo.startswith(prefix) and tag and tag != "<none>":
            refs.append(ref)
    return refs


def failure_tail(output: str) -> str:
    """What a failed command's output says went wrong: BuildKit's `#N ERROR: ...` lines when it printed any (the
    last 1,500 characters of a failed build are the echo of its long RUN line), and the output's last line."""
    lines = output.strip().splitlines()
    errors = [line for line in lines if re.match(r"#\d+ ERROR: ", line)]
    return " | ".join([*errors[-3:], lines[-1][-500:]] if errors else ["\n".join(lines)[-1500:]]) if lines else ""
