"""`make bench BENCH_ARGS=--gpu`: the size figures of the GPU images this machine can build (one per framework).

Cold GPU builds download gigabytes, so these figures run only with ``--gpu``. For each image: its size (the
engine's uncompressed size), its compressed size as pushed (`trainimg push` to a fresh local registry, then the
config and layer blob sizes its manifest lists: what a pull downloads) and size / (base + installed payload), the
payload measured as for ``size_overhead`` (/opt/venv plus the files of the apt packages the image added). Each is
built by `trainimg build` from the shipped recipes on the local Debian base (nothing is pruned: sizes do not depend
on the cache) and must pass `trainimg test --replicas 2` before `push` takes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packaging.version import Version

from trainimg.runtime.contract import REDUCTION_SERVER_PACKAGE

def _gpu_variants() -> tuple[str, ...]:
    """Per framework, the newest shipped GPU variant whose Python the bench's base (harness.BASE_IMAGE, Debian 12)
    provides: the base the GPU images are built on here (NVIDIA's cannot be pulled)."""
    from trainimg.recipe.compat import load_compat
    from trainimg.recipe.loading import load_recipes

    pythons = load_compat().operating_systems["debian12"].python
    variants = [v for v in load_recipes(Path(__file__).resolve().parent.parent / "recipes").variants if v.gpu and not v.extends and v.python in pythons]
    newest = {}
    for v in variants:
        if v.framework not in newest or Version(v.version or "0") > Version(newest[v.framework].version or "0"):
            newest[v.framework] = v
    return tuple(newest[fw].name for fw in ("pytorch", "tensorflow", "jax"))


GPU_VARIANTS = _gpu_variants()
# What `--allow-missing` names: the Reduction Server's Debian package (Google's apt repository is out of reach here).
ALLOW_MISSING = REDUCTION_SERVER_PACKAGE
GPU_UNITS = {"size_bytes": "bytes", "pushed_bytes": "bytes", "size_overhead": "ratio"}


def figure_lines(rows: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """``gpu.<variant>.<figure>: value`` lines, the stdout contract of the --gpu figures."""
    lines = []
    for name in GPU_VARIANTS:
        row = rows.get(name, {})
        for fig, unit in GPU_UNITS.items():
            value = row.get(fig)
            text = "failed" if value is None else (str(int(value)) if unit == "bytes" else f"{value:.3f}")
            lines.append(f"gpu.{name}.{fig}: {text}")
    return lines


def render_gpu_table(rows: Mapping[str, Mapping[str, Any]]) -> str:
    """The Markdown table of a run's --gpu figures, under its table on the benchmarks page (docs/gen/benchpage.py)."""
    lines = ["GPU images (`--gpu`), built on the local Debian base with `--allow-missing google-reduction-server`:",
             "", "| image | size | pushed (compressed) | size ÷ (base + payload) | NCCL | cuDNN | CUDA runtime |",
             "|---|---|---|---|---|---|---|"]
    for name in GPU_VARIANTS:
        row = rows.get(name, {})
        if row.get("size_bytes") is None:
            lines.append(f"| `{name}` | failed: {row.get('error', 'not measured')} | | | | | |")
            continue
        v = row.get("versions", {})
        lines.append(f"| `{name}` | {row['size_bytes'] / 1e6:,.0f} MB | {row['pushed_bytes'] / 1e6:,.0f} MB | "
                     f"{row['size_overhead']:.3f} | {v.get('nccl')} | {v.get('cudnn')} | {v.get('cuda')} |")
    return "\n".join(lines)
