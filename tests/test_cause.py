"""A failed check says its cause (`runtime.cause`): the first line naming the error, read through the wrappers.

The GPU cases are the real logs of the first device run (benchmarks/results/2026-11-26-h100/one-gpu-misuse: two
processes on one H100, PyTorch and JAX), judged the way selftest judged them; the CPU cases are failures made
here for real: a torchrun child raising under the launcher, a JAX process given a bad coordinator.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from venvs import venv
from trainimg.runtime.cause import ERRORS, WRAPPERS, classify, first_cause, reason
from trainimg.runtime.verdict import judge_allreduce

REPO = Path(__file__).resolve().parents[1]
MISUSE = REPO / "benchmarks" / "results" / "2026-11-26-h100" / "one-gpu-misuse"


@dataclass(frozen=True)
class Run:
    """One emulated replica as `verdict.judge_allreduce` reads it (selftest's LocalRun)."""

    name: str
    role: str
    exit_code: int | None
    timed_out: bool
    logs: str


def replica_log(path: Path, name: str = "chief-0") -> str:
    """What the replica's launcher printed: selftest relays it to its stderr as "  [chief-0] LINE"."""
    prefix = f"  [{name}] "
    return "\n".join(line[len(prefix):] for line in path.read_text().splitlines() if line.startswith(prefix))


@pytest.mark.parametrize(("log", "exit_code", "cause", "old_reason"), [
    ("pytorch-nproc2.log", 1, "torch.AcceleratorError: CUDA error: invalid device ordinal",
     "chief-0 exited 1: ============================================================"),
    ("jax-nproc2.log", 2, "E1126 11:12:19.176951 1904 cuda_executor.cc:1365] [0] Failed to allocate device memory of "
     "59.38GiB (63763906560 bytes): RESOURCE_EXHAUSTED: : CUDA_ERROR_OUT_OF_MEMORY: out of memory",
     "chief-0 exited 2: external/xla+/xla/tsl/distributed_runtime/rpc/grpc_util.h:89"),
])
def test_the_device_runs_failures_name_their_cause(log: str, exit_code: int, cause: str, old_reason: str) -> None:
    logs = replica_log(MISUSE / log)
    verdict = judge_allreduce("allreduce_nccl_vertex_x1x2", [Run("chief-0", "chief", exit_code, False, logs)], 2, 9.8)
    assert verdict.status == "failed"
    assert verdict.reason == f"chief-0 exited {exit_code}: {cause}"
    assert verdict.details["replicas"]["chief-0"]["cause"] == cause
    # What the device run's report said instead: the wrapper's last line (the recorded JSON report holds it).
    recorded = (MISUSE / log.replace(".log", ".json")).read_text()
    assert old_reason in recorded and logs.splitlines()[-1].strip() in old_reason


# One real line per ERRORS kind and per WRAPPERS pattern (from the device run's logs and the frameworks' sources):
# the table's test is generated from the table, so an entry without a sample fails here.
ERROR_SAMPLES = {
    "cuda": "torch.AcceleratorError: CUDA error: invalid device ordinal",
    "oom": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB",
    "nccl": "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, invalid usage",
    "log": "E1126 11:12:21.494741    1904 gpu_cliques.cc:454] Failed to initialize GPU clique devices=2:[0,1]",
    "exception": "ModuleNotFoundError: No module named 'hypertune'",
    "trainimg": "allreduce (pytorch): setup error: backend nccl asked for but torch sees no CUDA device",
}
WRAPPER_SAMPLES = [
    "============================================================",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    "Root Cause (first observed failure):",
    "exitcode  : 1 (pid: 1762)",
    "W1126 11:11:40.153000 1739 torch/distributed/elastic/multiprocessing/api.py:1012] Sending process 1761 "
    "closing signal SIGTERM",
    "E1126 11:11:40.157000 1739 torch/distributed/elastic/multiprocessing/api.py:986] failed (exitcode: 1) "
    "local_rank: 1 (pid: 1762) of binary: /opt/torch/.venv/bin/python3",
    'File "/opt/torch/.venv/lib/python3.12/site-packages/torch/cuda/__init__.py", line 638, in set_device',
    "=== Source Location Trace: ===",
    "external/xla+/xla/tsl/distributed_runtime/rpc/grpc_util.h:89",
]


@pytest.mark.parametrize(("kind", "pattern"), ERRORS)
def test_every_error_pattern_has_a_real_sample(kind: str, pattern: re.Pattern[str]) -> None:
    sample = ERROR_SAMPLES[kind]
    assert pattern.search(sample) and classify(sample) == kind
    # Found after lines that name nothing and before wrappers, prefixed as runners prefix them.
    text = f"starting\n[rank1]: {sample}\n{'=' * 60}\nexitcode  : 1 (pid: 7)\n"
    assert first_cause(text) == " ".join(sample.split())  # spaces collapsed


@pytest.mark.parametrize("pattern", WRAPPERS)
def test_every_wrapper_pattern_has_a_real_sample(pattern: re.Pattern[str]) -> None:
    samples = [s for s in WRAPPER_SAMPLES if pattern.search(s)]
    assert samples
    for sample in samples:
        assert first_cause(f"the last plain line\n{sample}\n") == "the last plain line"


def test_no_error_line_falls_back_to_the_last_plain_line() -> None:
    assert first_cause("") is None and reason("") == "no output"
    assert first_cause('one\ntwo\n{"ok": false}\n' + "=" * 60) == "two"
    assert reason("x" * 400, limit=50) == "x" * 47 + "..."


def runtime_copy(tmp_path: Path) -> Path:
    root = tmp_path / "rt"
    shutil.copytree(REPO / "builder" / "runtime", root / "trainimg_runtime",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_a_torchrun_child_raising_on_cpu(tmp_path: Path) -> None:
    """Two processes via torchrun under the launcher; rank 1 raises. torchrun's summary ends the log."""
    python = venv("torch")
    script = "import os\nif os.environ['RANK'] == '1':\n    raise ValueError('rank 1 cannot read its shard')\n"
    proc = subprocess.run([python, "-m", "trainimg_runtime", "launch", "--nproc-per-node", "2", "--framework",
                           "pytorch", "--", python, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(runtime_copy(tmp_path))}, timeout=180)
    logs = proc.stdout + proc.stderr
    assert proc.returncode == 1, logs
    assert "ChildFailedError" in logs and logs.strip().splitlines()[-1].startswith("=====")
    verdict = judge_allreduce("x", [Run("chief-0", "chief", proc.returncode, False, logs)], 2, 1.0)
    assert verdict.reason == "chief-0 exited 1: ValueError: rank 1 cannot read its shard"


def test_a_jax_process_that_cannot_start_on_cpu(tmp_path: Path) -> None:
    """The all-reduce worker of JAX with a coordinator address that is not one: its setup error is the cause."""
    python = venv("jax")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(runtime_copy(tmp_path)), "JAX_PLATFORMS": "cpu",
           "JAX_COORDINATOR_ADDRESS": "127.0.0.1:not-a-port", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "x"}
    proc = subprocess.run([python, "-m", "trainimg_runtime", "allreduce", "--framework", "jax", "--timeout", "20"],
                          cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2
    verdict = judge_allreduce("x", [Run("chief-0", "chief", 2, False, proc.stdout + proc.stderr)], 2, 1.0)
    assert verdict.reason == "chief-0 exited 2: allreduce (jax): setup error: JAX_PROCESS_ID='x' is not an integer"
