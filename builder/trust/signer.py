"""Signing a pushed image: its signature and its provenance, both by one key, for one repository.

A manifest is signed by digest for the repository it was pushed to (the identity a cluster pulls it by); the
moving tags of that repository name the same digest and so need nothing more. An image this key already signed
and attested for that repository is left as it is (its provenance stays the one written when it was made), so a
release run again, a variant it skips, or a promote after signed stage jobs adds nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..registry.registryapi import RegistryAPI
from . import attached, attestation, simplesigning
from .keys import SigningKey
from .provenance import Build, statement


@dataclass(frozen=True)
class Signer:
    """The release key, the environment the provenance's builder is read from, and where lines go."""

    key: SigningKey
    env: Mapping[str, str] = field(repr=False)
    on_line: Callable[[str], None] | None = None

    def sign(self, api: RegistryAPI, repository: str, digest: str, build: Callable[[], Build]) -> bool:
        """Sign manifest `digest` of `repository` and attest `build()` as its provenance, unless this key did both
        already; True when something was written."""
        identity = f"{api.target.host}/{repository}"
        if self.done(api, repository, digest):
            self._say(f"signed: {identity}@{digest}: signature and provenance by this key already there")
            return False
        signed = simplesigning.sign(self.key, api, repository, digest)
        attested, referrer = attestation.attest(self.key, api, repository, digest,
                                                statement(identity, digest, build(), self.env))
        said = [f"signature {'pushed' if signed else 'already there'}",
                f"provenance {'pushed' if attested else 'already there'} (referrer {referrer.digest})"]
        self._say(f"signed: {identity}@{digest}: {', '.join(said)}")
        return True

    def done(self, api: RegistryAPI, repository: str, digest: str) -> bool:
        """Whether this key's signature and SLSA provenance of `digest` for `repository` are both there."""
        identity = f"{api.target.host}/{repository}"
        signatures = attached.read(api, repository, attached.signature_tag(digest))
        if not simplesigning.check(self.key.public, signatures, identity, digest).ok:
            return False
        attestations = attached.read(api, repository, attached.attestation_tag(digest))
        return attestation.check(self.key.public, attestations, identity, digest)[0].ok

    def _say(self, line: str) -> None:
        if self.on_line is not None:
            self.on_line(line)
