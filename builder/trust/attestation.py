"""The provenance beside the image: the in-toto statement (provenance.py) in a DSSE envelope signed with the
signing key, stored where cosign looks (a layer of the ``sha256-<hex>.att`` attached image, media type
``application/vnd.dsse.envelope.v1+json``, annotation ``predicateType``; cosign's ``attest`` writes the same) and as
an OCI referrer of the image (artifact type ``application/vnd.in-toto+json``, as cosign's referrers mode names
attestations), which the referrers API serves where the registry has one and the fallback tag keeps otherwise.
"""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric import ec

from ..registry.referrers import Descriptor, attach, subject_of
from ..registry.registryapi import RegistryAPI
from . import attached, dsse
from .keys import SigningKey
from .provenance import PREDICATE_TYPE, Claims, read_statement
from .simplesigning import Finding, SIGNATURE_ANNOTATION

PREDICATE_ANNOTATION = "predicateType"
TITLE = "provenance.intoto.jsonl"  # the file name `oras pull` writes the referrer's payload as


def attest(key: SigningKey, api: RegistryAPI, repository: str, digest: str, statement: bytes
           ) -> tuple[bool, Descriptor]:
    """Sign `statement` (about manifest `digest` of `repository`) and store it under the ``.att`` tag, unless the
    same statement signed by this key is there, and as a referrer (the same envelope: pushed again, it is the same
    artifact); (whether the ``.att`` image was written, the referrer's descriptor)."""
    envelope = dsse.seal(key, statement)
    layer = attached.Attached(dsse.MEDIA_TYPE, envelope,
                              {SIGNATURE_ANNOTATION: "", PREDICATE_ANNOTATION: PREDICATE_TYPE})

    def same(old: attached.Attached) -> bool:
        opened = dsse.open_envelope(old.payload, key.public) if old.media_type == dsse.MEDIA_TYPE else ""
        return isinstance(opened, tuple) and opened == (dsse.IN_TOTO_PAYLOAD_TYPE, statement)

    written, kept = attached.append(api, repository, attached.attestation_tag(digest), layer, same)
    referrer = attach(api, repository, subject_of(api, repository, digest), dsse.IN_TOTO_PAYLOAD_TYPE, kept.payload,
                      media_type=dsse.MEDIA_TYPE, title=TITLE, annotations={PREDICATE_ANNOTATION: PREDICATE_TYPE})
    return written, referrer


def _provenance_of(public: ec.EllipticCurvePublicKey, layer: attached.Attached) -> tuple[bool, Claims | str]:
    """(whether `public` signed it, its claims or why there are none) of one ``.att`` layer."""
    if layer.media_type != dsse.MEDIA_TYPE:
        return False, f"a {layer.media_type or 'typeless'} layer"
    opened = dsse.open_envelope(layer.payload, public)
    if isinstance(opened, str):
        return False, opened
    if opened[0] != dsse.IN_TOTO_PAYLOAD_TYPE:
        return True, f"a {opened[0]} payload, not an in-toto statement"
    return True, read_statement(opened[1])


def check(public: ec.EllipticCurvePublicKey, layers: list[attached.Attached], identity: str,
          digest: str) -> tuple[Finding, Claims | None]:
    """Whether one of `layers` (the ``.att`` image's) is SLSA v1 provenance signed by `public` whose subject is
    `digest` of `identity`, with its claims; else the most telling reason, and the claims that came nearest."""
    where, tag = f"{identity}@{digest}", attached.attestation_tag(digest)
    if not layers:
        return Finding(False, f"provenance: none for {where} (no {tag} tag)"), None
    read = [_provenance_of(public, layer) for layer in layers]
    ours = [claims for by_key, claims in read if by_key]
    if not ours:
        return Finding(False, f"provenance: {len(layers)} attestation(s) of {where}, none by this key"), None
    statements = [claims for claims in ours if isinstance(claims, Claims)]
    for claims in statements:
        if claims.predicate_type == PREDICATE_TYPE and (identity, digest) in claims.subjects:
            return Finding(True, f"provenance: {PREDICATE_TYPE} of {where}, signed by this key"), claims
    if not statements:
        return Finding(False, f"provenance: this key signed {ours[0]} under {tag}"), None
    claims = statements[0]
    if claims.predicate_type != PREDICATE_TYPE:
        why = f"its predicate is {claims.predicate_type}, not {PREDICATE_TYPE}"
    elif digest not in {d for _, d in claims.subjects}:
        why = f"its subject is {', '.join(f'{n}@{d}' for n, d in claims.subjects) or 'empty'}, not this digest"
    else:
        why = f"its subject names {', '.join(n for n, d in claims.subjects if d == digest)}, not {identity}"
    return Finding(False, f"provenance: this key attested something else under {tag}: {why}"), claims
