"""Every framework's image proven on every platform's env, and one process per GPU mapped from node-level env.

TensorFlow (MultiWorkerMirroredStrategy from the TF_CONFIG each platform injects; UAI's master renamed chief by
the launcher; a ps on every UAI node that starts a server and waits) and JAX (`jax.distributed.initialize` from
the launcher's coordinator env) each run their own collective across 3 containers; the exact sum is checked on
every replica. The CPU images are the shipped Debian 13 (trixie) / Python 3.13 variants of TensorFlow and JAX
(tests/conftest_images.py FRAMEWORK_IMAGES, chosen by their facts), their wheels from PyPI through uv's cache.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import trainimg


def _checks(report: Path) -> dict[str, dict]:
    return {c["name"]: c for c in json.loads(report.read_text())["suites"][0]["checks"]}


@pytest.mark.parametrize("platform", ["vertex", "aiplatform", "uai"])
@pytest.mark.parametrize("framework", ["tensorflow", "jax"])
def test_framework_collective_on_each_platform(pinned_framework_images: dict[str, str], framework: str, platform: str,
                                               state_env: dict[str, str], tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    r = trainimg("test", pinned_framework_images[framework], "--platform", platform, "--replicas", "3",
                 "--json", str(report), "--progress", "quiet", env=state_env, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    checks = _checks(report)
    assert checks["framework"]["status"] == "passed"
    allreduce = checks[f"allreduce_{platform}_x3"]
    assert allreduce["status"] == "passed" and allreduce["reason"] == "sum 6 on all 3 ranks"
    results = [line for rep in allreduce["details"]["replicas"].values() for line in rep["results"]
               if line.get("rank") is not None and line.get("framework") == framework]
    assert sorted(line["rank"] for line in results) == [0, 1, 2]
    assert all(line["got"] == 6 for line in results)


@pytest.mark.parametrize("platform", ["vertex", "aiplatform", "uai"])
def test_two_processes_per_node_pytorch(pinned_cpu_image: str, platform: str, state_env: dict[str, str],
                                        tmp_path: Path) -> None:
    """2 replicas x 2 processes through torchrun: a gloo world of 4 from each platform's node-level env."""
    report = tmp_path / "r.json"
    r = trainimg("test", pinned_cpu_image, "--platform", platform, "--replicas", "2", "--nproc-per-node", "2",
                 "--json", str(report), "--progress", "quiet", env=state_env, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    check = _checks(report)[f"allreduce_{platform}_x2x2"]
    assert check["status"] == "passed" and check["reason"] == "sum 10 on all 4 ranks"


def test_two_processes_per_node_jax(pinned_framework_images: dict[str, str], state_env: dict[str, str],
                                   tmp_path: Path) -> None:
    """JAX: process id = node rank x 2 + local rank, process count 4, started by the launcher itself."""
    report = tmp_path / "r.json"
    r = trainimg("test", pinned_framework_images["jax"], "--platform", "vertex", "--replicas", "2", "--nproc-per-node",
                 "2", "--json", str(report), "--progress", "quiet", env=state_env, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _checks(report)["allreduce_vertex_x2x2"]["reason"] == "sum 10 on all 4 ranks"


def test_tensorflow_keeps_one_worker_per_replica(pinned_framework_images: dict[str, str], state_env: dict[str, str],
                                                 tmp_path: Path) -> None:
    """MultiWorkerMirroredStrategy takes all local GPUs in one worker: --nproc-per-node 2 still starts one."""
    report = tmp_path / "r.json"
    r = trainimg("test", pinned_framework_images["tensorflow"], "--platform", "vertex", "--replicas", "2",
                 "--nproc-per-node", "2", "--json", str(report), "--progress", "quiet", env=state_env, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _checks(report)["allreduce_vertex_x2x2"]["reason"] == "sum 3 on all 2 ranks"
