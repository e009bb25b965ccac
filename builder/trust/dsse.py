"""DSSE envelopes (secure-systems-lab/dsse ``envelope.md``, ``protocol.md``): a payload and its type, signed over
the pre-authentication encoding ``PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body`` (lengths
in ASCII decimal bytes), so a signature over one type can never be replayed as another. cosign's attestations
(``cosign attest``, ``verify-attestation``) are DSSE envelopes of in-toto statements.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec

from .keys import SigningKey, verifies

IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"


def pae(payload_type: str, body: bytes) -> bytes:
    """The bytes a DSSE signature is over."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(body), body)


def seal(key: SigningKey, body: bytes, payload_type: str = IN_TOTO_PAYLOAD_TYPE) -> bytes:
    """The envelope of `body` signed by `key` (one signature, no key id: cosign writes "" there too)."""
    envelope = {"payloadType": payload_type, "payload": base64.b64encode(body).decode(),
                "signatures": [{"keyid": "", "sig": base64.b64encode(key.sign(pae(payload_type, body))).decode()}]}
    return json.dumps(envelope, separators=(",", ":")).encode()


def open_envelope(data: bytes, public: ec.EllipticCurvePublicKey) -> tuple[str, bytes] | str:
    """(payload type, body) of an envelope one of whose signatures is `public`'s, else why not (one phrase)."""
    try:
        envelope: Any = json.loads(data)
        payload_type, body = str(envelope["payloadType"]), base64.b64decode(envelope["payload"], validate=True)
        signatures = [base64.b64decode(s["sig"], validate=True) for s in envelope["signatures"]]
    except (ValueError, KeyError, TypeError, binascii.Error):
        return "not a DSSE envelope"
    if not any(verifies(public, sig, pae(payload_type, body)) for sig in signatures):
        return f"{len(signatures)} signature(s), none by this key"
    return payload_type, body
