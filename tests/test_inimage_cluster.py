"""The runtime inside a real image: `python -m trainimg_runtime cluster` refuses malformed values with exit 2 and one
line (no traceback), and `trainimg-launch` finds the framework in the image's manifest without ``--framework``.
The image is the session's CPU PyTorch build (`cpu_image`), rebuilt from this checkout's runtime."""

from __future__ import annotations

import json

import docker
import pytest

DEEP = "[" * 50_000 + "]" * 50_000
SHELL_HOST = json.dumps({"cluster": {"chief": ["$(rm -rf /):1"]}, "task": {"type": "chief", "index": 0}})


def run(client: docker.DockerClient, image: str, command: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    container = client.containers.run(image, command, environment=env, detach=True, network_mode="none")
    try:
        code = container.wait(timeout=120)["StatusCode"]
        return (code, container.logs(stdout=True, stderr=False).decode(),
                container.logs(stdout=False, stderr=True).decode())
    finally:
        container.remove(force=True)


@pytest.mark.parametrize("value", [DEEP, SHELL_HOST], ids=["deep", "shell-host"])
def test_in_image_cluster_refuses_in_one_line(cpu_image: str, client: docker.DockerClient, value: str) -> None:
    code, out, err = run(client, cpu_image, ["python", "-m", "trainimg_runtime", "cluster", "--json"],
                         {"CLUSTER_SPEC": value})
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith("trainimg: CLUSTER_SPEC: ") and "Traceback" not in err


def test_in_image_launcher_reads_the_framework_from_the_manifest(cpu_image: str, client: docker.DockerClient) -> None:
    spec = json.dumps({"cluster": {"workerpool0": ["127.0.0.1:29500"]}, "task": {"type": "workerpool0", "index": 0}})
    code, out, err = run(client, cpu_image, ["trainimg-launch", "--nproc-per-node", "2", "--", "python", "-c",
                                             "import os; print(os.environ['RANK'], os.environ['WORLD_SIZE'])"],
                         {"CLUSTER_SPEC": spec})
    assert code == 0, err
    assert "via torchrun" in err  # the manifest says pytorch: torchrun starts the two processes
    assert sorted(out.split("\n")[:-1]) == ["0 2", "1 2"]
