"""Signing keys in cosign's format, so a key made by `cosign generate-key-pair` signs with trainimg as it is, and a
key `trainimg trust keygen` makes signs with cosign.

The private key is an ECDSA P-256 key, its PKCS#8 DER encrypted as go-securesystemslib's `encrypted` package does
(sigstore/cosign `pkg/cosign/keys.go` calls it): a scrypt key from the passphrase and a 32-byte salt, then
nacl/secretbox with a 24-byte nonce; the JSON of the KDF, the cipher and the ciphertext is the body of a PEM block
labelled ``ENCRYPTED SIGSTORE PRIVATE KEY`` (cosign before 2.0 wrote ``ENCRYPTED COSIGN PRIVATE KEY``: read too).
The public key is a PKIX ``PUBLIC KEY`` PEM block.

The passphrase comes from the environment only (`TRAINIMG_SIGN_PASSWORD`, else `COSIGN_PASSWORD` as cosign reads
it), never from an argument `ps` would show; neither the passphrase nor the key appears in a message or a repr.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nacl.exceptions
import nacl.secret
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from ..errors import UserInputError

PRIVATE_LABEL = "ENCRYPTED SIGSTORE PRIVATE KEY"  # what cosign 2.x writes, and so what trainimg writes
PRIVATE_LABELS = (PRIVATE_LABEL, "ENCRYPTED COSIGN PRIVATE KEY")  # what cosign reads
PUBLIC_LABEL = "PUBLIC KEY"
# Where the passphrase is read from, in order: trainimg's own variable, then the one cosign reads.
PASSWORD_VARS = ("TRAINIMG_SIGN_PASSWORD", "COSIGN_PASSWORD")
# The scrypt parameters go-securesystemslib decrypts (encrypted.go: Legacy, Standard, OWASP; anything else is
# "unsupported scrypt parameters"). trainimg writes the first, which every cosign reads; cosign 2.5.0's
# generate-key-pair writes the second (read here, as any of the three).
SCRYPT_PARAMS = ({"N": 32768, "r": 8, "p": 1}, {"N": 65536, "r": 8, "p": 1}, {"N": 131072, "r": 8, "p": 1})
KDF_NAME = "scrypt"
CIPHER_NAME = "nacl/secretbox"
SALT_BYTES = 32
CURVE = ec.SECP256R1()  # P-256: what cosign generates


def _pem(label: str, der: bytes) -> bytes:
    body = base64.encodebytes(der).decode("ascii").replace("\n", "")
    lines = [body[i:i + 64] for i in range(0, len(body), 64)]
    return "\n".join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----", ""]).encode("ascii")


def _unpem(data: bytes, labels: tuple[str, ...]) -> tuple[str, bytes] | None:
    """(label, DER) of the first PEM block labelled one of `labels`, None when there is none."""
    text = data.decode("ascii", errors="replace")
    for label in labels:
        begin, end = f"-----BEGIN {label}-----", f"-----END {label}-----"
        start = text.find(begin)
        stop = text.find(end, start + len(begin))
        if start >= 0 and stop > start:
            try:
                return label, base64.b64decode("".join(text[start + len(begin):stop].split()), validate=True)
            except binascii.Error:
                return None
    return None


def _scrypt(password: bytes, salt: bytes, params: Mapping[str, int]) -> bytes:
    n, r, p = params["N"], params["r"], params["p"]
    return hashlib.scrypt(password, salt=salt, n=n, r=r, p=p, dklen=nacl.secret.SecretBox.KEY_SIZE,
                          maxmem=256 * r * n + (1 << 20))


def encrypt(plaintext: bytes, password: bytes) -> bytes:
    """go-securesystemslib's `encrypted.Encrypt`: the JSON envelope (scrypt, the first SCRYPT_PARAMS, secretbox)."""
    params, salt = SCRYPT_PARAMS[0], secrets.token_bytes(SALT_BYTES)
    nonce = secrets.token_bytes(nacl.secret.SecretBox.NONCE_SIZE)
    sealed = nacl.secret.SecretBox(_scrypt(password, salt, params)).encrypt(plaintext, nonce).ciphertext
    envelope = {"kdf": {"name": KDF_NAME, "params": params, "salt": base64.b64encode(salt).decode()},
                "cipher": {"name": CIPHER_NAME, "nonce": base64.b64encode(nonce).decode()},
                "ciphertext": base64.b64encode(sealed).decode()}
    return json.dumps(envelope, separators=(",", ":")).encode()


def decrypt(envelope: bytes, password: bytes, where: str) -> bytes:
    """The plaintext of a go-securesystemslib envelope; UserInputError (at `where`) for anything it cannot open."""
    try:
        data: Any = json.loads(envelope)
        kdf, cipher = data["kdf"], data["cipher"]
        params = {k: kdf["params"][k] for k in ("N", "r", "p")}
        salt, nonce = base64.b64decode(kdf["salt"]), base64.b64decode(cipher["nonce"])
        sealed = base64.b64decode(data["ciphertext"])
    except (ValueError, KeyError, TypeError):
        raise UserInputError("not a cosign private key (its body is not the encrypted key's JSON)", where=where) from None
    if kdf.get("name") != KDF_NAME or cipher.get("name") != CIPHER_NAME or params not in SCRYPT_PARAMS:
        raise UserInputError(f"unsupported key encryption {kdf.get('name')} {params} / {cipher.get('name')}: cosign "
                             f"writes {KDF_NAME} {SCRYPT_PARAMS[0]} / {CIPHER_NAME}", where=where)
    try:
        return nacl.secret.SecretBox(_scrypt(password, salt, params)).decrypt(sealed, nonce)
    except (nacl.exceptions.CryptoError, ValueError):
        raise UserInputError(f"the passphrase ({' or '.join(PASSWORD_VARS)}) does not open this key",
                             where=where) from None


def passphrase(env: Mapping[str, str], where: str) -> bytes:
    """The passphrase from the first of PASSWORD_VARS that is set (empty is a passphrase, as cosign reads it)."""
    for name in PASSWORD_VARS:
        if name in env:
            return env[name].encode("utf-8")
    raise UserInputError(f"set the key's passphrase in {' or '.join(PASSWORD_VARS)} (never an argument)", where=where)


@dataclass(frozen=True)
class SigningKey:
    """An ECDSA private key that signs (SHA-256, DER signatures, as cosign signs) and says its public key."""

    private: ec.EllipticCurvePrivateKey = field(repr=False)

    def sign(self, data: bytes) -> bytes:
        return self.private.sign(data, ec.ECDSA(hashes.SHA256()))

    @property
    def public(self) -> ec.EllipticCurvePublicKey:
        return self.private.public_key()

    def public_pem(self) -> bytes:
        return public_pem(self.public)


def public_pem(key: ec.EllipticCurvePublicKey) -> bytes:
    return _pem(PUBLIC_LABEL, key.public_bytes(serialization.Encoding.DER,
                                               serialization.PublicFormat.SubjectPublicKeyInfo))


def generate(password: bytes) -> tuple[bytes, bytes]:
    """A new key pair as cosign writes it: (the encrypted private key PEM, the public key PEM)."""
    private = ec.generate_private_key(CURVE)
    der = private.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return _pem(PRIVATE_LABEL, encrypt(der, password)), SigningKey(private).public_pem()


def open_private(pem: bytes, password: bytes, where: str) -> SigningKey:
    """The signing key in a cosign private key file's bytes."""
    block = _unpem(pem, PRIVATE_LABELS)
    if block is None:
        raise UserInputError(f"not a cosign private key (no PEM block labelled {' or '.join(PRIVATE_LABELS)}; "
                             "make one with `trainimg trust keygen` or `cosign generate-key-pair`)", where=where)
    der = decrypt(block[1], password, where)
    try:
        key = serialization.load_der_private_key(der, password=None)
    except ValueError:
        raise UserInputError("the decrypted key is not a PKCS#8 private key", where=where) from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise UserInputError(f"a {type(key).__name__}: trainimg signs with ECDSA keys, as cosign makes them",
                             where=where)
    return SigningKey(key)


def _read(path: Path, where: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise UserInputError(f"cannot read {path}: {exc.strerror or exc}", where=where) from None


def load_signing_key(path: Path, env: Mapping[str, str], where: str = "--sign-key") -> SigningKey:
    """The key in cosign private key file `path`, opened with the passphrase from `env` (see PASSWORD_VARS)."""
    data = _read(path, where)
    return open_private(data, passphrase(env, where), where)


def load_public_key(path: Path, where: str = "--key") -> ec.EllipticCurvePublicKey:
    """The ECDSA public key of a PKIX `PUBLIC KEY` PEM file (cosign.pub)."""
    block = _unpem(_read(path, where), (PUBLIC_LABEL,))
    if block is None:
        raise UserInputError(f"{path} holds no PEM block labelled {PUBLIC_LABEL} (give the .pub of the pair)",
                             where=where)
    try:
        key = serialization.load_der_public_key(block[1])
    except ValueError:
        raise UserInputError(f"{path}: its {PUBLIC_LABEL} block is not a PKIX public key", where=where) from None
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise UserInputError(f"{path} holds a {type(key).__name__}: trainimg verifies ECDSA keys, as cosign makes "
                             "them", where=where)
    return key


def verifies(key: ec.EllipticCurvePublicKey, signature: bytes, data: bytes) -> bool:
    """Whether `signature` (DER ECDSA over SHA-256) is `key`'s over `data`."""
    try:
        key.verify(signature, data, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return False
    return True


def write_pair(prefix: Path, password: bytes) -> tuple[Path, Path]:
    """Write `<prefix>.key` (mode 0600, never over an existing file) and `<prefix>.pub`; returns both paths."""
    private, public = generate(password)
    key_path, pub_path = prefix.with_name(prefix.name + ".key"), prefix.with_name(prefix.name + ".pub")
    for path in (key_path, pub_path):
        if path.exists():
            raise UserInputError(f"{path} exists: keygen never overwrites a key; move it or pick another prefix")
    try:
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise UserInputError(f"cannot write {key_path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "wb") as handle:
        handle.write(private)
    pub_path.write_bytes(public)
    return key_path, pub_path
