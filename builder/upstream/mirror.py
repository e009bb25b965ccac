"""`trainimg mirror`: every base images.lock records, copied by digest into the team's registry, and the copy
recorded beside it (`LockEntry.base_mirror`), so a locked build finds its base when the upstream tag is gone
(NVIDIA deletes `nvidia/cuda` tags six months after a newer update: upstream/data/bases.yaml).

A base pulled from a registry is recorded as ``repo@sha256:<manifest>``: its manifest (an index: each platform's
manifest too) is copied byte for byte, so the copy has the same digest, and each blob the mirror lacks is mounted
(same registry) or streamed from the upstream registry into it, never held whole; the upstream tag is set on the
copy as well. A base only the engine holds (recorded by image ID, such as the local `local/debian:bookworm`) is
pushed from the engine by trainimg's client (`registry.blobpush`): its config keeps the image ID, which is checked.
Everything goes through `registry.registryapi.RegistryAPI`; the mirror's path is the upstream's, under the target's
prefix with the upstream host as its first component (``127.0.0.1:5000`` written ``127.0.0.1-5000``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import IO, Any, cast

from ..engine.base import Engine
from ..errors import RegistryError, UserInputError
from ..publish.inputs import split_remote
from ..publish.lockfile import LockEntry, read_lock, write_lock
from ..publish.push import reachable_target
from ..registry.blobpush import push_saved
from ..registry.credentials import resolve_credentials
from ..registry.references import RegistryTarget, split_tag
from ..registry.registryapi import RegistryAPI, sha256_digest

LOCAL_HOST = "local"  # the first path component of a base only an engine held


@dataclass
class Copied:
    """What one base's copy did: its mirror reference and the blobs sent, mounted or already there."""

    base: str
    mirror: str
    sent: int = 0  # blobs sent across
    sent_bytes: int = 0
    mounted: int = 0  # blobs linked from another repository of the mirror's registry
    present: int = 0  # blobs the mirror held already

    def line(self) -> str:
        return (f"{self.base} -> {self.mirror}: {self.sent} blob(s) sent ({self.sent_bytes:,} bytes), "
                f"{self.mounted} mounted, {self.present} already there")


def mirror_repository(target: RegistryTarget, host: str, repository: str) -> str:
    """Where an upstream repository's copy goes in the mirror."""
    return target.repository(f"{host.lower().replace(':', '-')}/{repository}")


def copy_manifest(src: RegistryAPI, src_repo: str, reference: str, dst: RegistryAPI, dst_repo: str,
                  copied: Copied) -> tuple[bytes, str]:
    """Copy the manifest `reference` (a digest) and everything it names; returns its bytes and media type."""
    got = src.manifest_json(src_repo, reference)
    if got is None:
        raise RegistryError(f"{src.target.host}/{src_repo}@{reference} is gone upstream: there is nothing to copy "
                            "(a base is mirrored while its upstream still serves it)")
    body, media_type, _ = got
    if sha256_digest(body) != reference:
        raise RegistryError(f"{src.target.host}/{src_repo} served {reference} with other bytes")
    manifest = json.loads(body)
    for child in manifest.get("manifests", []):
        copy_manifest(src, src_repo, child["digest"], dst, dst_repo, copied)
    for blob in [manifest["config"], *manifest.get("layers", [])] if "config" in manifest else []:
        _copy_blob(src, src_repo, dst, dst_repo, blob, copied)
    dst.put_manifest(dst_repo, reference, body, media_type)
    return body, media_type


def _copy_blob(src: RegistryAPI, src_repo: str, dst: RegistryAPI, dst_repo: str, blob: Mapping[str, Any],
               copied: Copied) -> None:
    digest, size = str(blob["digest"]), int(blob["size"])
    if dst.has_blob(dst_repo, digest):
        copied.present += 1
    elif src.target.host == dst.target.host and dst.mount_blob(dst_repo, digest, src_repo):
        copied.mounted += 1
    else:
        with src.open_blob(src_repo, digest) as resp:
            dst.upload_stream(dst_repo, digest, cast(IO[bytes], resp.raw), size)
        copied.sent += 1
        copied.sent_bytes += size


class Mirror:
    """Copies the bases of a lockfile into `target` and records each copy in the lockfile."""

    def __init__(self, engine: Engine, target: RegistryTarget, credentials: dict[str, str] | None,
                 env: Mapping[str, str], say: Callable[[str], None]) -> None:
        self.engine, self.env, self.say = engine, env, say
        self.target = reachable_target(engine, target)
        self.api = RegistryAPI(self.target, credentials)

    def _upstream(self, host: str) -> RegistryAPI:
        target = reachable_target(self.engine, RegistryTarget.parse(host))
        return RegistryAPI(target, resolve_credentials(target, None, None, env=self.env))

    def copy(self, entry: LockEntry) -> Copied:
        """The entry's base in the mirror, by digest."""
        if "@" in entry.base_digest:
            host, repository, digest = split_remote(entry.base_digest)
            dst_repo = mirror_repository(self.target, host, repository)
            copied = Copied(entry.base_digest, f"{self.target.host}/{dst_repo}@{digest}")
            body, media_type = copy_manifest(self._upstream(host), repository, digest, self.api, dst_repo, copied)
            _, _, tag = split_remote(entry.base_image.split("@", 1)[0])
            self.api.put_manifest(dst_repo, tag, body, media_type)
            return copied
        info = self.engine.image(entry.base_image)
        if info is None or info.id != entry.base_digest:
            raise UserInputError(f"the base of {entry.variant}, {entry.base_image}, is recorded as {entry.base_digest} "
                                 f"but the engine holds {info.id if info else 'no such image'}: it cannot be "
                                 "mirrored from here", where="--lock")
        name, tag = split_tag(entry.base_image)
        dst_repo = mirror_repository(self.target, LOCAL_HOST, name)
        pushed = push_saved(self.engine, entry.base_image, self.api, dst_repo, tag, exact_config=True)
        config = json.loads(self.api.manifest_json(dst_repo, pushed.digest)[0])["config"]["digest"]  # type: ignore[index]
        if config != info.id:
            raise RegistryError(f"the mirror's copy of {entry.base_image} has config {config}, not {info.id}")
        return Copied(entry.base_digest, f"{self.target.host}/{dst_repo}@{pushed.digest}", sent=len(pushed.uploaded),
                      sent_bytes=pushed.bytes_uploaded, mounted=len(pushed.mounted),
                      present=pushed.layers - len(pushed.uploaded) - len(pushed.mounted))

    def run(self, lock_path: str, variants: tuple[str, ...]) -> list[Copied]:
        """Copy each distinct base of the chosen entries (all: none chosen), record the copies, return them."""
        entries = read_lock(lock_path)
        unknown = sorted(set(variants) - set(entries))
        if unknown:
            raise UserInputError(f"no entry for {', '.join(unknown)}", where=lock_path)
        chosen = [e for name, e in sorted(entries.items()) if not variants or name in variants]
        done: dict[str, Copied] = {}
        for entry in chosen:
            if entry.base_digest not in done and not _extends(entry, entries):
                done[entry.base_digest] = self.copy(entry)
                self.say(done[entry.base_digest].line())
        write_lock(lock_path, {e.variant: replace(e, base_mirror=done[e.base_digest].mirror)
                               for e in chosen if e.base_digest in done})
        return list(done.values())


def _extends(entry: LockEntry, entries: Mapping[str, LockEntry]) -> bool:
    """Whether the entry's base is another entry's image (a variant that `extends` one): nothing to mirror."""
    return any(entry.base_digest == other.image_id for other in entries.values())

