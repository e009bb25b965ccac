"""What a node does to an image, caught by the real gate on the real engine (the CPU image, two local ranks):

* `trainimg test` fails a team's image built ``FROM`` trainimg's whose config sets ``NCCL_SOCKET_IFNAME``, naming
  it, and, given a node's 64 MiB of ``/dev/shm`` to replay (``--shm-size 64m``, Docker's own default), fails the
  ``shm`` check with the cause and the platform's way to set it, while the all-reduce itself still runs (gloo needs
  no shared memory: NCCL and DataLoader workers do);
* in the image, ``selftest --nproc-per-node 2`` in a container with 64 MiB of ``/dev/shm`` starts no rank: the
  ``shm`` check fails with the cause and the all-reduce is reported not started (exit 1).

The sizes the gate gives by default on every platform are held by tests/test_gate_platforms.py's runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from brokenimages import TestImages
from conftest import trainimg

from trainimg.engine.base import ContainerSpec
from trainimg.engine.docker import DockerEngine
from trainimg.runtime.shm import MIB

SMALL = 64 * MIB  # Docker's and containerd's /dev/shm unless told otherwise


@pytest.fixture(scope="module")
def images(client: docker.DockerClient, pinned_cpu_image: str) -> Iterator[TestImages]:
    made = TestImages(client, pinned_cpu_image)
    yield made
    made.remove_all()


def test_the_gate_names_a_node_variable_and_a_shm_too_small(images: TestImages, state_env: dict[str, str],
                                                             tmp_path: Path) -> None:
    image = images.build("node-env", ["ENV NCCL_SOCKET_IFNAME=eth0"])
    report = tmp_path / "r.json"
    r = trainimg("test", image, "--platform", "pytorchjob", "--replicas", "1", "--nproc-per-node", "2",
                 "--shm-size", "64m", "--json", str(report), "--progress", "quiet", env=state_env, timeout=600)
    assert r.returncode == 1, r.stderr[-3000:]
    checks = {c["name"]: c for c in json.loads(report.read_text())["suites"][0]["checks"]}
    env, shm = checks["image_env"], checks["shm"]
    assert env["status"] == "failed" and env["reason"].startswith("the image's config sets NCCL_SOCKET_IFNAME=eth0")
    assert shm["status"] == "failed", shm
    assert shm["reason"].startswith("/dev/shm is 64 MiB; 2 local ranks need at least 1 GiB (NCCL: --shm-size=1g "
                                    "--ulimit memlock=-1); on pytorchjob: an emptyDir of medium: Memory"), shm
    assert shm["details"]["bytes"] == SMALL
    assert checks["allreduce_pytorchjob_x1x2"]["status"] == "passed"
    assert "image_env, " in r.stderr and "shm" in r.stderr.splitlines()[-1], r.stderr[-500:]


def test_selftest_starts_no_rank_with_too_little_shm(pinned_cpu_image: str) -> None:
    script = ("trainimg-runtime selftest --platform vertex --nproc-per-node 2 --json /tmp/r.json; "
              "echo \"exit $?\"; cat /tmp/r.json")
    out = DockerEngine().run_command(ContainerSpec(image=pinned_cpu_image, command=("sh", "-c", script), shm_size=SMALL),
                                     timeout=300)
    head, _, report = out.stdout.partition("\n")
    assert head == "exit 1", out.stdout + out.stderr[-2000:]
    checks = {c["name"]: c for c in json.loads(report)["suites"][0]["checks"]}
    assert checks["shm"]["status"] == "failed" and "/dev/shm is 64 MiB; 2 local ranks" in checks["shm"]["reason"]
    assert "vertex gives a job no way to set it" in checks["shm"]["reason"]
    [allreduce] = [c for name, c in checks.items() if name.startswith("allreduce_")]
    assert allreduce["status"] == "skipped" and allreduce["reason"].startswith("not started: /dev/shm is 64 MiB")
