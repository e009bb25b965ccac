"""The release record beside the image: each released variant's lock entry (digest, inputs key, conformance
summary, versions read back) pushed as an OCI artifact whose subject is the image's manifest (referrers.attach,
the SBOM's mechanism), so a runner that has neither the engine's images nor the repository's lockfile can still
tell, from the registry alone, that an image passed conformance and skip it (publish/skip.py).

The record vouches only for the manifest it refers to: the registry binds it to that digest, and `registry_entry`
checks that the record names the same variant, digest and inputs key, and that it passed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

from ..errors import RegistryError, UserInputError
from ..recipe.arches import DEFAULT_ARCH
from .lockfile import LockEntry
from ..registry.referrers import attach, fetch, subject_of
from ..registry.references import RegistryTarget, split_tag
from ..registry.registryapi import RegistryAPI

RECORD_TYPE = "application/vnd.trainimg.release-entry.v1+json"
RECORD_TITLE = "release-entry.json"  # the file name `oras pull` writes the payload as


def attach_records(api: RegistryAPI, target: RegistryTarget, entries: Iterable[LockEntry],
                   on_line: Callable[[str], None] | None = None) -> None:
    """Push each entry beside the image its immutable tag was pushed as (an entry that pushed nothing: none)."""
    for entry in entries:
        digest = entry.image_digest(target.ref(entry.tag))  # its own manifest: in an index, its architecture's
        if digest is None:
            continue
        repository = target.repository(split_tag(entry.tag)[0])
        payload = json.dumps(entry.to_json(), sort_keys=True, separators=(",", ":")).encode()
        artifact = attach(api, repository, subject_of(api, repository, digest), RECORD_TYPE, payload,
                          title=RECORD_TITLE)
        if on_line is not None:
            on_line(f"record: pushed {target.host}/{repository}@{artifact.digest} (subject {entry.key}, {digest})")


def registry_entry(api: RegistryAPI, target: RegistryTarget, tag: str, digest: str, variant: str,
                   inputs: str, arch: str = DEFAULT_ARCH) -> LockEntry | None:
    """The passed record of `variant` (for `arch`) beside its image manifest `digest` under `tag` with inputs key
    `inputs`; None when there is none, or it does not match (another variant, architecture, digest or key) or did
    not pass."""
    repository = target.repository(split_tag(tag)[0])
    data = fetch(api, repository, digest, RECORD_TYPE)
    if data is None:
        return None
    try:
        entry = LockEntry.from_json(json.loads(data), f"record beside {target.ref(tag)}@{digest}")
    except (ValueError, UserInputError) as exc:
        raise RegistryError(f"the release record beside {target.ref(tag)}@{digest} is malformed: {exc}") from None
    if (entry.variant, entry.arch, entry.image_digest(target.ref(tag)), entry.inputs) != (variant, arch, digest,
                                                                                          inputs):
        return None
    return entry if entry.conformance.get("passed") else None
