"""cosign's image signature: a simple-signing payload naming the repository and the manifest digest, signed with
ECDSA P-256 over SHA-256, kept as one layer of the image's ``.sig`` attached image (attached.py).

The payload (sigstore/cosign ``specs/SIGNATURE_SPEC.md``; containers/image ``signature/``):
``{"critical":{"identity":{"docker-reference":"HOST/REPO"},"image":{"docker-manifest-digest":"sha256:..."},
"type":"cosign container image signature"},"optional":{...}}``; the layer's media type is
``application/vnd.dev.cosign.simplesigning.v1+json`` and its annotation ``dev.cosignproject.cosign/signature``
holds the base64 DER signature.

Who checks what: every verifier checks the key and the digest. The identity (which repository the signer meant)
is checked by containers/image (skopeo, podman, CRI-O: ``signedIdentity`` ``matchRepository``) and by
`trainimg verify --key`; cosign's own ``verify`` ignores ``docker-reference`` (its spec says so) and checks only the
``optional`` annotations it is given with ``-a``, as Kyverno checks an attestor's ``annotations``. So the repository
is also written as the optional annotation REPOSITORY_ANNOTATION, which those two can be told to require.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec

from ..registry.registryapi import RegistryAPI
from . import attached
from .keys import SigningKey, verifies

MEDIA_TYPE = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
SIGNATURE_TYPE = "cosign container image signature"
REPOSITORY_ANNOTATION = "trainimg.repository"  # the signed repository again, where cosign -a and Kyverno read


def payload(identity: str, digest: str) -> bytes:
    """The simple-signing payload that says "`digest` is the image of repository `identity` (HOST/REPO)"."""
    doc = {"critical": {"identity": {"docker-reference": identity},
                        "image": {"docker-manifest-digest": digest},
                        "type": SIGNATURE_TYPE},
           "optional": {REPOSITORY_ANNOTATION: identity}}
    return json.dumps(doc, separators=(",", ":")).encode()


def sign(key: SigningKey, api: RegistryAPI, repository: str, digest: str) -> bool:
    """Sign manifest `digest` as an image of `repository` on this registry and store the signature under its
    ``.sig`` tag; nothing is written when a signature by this key of the same payload is there. True: written."""
    body = payload(f"{api.target.host}/{repository}", digest)
    layer = attached.Attached(MEDIA_TYPE, body, {SIGNATURE_ANNOTATION: base64.b64encode(key.sign(body)).decode()})

    def same(old: attached.Attached) -> bool:
        return old.payload == body and _signed_by(key.public, old)

    return attached.append(api, repository, attached.signature_tag(digest), layer, same)[0]


def _signed_by(public: ec.EllipticCurvePublicKey, layer: attached.Attached) -> bool:
    try:
        signature = base64.b64decode(layer.annotations.get(SIGNATURE_ANNOTATION, ""), validate=True)
    except binascii.Error:
        return False
    return bool(signature) and verifies(public, signature, layer.payload)


@dataclass(frozen=True)
class Finding:
    """What the signatures of one image say, checked against a key: `ok`, and the line that says why."""

    ok: bool
    line: str


def repository_of(reference: str) -> str:
    """``HOST/REPO`` of a signed docker-reference, which may carry a tag or a digest (`cosign sign REF` writes REF
    as given): containers/image's ``matchRepository`` compares this part."""
    name = reference.partition("@")[0]
    head, colon, tag = name.rpartition(":")
    return head if colon and "/" not in tag else name


def _claims(data: bytes) -> tuple[str, str] | None:
    """(docker-reference, docker-manifest-digest) of a simple-signing payload, None when it is not one."""
    try:
        doc: Any = json.loads(data)
        critical = doc["critical"]
        if critical["type"] != SIGNATURE_TYPE:
            return None
        return str(critical["identity"]["docker-reference"]), str(critical["image"]["docker-manifest-digest"])
    except (ValueError, KeyError, TypeError):
        return None


def check(public: ec.EllipticCurvePublicKey, layers: list[attached.Attached], identity: str,
          digest: str) -> Finding:
    """Whether one of `layers` (the ``.sig`` image's) is a signature by `public` of `digest` as `identity`; else
    the most telling reason: a signature by this key of something else before one by another key."""
    where = f"{identity}@{digest}"
    signatures = [layer for layer in layers if layer.media_type == MEDIA_TYPE]
    if not signatures:
        return Finding(False, f"signature: none for {where} (no {attached.signature_tag(digest)} tag)")
    ours = [layer for layer in signatures if _signed_by(public, layer)]
    if not ours:
        return Finding(False, f"signature: {len(signatures)} signature(s) of {where}, none by this key")
    wrong = []
    for layer in ours:
        claims = _claims(layer.payload)
        if claims is None:
            wrong.append("is not cosign's simple signing")
        elif claims[1] != digest:
            wrong.append(f"covers {claims[1]}, not this digest")
        elif repository_of(claims[0]) != identity:
            wrong.append(f"names repository {repository_of(claims[0])}, not {identity}")
        else:
            return Finding(True, f"signature: {where} signed by this key for {identity}")
    return Finding(False, f"signature: the signature by this key under {attached.signature_tag(digest)} {wrong[0]}")
