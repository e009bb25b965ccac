"""The GPU images of every framework built here (no GPU, no NVIDIA/Google apt), their honest reports, and the
GPU code path.

Builds the shipped Python 3.11 GPU variant of each framework on the local Debian base, in one `trainimg build`:
`pytorch-2.14.1-cu130-py3.11` from this machine's local indexes, `tensorflow-2.21.0-cu125-py3.11`
(tensorflow[and-cuda]) and `jax-0.10.2-cu126-py3.11` (jax[cuda12]) through the pip proxy. Cold, the three take
about 15 minutes here (gigabytes of nvidia-* wheels); warm, BuildKit's cache makes it seconds. Each must then pass
`trainimg test --replicas 2` with the report the issue asks for, and its labels, `list --json` and the report must
state the versions read back from the image against the recipe's constraint (pin or range), and the driver the CUDA
it carries needs (its label and its NVIDIA_REQUIRE_CUDA, which replaces the base's).
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import docker
import pytest

from trainimg.imagebuild.builder import installed_versions
from trainimg.engine.docker import device_requests
from trainimg.runtime.expect import versions_from_labels
from trainimg.conformance.suite import expectations, gpu_device_requests, gpu_ready, judge_allreduce
from trainimg.runtime.versions import satisfies
from trainimg.recipe.drivers import REQUIRE_CUDA, floor_for, require_cuda
from trainimg.runtime.contract import DRIVER_MIN_LABEL
from trainimg.engine.docker import DockerEngine
from trainimg.conformance.replicas import ReplicaResult
from conftest import LOCAL_BASE, trainimg
from conftest_images import CUDA_TAG, CUDA_VARIANT, GPU_VARIANTS
from shipped import locked, pick


def _exists(client: docker.DockerClient, ref: str) -> bool:
    try:
        client.images.get(ref)
        return True
    except docker.errors.ImageNotFound:
        return False


def test_missing_component_fails_the_build_naming_it(image_matrix: list[str], gpu_images: dict[str, dict],
                                                      state_env: dict[str, str]) -> None:
    """Google's apt repository is unreachable here: without --allow-missing the build stops, saying which
    component and what to pass, and no tag points at a half-made image. (After `gpu_images`: the steps before the
    component's come from its cache, not a second cold build of the same gigabytes.)"""
    client = docker.from_env()
    before = client.images.get(CUDA_TAG).id if _exists(client, CUDA_TAG) else None
    r = trainimg("build", CUDA_VARIANT, "--base-image", LOCAL_BASE, *image_matrix, "--progress", "quiet",
                 env=state_env, timeout=1800)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "google-reduction-server" in lines[0] and "--allow-missing google-reduction-server" in lines[0]
    after = client.images.get(CUDA_TAG).id if _exists(client, CUDA_TAG) else None
    assert after == before  # the failed build tagged nothing


@pytest.mark.parametrize("variant", list(GPU_VARIANTS))
def test_gpu_image_passes_its_gate(gpu_images: dict[str, dict], state_env: dict[str, str], tmp_path: Path,
                                   variant: str) -> None:
    """The issue's report, per framework: a CUDA build, NCCL >= 2.7 through ctypes and in the recipe's range,
    cuDNN loading and in range, the reduction server absent (skipped, saying why), GPU checks skipped (no GPU),
    the CPU all-reduce passed, no duplicated CUDA library."""
    tag = gpu_images[variant]["tag"]
    report = tmp_path / "report.json"
    r = trainimg("test", tag, "--platform", "vertex", "--replicas", "2", "--json", str(report),
                 "--progress", "quiet", env=state_env, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    checks = {c["name"]: c for c in json.loads(report.read_text())["suites"][0]["checks"]}
    build, nccl_rule, cudnn_rule = GPU_VARIANTS[variant]
    image = docker.from_env().images.get(tag)
    installed = versions_from_labels(image.labels)
    # The driver it needs, for the CUDA it carries (read back), as its label and its NVIDIA_REQUIRE_CUDA state it.
    env = dict(item.partition("=")[::2] for item in image.attrs["Config"]["Env"])
    assert image.labels[DRIVER_MIN_LABEL] == floor_for(installed["cuda"]).driver
    assert env[REQUIRE_CUDA] == require_cuda(installed["cuda"]), env
    assert checks["image_env"]["status"] == "passed", checks["image_env"]
    assert checks["framework"]["status"] == "passed" and build in checks["framework"]["reason"], checks["framework"]
    assert checks["nccl"]["status"] == "passed", checks["nccl"]
    assert nccl_rule in checks["nccl"]["reason"] and ">= 2.7 for the Reduction Server" in checks["nccl"]["reason"]
    assert f"NCCL {installed['nccl']} (" in checks["nccl"]["reason"]
    assert checks["cudnn"]["status"] == "passed" and cudnn_rule in checks["cudnn"]["reason"], checks["cudnn"]
    assert f"cuDNN {'.'.join(installed['cudnn'].split('.')[:3])} (" in checks["cudnn"]["reason"]
    # Declared absent: reported as absent (skipped), never as passed.
    assert checks["reduction_server"]["status"] == "skipped"
    assert "absent" in checks["reduction_server"]["reason"]
    assert checks["allreduce_vertex_x2"]["status"] == "passed", checks["allreduce_vertex_x2"]
    for name in ("gpu", "allreduce_nccl_containers", "allreduce_nccl_single_container"):
        assert checks[name]["status"] == "skipped" and checks[name]["reason"] == "no GPU", checks[name]
    assert checks["duplicate_libs"]["status"] == "passed", checks["duplicate_libs"]["reason"]
    assert checks["duplicate_libs"]["details"]["wasted_bytes"] == 0


def test_labels_and_list_state_the_versions_read_back(gpu_images: dict[str, dict]) -> None:
    """Labels and `list --json` after the build say what the image holds, inside what the recipe asks for."""
    listed = {row["name"]: row for row in json.loads(trainimg("list", "--json").stdout)}
    for variant, build in gpu_images.items():
        labels = docker.from_env().images.get(build["tag"]).labels
        installed = versions_from_labels(labels)
        assert installed == installed_versions(build["manifest"]) == listed[variant]["installed"], variant
        for kind in ("nccl", "cudnn"):
            constraint = labels[f"trainimg.recipe.{kind}"]
            assert constraint == listed[variant]["versions"][kind]
            # cudnnGetVersion answers three parts of the wheel's four: compare three
            assert satisfies(installed[kind], constraint, 3 if kind == "cudnn" else None), (variant, kind)
        assert installed["cuda"] and installed["cuda"].split(".")[0] == labels["trainimg.recipe.cuda"].split(".")[0]


def test_absence_is_recorded_in_labels(cuda_image: str) -> None:
    labels = docker.from_env().images.get(cuda_image).labels
    assert labels["trainimg.absent"] == "google-reduction-server"
    cuda = pick("pytorch", gpu=True)  # the variant cuda_image is (tests/conftest_images.py)
    assert labels["trainimg.version.nccl"] == locked(cuda, "nvidia-nccl-")
    assert labels["trainimg.version.framework"] == locked(cuda, "torch")  # PyPI's CUDA wheel has no local tag
    assert expectations(labels)["reduction_server"] == "absent"


def test_duplicate_cuda_library_is_a_warning_with_its_size(cpu_image: str, state_env: dict[str, str],
                                                           tmp_path: Path) -> None:
    """An image built to contain the same soname twice (as a -cudnn- base under a pip framework would)."""
    client = docker.from_env()
    dockerfile = (f"FROM {cpu_image}\n"
                  "RUN head -c 1048576 /dev/urandom > /usr/local/lib/libcudnn.so.9 \\\n"
                  " && mkdir -p /opt/venv/lib/nvidia && cp /usr/local/lib/libcudnn.so.9 /opt/venv/lib/nvidia/\n")
    image, _ = client.images.build(fileobj=io.BytesIO(dockerfile.encode()), labels={"trainimg.test": "1"}, rm=True)
    try:
        report = tmp_path / "dup.json"
        r = trainimg("test", image.id, "--replicas", "1", "--json", str(report), "--progress", "quiet",
                     env=state_env, timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]  # a warning does not fail the image
        check = next(c for c in json.loads(report.read_text())["suites"][0]["checks"]
                     if c["name"] == "duplicate_libs")
        assert check["status"] == "warning", check
        dup = check["details"]["duplicates"]["libcudnn.so.9"]
        assert sorted(c["path"] for c in dup["copies"]) == ["/opt/venv/lib/nvidia/libcudnn.so.9",
                                                            "/usr/local/lib/libcudnn.so.9"]
        assert dup["wasted"] == 1048576
    finally:
        client.images.remove(image.id, force=True)


def test_gpu_path_command_construction() -> None:
    """One container per GPU: `--gpus device=<i>` as the engine API spells it."""
    req = device_requests(gpu_device_requests(3))[0]
    assert req["DeviceIDs"] == ["3"] and req["Capabilities"] == [["gpu"]] and req["Driver"] == ""


def test_gpu_ready_says_why_not_here(docker_engine: str) -> None:
    n, reason = gpu_ready(DockerEngine())
    if os.path.exists("/dev/nvidia0"):
        pytest.skip("this machine has a GPU: the 'no GPU' reason does not apply")
    assert (n, reason) == (0, "no GPU")


def test_judge_nccl_results_per_rank() -> None:
    """The NCCL path's result parsing: every rank must report the exact sum (busbw is reported, not judged)."""
    ok = [ReplicaResult(f"worker-{i}", "worker", i, 0, json.dumps(
        {"framework": "pytorch", "backend": "nccl", "rank": i, "world_size": 2, "expected": 3, "got": 3,
         "ok": True}) + "\n") for i in range(2)]
    assert judge_allreduce("x", ok, 2, 1.0).status == "passed"
    bad = ok[:1] + [ReplicaResult("worker-1", "worker", 1, 1, json.dumps(
        {"framework": "pytorch", "backend": "nccl", "rank": 1, "world_size": 2, "expected": 3, "got": 4,
         "ok": False}) + "\n")]
    verdict = judge_allreduce("x", bad, 2, 1.0)
    assert verdict.status == "failed" and "worker-1 got [4], expected 3" in verdict.reason
