"""`trainimg build`, `bake` and `push` against the real engine, a real BuildKit and a real registry.

The CPU PyTorch variant is the session's `cpu_image` (BuildKit's cache keeps rebuilding it cheap). Secrets are
proven to stay out of the image with a framework-less variant of our own (tests write a recipes folder) built with
no cache, so pip and uv really run with their configuration and the CA secrets mounted; then every layer, the image
config, the history and the build log are searched for them.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import tarfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

import buildkitlog
import docker
import docker.errors
import pytest
from brokenimages import TestImages, registry_digest
from conftest import BARE_VERSION, CPU_VARIANT, LOCAL_BASE, ROOT, bare_recipe, cpu_recipe, remove_image, trainimg
from conftest_registry import RegistryLogin

from trainimg.engine.docker import DockerEngine
from trainimg.plan.installer import UV
from trainimg.plan.requirements import lock_header, lock_path, variant_requirements
from trainimg.recipe.compat import load_compat
from trainimg.recipe.loading import load_recipes
from trainimg.registry.blobpush import saved_config
from trainimg.registry.imageconfig import image_config
from trainimg.registry.registryapi import sha256_digest
from trainimg.runtime import lockgroups

REAL_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
CPU_TAG = "trainimg/pytorch:2.13.0-cpu-py3.11"



def write_recipes(folder: Path, name: str, extras: list[str],
                  recipe: Callable[[str, str, str], str] = cpu_recipe) -> Path:
    recipes = folder / "recipes"
    recipes.mkdir(parents=True)
    (recipes / f"{name}.yaml").write_text(recipe(name, f"trainimg-test/{name}", ", ".join(json.dumps(e) for e in extras)),
                                          encoding="utf-8")
    return recipes


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got {len(lines)}: {text[-2000:]}"
    return lines[0]


def pushed_line(stdout: str, host: str) -> str:
    """The `pushed REF@DIGEST` line of a push; the SBOM pushed beside the image says so on the line after it."""
    line, sbom = stdout.strip().splitlines()  # tests/test_sbom.py checks the SBOM itself
    assert sbom.startswith(f"sbom: pushed {host}/"), sbom
    return line


# -- bad input -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "words"), [
    (("--allow-missing", "bogus"), ("--allow-missing", "bogus")),
    (("--base-image", "bad ref;rm"), ("--base-image", "not an image reference")),
    (("--wheelhouse", "/nonexistent"), ("--wheelhouse", "/nonexistent")),
    (("--ca-bundle", "/nonexistent/ca.pem"), ("--ca-bundle", "/nonexistent/ca.pem")),
])
def test_bad_build_input_exits_2_with_one_line(args: tuple[str, ...], words: tuple[str, ...],
                                               state_env: dict[str, str]) -> None:
    r = trainimg("build", CPU_VARIANT, *args, env=state_env, timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr)
    line = one_line(r.stderr)
    assert all(w in line for w in words), line
    assert "Traceback" not in r.stderr


def test_unknown_variant_exits_2_with_a_suggestion(state_env: dict[str, str]) -> None:
    r = trainimg("build", "pytorch-2.13.0-cpu-py3.1", env=state_env, timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr)
    line = one_line(r.stderr)
    assert f"did you mean {CPU_VARIANT}" in line, line


# -- the CPU variant -----------------------------------------------------------------------------------------------


@dataclass
class Rebuild:
    report: dict[str, Any]
    stderr: str


@pytest.fixture(scope="module")
def cpu_rebuild(cpu_image: str, state_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Rebuild:
    """The CPU variant built again (nothing changed since the session's build), with a --json report."""
    out = tmp_path_factory.mktemp("cpu") / "build.json"
    r = trainimg("build", CPU_VARIANT, "--base-image", LOCAL_BASE, "--json", str(out), "--progress", "plain",
                 env=state_env)
    assert r.returncode == 0, r.stderr[-3000:]
    (report,) = json.loads(out.read_text(encoding="utf-8"))
    return Rebuild(report, r.stderr)


def test_build_json_report_and_the_image_runs(cpu_rebuild: Rebuild, client: docker.DockerClient) -> None:
    rep = cpu_rebuild.report
    assert rep["name"] == CPU_VARIANT and rep["tag"] == CPU_TAG
    assert rep["image_id"].startswith("sha256:") and rep["image_id"] == client.images.get(CPU_TAG).id
    assert rep["size"] > 100_000_000
    assert isinstance(rep["seconds"], (int, float)) and rep["seconds"] >= 0
    assert rep["steps"] > 0 and 0 <= rep["cache_hits"] <= rep["steps"]
    assert rep["base_image"] == LOCAL_BASE
    version = client.containers.run(CPU_TAG, ["python", "-c", "import torch; print(torch.__version__)"],
                                    remove=True, network_mode="none", stderr=False)
    assert version.decode().strip() == "2.13.0+cpu"
    rank = client.containers.run(CPU_TAG, ["trainimg-launch", "--", "python", "-c",
                                           "import os; print(os.environ['RANK'])"],
                                 remove=True, network_mode="none", stderr=False)
    assert rank.decode().strip() == "0"


def test_rebuild_with_nothing_changed_is_fully_cached_and_pushes_the_same_digest(
        cpu_rebuild: Rebuild, state_env: dict[str, str], tmp_path: Path) -> None:
    """Two builds one after the other, nothing changed between them: every step cached, and the same image by the
    digest a push gives it (its layers, labels and config, build-clock times fixed: registry/imageconfig), read from
    each build's own image as it is stored. Not the local image ID: a fully cached BuildKit 0.8 build re-stamps the
    times in the config it exports when the image it exported before is gone, and warm suite runs saw two
    back-to-back builds get two IDs that way; what a registry and a verify see is the pushed digest."""
    def build(name: str) -> tuple[dict[str, Any], str]:
        out = tmp_path / f"{name}.json"
        r = trainimg("build", CPU_VARIANT, "--base-image", LOCAL_BASE, "--json", str(out), "--progress", "quiet",
                     env=state_env)
        assert r.returncode == 0, r.stderr[-3000:]
        (row,) = json.loads(out.read_text(encoding="utf-8"))
        return row, sha256_digest(image_config(saved_config(DockerEngine(), row["image_id"])))

    (first, first_digest), (again, again_digest) = build("first"), build("again")
    assert first["steps"] == first["cache_hits"] > 0 and again["steps"] == again["cache_hits"], (first, again)
    assert again_digest == first_digest, (first["image_id"], again["image_id"])


def test_labels_and_manifest_state_what_is_installed(cpu_rebuild: Rebuild, client: docker.DockerClient,
                                                     state_env: dict[str, str]) -> None:
    labels = client.images.get(CPU_TAG).labels
    oci = "org.opencontainers.image."
    for key in ("source", "revision", "created", "version"):
        assert labels.get(oci + key), (key, labels)
    # The suite runs from a checkout (CI: a fresh clone): the revision and its time are always there to compare.
    revision = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert revision.returncode == 0, revision.stderr
    assert labels[oci + "revision"] == revision.stdout.strip()
    stamp = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%ct"], capture_output=True,
                           text=True).stdout.strip()
    epoch = int(state_env.get("SOURCE_DATE_EPOCH") or stamp)
    created = datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert labels[oci + "created"] == created, "created must be the commit time, not the clock"
    assert labels[oci + "version"] == "2.13.0-cpu-py3.11"
    assert labels["trainimg.version.framework"] == "2.13.0+cpu"
    assert labels["trainimg.version.python"].startswith("3.11")
    assert labels["trainimg.absent"] == ""
    manifest = json.loads(client.containers.run(CPU_TAG, ["cat", "/etc/trainimg/manifest.json"], remove=True,
                                                network_mode="none", entrypoint=[]))
    assert manifest["distributions"]["torch"] == "2.13.0+cpu"
    assert manifest == cpu_rebuild.report["manifest"]


# -- secrets -------------------------------------------------------------------------------------------------------


@dataclass
class SecretBuild:
    tag: str
    report: dict[str, Any]
    log: str  # the CLI's stdout and stderr (--progress plain)
    extra: str  # the extras requirement, unique to this run
    needles: dict[str, bytes]  # what must never appear, by what it is


@pytest.fixture(scope="module")
def secret_build(client: docker.DockerClient, state_env: dict[str, str], registry: RegistryLogin,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecretBuild]:
    tmp = tmp_path_factory.mktemp("secrets")
    run = uuid.uuid4().hex
    # An extra on six, built with no cache: the install steps run (secrets mounted). Each step mounts only its layer
    # group's slice of the lock, so a never-seen extra alone no longer makes its step new (the slice is six==1.16.0).
    # A variant without a framework: every step that mounts a secret is there (the installer's pip, each layer
    # group's uv), and a cold build of it and the scan of its layers take a sixth of the CPU PyTorch image's.
    extra = f"six[t{run}]==1.16.0"
    recipes = write_recipes(tmp, "secrettest", [extra], bare_recipe)
    marker = f"# trainimg-secret-marker-{run}"
    ca = tmp / "proxy-ca.pem"
    ca.write_bytes(REAL_CA_BUNDLE.read_bytes().rstrip(b"\n") + f"\n{marker}\n".encode())
    token = f"tok-{uuid.uuid4().hex}"
    env = {**state_env, "PIP_EXTRA_INDEX_URL": f"https://__token__:{token}@127.0.0.1:9/simple/",
           "TRAINIMG_REGISTRY_PASSWORD": registry.password}
    out = tmp / "build.json"
    tag = f"trainimg-test/secrettest:{BARE_VERSION}"
    r = subprocess.run(["trainimg", "--recipes", str(recipes), "build", "secrettest", "--base-image", LOCAL_BASE,
                        "--no-cache", "--ca-bundle", str(ca), "--progress", "plain", "--json", str(out)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    try:
        assert r.returncode == 0, r.stderr[-3000:]
        (report,) = json.loads(out.read_text(encoding="utf-8"))
        needles = {"CA marker line": marker.encode(), "CA bundle tail": ca.read_bytes()[-2048:],
                   "index token": token.encode(), "registry password": registry.password.encode()}
        yield SecretBuild(tag, report, r.stdout + r.stderr, extra, needles)
    finally:
        remove_image(client, tag)


def _search_stream(fh: IO[bytes], needles: dict[str, bytes], chunk: int = 8 << 20) -> set[str]:
    """Names of the needles found in a byte stream, read in overlapping chunks."""
    found: set[str] = set()
    overlap = max(len(n) for n in needles.values()) - 1
    tail = b""
    while True:
        block = fh.read(chunk)
        if not block:
            return found
        window = tail + block
        found |= {name for name, needle in needles.items() if needle in window}
        tail = window[-overlap:] if overlap > 0 else b""


def scan_saved_image(tar_path: Path, needles: dict[str, bytes]) -> dict[str, list[str]]:
    """`docker save` output: every file of every layer tar, and the config and manifest JSON, searched."""
    hits: dict[str, list[str]] = {}
    layers = files = 0
    with tarfile.open(tar_path) as outer:
        for member in outer:
            if not member.isfile():
                continue
            fh = outer.extractfile(member)
            assert fh is not None
            if member.name.endswith("layer.tar"):
                layers += 1
                with tarfile.open(fileobj=fh, mode="r|") as layer:
                    for item in layer:
                        if not item.isfile():
                            continue
                        files += 1
                        for name in _search_stream(layer.extractfile(item), needles):  # type: ignore[arg-type]
                            hits.setdefault(name, []).append(f"{member.name}:{item.name}")
            else:
                for name in _search_stream(fh, needles):
                    hits.setdefault(name, []).append(member.name)
    assert layers > 3 and files > 1000, (layers, files)  # the scan really read the image
    return hits


def test_secret_build_ran_pip_with_the_secrets(secret_build: SecretBuild) -> None:
    rep = secret_build.report
    assert rep["manifest"]["distributions"]["six"] == "1.16.0"
    assert "cloudml-hypertune" in rep["manifest"]["distributions"]  # the hypertune group's step ran too
    assert rep["cache_hits"] < rep["steps"], "nothing ran: the secrets were never mounted"
    # The extra is in the lock, so the install step of its layer group (secrets mounted) runs anew; the steps of
    # the groups below it mount slices the extra did not change, and stay cached.
    group = lockgroups.group_of("six", ["six"])  # the recipe's own extra: the top step, the extras' group
    assert group == lockgroups.EXTRAS
    step = next(n for n, title in buildkitlog.titles(secret_build.log).items()
                if "--require-hashes" in title and f"/{group}.lock," in title)
    assert step not in buildkitlog.ended(secret_build.log, "CACHED$"), "the extras step (pip, secrets) was cached"
    assert step in buildkitlog.ended(secret_build.log, r"DONE [0-9.]+s$"), f"#{step} did not run to the end"


def test_no_secret_in_layers_config_history_or_log(secret_build: SecretBuild, client: docker.DockerClient,
                                                   docker_cli: str, tmp_path: Path) -> None:
    needles = secret_build.needles
    saved = tmp_path / "image.tar"
    subprocess.run([docker_cli, "save", "-o", str(saved), secret_build.tag], check=True, capture_output=True)
    try:
        assert scan_saved_image(saved, needles) == {}
    finally:
        saved.unlink()
    config = json.dumps(client.api.inspect_image(secret_build.tag)).encode()
    history = subprocess.run([docker_cli, "history", "--no-trunc", secret_build.tag], check=True,
                             capture_output=True).stdout
    for what, text in (("image config", config), ("docker history", history),
                       ("build log", secret_build.log.encode())):
        found = [name for name, needle in needles.items() if needle in text]
        assert found == [], f"{found} in the {what}"


def test_no_secret_file_left_in_the_image(secret_build: SecretBuild, client: docker.DockerClient) -> None:
    marker = secret_build.needles["CA marker line"].decode()
    script = ("test -e /etc/pip.conf && echo present: /etc/pip.conf; "
              "test -d /run/secrets && find /run/secrets -mindepth 1 | sed 's/^/in run-secrets: /'; "
              f"grep -rlF -e '{marker}' / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev 2>/dev/null; "
              "echo grep-exit=$?")
    out = client.containers.run(secret_build.tag, ["sh", "-c", script], entrypoint=[], remove=True,
                                network_mode="none", stderr=False).decode()
    assert out.strip() == "grep-exit=1", out  # no pip.conf, nothing under /run/secrets, no file with the marker


def test_no_run_secrets_directory_in_the_image(secret_build: SecretBuild, client: docker.DockerClient) -> None:
    out = client.containers.run(secret_build.tag, ["sh", "-c", "test -e /run/secrets && echo present; true"],
                                entrypoint=[], remove=True, network_mode="none", stderr=False).decode()
    assert out.strip() == ""


# -- a failing build -------------------------------------------------------------------------------------------


def test_an_unresolvable_pin_fails_when_locking_in_one_line(state_env: dict[str, str], tmp_path: Path) -> None:
    """No committed lock: the build locks first, and a pin no index has stops it there, before the engine."""
    recipes = write_recipes(tmp_path, "failtest-lock", ["six==0.0.999"])
    r = trainimg("--recipes", str(recipes), "build", "failtest-lock", "--base-image", LOCAL_BASE,
                 "--progress", "quiet", env=state_env, timeout=300)
    assert r.returncode == 1, (r.returncode, r.stderr[-3000:])
    line = one_line(r.stderr)
    assert "lock failtest-lock" in line and "six==0.0.999" in line, line


def write_unavailable_lock(recipes: Path, name: str, pin: str) -> None:
    """A lock that is current for the recipe (its header is what `trainimg lock` writes) but pins, besides the
    shipped CPU PyTorch lock's wheels, one that no index has: the engine's install step is what fails."""
    variant = load_recipes(recipes).by_name[name]
    body = lock_path(ROOT, CPU_VARIANT).read_text(encoding="utf-8").split("\n", 1)[1]
    body = "\n".join(ln for ln in body.splitlines() if not ln.startswith("#")) + "\n"
    text = lock_header(variant_requirements(variant, load_compat()), (), UV) + body + f"{pin} \\\n" \
        f"    --hash=sha256:{'0' * 64}\n"
    path = lock_path(recipes.parent, name)
    path.parent.mkdir(parents=True)
    path.write_text(text, encoding="utf-8")


def test_failing_build_exits_1_with_one_line_and_leaves_no_tag(client: docker.DockerClient,
                                                               state_env: dict[str, str], tmp_path: Path) -> None:
    recipes = write_recipes(tmp_path, "failtest", ["six==0.0.999"])
    write_unavailable_lock(recipes, "failtest", "six==0.0.999")
    tag = "trainimg-test/failtest:2.13.0-cpu-py3.11"
    remove_image(client, tag)
    before = {c["Id"] for c in client.api.containers(all=True)}  # one listing: never inspects (other users')
    try:
        r = subprocess.run(["trainimg", "--recipes", str(recipes), "build", "failtest", "--base-image", LOCAL_BASE,
                            "--progress", "quiet"], cwd=ROOT, env=state_env, capture_output=True, text=True,
                           timeout=900)
        assert r.returncode == 1, (r.returncode, r.stderr[-3000:])
        line = one_line(r.stderr)
        assert "stage image failed" in line and "six==0.0.999" in line, line
        with pytest.raises(docker.errors.ImageNotFound):
            client.images.get(tag)
        # Containers this build could make (a classic-builder relabel, a read-back of the manifest) run its own
        # stages' images: none may be left. The engine is shared, so other users' containers are not judged.
        new = [c for c in client.api.containers(all=True) if c["Id"] not in before]
        ours = [c for c in new if "failtest" in c.get("Image", "")
                or (c.get("Labels") or {}).get("trainimg.variant") == "failtest"]
        assert ours == [], [(c["Names"], c["Status"]) for c in ours]
    finally:
        remove_image(client, tag)


# -- push -----------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pushed_refs(client: docker.DockerClient, registry: RegistryLogin) -> Iterator[None]:
    """At teardown, untag the `<registry>/...` names push added locally (the fixture registry's port is this
    session's own; 127.0.0.1:1 is the unreachable one)."""
    yield
    for image in client.images.list():
        for ref in image.tags:
            if ref.startswith((f"{registry.host}/", "127.0.0.1:1/")):
                try:
                    client.api.remove_image(ref)
                except docker.errors.APIError:
                    pass


def push(ref: str, registry: RegistryLogin, env: dict[str, str], *extra: str, host: str | None = None
         ) -> subprocess.CompletedProcess[str]:
    return trainimg("push", ref, "--registry", host or registry.host, *extra, env=env, timeout=300)


def test_push_after_test_passed_matches_the_registry_digest(cpu_image: str, state_env: dict[str, str],
                                                             registry: RegistryLogin, pushed_refs: None) -> None:
    t = trainimg("test", CPU_TAG, "--replicas", "2", "--progress", "quiet", env=state_env, timeout=300)
    assert t.returncode == 0, t.stderr[-3000:]
    env = {**state_env, "TRAINIMG_REGISTRY_PASSWORD": registry.password}
    r = push(CPU_VARIANT, registry, env, "--username", registry.username)
    assert r.returncode == 0, r.stderr[-3000:]
    line = pushed_line(r.stdout, registry.host)
    assert line.startswith(f"pushed {registry.host}/{CPU_TAG}@sha256:"), line
    digest = line.split("@", 1)[1].split()[0]
    assert registry_digest(registry.host, registry.username, registry.password, CPU_TAG) == digest
    assert registry.password not in r.stdout + r.stderr


def test_push_with_a_wrong_password_fails_in_one_line(cpu_image: str, state_env: dict[str, str],
                                                      registry: RegistryLogin, pushed_refs: None) -> None:
    wrong = f"wrong-{uuid.uuid4().hex}"
    r = push(CPU_VARIANT, registry, {**state_env, "TRAINIMG_REGISTRY_PASSWORD": wrong}, "--username",
                registry.username)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    line = one_line(r.stderr)
    assert "rejected the credentials" in line and registry.username in line, line
    assert wrong not in r.stdout + r.stderr and registry.password not in r.stdout + r.stderr


def test_push_without_credentials_fails_with_its_own_message(cpu_image: str, state_env: dict[str, str],
                                                             registry: RegistryLogin, pushed_refs: None,
                                                             tmp_path: Path) -> None:
    config = tmp_path / "docker-config"
    config.mkdir()
    env = {k: v for k, v in state_env.items() if k != "TRAINIMG_REGISTRY_PASSWORD"}
    r = push(CPU_VARIANT, registry, {**env, "DOCKER_CONFIG": str(config)})
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    line = one_line(r.stderr)
    assert "asks for credentials" in line and "rejected" not in line, line


def test_docker_config_set_means_that_folder_only(cpu_image: str, state_env: dict[str, str], registry: RegistryLogin,
                                                 pushed_refs: None, tmp_path: Path) -> None:
    """As the docker CLI: with DOCKER_CONFIG set, a login in ~/.docker/config.json is not used; that folder's
    config.json is, with its `auths`, or a `credHelpers` program (which wins over `auths`)."""
    t = trainimg("test", CPU_TAG, "--replicas", "2", "--progress", "quiet", env=state_env, timeout=300)
    assert t.returncode == 0, t.stderr[-3000:]
    auth = base64.b64encode(f"{registry.username}:{registry.password}".encode()).decode()
    login = json.dumps({"auths": {f"http://{registry.host}": {"auth": auth}}})
    home = tmp_path / "home"
    (home / ".docker").mkdir(parents=True)
    (home / ".docker" / "config.json").write_text(login)
    isolated = tmp_path / "ci-docker-config"
    isolated.mkdir()
    env = {k: v for k, v in state_env.items() if k != "TRAINIMG_REGISTRY_PASSWORD"}
    env.update(HOME=str(home), DOCKER_CONFIG=str(isolated))
    r = push(CPU_VARIANT, registry, env)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "asks for credentials" in one_line(r.stderr), r.stderr
    (isolated / "config.json").write_text(login)
    r = push(CPU_VARIANT, registry, env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert pushed_line(r.stdout, registry.host).startswith(f"pushed {registry.host}/{CPU_TAG}@sha256:"), r.stdout
    # A credential helper named for the host replaces the auths entry (here a wrong one), as in the CLI.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    helper = bin_dir / "docker-credential-trainimgtest"
    answer = json.dumps({"ServerURL": registry.host, "Username": registry.username, "Secret": registry.password})
    # The CLI writes the server to the helper's stdin without a newline, as trainimg does.
    helper.write_text(f"#!/bin/sh\n[ \"$1\" = get ] && host=$(cat) && [ \"$host\" = {registry.host} ] && "
                      f"echo '{answer}' && exit 0\necho 'credentials not found in native keychain'; exit 1\n")
    helper.chmod(0o755)
    wrong = base64.b64encode(f"{registry.username}:wrong".encode()).decode()
    (isolated / "config.json").write_text(json.dumps({"auths": {registry.host: {"auth": wrong}},
                                                      "credHelpers": {registry.host: "trainimgtest"}}))
    r = push(CPU_VARIANT, registry, {**env, "PATH": f"{bin_dir}:{env.get('PATH', os.environ['PATH'])}"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert registry.password not in r.stdout + r.stderr


def test_push_to_an_unreachable_registry_gives_up_after_its_retries(cpu_image: str, state_env: dict[str, str],
                                                                     registry: RegistryLogin, pushed_refs: None,
                                                                     tmp_path: Path) -> None:
    """Bounded: the default retries (a refused port may be a registry restarting), then one line naming it."""
    config = tmp_path / "docker-config"
    config.mkdir()
    r = push(CPU_VARIANT, registry, {**state_env, "DOCKER_CONFIG": str(config)}, host="127.0.0.1:1")
    assert r.returncode == 1, (r.stdout, r.stderr)
    last = r.stderr.strip().splitlines()[-1]
    assert "registry 127.0.0.1:1 is unreachable (connection refused)" in last and last.endswith(
        "(gave up after 5 attempts)"), r.stderr


def test_push_of_an_untested_image_is_refused(cpu_image: str, state_env: dict[str, str], registry: RegistryLogin,
                                              client: docker.DockerClient, pushed_refs: None) -> None:
    made = TestImages(client, cpu_image)
    try:
        tag = made.relabelled()
        assert made.image_id(tag) != client.images.get(cpu_image).id
        env = {**state_env, "TRAINIMG_REGISTRY_PASSWORD": registry.password}
        r = push(tag, registry, env, "--username", registry.username)
        assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
        assert "no conformance record" in one_line(r.stderr)
        assert registry_digest(registry.host, registry.username, registry.password, tag) is None
    finally:
        made.remove_all()
