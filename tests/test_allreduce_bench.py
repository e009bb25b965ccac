"""``allreduce --benchmark-bytes``: a figure that cannot lie, run for real on CPU (gloo, several processes).

The first GPU run printed "1 GiB in 19 us, algbw 55,967 GB/s" for one rank (benchmarks/results/2026-11-26-h100/
selftest/allreduce-1073741824.json): the time of a no-op. One rank now reports that nothing was communicated and
no bandwidth; N ranks report nccl-tests' algbw and busbw with their definitions and, from the same run, a copy of
the same bytes on the same device.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from venvs import venv
from trainimg.runtime.allreduce_bench import DEFINITIONS, ONE_RANK, benchmark_result, parse_benchmark_output

REPO = Path(__file__).resolve().parents[1]
RECORDED = REPO / "benchmarks" / "results" / "2026-11-26-h100" / "selftest" / "allreduce-1073741824.json"


@pytest.fixture(scope="module")
def runtime_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rt")
    shutil.copytree(REPO / "builder" / "runtime", root / "trainimg_runtime",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return root


def bench(runtime: Path, *args: str) -> tuple[int, dict, str]:
    proc = subprocess.run([venv("torch"), "-m", "trainimg_runtime", "allreduce", "--framework", "pytorch",
                           "--backend", "gloo", *args], capture_output=True, text=True, cwd="/", timeout=300,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(runtime), "OMP_NUM_THREADS": "1"})
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, (proc.stdout, proc.stderr[-2000:])  # stdout is the one JSON line
    return proc.returncode, json.loads(lines[0]), proc.stderr


def test_the_recorded_one_rank_figure_is_what_one_rank_no_longer_prints() -> None:
    recorded = json.loads(RECORDED.read_text())
    assert recorded["nranks"] == 1 and recorded["algbw_gbps"] > 50_000  # the no-op's "bandwidth"
    now = benchmark_result(recorded["size_bytes"], recorded["iters"], 1, recorded["time_us"] * 20 / 1e6,
                           copy_s=714e-6, ok=True)
    assert now["communicated"] is False and now["reason"] == ONE_RANK
    assert not {"algbw_gbps", "busbw_gbps", "time_us"} & set(now)
    assert now["copy_gbps"] == pytest.approx(1503.8, rel=1e-3)  # d2d.txt's 1 GiB copy, the device's own figure
    assert parse_benchmark_output(json.dumps(now)) == now


def test_one_rank_reports_that_nothing_was_communicated(runtime_path: Path) -> None:
    rc, result, stderr = bench(runtime_path, "--benchmark-bytes", str(1 << 20), "--iters", "5")
    assert rc == 0, stderr
    assert result["nranks"] == 1 and result["ok"] is True and result["communicated"] is False
    assert result["reason"] == ONE_RANK and ONE_RANK in stderr
    assert not {"algbw_gbps", "busbw_gbps", "time_us", "definitions"} & set(result)
    assert result["device"] == "cpu" and result["copy_gbps"] > 0


def test_n_ranks_give_nccl_tests_figures_beside_a_copy(runtime_path: Path) -> None:
    size, iters = 4 << 20, 5
    rc, result, stderr = bench(runtime_path, "--benchmark-bytes", str(size), "--iters", str(iters), "--nranks", "3")
    assert rc == 0, stderr
    assert (result["nranks"], result["ok"], result["communicated"], result["backend"]) == (3, True, True, "gloo")
    assert result["definitions"] == DEFINITIONS
    # algbw = bytes / time; busbw = algbw * 2(n-1)/n (nccl-tests doc/PERFORMANCE.md), as the JSON states them.
    # (the JSON rounds GB/s to 3 decimals: on a loaded CPU a figure can be small enough for that to show)
    assert result["algbw_gbps"] == pytest.approx(size / (result["time_us"] / 1e6) / 1e9, rel=1e-2, abs=2e-3)
    assert result["busbw_gbps"] == pytest.approx(result["algbw_gbps"] * 2 * 2 / 3, rel=1e-3, abs=2e-3)
    assert result["copy_gbps"] == pytest.approx(size / (result["copy_time_us"] / 1e6) / 1e9, rel=1e-2, abs=2e-3)
    assert "busbw_gbps = algbw * 2 * (nranks - 1) / nranks" in stderr and "device copy of the same bytes" in stderr


def test_bad_benchmark_arguments_are_setup_errors(runtime_path: Path) -> None:
    rc, stdout, stderr = bench_rc(runtime_path, "--benchmark-bytes", "0")
    assert rc == 2 and "must be >= 1" in stderr and stdout == ""


def bench_rc(runtime: Path, *args: str) -> tuple[int, str, str]:
    proc = subprocess.run([venv("torch"), "-m", "trainimg_runtime", "allreduce", "--framework", "pytorch",
                           "--backend", "gloo", *args], capture_output=True, text=True, cwd="/", timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(runtime)})
    return proc.returncode, proc.stdout, proc.stderr
