"""Bases that cannot vanish, against two real registries: the "upstream" is a repository of the compose registry
(tests/conftest_registry.py) that local/debian:bookworm (with a known pending OS fix, tests/osfixture.py) is pushed
to by the engine, as a base pulled from Docker Hub would be recorded (`repo@sha256:...`); the team's registry is a second one (Debian's docker-registry on
127.0.0.1, registry/localregistry.py), so the copy streams every blob across.

A small variant (no framework) is released on the upstream base (and `outdated --lock` reads its SBOM beside it for
pending OS fixes); `trainimg mirror` copies the base by digest and
records the copy in images.lock; then the upstream manifest is deleted from its registry and the engine's name for
it removed, as NVIDIA deletes a tag; `trainimg verify --locked` rebuilds without cache on the mirror and finds every
layer identical. Without a recorded mirror the same verify is refused, saying what to run.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote

import docker
from conftest import BARE_VERSION, bare_recipe, remove_image, trainimg
from conftest_registry import RegistryLogin
from localindex import RECORDED, LocalIndex
from osfixture import INSTALLED, PACKAGE, index_versions

from trainimg.publish.lockfile import read_lock
from trainimg.registry.localregistry import LocalRegistry
from trainimg.registry.references import RegistryTarget
from trainimg.registry.registryapi import RegistryAPI

PURL = re.compile(r"^pkg:deb/[^/]+/(?P<name>[^@]+)@(?P<version>[^?]+)\?")  # a dpkg component of the SBOM

RUN = uuid.uuid4().hex[:8]
NAME = f"mirror-{RUN}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def docker_cli(config: Path, *args: str, stdin: str | None = None) -> None:
    r = subprocess.run(["docker", "--config", str(config), *args], input=stdin, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr


def dpkg_older(dpkg: str, installed: str, offered: str) -> bool:
    """Whether dpkg itself orders `installed` before `offered`."""
    return subprocess.run([dpkg, "--compare-versions", installed, "lt", offered], timeout=60).returncode == 0


def check_released_os_packages(recipes: Path, lock: Path, registry: str, env: dict[str, str], dpkg: str) -> None:
    """`outdated --lock` reads the released image's SBOM beside it in the registry (by the lockfile's digest) and
    names its packages with a newer version in the (recorded) security archive: exactly those the SBOM, read by
    `trainimg sbom` from the same registry, holds older than the index by dpkg's own ordering, the base's pending
    fix (tests/osfixture.py) among them."""
    r = trainimg("--recipes", str(recipes), "sbom", NAME, "--registry", registry, env=env)
    assert r.returncode == 0, r.stderr
    installed = {unquote(m["name"]): unquote(m["version"]) for m in (
        PURL.match(str(c.get("purl", ""))) for c in json.loads(r.stdout)["components"]) if m}
    with LocalIndex() as index:
        packages = index.raw_url("Packages.xz")
        offered = index_versions((RECORDED / "raw" / "Packages.xz").read_bytes())
        r = trainimg("--recipes", str(recipes), "outdated", "--json", "--lock", str(lock), "--index-url", index.url,
                     "--security-archive", f"debian={packages}", env=env)
    assert r.returncode == 1, r.stderr
    expected = sorted(f"{name} {version} -> {offered[name]}" for name, version in installed.items()
                      if name in offered and dpkg_older(dpkg, version, offered[name]))
    assert f"{PACKAGE} {INSTALLED} -> {offered[PACKAGE]}" in expected, (installed.get(PACKAGE), expected)
    found = [i for i in json.loads(r.stdout) if i["kind"] == "os-security"]
    assert [i["detail"] for i in found] == [expected], (found, expected)
    assert all(i["where"] == [NAME] and i["source"] == packages for i in found)


def test_verify_succeeds_with_the_upstream_tag_gone_and_the_mirror_present(
        registry: RegistryLogin, tmp_path: Path, state_env: dict[str, str], client: docker.DockerClient,
        osfix_base: str, host_tool: Callable[[str], str]) -> None:
    team = LocalRegistry(tmp_path / "team-registry", port=_free_port())
    info = team.start()
    config = tmp_path / "docker"
    env = {**state_env, "DOCKER_CONFIG": str(config)}
    for host, user, password in ((registry.host, registry.username, registry.password),
                                 (info.host, info.username, info.password)):
        docker_cli(config, "login", host, "--username", user, "--password-stdin", stdin=password)
    upstream = f"{registry.host}/trainimg-test/upstream-{RUN}/debian:bookworm"
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "m.yaml").write_text(bare_recipe(NAME, f"trainimg-test/{NAME}"))
    lock = tmp_path / "images.lock"
    tag = f"trainimg-test/{NAME}:{BARE_VERSION}"
    try:
        client.api.tag(osfix_base, upstream.rsplit(":", 1)[0], "bookworm")
        docker_cli(config, "push", upstream)
        start = time.monotonic()
        r = trainimg("--recipes", str(recipes), "release", NAME, "--registry", f"{registry.host}/trainimg-test",
                     "--base-image", upstream, "--lock", str(lock), "--replicas", "1", "--progress", "plain",
                     "--skip-audit", env=env)
        assert r.returncode == 0, r.stderr[-3000:]
        base = read_lock(lock)[NAME].base_digest
        assert base.startswith(upstream.rsplit(":", 1)[0] + "@sha256:"), base
        check_released_os_packages(recipes, lock, f"{registry.host}/trainimg-test", env, host_tool("dpkg"))

        released = time.monotonic()
        r = trainimg("--recipes", str(recipes), "mirror", "--registry", f"{info.host}/bases", "--lock", str(lock),
                     env=env)
        assert r.returncode == 0, r.stderr
        mirror = read_lock(lock)[NAME].base_mirror
        assert mirror == f"{info.host}/bases/{registry.host.replace(':', '-')}/trainimg-test/upstream-{RUN}/debian@" \
                         f"{base.split('@')[1]}", mirror
        print(r.stdout.strip())

        # The upstream vanishes: its manifest deleted from its registry, the engine's names for it removed.
        up = RegistryAPI(RegistryTarget.parse(registry.host), {"username": registry.username,
                                                               "password": registry.password})
        repository, digest = base.split("/", 1)[1].split("@")
        deleted = up.request("DELETE", f"/v2/{repository}/manifests/{digest}", scope=f"repository:{repository}:*")
        assert deleted.status_code == 202, deleted.text
        client.api.remove_image(upstream)
        assert up.remote_digest(repository, digest) is None and up.remote_digest(repository, "bookworm") is None
        assert base not in client.api.inspect_image(osfix_base)["RepoDigests"]

        mirrored = time.monotonic()
        r = trainimg("--recipes", str(recipes), "verify", NAME, "--registry", f"{registry.host}/trainimg-test",
                     "--locked", "--lock", str(lock), "--progress", "plain", env=env, timeout=1800)
        assert r.returncode == 0, r.stdout + r.stderr[-3000:]
        print(f"release {released - start:.0f} s, mirror {mirrored - released:.0f} s, verify "
              f"{time.monotonic() - mirrored:.0f} s")
        assert "identical" in r.stdout and f"building on its mirror {mirror}" in r.stderr, r.stdout + r.stderr

        bare = tmp_path / "bare.lock"
        data = json.loads(lock.read_text())
        data["variants"][NAME].pop("base_mirror")
        bare.write_text(json.dumps(data))
        r = trainimg("--recipes", str(recipes), "verify", NAME, "--registry", f"{registry.host}/trainimg-test",
                     "--locked", "--lock", str(bare), env=env)
        assert r.returncode == 2 and "`trainimg mirror` keeps a copy" in r.stderr, r.stderr
    finally:
        team.stop()
        for ref in (tag, upstream, f"{registry.host}/trainimg-test/{tag}"):
            remove_image(client, ref)
