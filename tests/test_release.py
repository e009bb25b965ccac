"""All-or-nothing releases with a lockfile: `trainimg release --lock`, `build --locked`, `diff`, against the real
engine, BuildKit and the compose registry (htpasswd).

The module writes its own recipes folder: three root CPU PyTorch variants (the shipped CPU entry under other
repositories, so BuildKit's cache of the session's CPU build serves every heavy step):

* `rel-a`, `rel-b`: good; they differ only in their repository (and so their labels);
* `rel-broken`: installs `trainimg-release-breaker==1.0` from a wheelhouse the test writes. The wheel holds a
  ``.pth`` file that makes ``torch.distributed.all_reduce`` add 1 after the real reduction (the patch
  tests/brokenimages.py applies to a built image), so the image builds but fails the all-reduce check: a real
  recipe-level way to make one variant of a release fail conformance.

* `rel-child`: `extends` rel-a with a `six` pin (its repository sorts before the others', so its moving tag is
  the first a release moves).

(a) releasing rel-a with rel-broken pushes nothing and writes no lockfile; (b) releasing rel-a, rel-b and
rel-child pushes all three (immutable, then moving tags) and the lockfile's digests are what the registry serves;
(c) `build --locked` builds on the recorded base; (d) the release's JUnit XML validates against
builder/data/junit.xsd; (e) `diff` names a changed version pin and the layers that differ. Then the CI paths as an
ephemeral runner runs them (issue 41), each on an engine emptied of this module's images first (the
`ephemeral_runner` fixture): (f) the same release again builds nothing, reads no image from the engine and moves
every moving tag onto its immutable tag's digest, with the lockfile and without it; (g) one changed pin rebuilds
only the child, under its skipped parent; (h) `release --stage` then `promote`; (i) a moving tag whose copy fails
puts back the one already moved and writes no lockfile.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
import requests
import xmlschema
from brokenimages import BREAKER, breaker_wheel
from conftest import CPU, LOCAL_BASE, ROOT, cpu_recipe, remove_image, trainimg
from conftest_images import FRAMEWORK_BASE, FRAMEWORK_IMAGES, WHEELHOUSES
from shipped import codename, shipped
from conftest_registry import RegistryLogin
from faultproxy import FaultProxy

from trainimg.publish.lockfile import LockEntry, read_lock
from trainimg.publish.movingtags import moving_tag
from trainimg.publish.push import RegistryTarget
from trainimg.publish.skip import read_decisions
from trainimg.registry.referrers import referrers
from trainimg.registry.registryapi import MANIFEST_TYPES, RegistryAPI
from trainimg.runtime.sbom import MEDIA_TYPE as SBOM_MEDIA_TYPE
from registryread import remote_tags

RUN = uuid.uuid4().hex[:8]
VERSION = CPU.tag_version  # the shipped CPU PyTorch variant's (tests/shipped.py), which cpu_recipe copies
MOVING = f"{'.'.join((CPU.version or '').split('.')[:2])}-cpu"  # its moving tag (publish/movingtags.py)
RELEASED = ("rel-a", "rel-b", "rel-child")
WHEELS = Path("/opt/wheels")



class Release:
    """The module's recipes folder, wheelhouse, registry login and environment."""

    def __init__(self, folder: Path, registry: RegistryLogin, env: dict[str, str]) -> None:
        self.folder = folder
        self.recipes = folder / "recipes"
        self.recipes.mkdir(parents=True)
        self.wheelhouse = folder / "wheels"
        breaker_wheel(self.wheelhouse)
        self.repos = {"rel-a": f"rel-a-{RUN}", "rel-b": f"rel-b-{RUN}", "rel-broken": f"rel-broken-{RUN}",
                      "rel-child": f"rel-0child-{RUN}"}
        for name, repo in self.repos.items():
            if name != "rel-child":
                extras = json.dumps(f"{BREAKER}==1.0") if name == "rel-broken" else ""
                (self.recipes / f"{name}.yaml").write_text(cpu_recipe(name, f"trainimg-test/{repo}", extras),
                                                           encoding="utf-8")
        self.pin_child("1.16.0")
        self.registry = registry
        self.target = RegistryTarget.parse(registry.host)
        self.creds = {"username": registry.username, "password": registry.password}
        self.env = {**env, "TRAINIMG_REGISTRY_PASSWORD": registry.password}
        self.lock = folder / "images.lock"

    def tag(self, name: str) -> str:
        return f"trainimg-test/{self.repos[name]}:{VERSION}"

    def pin_child(self, six: str) -> None:
        (self.recipes / "rel-child.yaml").write_text(
            f"extends: rel-a\nname: rel-child\nrepository: trainimg-test/{self.repos['rel-child']}\n"
            f"extras: [\"six=={six}\"]\n", encoding="utf-8")

    def repositories(self) -> list[str]:
        return [f"trainimg-test/{repo}" for repo in self.repos.values()]

    def build_flags(self) -> list[str]:
        wheels = ["--wheelhouse", str(WHEELS)] if WHEELS.is_dir() else []
        return ["--base-image", LOCAL_BASE, *wheels, "--wheelhouse", str(self.wheelhouse), "--progress", "plain"]

    def release(self, *names: str, out: str, env: dict[str, str] | None = None, lock: Path | None = None,
                host: str | None = None, extra: tuple[str, ...] = ()) -> tuple[Any, Path]:
        report = self.folder / out
        r = trainimg("--recipes", str(self.recipes), "release", *names, *self.build_flags(),
                     "--registry", host or self.registry.host, "--username", self.registry.username,
                     "--lock", str(lock or self.lock), "--junit", str(report.with_suffix(".xml")),
                     "--json", str(report.with_suffix(".json")), "--skip-audit", *extra, env=env or self.env, timeout=600)
        return r, report

    def head(self, ref_tag: str) -> str | None:
        """The manifest digest the registry serves for a local-style `name:tag`, by a plain HEAD with basic auth."""
        name, _, tag = ref_tag.rpartition(":")
        resp = requests.head(f"http://{self.registry.host}/v2/{name}/manifests/{tag}",
                             auth=(self.registry.username, self.registry.password),
                             headers={"Accept": ", ".join(MANIFEST_TYPES)}, timeout=30)
        if resp.status_code == 404:
            return None
        assert resp.status_code == 200, (resp.status_code, resp.text[:300])
        return resp.headers["Docker-Content-Digest"]


@pytest.fixture(scope="module")
def rel(tmp_path_factory: pytest.TempPathFactory, registry: RegistryLogin, state_env: dict[str, str],
        client: docker.DockerClient, image_matrix: list[str]) -> Iterator[Release]:
    """A release of several variants (image_matrix: tier 4), and at the end the removal of what it tagged."""
    release = Release(tmp_path_factory.mktemp("release"), registry, state_env)
    yield release
    # Remove exactly what this module tagged: variant tags, moving tags, registry-qualified tags, locked bases.
    refs = set()
    for name in release.repos:
        tag = release.tag(name)
        refs |= {tag, moving_tag(tag) or tag, release.target.ref(tag), release.target.ref(moving_tag(tag) or tag),
                 f"trainimg-locked/{name}"}
    # One listing call, tags read from its answer: `images.list()` inspects every image and fails when another
    # process removes one in between.
    for image in client.api.images():
        for t in image.get("RepoTags") or []:
            first, _, rest = t.partition("/")  # a registry's name of it, whatever the host (test (i)'s proxy too)
            plain = rest if ":" in first or "." in first else t
            if t in refs or t.rpartition(":")[0] in refs or plain in refs or plain.rpartition(":")[0] in refs:
                try:
                    client.api.remove_image(t, force=True)
                except docker.errors.NotFound:
                    pass


# -- (a) one failing variant: nothing is pushed ----------------------------------------------------------------------


def test_a_failing_variant_pushes_nothing(rel: Release) -> None:
    r, report = rel.release("rel-a", "rel-broken", out="broken")
    assert r.returncode == 1, (r.returncode, r.stderr[-3000:])
    last = r.stderr.strip().splitlines()[-1]
    assert "nothing pushed" in last and "rel-broken failed" in last and "allreduce_vertex_x2" in last, last
    assert "rel-a failed" not in last, last
    for name in ("rel-a", "rel-broken"):
        assert remote_tags(rel.target, f"trainimg-test/{rel.repos[name]}", rel.creds) == [], name
    assert not rel.lock.exists(), "a failed release must not write the lockfile"
    data = json.loads(report.with_suffix(".json").read_text(encoding="utf-8"))
    assert data["passed"] is False
    assert {s["name"]: s["passed"] for s in data["suites"]} == {"rel-a": True, "rel-broken": False}


# -- (b) two good variants: everything pushed, the lockfile says what the registry serves ---------------------------


@pytest.fixture(scope="module")
def good_release(rel: Release) -> Path:
    r, report = rel.release(*RELEASED, out="good")
    assert r.returncode == 0, r.stderr[-3000:]
    return report


def test_b_release_pushes_both_and_locks_registry_digests(rel: Release, good_release: Path,
                                                          client: docker.DockerClient) -> None:
    entries = read_lock(rel.lock)
    assert sorted(entries) == sorted(RELEASED)
    for name in RELEASED:
        tag, entry = rel.tag(name), entries[name]
        assert isinstance(entry, LockEntry)
        assert entry.tag == tag and entry.variant == name
        assert entry.image_id == client.images.get(tag).id
        assert entry.recipe.endswith(f"{name}.yaml"), entry.recipe
        if name != "rel-child":  # the child is built on its parent, as the lockfile says
            assert entry.base_image == LOCAL_BASE
            assert entry.base_digest == client.images.get(LOCAL_BASE).id  # a local base has no RepoDigest
        assert entry.versions["framework"] == f"{CPU.version}+cpu"  # PyTorch's CPU build (its local label)
        assert entry.versions["python"].startswith(f"{CPU.python}.")
        assert entry.versions["hypertune"], entry.versions
        assert entry.conformance["passed"] is True and entry.conformance["failed"] == []
        assert entry.conformance["platform"] == "vertex" and entry.conformance["replicas"] == 2
        # The immutable tag and the moving tag, each with the digest the registry serves (plain HEAD, basic auth).
        mt = moving_tag(tag)
        assert mt == f"trainimg-test/{rel.repos[name]}:{MOVING}"
        assert set(entry.pushed) == {rel.target.ref(tag), rel.target.ref(mt)}
        immutable = rel.head(tag)
        assert immutable is not None
        assert entry.pushed[rel.target.ref(tag)] == immutable
        assert entry.pushed[rel.target.ref(mt)] == rel.head(mt) == immutable
        # Its SBOM beside it: one artifact whose subject is the released manifest (the moving tag adds none).
        sboms = referrers(RegistryAPI(rel.target, rel.creds), f"trainimg-test/{rel.repos[name]}", immutable,
                          SBOM_MEDIA_TYPE)
        assert len(sboms) == 1, sboms
    # Deterministic bytes: sorted keys, two-space indent, one trailing newline.
    text = rel.lock.read_text(encoding="utf-8")
    assert text.endswith("}\n") and not text.endswith("\n\n")
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"


# -- (c) build --locked builds on the recorded base ---------------------------------------------------------------


def test_c_locked_rebuild_uses_the_recorded_base(rel: Release, good_release: Path,
                                                 client: docker.DockerClient) -> None:
    entry = read_lock(rel.lock)["rel-a"]
    out = rel.folder / "locked.json"
    wheels = ["--wheelhouse", str(WHEELS)] if WHEELS.is_dir() else []
    r = trainimg("--recipes", str(rel.recipes), "build", "rel-a", "--locked", "--lock", str(rel.lock), *wheels,
                 "--progress", "plain", "--json", str(out), env=rel.env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (report,) = json.loads(out.read_text(encoding="utf-8"))
    # BuildKit cannot FROM an image ID, so the base is a local tag made from the recorded digest (builder/lock.py).
    assert report["base_image"] == f"trainimg-locked/rel-a:{entry.base_digest[7:19]}", report["base_image"]
    assert client.images.get(report["base_image"]).id == entry.base_digest
    labels = client.images.get(report["image_id"]).labels
    assert labels["org.opencontainers.image.base.name"] == report["base_image"]
    assert report["cache_hits"] == report["steps"], "a locked rebuild on the same base must hit the cache"

    # A variant the lockfile does not know: bad input, one line naming the lockfile.
    r = trainimg("--recipes", str(rel.recipes), "build", "rel-broken", "--locked", "--lock", str(rel.lock),
                 env=rel.env, timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert str(rel.lock) in r.stderr and "rel-broken" in r.stderr and len(r.stderr.strip().splitlines()) == 1


# -- (d) the JUnit report validates against Jenkins' schema ---------------------------------------------------------


def test_d_junit_validates_against_the_jenkins_schema(good_release: Path) -> None:
    schema = xmlschema.XMLSchema(str(ROOT / "builder" / "conformance" / "data" / "junit.xsd"))
    xml = good_release.with_suffix(".xml")
    errors = [f"{e.path}: {e.reason}" for e in schema.iter_errors(str(xml))]
    assert errors == [], errors
    doc = schema.to_dict(str(xml))
    assert {s["@name"] for s in doc["testsuite"]} == set(RELEASED)


# -- (e) diff names a changed pin and the layers that differ -------------------------------------------------------


@pytest.fixture(scope="module")
def pinned_pair(client: docker.DockerClient, rel: Release, good_release: Path) -> Iterator[tuple[str, str]]:
    """Two tiny images FROM the CPU variant's image of this release, differing in a version pin and one layer."""
    made = []
    for framework, marker in (("2.13.0+cpu", "one"), ("2.13.1+cpu", "two")):
        dockerfile = (f"FROM {rel.tag('rel-a')}\n"
                      f"LABEL trainimg.version.framework={framework}\n"
                      f"RUN echo {marker}-{RUN} > /trainimg-diff-test\n")
        image, _ = client.images.build(fileobj=io.BytesIO(dockerfile.encode()), labels={"trainimg.test": "1"},
                                       rm=True, forcerm=True, pull=False)
        tag = f"trainimg-test/diff-{RUN}:{marker}"
        image.tag(tag)
        made.append(tag)
    yield made[0], made[1]
    for tag in made:
        remove_image(client, tag)


def test_e_diff_shows_a_changed_pin_and_layers(rel: Release, pinned_pair: tuple[str, str]) -> None:
    a, b = pinned_pair
    r = trainimg("--recipes", str(rel.recipes), "diff", a, b, "--json", env=rel.env, timeout=120)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["same"] is False
    assert d["versions"] == {"framework": {"a": "2.13.0+cpu", "b": "2.13.1+cpu"}}
    assert d["layers"]["a"] == d["layers"]["b"] and d["layers"]["common_prefix"] == d["layers"]["a"] - 1
    assert len(d["layers"]["added"]) == 1 and len(d["layers"]["removed"]) == 1
    r = trainimg("--recipes", str(rel.recipes), "diff", a, b, env=rel.env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "framework: 2.13.0+cpu -> 2.13.1+cpu" in r.stdout
    assert f"+ {d['layers']['added'][0]}" in r.stdout and f"- {d['layers']['removed'][0]}" in r.stdout


def test_e_diff_against_the_lockfile(rel: Release, good_release: Path, pinned_pair: tuple[str, str]) -> None:
    # A variant name against its own lock entry: the same image.
    r = trainimg("--recipes", str(rel.recipes), "diff", "rel-b", "lock:rel-b", "--lock", str(rel.lock), "--json",
                 env=rel.env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["same"] is True
    # The lock entry (by file path) against an image whose pin moved.
    r = trainimg("--recipes", str(rel.recipes), "diff", f"{rel.lock}:rel-a", pinned_pair[1], "--json",
                 env=rel.env, timeout=120)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["a"]["source"] == "lock" and d["versions"]["framework"] == {"a": "2.13.0+cpu", "b": "2.13.1+cpu"}
    assert d["layers"]["added"] and not d["layers"]["removed"]
    # A variant the lockfile lacks: bad input naming the lockfile.
    r = trainimg("--recipes", str(rel.recipes), "diff", "rel-a", "lock:nope", "--lock", str(rel.lock),
                 env=rel.env, timeout=120)
    assert r.returncode == 2 and "nope" in r.stderr and str(rel.lock) in r.stderr, (r.returncode, r.stderr)


# -- (f)-(i) the CI paths on an ephemeral runner: the engine emptied of this module's images first (issue 41) -------

# What a release asks the engine for when it builds, tests or pushes (a no-op release must ask none of these).
_ENGINE_WORK = re.compile(r"^(POST \S*/(build|session|containers/create|images/\S+/(push|tag))|GET \S*/images/get)")


def _registry_digests(rel: Release) -> dict[str, tuple[str | None, str | None]]:
    """{variant: (immutable tag's digest, moving tag's digest)} as the registry serves them."""
    return {name: (rel.head(rel.tag(name)), rel.head(moving_tag(rel.tag(name)) or "")) for name in RELEASED}


def _assert_moving_on_immutable(rel: Release) -> dict[str, str]:
    digests = _registry_digests(rel)
    for name, (immutable, moving) in digests.items():
        assert immutable is not None and moving == immutable, (name, immutable, moving)
    return {name: pair[0] for name, pair in digests.items() if pair[0]}


def test_f_a_noop_release_on_an_empty_runner_builds_and_reads_nothing(
        rel: Release, good_release: Path, ephemeral_runner: Any, tmp_path: Path) -> None:
    digests = _assert_moving_on_immutable(rel)
    lock_before = read_lock(rel.lock)
    runner = ephemeral_runner(rel.repositories(), rel.env)
    assert runner.removed, "the first release left no image of this module to take away"
    mark = len(runner.recorder.requests)
    r, _ = rel.release(*RELEASED, out="noop", env=runner.env)
    assert r.returncode == 0, r.stderr[-3000:]
    said = r.stdout + r.stderr
    decisions = read_decisions(said)
    assert sorted(decisions) == sorted(RELEASED) and all(skip for skip, _ in decisions.values()), decisions
    assert all("(lockfile)" in why for _, why in decisions.values()), decisions
    assert _assert_moving_on_immutable(rel) == digests
    assert {n: e.pushed for n, e in read_lock(rel.lock).items()} == {n: e.pushed for n, e in lock_before.items()}
    pushes = re.findall(r"^pushed (\S+) \((\d+) bytes uploaded\)", said, re.MULTILINE)
    assert sorted(ref.split("@")[0] for ref, _ in pushes) == sorted(
        rel.target.ref(moving_tag(rel.tag(n)) or "") for n in RELEASED), pushes  # the moving tags alone
    assert all(int(sent) == 0 for _, sent in pushes), pushes
    asked = runner.recorder.since(mark)
    assert asked, "the recorder saw no engine request: was DOCKER_HOST honoured?"
    mine = [line for line in asked if any(repo in line for repo in rel.repos.values())]
    assert mine == [] and [line for line in asked if _ENGINE_WORK.match(line)] == [], asked

    # A runner without the lockfile (a pipeline's first job): the release records beside the images vouch.
    bare = tmp_path / "images.lock"
    r, _ = rel.release(*RELEASED, out="noop-bare", env=runner.env, lock=bare)
    assert r.returncode == 0, r.stderr[-3000:]
    decisions = read_decisions(r.stdout + r.stderr)
    assert all(skip and "(record beside the image)" in why for skip, why in decisions.values()), decisions
    assert {n: e.pushed for n, e in read_lock(bare).items()} == {n: e.pushed for n, e in lock_before.items()}
    assert _assert_moving_on_immutable(rel) == digests


def test_g_one_change_on_an_empty_runner_rebuilds_only_it(rel: Release, good_release: Path,
                                                          ephemeral_runner: Any) -> None:
    before = _assert_moving_on_immutable(rel)
    rel.pin_child("1.17.0")
    runner = ephemeral_runner(rel.repositories(), rel.env)
    r, _ = rel.release(*RELEASED, out="one-change", env=runner.env)
    assert r.returncode == 0, r.stderr[-3000:]
    decisions = read_decisions(r.stdout + r.stderr)
    assert {n: skip for n, (skip, _) in decisions.items()} == {"rel-a": True, "rel-b": True, "rel-child": False}
    # The runner has no `docker login`, so BuildKit could not read the release's images as cache: the build says so.
    built = next(line for line in r.stderr.splitlines() if line.startswith("trainimg: built ") and "0child" in line)
    assert "; cache not read: " in built and "401 Unauthorized" in built and "docker login" in built, built
    after = _assert_moving_on_immutable(rel)
    assert after["rel-child"] != before["rel-child"]
    assert {n: after[n] for n in ("rel-a", "rel-b")} == {n: before[n] for n in ("rel-a", "rel-b")}
    entries = read_lock(rel.lock)
    for name in RELEASED:
        ref, mt = rel.target.ref(rel.tag(name)), rel.target.ref(moving_tag(rel.tag(name)) or "")
        assert entries[name].pushed == {ref: after[name], mt: after[name]}, (name, entries[name].pushed)


def test_h_stage_then_promote_on_an_empty_runner(rel: Release, good_release: Path, ephemeral_runner: Any,
                                                 tmp_path: Path) -> None:
    digests = _assert_moving_on_immutable(rel)
    runner = ephemeral_runner(rel.repositories(), rel.env)
    mark = len(runner.recorder.requests)
    parts = tmp_path / "lock.d"
    r, _ = rel.release(*RELEASED, out="staged", env=runner.env, extra=("--stage", "--lock-dir", str(parts)))
    assert r.returncode == 0, r.stderr[-3000:]
    assert all(skip for skip, _ in read_decisions(r.stdout + r.stderr).values())
    assert sorted(p.name for p in parts.iterdir()) == sorted(f"{n}.json" for n in RELEASED)
    promoted = tmp_path / "images.lock"
    p = trainimg("--recipes", str(rel.recipes), "promote", str(parts), *RELEASED, "--registry", rel.registry.host,
                 "--username", rel.registry.username, "--lock", str(promoted), env=runner.env, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert _assert_moving_on_immutable(rel) == digests
    assert {n: e.pushed[rel.target.ref(rel.tag(n))] for n, e in read_lock(promoted).items()} == digests
    asked = runner.recorder.since(mark)
    assert [line for line in asked if any(repo in line for repo in rel.repos.values())] == [], asked


def test_i_a_failed_moving_tag_puts_back_what_moved_and_writes_no_lock(
        rel: Release, good_release: Path, ephemeral_runner: Any, tmp_path: Path) -> None:
    before = _registry_digests(rel)
    rel.pin_child("1.15.0")  # the child is rebuilt: its moving tag (sorted first) moves, then rel-a's copy fails
    runner = ephemeral_runner(rel.repositories(), rel.env)
    host, port = rel.registry.host.rsplit(":", 1)
    with FaultProxy(upstream=(host, int(port)), lifetime=600.0) as proxy:
        proxied = f"127.0.0.1:{proxy.port}"
        # This runner's checkout reaches the registry by the proxy's address: so do its lockfile's references.
        lock = tmp_path / "images.lock"
        lock.write_text(rel.lock.read_text(encoding="utf-8").replace(rel.registry.host, proxied), encoding="utf-8")
        lock_before = lock.read_bytes()
        proxy.fail(rf"^PUT /v2/trainimg-test/{rel.repos['rel-a']}/manifests/{re.escape(MOVING)}$", status=503)
        r, _ = rel.release(*RELEASED, out="half", env=runner.env, host=proxied, lock=lock)
    assert r.returncode == 1, (r.returncode, r.stderr[-3000:])
    decisions = read_decisions(r.stdout + r.stderr)
    assert {n: skip for n, (skip, _) in decisions.items()} == {"rel-a": True, "rel-b": True, "rel-child": False}
    last = r.stderr.strip().splitlines()[-1]
    assert f"{rel.repos['rel-a']}:{MOVING} could not be set" in last and "503" in last, last
    assert f"put back {proxied}/trainimg-test/{rel.repos['rel-child']}:{MOVING}" in last, last
    after = _registry_digests(rel)
    assert after["rel-child"][0] != before["rel-child"][0]  # the immutable tag was pushed: the new image is there
    assert {n: pair[1] for n, pair in after.items()} == {n: pair[1] for n, pair in before.items()}  # no tag moved
    assert lock.read_bytes() == lock_before
    assert not list(tmp_path.glob(".images.lock.*")), "the lockfile written beside it was left behind"


# -- (j) the Debian 13 / Python 3.13 CPU images of TensorFlow and JAX, released ----------------------------------------


def test_j_the_debian13_framework_images_release(framework_images: dict[str, str], registry: RegistryLogin,
                                                 state_env: dict[str, str], client: docker.DockerClient,
                                                 tmp_path: Path) -> None:
    """The shipped trixie CPU variants of TensorFlow and JAX (tests/shipped.py), each copied under a test repository
    with its committed lock (amd64: the session's framework_images build is the cache of every heavy step, and no
    shipped tag moves), released: each passes the all-reduce on 2 replicas and is pushed, and the lockfile and the
    image say the Debian release and Python their recipes ask."""
    shipped_variants = {fw: shipped().by_name[variant] for fw, (variant, _) in FRAMEWORK_IMAGES.items()}
    recipes, names = tmp_path / "recipes", {fw: f"rel-{fw}" for fw in shipped_variants}
    recipes.mkdir()
    for fw, v in shipped_variants.items():
        (recipes / f"{fw}.yaml").write_text(
            f"framework: {fw}\nname: {names[fw]}\nrepository: trainimg-test/rel-{fw}-{RUN}\nmatrix:\n"
            f"  - version: [\"{v.version}\"]\n    os: [{v.os}]\n    python: [\"{v.python}\"]\n", encoding="utf-8")
        (tmp_path / "images" / names[fw]).mkdir(parents=True)
        shutil.copyfile(ROOT / "images" / v.name / "requirements.lock",
                        tmp_path / "images" / names[fw] / "requirements.lock")
    lock, report = tmp_path / "images.lock", tmp_path / "release.json"
    env = {**state_env, "TRAINIMG_REGISTRY_PASSWORD": registry.password}
    target = RegistryTarget.parse(registry.host)
    tags = [f"trainimg-test/rel-{fw}-{RUN}:{v.tag_version}" for fw, v in shipped_variants.items()]
    try:
        r = trainimg("--recipes", str(recipes), "release", *names.values(), "--base-image", FRAMEWORK_BASE,
                     *WHEELHOUSES, "--registry", registry.host, "--username", registry.username, "--replicas", "2",
                     "--lock", str(lock), "--json", str(report), "--skip-audit", "--progress", "plain", env=env,
                     timeout=1800)
        assert r.returncode == 0, r.stderr[-3000:]
        suites = {s["name"]: s for s in json.loads(report.read_text(encoding="utf-8"))["suites"]}
        entries = read_lock(lock)
        for (fw, v), tag in zip(shipped_variants.items(), tags):
            checks = {c["name"]: c["status"] for c in suites[names[fw]]["checks"]}
            assert checks["framework"] == checks["allreduce_vertex_x2"] == "passed", checks
            entry = entries[names[fw]]
            assert entry.base_image == FRAMEWORK_BASE and entry.versions["python"].startswith(f"{v.python}.")
            assert entry.versions["framework"] == v.version, entry.versions
            assert entry.pushed[target.ref(tag)] == registry_head(registry, tag)
            release = client.containers.run(tag, ["cat", "/etc/os-release"], entrypoint=[], remove=True,
                                            network_mode="none").decode()
            assert f"VERSION_CODENAME={codename(v.os)}" in release, release
    finally:  # what this test tagged: the variants' tags and their registry's names
        for tag in tags:
            for ref in (tag, moving_tag(tag) or tag):
                remove_image(client, ref)
                remove_image(client, target.ref(ref))


def registry_head(registry: RegistryLogin, ref_tag: str) -> str | None:
    """The digest the registry serves for `name:tag` (a plain HEAD with basic auth)."""
    name, _, tag = ref_tag.rpartition(":")
    resp = requests.head(f"http://{registry.host}/v2/{name}/manifests/{tag}",
                         auth=(registry.username, registry.password),
                         headers={"Accept": ", ".join(MANIFEST_TYPES)}, timeout=30)
    return resp.headers.get("Docker-Content-Digest") if resp.status_code == 200 else None
