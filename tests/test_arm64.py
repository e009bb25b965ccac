"""arm64 images built, gated under emulation and released with amd64 as one index (issue 46), on the real engine,
the real registry and the real clients: the 20.10 docker client's `manifest inspect`, containerd's own `ctr` (an
instance of its own beside dockerd: its root, state, socket, FIFOs and runc root under the test's folder) and
`docker run --platform linux/arm64`.

The image is the smallest trainimg builds (issue 56: a cold suite within 30 minutes), a variant of both
architectures with no framework (Python, hypertune, the runtime), built on `local/debian:bookworm-arm64` under
qemu-aarch64 (.ci/setup-host registers it). The shipped JAX CPU variant's arm64 image (jaxlib's aarch64 wheels:
13 minutes of a cold run under emulation, 2 cores) is built and gated by `benchmarks/bench.py --arm64`, whose
figures fail when its gate does; its lock is resolved for aarch64 wheels in tests/test_arches.py.

(a) The arm64 image says arm64 everywhere: its config, its labels, its SBOM (every Debian package arm64 or `all`),
    its bytecode (aarch64's interpreter, hash-checked); `trainimg test --arch arm64` passes its gate under
    emulation, the GPU checks skipped, never passed; `--base-image` of the other architecture is one line.
(b) Released to the registry: one OCI image index under its tag, each architecture's manifest gated, its config
    naming its architecture, its SBOM and release record beside it, a lockfile entry each; the real clients see
    both under one tag, an arm64 pull runs the launcher under emulation, an amd64 pull gets the gated amd64 image
    byte for byte; the same release again skips both architectures; one architecture failing its gate pushes
    nothing; stage jobs per architecture and promote put the index together.
"""
from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
import requests
from conftest import BARE_VERSION, LOCAL_BASE, bare_recipe, remove_image, trainimg
from conftest_registry import RegistryLogin
from containerdnode import containerd

from trainimg.engine.docker import DockerEngine
from trainimg.publish.lockfile import LockEntry, read_lock
from trainimg.registry.blobpush import saved_config
from trainimg.registry.imageconfig import image_config
from trainimg.publish.skip import read_decisions
from trainimg.recipe.arches import local_tag
from trainimg.registry.imageindex import INDEX_TYPE
from trainimg.registry.registryapi import MANIFEST_TYPES, sha256_digest
from trainimg.runtime.contract import SBOM_PATH, VARIANT_LABEL

ARM64_BASE = os.environ.get("TRAINIMG_LOCAL_BASE_ARM64", "local/debian:bookworm-arm64")
BASES = ["--base-image", LOCAL_BASE, "--base-image", f"arm64={ARM64_BASE}"]  # the bare variant's (bookworm)
RUN = uuid.uuid4().hex[:8]
SMALL = "arm-small"
VERSION = BARE_VERSION


@pytest.fixture(scope="module")
def arm64_base(docker_engine: str, client: docker.DockerClient) -> str:
    """The emulator the kernel runs aarch64 programs with, and the arm64 base: .ci/setup-host makes them."""
    if not Path("/proc/sys/fs/binfmt_misc/qemu-aarch64").exists():
        pytest.fail("no qemu-aarch64 in binfmt_misc: run .ci/setup-host (as root) to register it")
    try:
        arch = client.images.get(ARM64_BASE).attrs["Architecture"]
    except docker.errors.ImageNotFound:
        pytest.fail(f"no {ARM64_BASE}: run .ci/setup-host to make it")
    assert arch == "arm64", (ARM64_BASE, arch)
    return ARM64_BASE


# -- the variant of both architectures and its release --------------------------------------------------------------

class Small:
    """A variant of both architectures with no framework, in a recipes folder of its own, and its registry."""

    def __init__(self, folder: Path, registry: RegistryLogin, env: dict[str, str]) -> None:
        self.folder, self.registry = folder, registry
        self.recipes = folder / "recipes"
        self.recipes.mkdir()
        self.repo = f"trainimg-test/arm-{RUN}"
        (self.recipes / "small.yaml").write_text(bare_recipe(SMALL, self.repo) + "arch: [amd64, arm64]\n",
                                                 encoding="utf-8")
        self.env = {**env, "TRAINIMG_REGISTRY_PASSWORD": registry.password}
        self.lock = folder / "images.lock"

    def release(self, *extra: str) -> subprocess.CompletedProcess[str]:
        return trainimg("--recipes", str(self.recipes), "release", SMALL, *BASES, "--registry", self.registry.host,
                        "--username", self.registry.username, "--lock", str(self.lock), "--skip-audit",
                        "--progress", "plain", *extra, env=self.env, timeout=1500)

    def get(self, reference: str, accept: str = ", ".join(MANIFEST_TYPES)) -> requests.Response:
        resp = requests.get(f"http://{self.registry.host}/v2/{self.repo}/manifests/{reference}",
                            auth=(self.registry.username, self.registry.password), headers={"Accept": accept},
                            timeout=30)
        assert resp.status_code == 200, (reference, resp.status_code)
        return resp

    def blob(self, digest: str) -> dict:
        return requests.get(f"http://{self.registry.host}/v2/{self.repo}/blobs/{digest}",
                            auth=(self.registry.username, self.registry.password), timeout=30).json()


@pytest.fixture(scope="module")
def small(arm64_base: str, registry: RegistryLogin, state_env: dict[str, str], client: docker.DockerClient,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Small, subprocess.CompletedProcess[str]]]:
    s = Small(tmp_path_factory.mktemp("arm-small"), registry, state_env)
    r = s.release()
    try:
        yield s, r
    finally:
        for ref in (f"{s.repo}:{VERSION}", f"{s.repo}:{VERSION}-arm64"):
            remove_image(client, ref)


# -- (a) the arm64 image ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def arm64_entry(small: tuple[Small, subprocess.CompletedProcess[str]]) -> LockEntry:
    """The arm64 image the release built and gated (its lockfile entry: the local image ID, its base)."""
    s, r = small
    assert r.returncode == 0, r.stderr[-3000:]
    (entry,) = [e for e in read_lock(s.lock).values() if e.arch == "arm64"]
    return entry


def test_the_arm64_image_says_arm64_everywhere(small: tuple[Small, subprocess.CompletedProcess[str]],
                                               arm64_entry: LockEntry, client: docker.DockerClient) -> None:
    s, _ = small
    assert arm64_entry.tag == f"{s.repo}:{VERSION}" and arm64_entry.base_image == ARM64_BASE  # the index's tag
    assert client.images.get(local_tag(arm64_entry.tag, "arm64")).id == arm64_entry.image_id  # the engine's name
    attrs = client.api.inspect_image(arm64_entry.image_id)
    assert attrs["Architecture"] == "arm64" and attrs["Os"] == "linux"
    labels = attrs["Config"]["Labels"]
    assert labels["org.opencontainers.image.base.name"] == ARM64_BASE and labels[VARIANT_LABEL] == SMALL
    # The SBOM the image wrote under emulation: every Debian package of arm64 (or architecture-independent).
    # Read from the stopped container's logs, then removed: `run(remove=True)` can return the output cut short when
    # the removal races the log read (a 44,873-byte prefix of an SBOM once, under emulation).
    container = client.containers.run(arm64_entry.image_id, ["cat", SBOM_PATH], entrypoint=[], detach=True,
                                      network_mode="none")
    try:
        assert container.wait(timeout=300)["StatusCode"] == 0
        sbom = json.loads(container.logs(stdout=True, stderr=False))
    finally:
        container.remove(force=True)
    arches = {p.split("arch=")[1].split("&")[0] for c in sbom["components"]
              if (p := c.get("purl", "")).startswith("pkg:deb/")}
    assert arches and arches <= {"arm64", "all"}, arches
    # Bytecode compiled in the install step, hash-checked (no build time in it), for aarch64's interpreter too.
    out = client.containers.run(arm64_entry.image_id, ["python", "-c", (
        "import importlib.util, platform, hypertune; p = importlib.util.cache_from_source(hypertune.__file__); "
        "flags = int.from_bytes(open(p, 'rb').read()[4:8], 'little'); print(platform.machine(), flags)")],
        entrypoint=[], remove=True, network_mode="none").decode().split()
    assert out[0] == "aarch64" and int(out[1]) & 1, out  # flags bit 0: hash-based


def test_the_arm64_gate_passes_under_emulation(small: tuple[Small, subprocess.CompletedProcess[str]],
                                               arm64_entry: LockEntry, tmp_path: Path) -> None:
    s, _ = small
    report = tmp_path / "gate.json"
    r = trainimg("--recipes", str(s.recipes), "test", SMALL, "--arch", "arm64", *BASES, "--json", str(report),
                 "--progress", "quiet", env=s.env, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    (suite,) = json.loads(report.read_text())["suites"]
    assert suite["name"] == f"{SMALL}@arm64" and suite["image_id"] == arm64_entry.image_id
    status = {c["name"]: c["status"] for c in suite["checks"]}
    # What runs under emulation passed (the interpreter, hypertune, each platform's cluster parsing); the framework's
    # checks are skipped (none in this image: benchmarks/arm64.py gates the JAX one's all-reduce).
    assert "failed" not in status.values(), status
    assert all(status[n] == "passed" for n in ("python", "hypertune", "cluster_parsing", "duplicate_libs")), status
    assert status["gpu"] == status["allreduce_nccl_containers"] == "skipped", status  # never passed without a GPU


def test_test_base_image_names_the_base_each_architecture_was_built_on(
        small: tuple[Small, subprocess.CompletedProcess[str]], arm64_entry: LockEntry) -> None:
    s, _ = small
    r = trainimg("--recipes", str(s.recipes), "test", SMALL, "--arch", "arm64", "--base-image",
                 f"arm64={LOCAL_BASE}", "--progress", "quiet", env=s.env, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    engine_name = local_tag(arm64_entry.tag, "arm64")
    assert r.stderr.startswith(f"--base-image: {engine_name} (arm64) was built on {ARM64_BASE}, not {LOCAL_BASE}"), \
        r.stderr


# -- (b) the release: one index ---------------------------------------------------------------------------------------


def test_a_release_of_both_architectures_is_one_index(small: tuple[Small, subprocess.CompletedProcess[str]]) -> None:
    s, r = small
    assert r.returncode == 0, r.stderr[-3000:]
    decided = read_decisions(r.stdout + r.stderr)
    assert {k: v[0] for k, v in decided.items()} == {SMALL: False, f"{SMALL}@arm64": False}
    index = s.get(VERSION, INDEX_TYPE)
    assert index.headers["Content-Type"] == INDEX_TYPE
    body = index.json()
    platforms = {m["platform"]["architecture"]: m for m in body["manifests"]}
    assert sorted(platforms) == ["amd64", "arm64"] and platforms["arm64"]["platform"]["variant"] == "v8"
    entries = read_lock(s.lock)
    assert sorted(entries) == [SMALL, f"{SMALL}@arm64"]
    digest = index.headers["Docker-Content-Digest"]
    moving = f"{s.registry.host}/{s.repo}:base-cpu"  # no framework version: no moving tag
    for arch, entry in ((e.arch, e) for e in entries.values()):
        manifest = s.get(platforms[arch]["digest"]).json()
        config = s.blob(manifest["config"]["digest"])
        assert config["architecture"] == arch
        assert manifest["config"]["digest"] == pushed_config(entry.image_id)  # the gated image, its times fixed
        assert entry.manifest == platforms[arch]["digest"] and entry.conformance["passed"]
        assert entry.pushed == {f"{s.registry.host}/{s.repo}:{VERSION}": digest} and moving not in entry.pushed
        referrers = s.get(f"sha256-{entry.manifest.split(':')[1]}", INDEX_TYPE).json()["manifests"]
        kinds = sorted(m["artifactType"] for m in referrers)
        assert kinds == ["application/vnd.cyclonedx+json", "application/vnd.trainimg.release-entry.v1+json"], kinds


def test_the_real_clients_see_both_under_one_tag(small: tuple[Small, subprocess.CompletedProcess[str]],
                                                 docker_cli: str, client: docker.DockerClient,
                                                 tmp_path: Path) -> None:
    s, r = small
    assert r.returncode == 0, r.stderr[-3000:]
    ref = f"{s.registry.host}/{s.repo}:{VERSION}"
    entries = {e.arch: e for e in read_lock(s.lock).values()}
    env = {**os.environ, "DOCKER_CONFIG": str(tmp_path / "docker")}  # a login of its own, not the user's
    subprocess.run([docker_cli, "login", s.registry.host, "-u", s.registry.username, "--password-stdin"],
                   input=s.registry.password, text=True, check=True, env=env, capture_output=True)
    seen = json.loads(subprocess.run([docker_cli, "manifest", "inspect", "--insecure", "-v", ref], env=env,
                                     check=True, capture_output=True, text=True).stdout)
    assert sorted((m["Descriptor"]["platform"]["architecture"], m["SchemaV2Manifest"]["config"]["digest"])
                  for m in seen) == sorted((a, pushed_config(e.image_id)) for a, e in entries.items())
    with containerd(tmp_path) as ctr:
        pulled = ctr("images", "pull", "--plain-http", "--platform", "linux/arm64", "--user",
                     f"{s.registry.username}:{s.registry.password}", ref)
        assert pulled.returncode == 0, pulled.stderr
        ran = ctr("run", "--rm", "--platform", "linux/arm64", "--fifo-dir", str(tmp_path / "fifo"), "--runc-root",
                  str(tmp_path / "runc"), ref, f"arm-{RUN}", "trainimg-launch", "--", "python", "-c",
                  "import platform; print(platform.machine())")
        assert ran.returncode == 0 and ran.stdout.strip().splitlines()[-1] == "aarch64", ran.stdout + ran.stderr
    try:  # the engine: an arm64 run of the tag, and an amd64-only node's pull of it
        out = subprocess.run([docker_cli, "run", "--rm", "--platform", "linux/arm64", ref, "python", "-c",
                              "import platform; print(platform.machine())"], env=env, capture_output=True, text=True)
        assert out.returncode == 0 and out.stdout.strip() == "aarch64", out.stderr
        assert client.images.get(ref).id == pushed_config(entries["arm64"].image_id)
        remove_image(client, ref)
        subprocess.run([docker_cli, "pull", "--platform", "linux/amd64", ref], env=env, check=True,
                       capture_output=True)
        assert client.images.get(ref).id == pushed_config(entries["amd64"].image_id)  # what was gated, times fixed
    finally:
        remove_image(client, ref)


def test_the_same_release_again_skips_both_architectures(small: tuple[Small, subprocess.CompletedProcess[str]]
                                                         ) -> None:
    s, first = small
    assert first.returncode == 0, first.stderr[-3000:]
    before = s.get(VERSION, INDEX_TYPE).headers["Docker-Content-Digest"]
    r = s.release()
    assert r.returncode == 0, r.stderr[-3000:]
    decided = read_decisions(r.stdout + r.stderr)
    assert decided[SMALL][0] and decided[f"{SMALL}@arm64"][0], decided
    assert s.get(VERSION, INDEX_TYPE).headers["Docker-Content-Digest"] == before


def test_one_architecture_failing_its_gate_pushes_nothing(small: tuple[Small, subprocess.CompletedProcess[str]],
                                                          tmp_path: Path) -> None:
    """A check only an x86-64 image passes (the team's container-structure-test): the arm64 gate fails, so neither
    architecture is pushed, the tag keeps its index and the lockfile is unchanged."""
    s, first = small
    assert first.returncode == 0, first.stderr[-3000:]
    checks = tmp_path / "x86-only.yaml"
    checks.write_text('schemaVersion: 2.0.0\ncommandTests:\n  - name: x86-64 only\n    command: uname\n'
                      '    args: ["-m"]\n    expectedOutput: ["x86_64"]\n', encoding="utf-8")
    before = (s.get(VERSION, INDEX_TYPE).headers["Docker-Content-Digest"], s.lock.read_bytes())
    r = s.release("--rebuild", "--structure-tests", str(checks), "--replicas", "1")
    assert r.returncode == 1, r.stderr[-3000:]
    assert "nothing pushed" in r.stderr and f"{SMALL}@arm64 failed structure: " in r.stderr, r.stderr[-2000:]
    assert f"{SMALL} failed" not in r.stderr.replace(f"{SMALL}@arm64 failed", "")  # amd64 passed its gate
    assert (s.get(VERSION, INDEX_TYPE).headers["Docker-Content-Digest"], s.lock.read_bytes()) == before


def test_stage_jobs_per_architecture_then_promote_put_the_index_together(
        small: tuple[Small, subprocess.CompletedProcess[str]], tmp_path: Path) -> None:
    """What `trainimg ci` writes for native arm64 runners: a stage job per architecture, each pushing its manifest by
    digest and writing its part; promote refuses while a part is missing, then puts the index under the tag, each
    manifest and the index signed by `--sign-key` (`verify REF --key` accepts the tag and each digest)."""
    s, first = small
    assert first.returncode == 0, first.stderr[-3000:]
    parts = tmp_path / "lock.d"
    for arch in ("amd64", "arm64"):
        r = s.release("--stage", "--arch", arch, "--lock-dir", str(parts), "--rebuild", "--replicas", "1")
        assert r.returncode == 0, r.stderr[-3000:]
        part = json.loads((parts / f"{SMALL}{'@arm64' if arch == 'arm64' else ''}.json").read_text())
        (entry,) = part["variants"].values()
        assert entry["pushed"] == {} and entry["manifest"].startswith("sha256:")  # by digest: the tag is promote's
        if arch == "amd64":  # promote names the architecture still missing, and moves nothing
            lock = tmp_path / "missing.lock"
            r = trainimg("--recipes", str(s.recipes), "promote", str(parts), SMALL, "--registry", s.registry.host,
                         "--username", s.registry.username, "--lock", str(lock), env=s.env, timeout=300)
            assert r.returncode == 1 and f"{SMALL}@arm64: no part" in r.stderr and not lock.exists(), r.stderr
    lock = tmp_path / "promoted.lock"
    key = tmp_path / "release"  # promote signs each architecture's manifest and the index it puts together
    signing = {**s.env, "TRAINIMG_SIGN_PASSWORD": "arm64-test"}
    r = trainimg("trust", "keygen", "--output-key-prefix", str(key), env=signing, timeout=120)
    assert r.returncode == 0, r.stderr
    r = trainimg("--recipes", str(s.recipes), "promote", str(parts), SMALL, "--registry", s.registry.host,
                 "--username", s.registry.username, "--lock", str(lock), "--sign-key", f"{key}.key", env=signing,
                 timeout=300)
    assert r.returncode == 0, r.stderr
    index = s.get(VERSION, INDEX_TYPE)
    index_digest = index.headers["Docker-Content-Digest"]
    held = {m["platform"]["architecture"]: m["digest"] for m in index.json()["manifests"]}
    entries = read_lock(lock)
    assert {e.arch: e.manifest for e in entries.values()} == held
    assert {d for e in entries.values() for d in e.pushed.values()} == {index_digest}
    assert sum(line.startswith("signed: ") for line in r.stdout.splitlines()) == 3, r.stdout
    for ref in (f"{s.registry.host}/{s.repo}:{VERSION}", *(f"{s.registry.host}/{s.repo}@{d}" for d in held.values())):
        checked = trainimg("verify", ref, "--key", f"{key}.pub", "--username", s.registry.username, env=s.env,
                           timeout=300)
        assert checked.returncode == 0, (ref, checked.stdout, checked.stderr)


def pushed_config(image_id: str) -> str:
    """The digest of the config trainimg's client pushes for local image `image_id`: its own, with fixed times and
    without the inline cache (registry/imageconfig.py)."""
    return sha256_digest(image_config(saved_config(DockerEngine(), image_id)))
