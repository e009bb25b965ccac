"""The ephemeral CI runner as a fixture: this engine as a runner that starts empty sees it.

Import it from tests/conftest.py with `from conftest_runner import *  # noqa: F401,F403`.

A hosted CI job starts on a machine whose engine holds no image of the last release, no conformance record and no
registry login; it has the repository (recipes, lockfile) and the base image. `ephemeral_runner(repositories, env)`
makes that true for the repositories a test released: every local tag in them (plain and registry-qualified) is
removed, and the environment it returns has a fresh state folder (no pass record), a fresh docker config (no login)
and the engine reached through tests/enginerecorder.py, so a test can say what a command asked the engine for.

The build cache stays: this engine is shared by the whole suite (its warm GPU chains keep the run short), and a
release with nothing to do builds nothing. What a cold cache costs an ephemeral runner is measured by the bench
(`ci_rebuild_ratio`), not here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
import pytest
from enginerecorder import EngineRecorder

__all__ = ["EphemeralRunner", "ephemeral_runner"]


@dataclass(frozen=True)
class EphemeralRunner:
    """The environment a command on the emptied runner gets, and the recorder of its engine requests."""

    env: dict[str, str]
    recorder: EngineRecorder
    removed: tuple[str, ...]  # the local tags taken away


def _repository(tag: str) -> str:
    """The repository of a local tag, without a registry host (`127.0.0.1:5000/a/b:t` -> `a/b`)."""
    name = tag.rpartition(":")[0]
    first, slash, rest = name.partition("/")
    return rest if slash and ("." in first or ":" in first or first == "localhost") else name


@pytest.fixture
def ephemeral_runner(client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
                     ) -> Iterator[Callable[[Iterable[str], Mapping[str, str]], EphemeralRunner]]:
    """`ephemeral_runner(repositories, env)`: empty the engine of `repositories` and return the runner's env."""
    recorders: list[EngineRecorder] = []

    def empty(repositories: Iterable[str], env: Mapping[str, str]) -> EphemeralRunner:
        wanted = set(repositories)
        removed = []
        for image in client.api.images():  # one listing call: inspecting each image races other removals
            for tag in image.get("RepoTags") or []:
                if _repository(tag) in wanted:
                    try:
                        client.api.remove_image(tag, force=True)
                    except docker.errors.NotFound:
                        pass
                    removed.append(tag)
        folder = tmp_path_factory.mktemp("runner")
        recorder = EngineRecorder(Path(folder))
        recorders.append(recorder)
        (folder / "state").mkdir()
        (folder / "docker-config").mkdir()
        runner_env = {**env, "TRAINIMG_STATE_DIR": str(folder / "state"),
                      "DOCKER_CONFIG": str(folder / "docker-config"), "DOCKER_HOST": recorder.docker_host}
        return EphemeralRunner(runner_env, recorder, tuple(sorted(removed)))

    yield empty
    for recorder in recorders:
        recorder.stop()
