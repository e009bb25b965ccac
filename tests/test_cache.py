"""Registry cache for ephemeral CI: every build writes BuildKit's inline cache metadata into the image (and keeps
it when the labels read back from the image go into its config: imagebuild/labelling.py, no second BuildKit pass),
so the pushed image is a `--cache-from` source; `release` defaults to the images the lockfile's previous entries
pushed.

The engine is shared, so nothing here prunes it: a private variant (its extras step new on every run) is built,
pushed to the session's registry with the metadata checked in the config blob the registry serves, its local
images removed, and rebuilt with `--cache-from` the pushed image. The ratio of that rebuild to the first build is
printed, not asserted (`make bench` measures `ci_rebuild_ratio` on a really pruned engine).
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import buildkitlog
import docker
import pytest
import requests
from conftest import BARE_VERSION, LOCAL_BASE, bare_recipe, remove_image, trainimg
from conftest_registry import RegistryLogin
from enginerecorder import EngineRecorder

from trainimg.engine.docker import DockerEngine
from trainimg.publish.lockedbases import cache_sources
from trainimg.publish.lockfile import LockEntry
from trainimg.publish.indexpush import push_index
from trainimg.publish.push import push
from trainimg.registry.imageconfig import INLINE_CACHE_KEY, with_build_caches
from trainimg.registry.references import RegistryTarget
from trainimg.registry.registryapi import RegistryAPI



def test_release_cache_sources_are_the_previous_pushes() -> None:
    pushed = LockEntry("a", "recipes/a.yaml", "t/a:1", "sha256:1", "debian", "sha256:2",
                       pushed={"reg.example/t/a:1": "sha256:3", "reg.example/t/a:1-cpu": "sha256:3"})
    never = LockEntry("b", "recipes/b.yaml", "t/b:1", "sha256:4", "debian", "sha256:5")
    entries = {"a": pushed, "b": never}
    assert cache_sources(entries, ["a", "b", "c"]) == ("reg.example/t/a:1",)
    assert cache_sources({}, ["a"]) == ()


def test_bad_cache_from_is_one_line_exit_2(state_env: dict[str, str]) -> None:
    r = trainimg("build", "pytorch-2.13.0-cpu-py3.11", "--cache-from", "not a ref!", env=state_env, timeout=60)
    assert r.returncode == 2 and "--cache-from" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def registry_config(registry: RegistryLogin, ref: str) -> dict:
    """The image config blob the registry serves for `ref` (host/name:tag), by the registry's HTTP API."""
    name, tag = ref.removeprefix(f"{registry.host}/").rsplit(":", 1)
    auth = (registry.username, registry.password)
    manifest = requests.get(f"http://{registry.host}/v2/{name}/manifests/{tag}", auth=auth, timeout=30, headers={
        "Accept": "application/vnd.docker.distribution.manifest.v2+json"}).json()
    blob = requests.get(f"http://{registry.host}/v2/{name}/blobs/{manifest['config']['digest']}", auth=auth,
                        timeout=30)
    return blob.json()


@pytest.fixture
def private_build(tmp_path: Path, state_env: dict[str, str], client: docker.DockerClient,
                  registry: RegistryLogin) -> Iterator[tuple[Path, dict[str, str], str]]:
    """A recipes folder with a variant of our own, an env whose docker client is logged in to the registry (BuildKit
    reads the cache with it), and the variant's tag; every image it made is removed afterwards."""
    run = uuid.uuid4().hex[:12]
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "cachetest.yaml").write_text(
        bare_recipe("cachetest", "trainimg-test/cachetest", json.dumps(f"six[c{run}]==1.16.0")), encoding="utf-8")
    config = tmp_path / "docker-config"
    config.mkdir()
    login = base64.b64encode(f"{registry.username}:{registry.password}".encode()).decode()
    (config / "config.json").write_text(json.dumps({"auths": {registry.host: {"auth": login}}}), encoding="utf-8")
    tag = f"trainimg-test/cachetest:{BARE_VERSION}"
    try:
        yield recipes, {**state_env, "DOCKER_CONFIG": str(config)}, tag
    finally:
        for ref in (tag, f"{registry.host}/{tag}"):
            remove_image(client, ref)


def test_pushed_image_carries_inline_cache_and_serves_a_rebuild(private_build: tuple[Path, dict[str, str], str],
                                                                client: docker.DockerClient,
                                                                registry: RegistryLogin, tmp_path: Path) -> None:
    recipes, env, tag = private_build
    first = tmp_path / "first.json"
    (tmp_path / "engine").mkdir()
    recorder = EngineRecorder(tmp_path / "engine")  # what the build asks the engine for
    try:
        r = trainimg("--recipes", str(recipes), "build", "cachetest", "--base-image", LOCAL_BASE, "--progress",
                     "plain", "--json", str(first), env={**env, "DOCKER_HOST": recorder.docker_host}, timeout=900)
    finally:
        recorder.stop()
    assert r.returncode == 0, r.stderr[-3000:]
    builds = [line for line in recorder.requests if re.search(r"^POST /\S*/build(\?|$)", line)]
    assert len(builds) == 1, builds  # one BuildKit pass: the labels read back went into the config it wrote
    (built,) = json.loads(first.read_text(encoding="utf-8"))
    remote = f"{registry.host}/{tag}"
    client.api.tag(built["image_id"], remote.rsplit(":", 1)[0], remote.rsplit(":", 1)[1])
    for line in client.api.push(remote, auth_config={"username": registry.username, "password": registry.password},
                                stream=True, decode=True):
        assert "error" not in line, line
    config = registry_config(registry, remote)
    assert INLINE_CACHE_KEY in config, sorted(config)  # the labelling kept BuildKit's cache metadata
    assert config["config"]["Labels"]["trainimg.version.hypertune"] == "0.1.0.dev6"  # a label read back

    for ref in (tag, remote):  # only this variant's own images go: the engine is shared
        client.api.remove_image(ref, force=True)
    again = tmp_path / "again.json"
    r = trainimg("--recipes", str(recipes), "build", "cachetest", "--base-image", LOCAL_BASE, "--progress", "plain",
                 "--cache-from", remote, "--json", str(again), env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    # BuildKit read the pushed image's cache (a step of its own), and did not fail to: BuildKit 0.8 says so only as
    # `#N ERROR: ...` under that step (a 401 when the engine has no login), which the build's report carries.
    assert_cache_read(r.stderr, remote)
    (rebuilt,) = json.loads(again.read_text(encoding="utf-8"))
    # (its `.buildcache` companion was not pushed here: BuildKit finds none, and says so)
    assert [u for u in rebuilt["unread_caches"] if u.startswith(f"{remote}: ")] == [], rebuilt["unread_caches"]
    assert rebuilt["cache_hits"] == rebuilt["steps"], rebuilt
    assert rebuilt["manifest"] == built["manifest"]
    print(f"cache rebuild ratio (not asserted; local BuildKit cache also present): "
          f"{rebuilt['seconds']:.1f} s / {built['seconds']:.1f} s = {rebuilt['seconds'] / built['seconds']:.3f}")


def assert_cache_read(log: str, ref: str) -> None:
    """BuildKit 0.8 imported `ref`'s cache: its import is a step of its own, and that step has no `#N ERROR` (how it
    reports a cache it could not read, a 401 or a manifest it cannot use, and builds on without it)."""
    (step,) = [n for n, title in buildkitlog.titles(log).items() if title == f"importing cache manifest from {ref}"]
    assert step not in buildkitlog.ended(log, "ERROR"), log[-3000:]


def test_the_client_pushes_the_cache_beside_the_image_and_buildkit_reads_it(
        client: docker.DockerClient, registry: RegistryLogin, docker_cli: str, tmp_path: Path) -> None:
    """trainimg's client pushes the image config without the inline cache (it lists the engine's other builds: not a
    function of the inputs) and the cache beside it under `<tag>.buildcache`, the same layers; a build given
    `--cache-from` the image (as `trainimg build` expands it: registry/imageconfig.with_build_caches) imports both."""
    run = uuid.uuid4().hex[:12]
    (tmp_path / "Dockerfile").write_text(f"FROM {LOCAL_BASE}\nRUN echo {run} > /cached\n", encoding="utf-8")
    tag = f"trainimg-test/clientcache:{run}"
    env = {**os.environ, "DOCKER_BUILDKIT": "1", "DOCKER_CONFIG": str(tmp_path / "docker")}
    build = [docker_cli, "build", "--progress", "plain", "--build-arg", "BUILDKIT_INLINE_CACHE=1", "-t", tag]
    try:
        subprocess.run([*build, str(tmp_path)], env=env, check=True, capture_output=True)
        target = RegistryTarget.parse(registry.host)
        creds = {"username": registry.username, "password": registry.password}
        pushed = push(DockerEngine(client), tag, target, tag, credentials=creds)
        api = RegistryAPI(target, creds)
        name, version = tag.split(":")
        image, cache = (json.loads(api.manifest_json(name, t)[0])  # type: ignore[index]
                        for t in (version, f"{version}.buildcache"))
        assert INLINE_CACHE_KEY not in json.loads(api.blob(name, image["config"]["digest"]))
        assert INLINE_CACHE_KEY in json.loads(api.blob(name, cache["config"]["digest"]))
        assert cache["layers"] == image["layers"] and pushed.digest == api.remote_digest(name, version)
        subprocess.run([docker_cli, "login", registry.host, "-u", registry.username, "--password-stdin"],
                       input=registry.password, text=True, env=env, check=True, capture_output=True)
        refs = with_build_caches((target.ref(tag),))
        again = subprocess.run([*build, *(f"--cache-from={r}" for r in refs), str(tmp_path)], env=env, text=True,
                               capture_output=True)
        assert again.returncode == 0, again.stderr[-3000:]
        for ref in refs:  # each read (a step of its own), none failed
            assert_cache_read(again.stderr, ref)
        # An index (a variant of several architectures): each architecture's cache, as an index of its own beside.
        indexed = push_index(DockerEngine(client), f"{name}:{version}-index", [(tag, "amd64")], target, creds)
        caches = json.loads(api.manifest_json(name, f"{version}-index.buildcache")[0])  # type: ignore[index]
        assert [m["platform"]["architecture"] for m in caches["manifests"]] == ["amd64"]
        assert caches["manifests"][0]["digest"] != indexed.manifests["amd64"]
        arch_cache = json.loads(api.manifest_json(name, caches["manifests"][0]["digest"])[0])  # type: ignore[index]
        assert arch_cache["layers"] == image["layers"]  # the architecture's cache holds its image's layers
        assert INLINE_CACHE_KEY in json.loads(api.blob(name, arch_cache["config"]["digest"]))
        refs = with_build_caches((target.ref(f"{name}:{version}-index"),))
        again = subprocess.run([*build, *(f"--cache-from={r}" for r in refs), str(tmp_path)], env=env, text=True,
                               capture_output=True)
        assert again.returncode == 0, again.stderr[-3000:]
        for ref in refs:
            assert_cache_read(again.stderr, ref)
    finally:
        for ref in (tag, f"{registry.host}/{tag}"):
            remove_image(client, ref)


def test_a_push_keeps_the_build_cache_the_registry_holds_for_the_same_layers(
        client: docker.DockerClient, registry: RegistryLogin, docker_cli: str, tmp_path: Path) -> None:
    """An image of the same layers pushed again under the tag (another config: here a label more; on a runner, the
    rebuild that took every step from the cache) moves the tag and leaves `<tag>.buildcache` as the first build
    wrote it (BuildKit 0.8's re-export of an imported cache matches no later change in part: benchmarks/runner.py
    measured 8 of 13 steps against 0 of 13); an image with a new layer replaces it."""
    run = uuid.uuid4().hex[:12]
    target = RegistryTarget.parse(registry.host)
    creds = {"username": registry.username, "password": registry.password}
    api = RegistryAPI(target, creds)
    name, version = f"trainimg-test/keptcache:{run}".split(":")
    tags, pushed = [], []
    for i, (step, label) in enumerate([(run, ""), (run, "LABEL trainimg.test.relabel=yes\n"), (f"{run}-2", "")]):
        folder = tmp_path / str(i)
        folder.mkdir()
        (folder / "Dockerfile").write_text(f"FROM {LOCAL_BASE}\nRUN echo {step} > /cached\n{label}", encoding="utf-8")
        tags.append(f"{name}:{run}-{i}")
        subprocess.run([docker_cli, "build", "--build-arg", "BUILDKIT_INLINE_CACHE=1", "-t", tags[-1], str(folder)],
                       env={**os.environ, "DOCKER_BUILDKIT": "1"}, check=True, capture_output=True)
    try:
        for local in tags:
            pushed.append(push(DockerEngine(client), local, target, f"{name}:{version}", credentials=creds))
            held = api.manifest_json(name, f"{version}.buildcache")
            assert held is not None and held[2] == pushed[-1].cache, local  # what the push says is what it holds
        first, relabelled, changed = pushed
        assert relabelled.digest != first.digest and relabelled.cache == first.cache  # the tag moved, the cache not
        assert changed.cache not in ("", first.cache)
        assert api.remote_digest(name, version) == changed.digest
    finally:
        for ref in tags:
            remove_image(client, ref)
