"""cosign's attached images: signatures and attestations kept in the image's own repository under tags derived
from its digest, so they need no referrers API (Debian's docker-registry 2.8 has none).

For the image ``sha256:<hex>`` cosign keeps its signatures under the tag ``sha256-<hex>.sig`` and its attestations
under ``sha256-<hex>.att``: an OCI image manifest whose every layer is one signed payload (the layer's media type
says which kind, its annotations carry the signature), with an image config that lists the layers, as
go-containerregistry's ``empty.Image`` plus ``mutate.Append`` writes it (sigstore/cosign ``pkg/oci/static``,
``pkg/oci/remote``). A second signer adds a layer to the manifest; the earlier layers stay.

Both tags are the referrers fallback tag (`registry.referrers.fallback_tag`, ``sha256-<hex>``) plus a suffix, so
they never collide with it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import RegistryError
from ..registry.referrers import OCI_MANIFEST, fallback_tag
from ..registry.registryapi import RegistryAPI, sha256_digest

SIGNATURE_SUFFIX = ".sig"
ATTESTATION_SUFFIX = ".att"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
ZERO_TIME = "0001-01-01T00:00:00Z"  # go's zero time.Time: what an empty.Image's config says


def signature_tag(digest: str) -> str:
    """``sha256-<hex>.sig``: where cosign looks for the signatures of image `digest`."""
    return fallback_tag(digest) + SIGNATURE_SUFFIX


def attestation_tag(digest: str) -> str:
    """``sha256-<hex>.att``: where cosign looks for the attestations of image `digest`."""
    return fallback_tag(digest) + ATTESTATION_SUFFIX


@dataclass(frozen=True)
class Attached:
    """One layer of an attached image: its payload bytes, their media type and its annotations."""

    media_type: str
    payload: bytes
    annotations: Mapping[str, str] = field(default_factory=dict)

    def descriptor(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mediaType": self.media_type, "size": len(self.payload),
                               "digest": sha256_digest(self.payload)}
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out


def read(api: RegistryAPI, repository: str, tag: str) -> list[Attached]:
    """Every layer of the attached image under `tag`, with its payload; [] when the tag is not there."""
    got = api.manifest_json(repository, tag)
    if got is None:
        return []
    try:
        layers = json.loads(got[0]).get("layers")
    except ValueError:
        layers = None
    if not isinstance(layers, list):
        raise RegistryError(f"registry {api.target.host}: {repository}:{tag} is not an image manifest with layers "
                            "(cosign's attached signatures)")
    found = []
    for layer in layers:
        if not isinstance(layer, dict) or not isinstance(layer.get("digest"), str):
            raise RegistryError(f"registry {api.target.host}: {repository}:{tag} lists a layer without a digest")
        annotations = {str(k): str(v) for k, v in (layer.get("annotations") or {}).items()}
        found.append(Attached(str(layer.get("mediaType", "")), api.blob(repository, layer["digest"]), annotations))
    return found


def _config(layers: Sequence[Attached]) -> bytes:
    """The image config an `empty.Image` with these layers appended has (layers are uncompressed: diff ID =
    digest)."""
    config = {"architecture": "", "config": {}, "created": ZERO_TIME,
              "history": [{"created": ZERO_TIME} for _ in layers], "os": "",
              "rootfs": {"type": "layers", "diff_ids": [sha256_digest(layer.payload) for layer in layers]}}
    return json.dumps(config, separators=(",", ":")).encode()


def write(api: RegistryAPI, repository: str, tag: str, layers: Sequence[Attached]) -> str:
    """Store `layers` as the attached image under `tag` (blobs first, then the manifest); returns its digest."""
    config = _config(layers)
    api.put_blob(repository, config)
    for layer in layers:
        api.put_blob(repository, layer.payload)
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "config": {"mediaType": CONFIG_MEDIA_TYPE, "size": len(config), "digest": sha256_digest(config)},
                "layers": [layer.descriptor() for layer in layers]}
    return api.put_manifest(repository, tag, json.dumps(manifest, separators=(",", ":")).encode(), OCI_MANIFEST)


def append(api: RegistryAPI, repository: str, tag: str, layer: Attached,
           same: Callable[[Attached], bool]) -> tuple[bool, Attached]:
    """Add `layer` to the attached image under `tag`, keeping the layers there; nothing is written when one of
    them is `same` (the same signer said the same thing: signing twice changes nothing). Returns whether it was
    written, and the layer that now says it (that one, or `layer`)."""
    present = read(api, repository, tag)
    found = next((old for old in present if same(old)), None)
    if found is not None:
        return False, found
    write(api, repository, tag, [*present, layer])
    return True, layer
