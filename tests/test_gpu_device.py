"""benchmarks/gpu_device.sh, the next device run in one command, checked as far as a machine without a GPU can.

Its checks (benchmarks/gpu_device.py) are run on the first device run's real files
(benchmarks/results/2026-11-26-h100): what held then must pass them, and what went wrong then (a one-rank
"bandwidth", two checks disagreeing on the GPU count, a misuse that was not refused) must fail them. The script
itself runs in its dry mode (every step's command and check, nothing run) and passes shellcheck.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RUN = REPO / "benchmarks" / "results" / "2026-11-26-h100"
sys.path.insert(0, str(REPO / "benchmarks"))
import gpu_device  # noqa: E402

PLATFORMS = ("vertex", "aiplatform", "uai", "slurm", "trainjob", "pytorchjob", "tfjob", "azureml", "mpi", "jaxjob")


def check(kind: str, *args: str) -> tuple[bool, str]:
    return gpu_device.CHECKS[kind](*args)


@pytest.mark.parametrize("report", ["selftest/selftest-pytorch.json", "selftest/selftest-jax.json",
                                    *(f"platforms/selftest-{p}.json" for p in PLATFORMS)])
def test_what_held_on_the_h100_passes_the_gate(report: str) -> None:
    ok, detail = check("gate", str(RUN / report))
    assert ok, detail
    assert "gpu, framework, nccl, cudnn and allreduce_nccl_" in detail and "1 GPU(s)" in detail


def test_cluster_form_and_ddp_program_pass() -> None:
    assert check("cluster", str(RUN / "platforms/cluster-vertex-launch.log")) == (
        True, "allreduce_cluster passed: rank 0 of 1: sum 1 over nccl")
    ok, line = check("line", str(RUN / "platforms/user-ddp-under-launch.log"), "^DDP ok rank 0 of 1 ")
    assert ok and line.startswith("DDP ok rank 0 of 1 device 0")


def test_what_went_wrong_on_the_h100_fails_its_check() -> None:
    # Two processes on one GPU ran (exit 1) instead of being refused up front.
    ok, detail = check("refused", "1", str(RUN / "one-gpu-misuse/pytorch-nproc2.log"), "2", "1")
    assert not ok and detail.startswith("exit 1, not refused naming 2 processes and 1 GPU(s)")
    # CUDA_VISIBLE_DEVICES=-1: gpu said "passed, 1 GPU(s)" while the NCCL all-reduce saw none.
    ok, detail = check("hidden", str(RUN / "one-gpu-misuse/cuda-visible-devices-hidden.json"))
    assert not ok and "gpu passed: 1 GPU(s)" in detail and "torch sees no CUDA device" in detail
    # One rank printed a bandwidth: 1 GiB in 19 us.
    ok, detail = check("bench", *(str(p) for p in sorted((RUN / "selftest").glob("allreduce-*.json"))))
    assert not ok and "1073741824 bytes: one rank printed a bandwidth (55967.339 GB/s)" in detail


def test_todays_forms_pass(tmp_path: Path) -> None:
    refused = tmp_path / "refused.log"
    refused.write_text("trainimg-runtime selftest: --nproc-per-node 2: this machine has 1 GPU(s) and NCCL needs "
                       "one GPU per process; use --nproc-per-node auto (or at most 1)\n")
    assert check("refused", "2", str(refused), "2", "1")[0]
    assert not check("refused", "1", str(refused), "2", "1")[0]  # the line without exit 2 is not a refusal
    hidden = json.loads((RUN / "one-gpu-misuse/cuda-visible-devices-hidden.json").read_text())
    for c in hidden["suites"][0]["checks"]:
        if c["name"] == "gpu":
            c.update(status="warning", details={**c["details"], "count": 0})
        if c["name"].startswith("allreduce"):
            c.update(name="allreduce_gloo_vertex_x1", status="passed", reason="sum 1 on all 1 ranks")
    (tmp_path / "hidden.json").write_text(json.dumps(hidden))
    assert check("hidden", str(tmp_path / "hidden.json"))[0]
    one = {"size_bytes": 1 << 30, "nranks": 1, "ok": True, "communicated": False, "reason": "one rank",
           "copy_gbps": 1503.8, "copy_time_us": 714.0}
    (tmp_path / "b.json").write_text(json.dumps(one))
    assert check("bench", str(tmp_path / "b.json")) == (True, "1073741824 B x1: nothing communicated, copy 1503.8 GB/s")


def test_the_shm_step_checks(tmp_path: Path) -> None:
    """Step 6's verdicts, on reports of the form selftest writes (a 64 MiB run refused up front, a 2 GiB run)."""
    def report(shm: tuple[str, str], allreduce: tuple[str, str]) -> str:
        checks = [{"name": "shm", "status": shm[0], "reason": shm[1]},
                  {"name": "allreduce_gloo_vertex_x1x2", "status": allreduce[0], "reason": allreduce[1]}]
        path = tmp_path / f"{shm[0]}-{allreduce[0]}.json"
        path.write_text(json.dumps({"suites": [{"checks": checks}]}))
        return str(path)

    small = ("failed", "/dev/shm is 64 MiB; 2 local ranks need at least 1 GiB (NCCL: --shm-size=1g ...)")
    assert check("shm", "refused", report(small, ("skipped", "not started: /dev/shm is 64 MiB; ...")))[0]
    assert not check("shm", "refused", report(small, ("passed", "sum 3 on all 2 ranks")))[0]  # a rank started
    assert check("shm", "passed", report(("passed", "/dev/shm 2 GiB for 2 local ranks"), ("passed", "sum 3")))[0]
    assert not check("shm", "passed", report(small, ("skipped", "not started: ...")))[0]


def test_labels_and_summary(tmp_path: Path) -> None:
    labels = gpu_device.labels("pytorch")
    assert labels["trainimg.framework"] == "pytorch" and labels["trainimg.recipe.cuda"] == "13.0"
    (tmp_path / "steps.tsv").write_text("a\tok\t3\tfine\nb\tFAIL\t4\twhy\n")
    passed, doc = gpu_device.summary(tmp_path)
    assert not passed and doc["seconds"] == 7.0 and [s["ok"] for s in doc["steps"]] == [True, False]
    assert gpu_device.main(["summary", str(tmp_path)]) == 1
    assert json.loads((tmp_path / "summary.json").read_text()) == doc


def test_the_script_dry_run_covers_the_whole_device_run(tmp_path: Path) -> None:
    proc = subprocess.run(["bash", str(REPO / "benchmarks/gpu_device.sh"), str(tmp_path / "out")],
                          env={"PATH": "/usr/bin:/bin", "DRY_RUN": "1"}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for p in PLATFORMS:
        assert f"selftest --platform {p} --nproc-per-node auto" in out and f"check platform-{p}: gate" in out
    for needed in ("gpu_selftest.sh", "selftest --cluster", "train_ddp.py", "--nproc-per-node 2 --framework pytorch",
                   "CUDA_VISIBLE_DEVICES=-1", "check misuse-selftest-jax: refused", "check allreduce-bench: bench",
                   "unshare -rm sh -c", "shm 64m", "shm 2g", "check shm-too-small: shm refused",
                   "check shm-enough: shm passed"):
        assert needed in out, needed
    assert (REPO / "benchmarks/results/2026-11-26-h100/platforms/train_ddp.py").is_file()


def test_shellcheck(host_tool: Callable[[str], str]) -> None:
    proc = subprocess.run([host_tool("shellcheck"), "benchmarks/gpu_device.sh", "benchmarks/gpu_selftest.sh"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout
