"""trainimg's signatures and provenance checked by their real consumers (tier 2: no engine): cosign 2.5 and skopeo
1.18 from Debian trixie against Debian's docker-registry 2.8 (tests/trustworld.py).

One table of cases (CASES) says how each is made and what every consumer must answer; every case runs through
every consumer, and `trainimg verify --key` must agree with cosign where cosign is asked what trainimg checks (the
signed repository, through `-a trainimg.repository=...`). Plain `cosign verify` ignores the signed identity (its
SIGNATURE_SPEC says so) and `verify-attestation` checks the subject's digest, not its name: the table records both,
so a change in either is seen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from trustworld import CONSUMERS, World, world_of

from trainimg.registry.referrers import referrers
from trainimg.trust import attached, provenance
from trainimg.trust.dsse import IN_TOTO_PAYLOAD_TYPE


@dataclass(frozen=True)
class Case:
    """How an image is made (`make` returns the reference checked and the key it is checked with) and what each
    consumer answers (True: accepted), in CONSUMERS order."""

    name: str
    make: str
    accepted: tuple[bool, bool, bool, bool, bool]
    why: str


CASES = (
    Case("signed", "signed", (True, True, True, True, True), "trainimg's signature and provenance"),
    Case("signed-with-a-cosign-key", "signed_cosign_key", (True, True, True, True, True),
         "a key from `cosign generate-key-pair`, used as it is"),
    Case("signed-by-cosign", "signed_by_cosign", (True, True, True, True, True),
         "`cosign sign -a trainimg.repository=...` and `cosign attest`: trainimg reads cosign's own"),
    Case("unsigned", "unsigned", (False, False, False, False, False), "nothing beside the image"),
    Case("another-digest", "another_digest", (False, False, False, False, False),
         "a signature and provenance of another image, copied under this digest's tags"),
    Case("tag-moved", "tag_moved", (False, False, False, False, False),
         "the tag signed, then moved to an unsigned manifest"),
    Case("another-key", "another_key", (False, False, False, False, False), "signed, checked with another key"),
    Case("another-repository", "another_repository", (False, True, False, True, False),
         "signed for another repository and copied here, as `cosign copy` would: plain cosign verify ignores "
         "the identity and verify-attestation the subject's name"),
)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, host_tool: Callable[[str], str]) -> Iterator[World]:
    """Debian's registry (the binary: no engine), keys, and the tools .ci/setup-host installed (tier 2)."""
    host_tool("docker-registry")
    host_tool("htpasswd")
    with world_of(tmp_path_factory.mktemp("trust")) as w:
        yield w


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_consumer_answers_as_the_table_says_and_trainimg_agrees_with_cosign(case: Case, world: World) -> None:
    ref, key = getattr(world, case.make)(f"trust/{case.name}")
    verdicts = world.verdicts(ref, key)
    got = tuple(verdicts[c][0] for c in CONSUMERS)
    assert got == case.accepted, {c: v for c, v in verdicts.items()}
    assert verdicts["trainimg"][0] == verdicts["cosign-identity"][0]  # what both check, both answer alike
    said = verdicts["trainimg"][1]
    if case.accepted[0]:
        assert "signed by this key for" in said and "provenance: https://slsa.dev/provenance/v1" in said, said
    else:
        assert said.splitlines()[-1].startswith("trainimg verify: "), said  # one line naming what is wrong
    print(f"{case.name}: {dict(zip(CONSUMERS, got))} ({case.why})")


def test_the_provenance_is_also_an_oci_referrer_and_signing_twice_adds_nothing(world: World) -> None:
    repository = "trust/twice"
    digest = world.push(repository, "v1")
    world.sign(world.ours[0], repository, digest)
    layers = {tag: attached.read(world.api, repository, tag)
              for tag in (attached.signature_tag(digest), attached.attestation_tag(digest))}
    world.sign(world.ours[0], repository, digest)
    assert {tag: attached.read(world.api, repository, tag) for tag in layers} == layers
    assert [len(found) for found in layers.values()] == [1, 1]
    found = referrers(world.api, repository, digest, IN_TOTO_PAYLOAD_TYPE)  # the fallback index: no API on 2.8
    assert len(found) == 1 and found[0]["annotations"] == {"predicateType": provenance.PREDICATE_TYPE}
    assert world.api.referrers(repository, digest) is None
