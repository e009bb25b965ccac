"""Signing a pushed image: its signature and its provenance, both by one key, for one repository.

A manifest is signed by digest for the repository it was pushed to (the identity a cluster pulls it by); the
moving tags of that repository name the same digest and so need nothing more. Signing the same digest again with
the same key adds nothing (the signature is found and kept; an identical statement likewise), so a release run
twice, or a promote after a signed stage job, leaves one signature.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..registry.registryapi import RegistryAPI
from . import attestation, simplesigning
from .keys import SigningKey
from .provenance import Build, statement


@dataclass(frozen=True)
class Signer:
    """The release key, the environment the provenance's builder is read from, and where lines go."""

    key: SigningKey
    env: Mapping[str, str] = field(repr=False)
    on_line: Callable[[str], None] | None = None

    def sign(self, api: RegistryAPI, repository: str, digest: str, build: Build) -> None:
        """Sign manifest `digest` of `repository` and attest `build` as its provenance."""
        identity = f"{api.target.host}/{repository}"
        signed = simplesigning.sign(self.key, api, repository, digest)
        body = statement(identity, digest, build, self.env)
        attested, referrer = attestation.attest(self.key, api, repository, digest, body)
        if self.on_line is not None:
            said = [f"signature {'pushed' if signed else 'already there'}",
                    f"provenance {'pushed' if attested else 'already there'} (referrer {referrer.digest})"]
            self.on_line(f"signed: {identity}@{digest}: {', '.join(said)}")
