"""`trainimg promote --sign-key` against a real registry (tests/trustworld.py, tier 2: no engine): every promoted
image is signed and attested before a tag moves, and a signing that fails (the registry refuses the signature) or
a key that cannot be opened moves no tag and writes no lockfile. Then cosign and skopeo accept the moving tag as
they accept the immutable one: moving tags in the same repository share the digest, so one signature serves both.

The stage jobs' parts are written as `release --stage` writes them, for an image pushed through trainimg's
registry client with the labels a build gives it (so the provenance has something to read).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator

import pytest
from conftest import cpu_recipe, trainimg
from trustworld import CONSUMERS, PASSWORD, World, world_of

from trainimg.publish.lockfile import LockEntry
from trainimg.publish.promote import write_parts
from trainimg.runtime.contract import OCI_BASE_NAME, OCI_REVISION, RECIPE_LABEL, VARIANT_LABEL
from trainimg.trust import attached, dsse, provenance
from trainimg.trust.keys import load_public_key

RUN = uuid.uuid4().hex[:8]
NAME = "sig-a"
REPOSITORY = f"trainimg-test/sig-a-{RUN}"
IMMUTABLE, MOVING = "2.13.0-cpu-py3.11", "2.13-cpu"
BASE_DIGEST = "local/debian@sha256:" + "1" * 64


class Staged:
    """A recipes folder with one variant, its image in the registry and its part in lock.d/."""

    def __init__(self, world: World) -> None:
        self.world, self.folder = world, world.folder / "promote"
        (self.folder / "recipes").mkdir(parents=True)
        (self.folder / "recipes" / f"{NAME}.yaml").write_text(cpu_recipe(NAME, REPOSITORY), encoding="utf-8")
        labels = {VARIANT_LABEL: NAME, RECIPE_LABEL: f"recipes/{NAME}.yaml", OCI_BASE_NAME: "local/debian:bookworm",
                  OCI_REVISION: "a" * 40}
        self.digest = world.push(REPOSITORY, IMMUTABLE, labels)
        tag = f"{REPOSITORY}:{IMMUTABLE}"
        write_parts(self.folder / "lock.d", [LockEntry(
            variant=NAME, recipe=f"recipes/{NAME}.yaml", tag=tag, image_id="sha256:" + "2" * 64,
            base_image="local/debian:bookworm", base_digest=BASE_DIGEST, pushed={f"{world.host}/{tag}": self.digest},
            conformance={"passed": True}, released="2026-11-27T10:00:00Z")])
        self.lock = self.folder / "images.lock"

    def promote(self, password: str) -> tuple[int, str, str]:
        env = {**self.world.env, "TRAINIMG_SIGN_PASSWORD": password}
        env.pop("COSIGN_PASSWORD")
        r = trainimg("--recipes", str(self.folder / "recipes"), "promote", str(self.folder / "lock.d"), NAME,
                     "--registry", self.world.host, "--username", self.world.user, "--lock", str(self.lock),
                     "--sign-key", str(self.world.ours[0]), env={**env, "TRAINIMG_REGISTRY_PASSWORD":
                                                                 self.world.password}, timeout=120)
        return r.returncode, r.stdout, r.stderr

    def moving(self) -> str | None:
        return self.world.api.remote_digest(REPOSITORY, MOVING)


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory, host_tool: Callable[[str], str]) -> Iterator[Staged]:
    host_tool("docker-registry")
    host_tool("htpasswd")
    with world_of(tmp_path_factory.mktemp("trust-promote")) as world:
        yield Staged(world)


def test_a_signature_the_registry_refuses_moves_no_tag(staged: Staged) -> None:
    proxy = staged.world.proxy
    proxy.fail(rf"PUT /v2/{REPOSITORY}/manifests/sha256-[0-9a-f]{{64}}\.sig", status=403, times=1)
    code, out, err = staged.promote(PASSWORD)
    assert code == 1 and proxy.fired("error") == 1, (out, err)
    assert "refused the manifest" in err and f"sha256-{staged.digest[7:]}.sig" in err, err
    assert staged.moving() is None and not staged.lock.exists()


def test_a_key_that_cannot_be_opened_moves_nothing(staged: Staged) -> None:
    code, out, err = staged.promote("not the passphrase")
    assert code == 2 and err.strip() == "--sign-key: the passphrase (TRAINIMG_SIGN_PASSWORD or COSIGN_PASSWORD) " \
                                        "does not open this key", err
    assert staged.moving() is None and not staged.lock.exists()


def test_promote_signs_before_the_tags_move_and_every_consumer_accepts_both_tags(staged: Staged) -> None:
    code, out, err = staged.promote(PASSWORD)
    assert code == 0, err
    assert staged.moving() == staged.digest and staged.lock.exists()
    assert f"signed: {staged.world.host}/{REPOSITORY}@{staged.digest}: signature pushed, provenance pushed" in out
    for tag in (IMMUTABLE, MOVING):
        verdicts = staged.world.verdicts(f"{staged.world.host}/{REPOSITORY}:{tag}", staged.world.ours[1])
        assert {c: v[0] for c, v in verdicts.items()} == dict.fromkeys(CONSUMERS, True), verdicts
    (layer,) = attached.read(staged.world.api, REPOSITORY, attached.attestation_tag(staged.digest))
    opened = dsse.open_envelope(layer.payload, load_public_key(staged.world.ours[1]))
    assert isinstance(opened, tuple)
    statement = json.loads(opened[1])
    definition = statement["predicate"]["buildDefinition"]
    assert definition["externalParameters"] == {"variant": NAME, "recipe": f"recipes/{NAME}.yaml",
                                                "baseImage": "local/debian:bookworm"}
    assert {"name": "local/debian:bookworm", "digest": {"sha256": "1" * 64}} in definition["resolvedDependencies"]
    assert {"name": "source", "digest": {"gitCommit": "a" * 40}} in definition["resolvedDependencies"]
    assert "startedOn" not in statement["predicate"]["runDetails"].get("metadata", {})  # promote did not see it
    assert statement["predicate"]["runDetails"]["builder"]["id"] == provenance.LOCAL_BUILDER
    # promoted again: the key's signature and provenance are there, nothing is added
    code, out, err = staged.promote(PASSWORD)
    assert code == 0 and "already there" in out, err
    assert [len(attached.read(staged.world.api, REPOSITORY, t(staged.digest)))
            for t in (attached.signature_tag, attached.attestation_tag)] == [1, 1]

