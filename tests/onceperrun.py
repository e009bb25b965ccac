"""The suite's images, built once per run whichever pytest-xdist worker asks first, and pinned by a name no test moves.

Why: `make test` runs the engine tests in two lanes, one xdist worker each (tests/conftest.py): the first rebuilds
shipped variants among other things; the second (RUNS_BESIDE) builds only under its own names. A session fixture
is per worker, so both would build the CPU image; and a cached `trainimg build` stores a new image (its labelling
pass) and moves the variant's tag, under the other lane's running tests. So the first
worker to ask builds, holding a lock in the run's shared temp folder, and writes the build's rows there; the other
waits on the lock and reads them. Each built image is also tagged `trainimg-test/pinned:<variant>`: when a test
of the building lane rebuilds the variant and its tag moves, trainimg removes the image the tag moved from only if
nothing else names it (builder/imagebuild/litter.py), so the pinned image stays for the second lane's containers.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import pytest

from trainimg.recipe.arches import arch_key, split_key

PIN_REPOSITORY = "trainimg-test/pinned"


def run_folder(factory: pytest.TempPathFactory) -> Path:
    """The folder every worker of this run shares (xdist gives each worker its own under it)."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once_per_run(factory: pytest.TempPathFactory, key: str, make: Callable[[], Any]) -> Any:
    """`make()`'s JSON value, made by the first worker to ask for `key` in this run; the others wait and read it.
    A `make` that fails writes nothing: the next worker to ask makes it again (and fails the same way, named)."""
    folder = run_folder(factory)
    with open(folder / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = folder / f"{key}.json"
        if done.exists():
            return json.loads(done.read_text())
        value = make()
        done.write_text(json.dumps(value))
        return value


def pinned_tag(key: str) -> str:
    """The name that holds a variant's image (`key`: its name, `@arch` off amd64) for this run."""
    variant, arch = split_key(key)
    return f"{PIN_REPOSITORY}:{variant}-{arch}"


def pin(image_id: str, key: str) -> str:
    """Tag `image_id` as `pinned_tag(key)`; the image the pin held before goes when nothing else names or uses it
    (the previous run's, which no later build reuses). Returns the pinned name."""
    tag = pinned_tag(key)
    client = docker.from_env(timeout=600)
    try:
        try:
            before = client.images.get(tag).id
        except docker.errors.ImageNotFound:
            before = None
        client.images.get(image_id).tag(tag)
        if before not in (None, image_id):
            try:
                if not client.images.get(before).tags:
                    client.api.remove_image(before, force=False)
            except (docker.errors.ImageNotFound, docker.errors.APIError):
                pass  # already gone, or a container or another image uses it: kept, as `docker rmi` keeps it
        return tag
    finally:
        client.close()


def built_once(factory: pytest.TempPathFactory, key: str, args: list[str], env: dict[str, str],
               timeout: float) -> dict[str, dict[str, Any]]:
    """`trainimg build ARGS --json`, once per run (`once_per_run`), each image pinned: variant key -> its build
    row, with `pinned` (the name that holds it) added."""
    from conftest import trainimg

    def build() -> dict[str, dict[str, Any]]:
        report = factory.mktemp(f"build-{key}") / "build.json"
        r = trainimg("build", *args, "--progress", "plain", "--json", str(report), env=env, timeout=timeout)
        assert r.returncode == 0, r.stderr[-3000:]
        rows = {arch_key(row["name"], row["arch"]): row for row in json.loads(report.read_text())}
        for name, row in rows.items():
            row["pinned"] = pin(row["image_id"], name)
        return rows

    return once_per_run(factory, key, build)
