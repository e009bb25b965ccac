"""OCI artifacts that refer to an image: an SBOM, a conformance report, any payload of any artifact type.

An artifact is an OCI image manifest whose `subject` is the image's manifest, whose `artifactType` says what it
is, whose config is the empty descriptor and whose one layer is the payload (OCI image-spec 1.1, "Guidelines for
artifact usage"). A client finds the artifacts of an image through the registry's referrers API
(``GET /v2/<name>/referrers/<digest>``) where the registry has one; where it has none (Debian's docker-registry
2.8 answers that request 404) the pusher keeps the list itself, as distribution-spec 1.1's "referrers tag schema"
says: an OCI image index under the tag ``sha256-<hex of the subject digest>``, read, extended and written back on
each push, so a second artifact keeps the first. Which one applies is read from the registry's answer, never set.

Two pushers updating one fallback index at the same moment can lose one entry (the schema has no lock); a
release pushes its artifacts one after another.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import RegistryError
from ..runtime.contract import OCI_TITLE
from .registryapi import RegistryAPI, sha256_digest

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_CONFIG = b"{}"


@dataclass(frozen=True)
class Descriptor:
    """An OCI content descriptor: what a manifest or an index says about another piece of content."""

    media_type: str
    digest: str
    size: int
    artifact_type: str | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mediaType": self.media_type, "digest": self.digest, "size": self.size}
        if self.artifact_type:
            out["artifactType"] = self.artifact_type
        if self.annotations:
            out["annotations"] = dict(sorted(self.annotations.items()))
        return out

    @classmethod
    def of(cls, data: bytes, media_type: str, **kwargs: Any) -> Descriptor:
        return cls(media_type, sha256_digest(data), len(data), **kwargs)


def fallback_tag(digest: str) -> str:
    """The referrers tag schema's tag for a subject: ``sha256:abc...`` -> ``sha256-abc...``."""
    algorithm, _, hexpart = digest.partition(":")
    return f"{algorithm}-{hexpart}"


def subject_of(api: RegistryAPI, repository: str, reference: str) -> Descriptor:
    """The descriptor of the manifest `reference` (a tag or digest) names: what an artifact's `subject` holds."""
    got = api.manifest_json(repository, reference)
    if got is None:
        raise RegistryError(f"registry {api.target.host} has no manifest {repository}:{reference} to attach to")
    body, media_type, digest = got
    return Descriptor(media_type, digest, len(body))


def artifact_manifest(subject: Descriptor, artifact_type: str, payload: Descriptor,
                      annotations: Mapping[str, str] | None = None) -> bytes:
    """The artifact's manifest bytes: deterministic (sorted keys), so the same payload gives the same digest."""
    manifest: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": Descriptor.of(EMPTY_CONFIG, EMPTY_MEDIA_TYPE).as_json(),
        "layers": [payload.as_json()],
        "subject": subject.as_json(),
    }
    if annotations:
        manifest["annotations"] = dict(sorted(annotations.items()))
    return json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()


def attach(api: RegistryAPI, repository: str, subject: Descriptor, artifact_type: str, payload: bytes, *,
           media_type: str | None = None, title: str | None = None,
           annotations: Mapping[str, str] | None = None) -> Descriptor:
    """Push `payload` as an artifact of `artifact_type` referring to `subject`; returns the artifact's descriptor.

    The payload's own media type defaults to the artifact type; `title` names its file (the OCI title annotation
    `oras pull` writes it as). Without a referrers API the fallback index is updated too. Pushing the same payload again changes nothing (same manifest, same digest, one index entry)."""
    api.put_blob(repository, EMPTY_CONFIG)
    layer = Descriptor(media_type or artifact_type, api.put_blob(repository, payload), len(payload),
                       annotations={OCI_TITLE: title} if title else {})
    body = artifact_manifest(subject, artifact_type, layer, annotations)
    digest = api.put_manifest(repository, sha256_digest(body), body, OCI_MANIFEST)
    entry = Descriptor(OCI_MANIFEST, digest, len(body), artifact_type, dict(annotations or {}))
    if api.referrers(repository, subject.digest) is None:
        _add_to_fallback(api, repository, subject, entry)
    return entry


def _fallback_index(api: RegistryAPI, repository: str, tag: str) -> dict[str, Any] | None:
    """The index the fallback tag holds, None when the tag is not there; anything else there is an error."""
    got = api.manifest_json(repository, tag)
    if got is None:
        return None
    body, media_type, _ = got
    try:
        index = json.loads(body)
    except ValueError:
        index = None
    if media_type != OCI_INDEX or not isinstance(index, dict) or not isinstance(index.get("manifests"), list):
        raise RegistryError(f"registry {api.target.host}: tag {repository}:{tag} holds {media_type or 'something'}, "
                            "not the referrers index the OCI fallback tag schema keeps there; it was not changed")
    return index


def _add_to_fallback(api: RegistryAPI, repository: str, subject: Descriptor, entry: Descriptor) -> None:
    """Add `entry` to the subject's fallback index (made when absent), keeping every entry already there."""
    tag = fallback_tag(subject.digest)
    index = _fallback_index(api, repository, tag) or {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}
    if any(m.get("digest") == entry.digest for m in index["manifests"] if isinstance(m, dict)):
        return
    index["manifests"].append(entry.as_json())
    api.put_manifest(repository, tag, json.dumps(index, sort_keys=True, separators=(",", ":")).encode(), OCI_INDEX)


def referrers(api: RegistryAPI, repository: str, subject_digest: str,
              artifact_type: str | None = None) -> list[dict[str, Any]]:
    """The artifacts referring to `subject_digest` (of `artifact_type` when given), by the API or the fallback."""
    found = api.referrers(repository, subject_digest)
    if found is None:
        index = _fallback_index(api, repository, fallback_tag(subject_digest))
        found = [m for m in (index or {}).get("manifests", []) if isinstance(m, dict)]
    return [m for m in found if artifact_type is None or m.get("artifactType") == artifact_type]


def fetch(api: RegistryAPI, repository: str, subject_digest: str, artifact_type: str) -> bytes | None:
    """The payload of the latest artifact of `artifact_type` referring to the subject; None when there is none."""
    found = referrers(api, repository, subject_digest, artifact_type)
    if not found:
        return None
    digest = str(found[-1].get("digest"))
    got = api.manifest_json(repository, digest)
    if got is None:
        raise RegistryError(f"registry {api.target.host} lists artifact {digest} for {repository}@{subject_digest} "
                            "but does not have it")
    layers = json.loads(got[0]).get("layers") or []
    if not layers:
        raise RegistryError(f"artifact {repository}@{digest} has no layer: it carries no payload")
    return api.blob(repository, layers[0]["digest"])
