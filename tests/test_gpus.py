"""One GPU count, CUDA's (`runtime.gpus`), and the one rule that refuses more NCCL processes than GPUs.

No machine here has a GPU, so `nvidia-smi` is a script on PATH printing what the real one printed on the H100 of
the first device run (benchmarks/results/2026-11-26-h100: ``nvidia-smi -L``), with a second GPU added in the
same format for the two-GPU cases. `CUDA_VISIBLE_DEVICES` then drives the count by CUDA's documented rules
(CUDA C Programming Guide, CUDA Environment Variables): the launcher, selftest, the probe's `gpu` check and the
host's conformance all take it from `gpus.gpu_view`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memory_engine import MemoryEngine
from trainimg.conformance.suite import refuse_too_many_processes
from trainimg.engine.docker import DockerEngine
from trainimg.errors import UserInputError
from trainimg.runtime import probe
from trainimg.runtime.gpus import gpu_view, too_many_processes, visible_gpus

REPO = Path(__file__).resolve().parents[1]
RUN = REPO / "benchmarks" / "results" / "2026-11-26-h100"
# The H100's line, as `nvidia-smi -L` printed it in the device run (gpu_selftest.out), and a second in its format.
H100 = (RUN / "gpu_selftest.out").read_text().splitlines()[1]
SECOND = "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-5f0c7d21-0000-1111-2222-333344445555)"

# CUDA_VISIBLE_DEVICES (None: unset) -> GPUs CUDA enumerates on a machine whose nvidia-smi lists two.
TWO_GPU_CASES = [
    (None, 2),
    ("", 0),  # set and empty: none
    ("-1", 0),  # a negative index ends the list at once
    ("0", 1),
    ("0,1", 2),
    ("1,0", 2),  # enumerated in the order given
    ("GPU-a2314e0e", 1),  # a unique UUID prefix
    ("GPU-a2314e0e-85ce-fa06-8894-88fb8ffea0d4,1", 2),
    ("GPU-ffff", 0),  # a UUID no GPU has is invalid
    ("1,0,5", 2),  # CUDA stops at the first invalid ordinal: 5 is past the last GPU
    ("0,2,-1,1", 1),  # the guide's example: 2 is invalid here, so only 0
    ("0,0", 0),  # a repeated device invalidates the whole list
    ("NoDevFiles", 0),
]


def fake_smi(folder: Path, *lines: str) -> Path:
    """A folder holding an `nvidia-smi` whose `-L` prints `lines` (the real command's output format)."""
    folder.mkdir(parents=True, exist_ok=True)
    smi = folder / "nvidia-smi"
    body = "".join(f"echo '{line}'\n" for line in lines)
    smi.write_text(f'#!/bin/sh\n[ "$1" = "-L" ] || exit 9\n{body}')
    smi.chmod(0o755)
    return folder


@pytest.mark.parametrize(("setting", "visible"), TWO_GPU_CASES)
def test_cuda_visible_devices_on_two_gpus(tmp_path: Path, setting: str | None, visible: int) -> None:
    env = {"PATH": str(fake_smi(tmp_path, H100, SECOND))}
    if setting is not None:
        env["CUDA_VISIBLE_DEVICES"] = setting
    view = gpu_view(env)
    assert (len(view.listed or []), view.visible) == (2, visible)
    assert view.hidden == 2 - visible
    assert visible_gpus(env) == max(visible, 1)  # `auto` starts at least one process
    if visible < 2:
        assert f"{visible} visible of 2 listed by nvidia-smi" in view.describe()


def test_without_nvidia_smi_the_entries_count() -> None:
    """No listing to check indices against (a container without nvidia-smi): the entries CUDA would try."""
    for setting, visible in (("0,1,2", 3), ("GPU-aaaa,GPU-bbbb", 2), ("", 0), ("-1", 0), ("0,-1,2", 1), ("3", 1)):
        assert gpu_view({"CUDA_VISIBLE_DEVICES": setting, "PATH": ""}).visible == visible
    assert gpu_view({"PATH": ""}).visible == 0 and gpu_view({"PATH": ""}).listed is None


@pytest.mark.parametrize(("setting", "status", "reason"), [
    (None, "passed", "1 GPU(s): GPU 0: NVIDIA H100 80GB HBM3"),
    ("0", "passed", "1 GPU(s): GPU 0: NVIDIA H100 80GB HBM3"),
    # The device run's case: nvidia-smi lists the H100, CUDA sees none; `gpu` must not say "passed, 1 GPU(s)".
    ("-1", "warning", "0 GPU(s) visible of 1 listed by nvidia-smi: CUDA_VISIBLE_DEVICES='-1' hides them"),
    ("", "warning", "0 GPU(s) visible of 1 listed by nvidia-smi: CUDA_VISIBLE_DEVICES='' hides them"),
])
def test_probe_gpu_check_counts_what_cuda_sees(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               setting: str | None, status: str, reason: str) -> None:
    monkeypatch.setenv("PATH", f"{fake_smi(tmp_path, H100)}{os.pathsep}{os.environ['PATH']}")
    if setting is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", setting)
    [check] = probe.run_checks({}, {"gpu"})
    assert (check["status"], check["reason"].split(";")[0]) == (status, reason)
    assert check["details"]["listed"] == 1 and check["details"]["count"] == (0 if status == "warning" else 1)


# processes, GPUs, backend -> refused?
RULE_CASES = [(n, g, b) for n in (1, 2, 8) for g in (0, 1, 2, 8) for b in ("nccl", "gloo")]


@pytest.mark.parametrize(("nproc", "gpus", "backend"), RULE_CASES)
def test_too_many_processes_rule(nproc: int, gpus: int, backend: str) -> None:
    refused = too_many_processes(nproc, gpus, backend)
    assert (refused is not None) == (backend == "nccl" and nproc > gpus)
    if refused:
        assert "\n" not in refused and f"--nproc-per-node {nproc}:" in refused and f"has {gpus} GPU(s)" in refused


def runtime_env(path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "CLUSTER_SPEC", "TF_CONFIG")}
    env.update(PATH=f"{path}{os.pathsep}{os.environ['PATH']}", PYTHONPATH=str(REPO), **extra)
    return env


def test_launch_refuses_more_processes_than_gpus_before_starting_any(tmp_path: Path) -> None:
    smi = fake_smi(tmp_path / "bin", H100)
    marker = tmp_path / "started"
    cmd = [sys.executable, "-m", "trainimg.runtime", "launch"]
    touch = ["--", sys.executable, "-c", f"open({str(marker)!r}, 'a').write('x')"]
    for framework in ("pytorch", "jax"):
        proc = subprocess.run([*cmd, "--nproc-per-node", "2", "--framework", framework, *touch],
                              env=runtime_env(smi), capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and not marker.exists()
        assert proc.stderr == ("trainimg-launch: --nproc-per-node 2: this node has 1 GPU(s) and NCCL needs one GPU "
                               "per process; use --nproc-per-node auto (or at most 1), or hide the GPUs "
                               "(CUDA_VISIBLE_DEVICES=) to run on CPU over gloo\n")
    # auto is the visible count; hidden GPUs mean gloo on CPU, where any count runs.
    for args, env, started in ((["--nproc-per-node", "auto"], {}, 1), (["--nproc-per-node", "2"],
                                                                        {"CUDA_VISIBLE_DEVICES": ""}, 2)):
        marker.unlink(missing_ok=True)
        proc = subprocess.run([*cmd, *args, "--framework", "jax", *touch], env=runtime_env(smi, **env),
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert marker.read_text() == "x" * started


def test_selftest_refuses_before_any_check(tmp_path: Path) -> None:
    smi = fake_smi(tmp_path / "bin", H100)
    labels = RUN / "selftest" / "labels-pytorch.json"
    report = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "trainimg.runtime", "selftest", "--nproc-per-node", "2",
                           "--labels", str(labels), "--json", str(report)],
                          env=runtime_env(smi), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and not report.exists()
    assert proc.stderr.splitlines() == [
        "trainimg-runtime selftest: --nproc-per-node 2: this machine has 1 GPU(s) and NCCL needs one GPU per "
        "process; use --nproc-per-node auto (or at most 1), or hide the GPUs (CUDA_VISIBLE_DEVICES=) to run on "
        "CPU over gloo"]
    assert json.loads(labels.read_text())["trainimg.framework"] == "pytorch"


class GpuEngine(MemoryEngine):
    """An engine with the NVIDIA runtime: none can be staged here, the memory engine stands in for it."""

    def gpu_runtime(self) -> bool:
        return True


def test_host_refusal_takes_the_engines_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{fake_smi(tmp_path, H100, SECOND)}{os.pathsep}{os.environ['PATH']}")
    engine = GpuEngine()
    refuse_too_many_processes(engine, True, 2)
    refuse_too_many_processes(engine, False, 3)  # a CPU variant runs gloo
    with pytest.raises(UserInputError) as err:
        refuse_too_many_processes(engine, True, 3)
    assert str(err.value).startswith("--nproc-per-node 3: this engine's machine has 2 GPU(s)")


def test_an_engine_without_gpu_support_never_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      docker_engine: str) -> None:
    """This machine's real engine has no NVIDIA runtime: its containers get no GPU, so gloo, whatever nvidia-smi
    says."""
    monkeypatch.setenv("PATH", f"{fake_smi(tmp_path, H100, SECOND)}{os.pathsep}{os.environ['PATH']}")
    refuse_too_many_processes(DockerEngine(), True, 3)


def test_a_platforms_own_count_is_held_to_the_same_rule(tmp_path: Path) -> None:
    """A TrainJob asking for 4 processes per node (PET_NPROC_PER_NODE) on a node whose CUDA sees 2 GPUs."""
    env = runtime_env(fake_smi(tmp_path / "bin", H100, SECOND), PET_NPROC_PER_NODE="4", PET_NNODES="1",
                      PET_NODE_RANK="0", PET_MASTER_ADDR="127.0.0.1", PET_MASTER_PORT="29500")
    proc = subprocess.run([sys.executable, "-m", "trainimg.runtime", "launch", "--framework", "jax", "--", "true"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.startswith("trainimg-launch: trainjob's processes per node 4: this node has 2 GPU(s) and "
                                  "NCCL needs one GPU per process; run at most 2 per node"), proc.stderr


def test_trainimg_test_and_run_refuse_before_any_container(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CUDA image on an engine with 2 GPUs: `--nproc-per-node 3` is refused before a container starts."""
    from trainimg.conformance.suite import Conformance
    from trainimg.engine.base import ImageInfo
    from trainimg.jobs.run import run_job
    from trainimg.options import JobOptions, TestOptions

    monkeypatch.setenv("PATH", f"{fake_smi(tmp_path, H100, SECOND)}{os.pathsep}{os.environ['PATH']}")
    labels = json.loads((RUN / "selftest" / "labels-pytorch.json").read_text())
    engine = GpuEngine(images={"img": ImageInfo("sha256:1", labels)})
    with pytest.raises(UserInputError, match=r"^--nproc-per-node 3: this engine's machine has 2 GPU\(s\)"):
        Conformance(engine).run("img", TestOptions(platform="vertex", replicas=1, nproc_per_node=3))
    with pytest.raises(UserInputError, match=r"^--nproc-per-node 3: this engine's machine has 2 GPU\(s\)"):
        run_job(engine, "img", JobOptions(command=("true",), platform="vertex", nproc_per_node=3),
                state=tmp_path / "state")
    assert engine.started == []
