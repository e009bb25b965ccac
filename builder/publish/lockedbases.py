"""Locked bases: how `trainimg build --locked` rebuilds each root variant on the base images.lock recorded, and
the previous release's images `release` offers BuildKit as cache, and the audit each release recorded.

BuildKit (the Docker 20.10 engine's, driven by DOCKER_BUILDKIT=1) cannot use an image ID as a
FROM: ``FROM sha256:<id>`` is read as the Docker Hub image ``library/sha256`` and the build fails resolving it.
It does resolve a local *tag* from the engine's image store without a registry, so `locked_bases` tags the
recorded image as ``trainimg-locked/<variant>:<first 12 hex digits of the digest>`` and passes that tag as the
variant's base. The tag names the exact content: it is made from the digest, and `locked_bases` re-tags it each
time from the digest, so it can never point elsewhere for long. A base recorded as ``repo@sha256:...`` (a base
pulled from a registry) must be on the engine (``docker pull repo@sha256:...``); a base recorded as an image ID
must still be on the engine.

Only root variants have a base; a variant that `extends` another is always built on its parent built in the same
run, and its recorded `base_digest` (the parent's image ID) is for the record only.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from ..audit.vex import document_text
from ..engine.base import Engine
from ..errors import UserInputError
from ..recipe.grammar import DIGEST_RE
from ..recipe.variant import Variant
from .lockfile import LockEntry, read_lock

LOCKED_REPOSITORY = "trainimg-locked"


def cache_sources(entries: Mapping[str, LockEntry], variants: Iterable[str]) -> tuple[str, ...]:
    """One image a previous release pushed per variant in `variants`: `release`'s default `--cache-from`."""
    return tuple(sorted(entries[name].pushed)[0] for name in variants if name in entries and entries[name].pushed)


def _digest_hex(digest: str) -> str:
    return digest.rsplit("sha256:", 1)[-1]


def locked_base_tag(variant: str, digest: str) -> str:
    return f"{LOCKED_REPOSITORY}/{variant}:{_digest_hex(digest)[:12]}"


def locked_bases(engine: Engine, lock_path: str | os.PathLike[str], variants: Iterable[Variant]) -> dict[str, str]:
    """For `build --locked`: {variant name: a local tag of the recorded base} for every root variant among
    `variants` (recipe Variants; those that `extends` another are skipped: they build on their parent).

    Raises UserInputError naming the lockfile when a root variant has no entry, or its base is not on the engine.
    """
    entries = read_lock(lock_path)
    out: dict[str, str] = {}
    missing = []
    for v in variants:
        if v.extends:
            continue
        entry = entries.get(v.name)
        if entry is None:
            missing.append(v.name)
            continue
        digest = entry.base_digest
        if not (DIGEST_RE.match(digest) or ("@" in digest and DIGEST_RE.match(digest.rsplit("@", 1)[1]))):
            raise UserInputError(f"base_digest {digest!r} is not sha256:<64 hex> or repo@sha256:<64 hex>",
                                 where=f"{lock_path}:variants.{v.name}")
        info = engine.image(digest)
        if info is None:
            how = f"docker pull {digest}" if "@" in digest else "rebuild or load that image"
            raise UserInputError(f"the locked base of {v.name}, {digest}, is not on this engine ({how})",
                                 where=str(lock_path))
        tag = locked_base_tag(v.name, digest)
        engine.tag(info.id, tag)
        out[v.name] = tag
    if missing:
        raise UserInputError(f"no entry for {', '.join(missing)}: release them with --lock first, or build "
                             "without --locked", where=str(lock_path))
    return out


def locked_audits(lock_path: str | os.PathLike[str], variants: Iterable[Variant]) -> dict[str, str]:
    """{variant: the audit document its release's SBOM step mounted}, for the variants whose lockfile entry
    records one (audit/vex.py): `build --locked` rebuilds the released SBOM layer, whatever the audit would say
    today. A variant without one is built as not audited, as any build without `--advisories`."""
    entries = read_lock(lock_path)
    return {v.name: document_text(entries[v.name].audit or {}) for v in variants
            if v.name in entries and entries[v.name].audit}
