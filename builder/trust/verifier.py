"""`trainimg verify REF --key PUB`: is the image a reference names signed by that key, for this digest and this
repository, and what does its provenance say?

The reference is resolved to its manifest digest once (a tag is followed to what it names now, so a tag moved to
another manifest is checked as that manifest); then the ``.sig`` and ``.att`` attached images of that digest are
read and checked against the key (simplesigning.check, attestation.check). The signature decides: it is what every
cluster-side verifier requires. A provenance signed by this key that says something else (another subject, another
predicate) is wrong too; none at all is said in its line, and is left to the policies that require it.
"""

from __future__ import annotations

from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric import ec

from ..registry.references import PushedRef
from ..registry.registryapi import RegistryAPI
from . import attached, attestation, simplesigning


@dataclass(frozen=True)
class Verdict:
    """One line per finding; `problems` are the lines that make the verdict a failure."""

    ref: str
    digest: str | None
    lines: tuple[str, ...]
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(api: RegistryAPI, ref: PushedRef, public: ec.EllipticCurvePublicKey) -> Verdict:
    """Check `ref` in the registry `api` reaches (see the module doc)."""
    digest = api.remote_digest(ref.repository, ref.reference)
    if digest is None:
        missing = f"image: the registry has no {ref}"
        return Verdict(str(ref), None, (missing,), (missing,))
    if ref.reference.startswith("sha256:") and digest != ref.reference:
        wrong = f"image: the registry serves {digest} for {ref}"
        return Verdict(str(ref), digest, (wrong,), (wrong,))
    lines = [f"image: {ref} is {digest}"]
    signature = simplesigning.check(public, attached.read(api, ref.repository, attached.signature_tag(digest)),
                                    ref.identity, digest)
    provenance, claims = attestation.check(
        public, attached.read(api, ref.repository, attached.attestation_tag(digest)), ref.identity, digest)
    lines += [signature.line, provenance.line]
    if claims is not None and provenance.ok:
        lines.append(f"subject: {', '.join(f'{name}@{d}' for name, d in claims.subjects)}")
        said = ", ".join(f"{k} {v}" for k, v in sorted(claims.parameters.items()) if isinstance(v, str))
        lines.append(f"predicate: {claims.predicate_type}, builder {claims.builder_id}" + (f", {said}" if said else ""))
    problems = [] if signature.ok else [signature.line]
    if claims is not None and not provenance.ok:
        problems.append(provenance.line)
    return Verdict(str(ref), digest, tuple(lines), tuple(problems))
