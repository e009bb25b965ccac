"""Shared fixtures. Engine tests need a running Docker engine and the local base image (.ci/setup-host makes
both); they are never skipped in CI."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from conftest_registry import *  # noqa: F401,F403  (the registry fixtures: registry, fault_proxy, ...)
from slurmcluster import slurm_cluster  # noqa: F401  (a real one-machine Slurm, session-scoped)

ROOT = Path(__file__).resolve().parent.parent
LOCAL_BASE = os.environ.get("TRAINIMG_LOCAL_BASE", "local/debian:bookworm")
CPU_VARIANT = "pytorch-2.13.0-cpu-py3.11"


@pytest.fixture(scope="session")
def docker_cli() -> str:
    return os.environ.get("TRAINIMG_DOCKER_CLI", "/usr/bin/docker")


@pytest.fixture(scope="session", autouse=True)
def _engine_env(docker_cli: str) -> None:
    os.environ.setdefault("TRAINIMG_DOCKER_CLI", docker_cli)


@pytest.fixture(scope="session")
def state_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment whose trainimg state (records, registry) lives in a temp folder."""
    env = dict(os.environ)
    env["TRAINIMG_STATE_DIR"] = str(tmp_path_factory.mktemp("state"))
    return env


def default_sigint() -> None:
    """`preexec_fn` for a child a test interrupts with SIGINT: Ctrl-C's default disposition, as a terminal gives.

    A suite started in the background (`cmd &` in a script, nohup) inherits SIGINT *ignored*, and an ignored signal
    stays ignored across exec: Python then installs no KeyboardInterrupt handler and the child never sees the
    test's Ctrl-C (the run hangs until the test's timeout)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def trainimg(*args: str, env: dict[str, str] | None = None, timeout: float = 1200,
             input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real CLI as a user would, from the repository root."""
    return subprocess.run(["trainimg", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
                          input=input)


@pytest.fixture(scope="session")
def cpu_image(state_env: dict[str, str]) -> str:
    """The CPU PyTorch variant built once per session on the local base, with the CA bundle and wheelhouse."""
    r = trainimg("build", CPU_VARIANT, "--base-image", LOCAL_BASE, "--progress", "plain", env=state_env)
    assert r.returncode == 0, r.stderr[-3000:]
    return "trainimg/pytorch:2.13.0-cpu-py3.11"


def remove_image(client: docker.DockerClient, ref: str) -> None:
    """Remove an image a test built (by tag or ID, forced), and its untagged parents; one already gone is fine."""
    try:
        client.api.remove_image(ref, force=True)
    except docker.errors.NotFound:
        pass


@pytest.fixture(scope="session")
def client() -> Iterator[docker.DockerClient]:
    """The docker SDK, for tests that look at what the CLI left in the engine."""
    c = docker.from_env(timeout=600)
    yield c
    c.close()


def cpu_recipe(name: str, repository: str, extras: str = "") -> str:
    """A test recipe: the shipped CPU PyTorch entry (recipes/pytorch.yaml) under another name and repository,
    so its builds hit the shipped variant's cached stages."""
    return f"""\
framework: pytorch
name: {name}
repository: {repository}
extras: [{extras}]
matrix:
  - version: ["2.13.0"]
    os: [debian12]
    python: ["3.11"]
"""
