"""One tag for every architecture: the OCI image index trainimg pushes, and how each architecture's manifest is
found under a tag.

Why: a GB200 or GH200 node is arm64, a H100 node amd64; both pull the same tag, and the engine or containerd picks
the manifest whose `platform` matches the node (OCI image-spec, image-index.md: `platform.architecture` and `os`,
Go's GOARCH/GOOS names; `variant` ``v8`` for arm64 as Docker and containerd write it). A variant built for more
than amd64 is pushed as each architecture's image manifest by digest, then one index naming them under the tag. A
tag that names one image manifest (every variant built before architectures, or for amd64 only) is that image:
its config's `architecture` says which.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import RegistryError
from ..recipe.arches import DEFAULT_ARCH, arch_of
from .registryapi import RegistryAPI

INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
LIST_TYPE = "application/vnd.docker.distribution.manifest.list.v2+json"  # Docker's name for the same thing
INDEX_TYPES = (INDEX_TYPE, LIST_TYPE)

Manifest = tuple[bytes, str, str]  # (exact bytes, media type, digest), as RegistryAPI.manifest_json gives it


@dataclass(frozen=True)
class Platformed:
    """One architecture's image manifest as an index entry names it."""

    arch: str
    digest: str
    size: int
    media_type: str

    def descriptor(self) -> dict[str, Any]:
        platform: dict[str, str] = {"architecture": self.arch, "os": "linux"}
        if arch_of(self.arch).oci_variant:
            platform["variant"] = str(arch_of(self.arch).oci_variant)
        return {"mediaType": self.media_type, "size": self.size, "digest": self.digest, "platform": platform}


def index_body(manifests: Iterable[Platformed]) -> bytes:
    """The OCI image index naming `manifests` (one per architecture, in the order given), as pushed under a tag."""
    body = {"schemaVersion": 2, "mediaType": INDEX_TYPE,
            "manifests": [m.descriptor() for m in manifests]}
    return json.dumps(body, indent=3).encode()


def is_index(media_type: str, body: bytes) -> bool:
    return media_type in INDEX_TYPES or "manifests" in json.loads(body)


def entries(body: bytes) -> list[Platformed]:
    """The linux image manifests an index names, each with its architecture (entries without one, such as an
    attestation, are not images to run)."""
    found = []
    for entry in json.loads(body).get("manifests") or []:
        platform = entry.get("platform") or {}
        if platform.get("os", "linux") == "linux" and platform.get("architecture"):
            found.append(Platformed(str(platform["architecture"]), str(entry["digest"]), int(entry.get("size", 0)),
                                    str(entry.get("mediaType", ""))))
    return found


def manifest_arch(api: RegistryAPI, repository: str, body: bytes) -> str:
    """The architecture one image manifest's config names (amd64 when it names none: Docker's default)."""
    config = json.loads(body).get("config", {}).get("digest")
    if not config:
        raise RegistryError(f"registry {api.target.host} serves a manifest of {repository} without a config")
    return str(json.loads(api.blob(repository, config)).get("architecture") or DEFAULT_ARCH)


def architectures(api: RegistryAPI, repository: str, got: Manifest) -> dict[str, str]:
    """{architecture: its image manifest's digest} of what a tag names (`got`, from `manifest_json`)."""
    body, media_type, digest = got
    if is_index(media_type, body):
        return {e.arch: e.digest for e in entries(body)}
    return {manifest_arch(api, repository, body): digest}


def platform_manifest(api: RegistryAPI, repository: str, got: Manifest, arch: str) -> Manifest | None:
    """The image manifest for `arch` of what a tag names (`got`): the index's entry, or the manifest itself when its
    config names `arch`; None when there is none."""
    digest = architectures(api, repository, got).get(arch)
    if digest is None:
        return None
    if digest == got[2]:
        return got
    return api.manifest_json(repository, digest)
