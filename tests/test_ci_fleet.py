"""CI at fleet scale against the real engine, BuildKit and a real registry (Debian's docker-registry with its
access log on): the inputs key and skipping (on the lockfile's record, or on the release record beside the image),
a moving tag set by a manifest copy (no blob moves), --rebuild, a changed pin and a changed parent, release --stage
and promote, no dangling image after a rebuild, and `trainimg prune`.

The module's recipes are three small variants FROM local/debian:bookworm without a framework (Python, hypertune,
the runtime: seconds to build from BuildKit's cache): `dsk-a`, `dsk-b` (roots) and `dsk-child` (extends dsk-a,
pins six). Each carries the label `dsk.run=<this run>`, so prune is scoped to this module's images.
Tests run in file order: each step starts from what the one before left in the registry and the lockfile.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import shutil
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest
from conftest import BARE_VERSION, LOCAL_BASE, bare_recipe, trainimg
from trustworld import PASSWORD, Consumers

from trainimg.registry.accesslog import fetched_blobs, layer_digests, log_offset, requests_since, uploads
from trainimg.registry.localregistry import LocalRegistry
from trainimg.publish.lockfile import read_lock
from trainimg.publish.movingtags import copy_moving_tags
from trainimg.publish.passrecord import RECORD_TYPE, attach_records, registry_entry
from trainimg.registry.referrers import attach, subject_of
from trainimg.registry.references import RegistryTarget
from trainimg.registry.registryapi import RegistryAPI
from trainimg.publish.skip import BUILDING, SKIPPED, decide, read_decisions
from trainimg.recipe.loading import load_recipes
from trainimg.runtime.contract import INPUTS_LABEL
from trainimg.trust import attached, dsse
from trainimg.trust.keys import load_public_key

RUN = uuid.uuid4().hex[:8]
RUN_LABEL = f"dsk.run={RUN}"
NAMES = ("dsk-a", "dsk-b", "dsk-child")


def _root(name: str, extra_labels: str = "") -> str:
    return bare_recipe(name, f"dsk-{RUN}/{name}") + f"labels: {{dsk.run: \"{RUN}\"{extra_labels}}}\n"


def _child(pin: str) -> str:
    return (f"name: dsk-child\nrepository: dsk-{RUN}/dsk-child\nextends: dsk-a\nextras: [\"six=={pin}\"]\n"
            f"labels: {{dsk.run: \"{RUN}\"}}\n")


class Fleet:
    """The module's recipes, registry (access log on), lockfile and environment."""

    def __init__(self, folder: Path, registry: LocalRegistry, env: dict[str, str]) -> None:
        self.folder, self.registry = folder, registry
        self.recipes = folder / "recipes"
        self.recipes.mkdir()
        self.write("dsk-a", _root("dsk-a"))
        self.write("dsk-b", _root("dsk-b"))
        self.write("dsk-child", _child("1.16.0"))
        info = registry.start()
        self.host, self.user, self.password = info.host, info.username, info.password
        self.env = {**env, "TRAINIMG_REGISTRY_PASSWORD": info.password}
        self.lock = folder / "images.lock"
        self.target = RegistryTarget.parse(self.host)

    def write(self, name: str, text: str) -> None:
        (self.recipes / f"{name}.yaml").write_text(text, encoding="utf-8")

    def tag(self, name: str) -> str:
        return f"dsk-{RUN}/{name}:{BARE_VERSION}"

    def cli(self, *args: str, timeout: float = 600) -> tuple[int, str, str]:
        r = trainimg("--recipes", str(self.recipes), *args, env=self.env, timeout=timeout)
        return r.returncode, r.stdout, r.stderr

    def release(self, *extra: str) -> tuple[int, str, str]:
        return self.cli("release", *NAMES, "--base-image", LOCAL_BASE, "--progress", "plain", "--registry",
                        self.host, "--username", self.user, "--lock", str(self.lock), "--skip-audit", *extra)

    def log_offset(self) -> int:
        return log_offset(self.registry.log_path)

    def blob_gets(self, since: int) -> list[str]:
        """The digest of every blob the registry served after byte `since` of its access log."""
        return [digest for digest, _ in fetched_blobs(requests_since(self.registry.log_path, since))]

    def api(self) -> RegistryAPI:
        return RegistryAPI(self.target, {"username": self.user, "password": self.password})

    def layers(self) -> set[str]:
        found: set[str] = set()
        for name in NAMES:
            layers = layer_digests(self.api(), *self.tag(name).rsplit(":", 1))
            assert layers, name
            found |= layers
        return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, state_env: dict[str, str],
          client: docker.DockerClient, image_matrix: list[str]) -> Iterator[Fleet]:
    """A fleet of variants released to its own registry (image_matrix: tier 4); its images removed at the end."""
    folder = tmp_path_factory.mktemp("dsk-fleet")
    registry = LocalRegistry(folder / "registry", port=_free_port(), access_log=True)
    fleet = Fleet(folder, registry, state_env)
    yield fleet
    registry.stop()
    for image in client.images.list(filters={"label": RUN_LABEL}):
        try:
            client.images.remove(image.id, force=True)
        except docker.errors.APIError:
            pass


def _lines(out: str, word: str) -> dict[str, str]:
    """{variant: reason} of the `skipped X: ...` (word SKIPPED) or `building X: ...` (BUILDING) lines."""
    return {name: why for name, (skipped, why) in read_decisions(out).items() if skipped == (word == SKIPPED)}


def test_first_release_records_the_inputs_key(fleet: Fleet, client: docker.DockerClient) -> None:
    code, out, err = fleet.release()
    assert code == 0, err[-3000:]
    assert set(_lines(out, BUILDING)) == set(NAMES), out
    assert len(re.findall(r"^record: pushed ", out, re.M)) == len(NAMES), out  # each entry beside its image
    entries = read_lock(fleet.lock)
    for name in NAMES:
        key = entries[name].inputs
        assert key and key.startswith("sha256:"), entries[name]
        assert client.images.get(fleet.tag(name)).labels[INPUTS_LABEL] == key
    assert len({entries[n].inputs for n in NAMES}) == 3


def test_a_moving_tag_is_a_manifest_copy_no_layer_moves(fleet: Fleet) -> None:
    """copy_moving_tags (release's last step, and promote's) on a real pushed image: the moving tag names the
    immutable manifest's digest, and the registry's access log shows manifest requests only: no blob fetched,
    no upload started."""
    repo, tag = fleet.tag("dsk-a").rsplit(":", 1)
    api = fleet.api()
    digest = api.remote_digest(repo, tag)
    assert digest is not None
    since = fleet.log_offset()
    moved = copy_moving_tags(api, fleet.target, {f"{repo}:1.2.3-cpu-py3.11": digest})
    assert list(moved) == [f"{repo}:1.2-cpu"], moved
    assert moved[f"{repo}:1.2-cpu"].digest == digest and moved[f"{repo}:1.2-cpu"].bytes_uploaded == 0
    logged = requests_since(fleet.registry.log_path, since)
    assert api.remote_digest(repo, "1.2-cpu") == digest
    assert fetched_blobs(logged) == [] and uploads(logged) == [], logged
    assert {(r.method, r.path) for r in logged if r.status < 400} == {
        ("GET", f"/v2/{repo}/manifests/{digest}"), ("PUT", f"/v2/{repo}/manifests/1.2-cpu")}, logged


def test_nothing_changed_skips_everything_without_a_layer_get(fleet: Fleet, client: docker.DockerClient) -> None:
    before = read_lock(fleet.lock)
    for name in NAMES:  # an empty runner: the images are only in the registry
        client.images.remove(fleet.tag(name), force=True)
    since = fleet.log_offset()
    code, out, err = fleet.release()
    assert code == 0, err[-3000:]
    skipped = _lines(out, SKIPPED)
    assert set(skipped) == set(NAMES) and not _lines(out, BUILDING), out
    assert all("unchanged" in why and "passed conformance" in why for why in skipped.values()), skipped
    layer_gets = [d for d in fleet.blob_gets(since) if d in fleet.layers()]
    assert layer_gets == [], layer_gets
    assert fleet.blob_gets(since), "the config blobs are read (the labels): the access log must show them"
    assert read_lock(fleet.lock) == before  # the entries are kept as they were
    for name in NAMES:
        with pytest.raises(docker.errors.ImageNotFound):
            client.images.get(fleet.tag(name))


def test_a_runner_without_the_lockfile_trusts_the_record_beside_the_image(fleet: Fleet) -> None:
    """No lockfile, no image on the engine: the release entry each release pushed beside its image (an OCI artifact
    whose subject is the image's manifest) is the passed record; the lockfile is written back from it, the same."""
    before = read_lock(fleet.lock)
    fleet.lock.rename(fleet.lock.with_suffix(".kept"))
    since = fleet.log_offset()
    code, out, err = fleet.release()
    assert code == 0, err[-3000:]
    skipped = _lines(out, SKIPPED)
    assert set(skipped) == set(NAMES) and not _lines(out, BUILDING), out
    assert all(why.endswith("passed conformance (record beside the image)") for why in skipped.values()), skipped
    assert [d for d in fleet.blob_gets(since) if d in fleet.layers()] == []
    assert read_lock(fleet.lock) == before


def test_a_record_of_other_inputs_or_a_failed_run_is_not_trusted(fleet: Fleet) -> None:
    """The record beside the image must name the same variant, digest and inputs key, and have passed."""
    entry = read_lock(fleet.lock)["dsk-b"]
    ref = fleet.target.ref(entry.tag)
    digest = entry.pushed[ref]
    assert entry.inputs is not None
    assert registry_entry(fleet.api(), fleet.target, entry.tag, digest, "dsk-b", entry.inputs) == entry
    assert registry_entry(fleet.api(), fleet.target, entry.tag, digest, "dsk-b", "sha256:" + "1" * 64) is None
    assert registry_entry(fleet.api(), fleet.target, entry.tag, digest, "dsk-a", entry.inputs) is None
    failed = dataclasses.replace(entry, conformance={**entry.conformance, "passed": False})
    attach_records(fleet.api(), fleet.target, [failed])  # the newest record is the one read
    assert registry_entry(fleet.api(), fleet.target, entry.tag, digest, "dsk-b", entry.inputs) is None
    variant = load_recipes(fleet.recipes).by_name["dsk-b"]
    no_lock = decide(fleet.api(), fleet.target, [variant], {"dsk-b": entry.inputs}, {}, rebuild=False)["dsk-b"]
    assert not no_lock.skip and no_lock.reason.endswith("in the lockfile or beside the image"), no_lock
    repository = entry.tag.rsplit(":", 1)[0]
    attach(fleet.api(), repository, subject_of(fleet.api(), repository, digest), RECORD_TYPE, b"not json")
    malformed = decide(fleet.api(), fleet.target, [variant], {"dsk-b": entry.inputs}, {}, rebuild=False)["dsk-b"]
    assert not malformed.skip and "is malformed" in malformed.reason, malformed  # a build, not a failed release


def test_a_changed_pin_rebuilds_that_variant_only(fleet: Fleet) -> None:
    fleet.write("dsk-child", _child("1.17.0"))
    old = read_lock(fleet.lock)["dsk-child"].inputs
    code, out, err = fleet.release()
    assert code == 0, err[-3000:]
    assert set(_lines(out, SKIPPED)) == {"dsk-a", "dsk-b"}, out
    assert _lines(out, BUILDING)["dsk-child"].startswith("inputs changed"), out
    assert read_lock(fleet.lock)["dsk-child"].inputs != old


def test_a_signed_release_signs_what_it_builds_and_what_it_keeps(fleet: Fleet, tmp_path: Path) -> None:
    """`release --sign-key`: the variant built and the two kept are signed and attested after their SBOMs and
    records, and cosign and `verify --key` accept each (and a `push --sign-key` to another repository, signed for
    that one); the built one's provenance names what this run built it from and when, the kept ones' only what
    their labels and lock entries say."""
    consumers = Consumers(tmp_path, fleet.host, fleet.user, fleet.password)
    fleet.write("dsk-child", _child("1.16.0"))  # the first pin again: BuildKit's cache holds its layers
    fleet.env["TRAINIMG_SIGN_PASSWORD"] = PASSWORD
    try:
        code, out, err = fleet.release("--sign-key", str(consumers.ours[0]))
        # `push --sign-key` of a kept variant's local image to another repository: signed for that repository. The
        # engine's dsk-a may be the build the child's FROM needed (from cache, a new image ID, never tested), and push
        # sends only a tested image: the team tests it first, as it would.
        tested = fleet.cli("test", fleet.tag("dsk-a"), "--replicas", "1", "--progress", "quiet")
        assert tested[0] == 0, tested[2][-3000:]
        pushed = fleet.cli("push", "dsk-a", "--registry", f"{fleet.host}/mirror", "--username", fleet.user,
                           "--sign-key", str(consumers.ours[0]))
    finally:
        del fleet.env["TRAINIMG_SIGN_PASSWORD"]
    assert code == 0, err[-3000:]
    assert pushed[0] == 0 and "signed: " in pushed[1], pushed[2][-3000:]
    assert set(_lines(out, BUILDING)) == {"dsk-child"} and set(_lines(out, SKIPPED)) == {"dsk-a", "dsk-b"}, out
    lines = out.splitlines()
    signed = [i for i, line in enumerate(lines) if line.startswith("signed: ")]
    assert len(signed) == 3 and max(i for i, line in enumerate(lines) if line.startswith("record: ")) < signed[0], out
    checkers = ("trainimg", "cosign-identity", "cosign-attestation")  # skopeo: tests/test_trust_consumers.py
    for ref in [*(fleet.target.ref(fleet.tag(name)) for name in NAMES), f"{fleet.host}/mirror/{fleet.tag('dsk-a')}"]:
        verdicts = consumers.verdicts(ref, consumers.ours[1], checkers)
        assert {c: v[0] for c, v in verdicts.items()} == dict.fromkeys(checkers, True), verdicts
    public = load_public_key(consumers.ours[1])
    for name, built in (("dsk-child", True), ("dsk-a", False)):
        repository, tag = fleet.tag(name).rsplit(":", 1)
        digest = fleet.api().remote_digest(repository, tag)
        assert digest is not None
        (layer,) = attached.read(fleet.api(), repository, attached.attestation_tag(digest))
        opened = dsse.open_envelope(layer.payload, public)
        assert isinstance(opened, tuple)
        predicate = json.loads(opened[1])["predicate"]
        names = {d["name"] for d in predicate["buildDefinition"]["resolvedDependencies"]}
        assert ({f"recipes/{name}.yaml", f"images/{name}/Dockerfile"} <= names) == built, names
        assert ("startedOn" in predicate["runDetails"].get("metadata", {})) == built, predicate["runDetails"]
        assert {b["name"] for b in predicate["runDetails"]["byproducts"]} == {"sbom.cdx.json", "release-entry.json"}


def test_a_changed_parent_rebuilds_its_child(fleet: Fleet) -> None:
    fleet.write("dsk-a", _root("dsk-a", ", dsk.note: changed"))
    code, out, err = fleet.release()
    assert code == 0, err[-3000:]
    building = _lines(out, BUILDING)
    assert set(building) == {"dsk-a", "dsk-child"} and set(_lines(out, SKIPPED)) == {"dsk-b"}, out
    assert building["dsk-child"].startswith("its parent changed"), building


def test_rebuild_forces_and_leaves_no_dangling_image(fleet: Fleet, client: docker.DockerClient) -> None:
    code, _, err = fleet.cli("build", "dsk-b", "--base-image", LOCAL_BASE, "--progress", "plain")  # skipped so far
    assert code == 0, err[-3000:]
    old_id = client.images.get(fleet.tag("dsk-b")).id
    fleet.write("dsk-b", _root("dsk-b", ", dsk.note: relabelled"))  # a new image ID: the tag moves
    code, out, err = fleet.release("--rebuild")
    assert code == 0, err[-3000:]
    assert set(_lines(out, BUILDING)) == set(NAMES) and all(
        why == "--rebuild" for why in _lines(out, BUILDING).values()), out
    assert client.images.get(fleet.tag("dsk-b")).id != old_id
    with pytest.raises(docker.errors.ImageNotFound):
        client.images.get(old_id)  # the image the tag left was trainimg's and unused: removed
    dangling = client.images.list(filters={"dangling": True, "label": RUN_LABEL})
    assert dangling == [], [i.id for i in dangling]
    passes = [t for i in client.images.list(name="trainimg-pass/*") for t in i.tags if "/dsk-" in t]
    assert passes == [], passes


# -- stage and promote ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def staged(fleet: Fleet) -> Path:
    lock_dir = fleet.folder / "lock.d"
    fleet.write("dsk-b", _root("dsk-b", ", dsk.note: staged"))  # one variant built by the stage job, two skipped
    code, out, err = fleet.cli("release", *NAMES, "--stage", "--lock-dir", str(lock_dir), "--lock", str(fleet.lock),
                               "--base-image", LOCAL_BASE, "--progress", "plain", "--registry", fleet.host,
                               "--username", fleet.user, "--skip-audit")
    assert code == 0, err[-3000:]
    assert set(_lines(out, BUILDING)) == {"dsk-b"} and set(_lines(out, SKIPPED)) == {"dsk-a", "dsk-child"}, out
    return lock_dir


def _promote(fleet: Fleet, lock_dir: Path, lock: Path) -> tuple[int, str, str]:
    return fleet.cli("promote", str(lock_dir), *NAMES, "--registry", fleet.host, "--username", fleet.user,
                     "--lock", str(lock), timeout=120)


def test_stage_writes_a_part_per_variant_and_promote_locks_them(fleet: Fleet, staged: Path) -> None:
    assert sorted(p.name for p in staged.iterdir()) == [f"{n}.json" for n in sorted(NAMES)]
    lock = fleet.folder / "promoted.lock"
    code, out, err = _promote(fleet, staged, lock)
    assert code == 0, err
    entries = read_lock(lock)
    api = RegistryAPI(fleet.target, {"username": fleet.user, "password": fleet.password})
    for name in NAMES:
        ref = fleet.target.ref(fleet.tag(name))
        part = read_lock(staged / f"{name}.json")[name]
        assert entries[name].pushed[ref] == part.pushed[ref] == api.remote_digest(*fleet.tag(name).rsplit(":", 1))
        assert entries[name].inputs == part.inputs and entries[name].conformance["passed"] is True


@pytest.mark.parametrize("damage", ["missing", "failed", "not_in_registry"])
def test_promote_moves_nothing_when_a_part_is_wrong(fleet: Fleet, staged: Path, damage: str) -> None:
    broken = fleet.folder / f"lock.d-{damage}"
    shutil.copytree(staged, broken)
    part = broken / "dsk-b.json"
    if damage == "missing":
        part.unlink()
    else:
        data = json.loads(part.read_text(encoding="utf-8"))
        entry = data["variants"]["dsk-b"]
        if damage == "failed":
            entry["conformance"].update(passed=False, failed=["hypertune"])
        else:
            entry["pushed"] = {ref: "sha256:" + "0" * 64 for ref in entry["pushed"]}
        part.write_text(json.dumps(data), encoding="utf-8")
    lock = fleet.folder / f"promoted-{damage}.lock"
    code, _, err = _promote(fleet, broken, lock)
    assert code == 1, err
    *problems, verdict = err.splitlines()  # a line per problem, then the verdict, each `trainimg promote: ...`
    assert verdict.startswith("trainimg promote: nothing promoted: 1 problem(s)"), err
    assert len(problems) == 1 and problems[0].startswith("trainimg promote: dsk-b: "), err
    expected = {"missing": "no part", "failed": "failed conformance (hypertune)",
                "not_in_registry": "the part says sha256:0000"}[damage]
    assert expected in problems[0], problems
    assert "nothing promoted" in err.splitlines()[-1]
    assert not lock.exists(), "nothing moves: no lockfile written"


# -- prune -----------------------------------------------------------------------------------------------------


def test_prune_removes_only_what_trainimg_made(fleet: Fleet, client: docker.DockerClient) -> None:
    foreign, _ = client.images.build(fileobj=io.BytesIO(f"FROM {LOCAL_BASE}\nRUN echo {RUN} > /dsk\n".encode()),
                                     labels={"dsk.run": RUN}, rm=True, forcerm=True, pull=False)
    ours = {i.id for i in client.images.list(filters={"label": RUN_LABEL}) if "trainimg.managed" in i.labels}
    assert ours, "the module's releases left its images on the engine"
    code, out, err = fleet.cli("prune", "--label", RUN_LABEL, "--dry-run", timeout=120)
    assert code == 0, err
    listed = {line.split()[2] for line in out.splitlines() if line.startswith("would remove")}
    assert {i[7:19] for i in ours} <= listed and foreign.id[7:19] not in listed, out
    assert {i.id for i in client.images.list(filters={"label": RUN_LABEL})} >= ours  # a dry run removes nothing
    code, out, err = fleet.cli("prune", "--label", RUN_LABEL, timeout=120)
    assert code == 0, err
    left = {i.id for i in client.images.list(filters={"label": RUN_LABEL})}
    assert left == {foreign.id}, (left, out)
    client.images.remove(foreign.id, force=True)
