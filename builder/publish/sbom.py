"""The SBOM beside every image: read from a local image, pushed next to the pushed image, read back, compared.

The image writes its own SBOM at build time (runtime/sbom.py, at the contract's SBOM_PATH). On `push` and
`release` it goes to the registry as an OCI artifact (referrers.attach) whose subject is the image's manifest, so
a consumer with only the registry finds it from the image digest: `trainimg sbom IMAGE --registry R`, oras, or any
client of the referrers API or its fallback tag. `package_changes` is what `trainimg diff` says about packages.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from ..engine.base import Engine
from ..errors import CheckFailed, EngineError, RegistryError, UserInputError
from ..runtime.contract import SBOM_PATH
from ..runtime.manifest import distribution_key
from ..runtime.sbom import MEDIA_TYPE
from ..registry.referrers import attach, fetch, subject_of
from ..registry.references import RegistryTarget, split_tag
from ..registry.registryapi import RegistryAPI

SBOM_TITLE = os.path.basename(SBOM_PATH)  # the file name `oras pull` writes the artifact's payload as


def local_sbom(engine: Engine, image: str) -> bytes:
    """The SBOM file of a local image (tag or ID), exactly as the build wrote it."""
    if engine.image(image) is None:
        raise UserInputError(f"no image {image} on this engine: build it, or pass --registry to read a pushed one")
    try:
        return engine.read_file(image, SBOM_PATH).encode("utf-8")
    except EngineError:
        raise CheckFailed(f"{image} has no SBOM at {SBOM_PATH}: it was not built by this trainimg; rebuild it with "
                          "`trainimg build`") from None


def parse_sbom(data: bytes, where: str) -> dict[str, Any]:
    """A CycloneDX JSON document, or RegistryError saying where the bytes came from."""
    try:
        doc = json.loads(data)
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or doc.get("bomFormat") != "CycloneDX":
        raise RegistryError(f"the SBOM of {where} is not a CycloneDX JSON document")
    return doc


def registry_sbom(api: RegistryAPI, image: str) -> bytes:
    """The SBOM pushed beside `image` (a local ``name:tag``, found under the target's prefix), by its digest."""
    name, tag = split_tag(image)
    repository = api.target.repository(name)
    digest = api.remote_digest(repository, tag)
    where = f"{api.target.host}/{repository}:{tag}"
    if digest is None:
        raise UserInputError(f"registry has no {where}")
    data = fetch(api, repository, digest, MEDIA_TYPE)
    if data is None:
        raise CheckFailed(f"no SBOM refers to {where} ({digest}): push it with `trainimg push` or `release`")
    parse_sbom(data, where)
    return data


class SbomPublisher:
    """Pushes each pushed image's SBOM beside it, once per manifest digest (a moving tag is the same image).

    `read(tag)` takes the SBOM from the local image before anything is pushed (so an image without one is refused
    before it leaves); `__call__(tag, result)` fits `push_immutable`'s `on_pushed` and `push`'s callers;
    `require_beside` checks, from the registry alone, an image pushed by an earlier release."""

    def __init__(self, engine: Engine, target: RegistryTarget, credentials: dict[str, str] | None,
                 on_line: Callable[[str], None] | None = None) -> None:
        self.engine, self.target, self.credentials, self.on_line = engine, target, credentials, on_line
        self._sboms: dict[str, bytes] = {}
        self._done: set[str] = set()

    def read(self, tag: str) -> bytes:
        if tag not in self._sboms:
            self._sboms[tag] = local_sbom(self.engine, tag)
        return self._sboms[tag]

    def require_beside(self, tag: str, digest: str) -> None:
        """CheckFailed unless the registry holds an SBOM beside `tag`'s manifest `digest`: a skipped variant's
        moving tag names a manifest pushed earlier, whose SBOM is already its referrer in the same repository (no
        local image is read, so a runner that starts empty can move it)."""
        from .push import reachable_target

        api = RegistryAPI(reachable_target(self.engine, self.target), self.credentials)
        repository = self.target.repository(split_tag(tag)[0])
        if fetch(api, repository, digest, MEDIA_TYPE) is None:
            raise CheckFailed(f"no SBOM refers to {self.target.host}/{repository}@{digest} ({tag}): its moving tag "
                              "would name an image without one; release it with --rebuild")

    def __call__(self, tag: str, result: Any) -> None:
        if result.digest in self._done:
            return
        from .push import reachable_target

        api = RegistryAPI(reachable_target(self.engine, self.target), self.credentials)
        name, tag_part = split_tag(tag)
        repository = self.target.repository(name)
        subject = subject_of(api, repository, result.digest)
        artifact = attach(api, repository, subject, MEDIA_TYPE, self.read(tag), title=SBOM_TITLE)
        self._done.add(result.digest)
        if self.on_line:
            self.on_line(f"sbom: pushed {self.target.host}/{repository}@{artifact.digest} (subject {tag_part}, "
                         f"{result.digest})")


def package_versions(doc: dict[str, Any]) -> dict[str, str]:
    """``pypi:torch`` / ``deb:libc6`` / ``lib:libnccl`` -> version(s), from a CycloneDX document's components;
    a name present twice (a library in two folders) lists its versions sorted, joined by ``, ``."""
    found: dict[str, set[str]] = {}
    for component in doc.get("components") or []:
        if not isinstance(component, dict) or not component.get("name"):
            continue
        purl = str(component.get("purl") or "")
        kind = purl[4:].split("/", 1)[0] if purl.startswith("pkg:") else "lib"
        name = distribution_key(str(component["name"])) if kind == "pypi" else str(component["name"])
        found.setdefault(f"{kind}:{name}", set()).add(str(component.get("version") or "?"))
    return {key: ", ".join(sorted(versions)) for key, versions in sorted(found.items())}


def package_changes(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Packages added, removed and changed in version from SBOM `a` to SBOM `b`."""
    va, vb = package_versions(a), package_versions(b)
    return {
        "added": {k: vb[k] for k in sorted(set(vb) - set(va))},
        "removed": {k: va[k] for k in sorted(set(va) - set(vb))},
        "changed": {k: {"a": va[k], "b": vb[k]} for k in sorted(set(va) & set(vb)) if va[k] != vb[k]},
    }
