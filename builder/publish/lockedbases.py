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

A base the engine does not hold is taken from a registry by its digest, the upstream's if it still serves it,
else the copy `trainimg mirror` made (`LockEntry.base_mirror`): BuildKit pulls that digest reference itself. So a
build, and `verify --locked`, go on when NVIDIA has deleted the upstream tag, and say which copy they used.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Set

from ..audit.vex import document_text
from ..engine.base import Engine
from ..errors import RegistryError, UserInputError
from ..recipe.arches import ARCH_SEPARATOR, arch_key
from ..recipe.grammar import DIGEST_RE
from ..recipe.variant import Variant
from ..registry.credentials import resolve_credentials
from ..registry.references import RegistryTarget
from ..registry.registryapi import RegistryAPI
from .inputs import split_remote
from .lockfile import LockEntry, read_lock
from .push import reachable_target

LOCKED_REPOSITORY = "trainimg-locked"


def cache_sources(entries: Mapping[str, LockEntry], variants: Iterable[str]) -> tuple[str, ...]:
    """One image a previous release pushed per variant in `variants`: `release`'s default `--cache-from`."""
    return tuple(sorted(entries[name].pushed)[0] for name in variants if name in entries and entries[name].pushed)


def _digest_hex(digest: str) -> str:
    return digest.rsplit("sha256:", 1)[-1]


def locked_base_tag(variant: str, digest: str) -> str:
    return f"{LOCKED_REPOSITORY}/{variant}:{_digest_hex(digest)[:12]}"


def from_registry(engine: Engine, entry: LockEntry, env: Mapping[str, str], say: Callable[[str], None]) -> str:
    """The first of the entry's upstream digest reference and its mirror that a registry serves (one manifest
    request each), or UserInputError naming what was asked and what each answered."""
    refs = ([entry.base_digest] if "@" in entry.base_digest else []) + ([entry.base_mirror] if entry.base_mirror
                                                                         else [])
    tried = []
    for ref in refs:
        host, repository, digest = split_remote(ref)
        target = reachable_target(engine, RegistryTarget.parse(host))
        try:
            served = RegistryAPI(target, resolve_credentials(target, None, None, env=env)).remote_digest(repository,
                                                                                                         digest)
        except RegistryError as err:
            tried.append(f"{ref}: {err.message}")
            continue
        if served == digest:
            if ref == entry.base_mirror:
                say(f"the locked base of {entry.variant} is not on this engine"
                    + (f" and {tried[-1]}" if tried else "") + f"; building on its mirror {ref}")
            return ref
        tried.append(f"{ref}: the registry does not serve it")
    hint = "" if entry.base_mirror else "; `trainimg mirror` keeps a copy of each locked base in your registry"
    raise UserInputError(f"the locked base of {entry.variant}, {entry.base_digest}, is not on this engine and no "
                         f"registry serves it ({'; '.join(tried) or 'no registry reference recorded'}){hint}")


def locked_bases(engine: Engine, lock_path: str | os.PathLike[str], variants: Iterable[Variant],
                 env: Mapping[str, str], say: Callable[[str], None], left: Set[tuple[str, str]] = frozenset()
                 ) -> dict[str, str]:
    """For `build --locked`: {`arch_key`: a local tag of the recorded base} for every root variant among `variants`
    (recipe Variants; those that `extends` another are skipped: they build on their parent) and each architecture
    it is built for (not the (variant, architecture) pairs of `left`, which no build here makes).

    Raises UserInputError naming the lockfile when a root variant has no entry, or its base is neither on the engine
    nor served by a registry (upstream, or its mirror: `from_registry`).
    """
    entries = read_lock(lock_path)
    out: dict[str, str] = {}
    missing = []
    for v in variants:
        if v.extends:
            continue
        for key in (arch_key(v.name, a) for a in v.arch if (v.name, a) not in left):
            entry = entries.get(key)
            if entry is None:
                missing.append(key)
                continue
            out[key] = _locked_base(engine, lock_path, key, entry, env, say)
    if missing:
        raise UserInputError(f"no entry for {', '.join(missing)}: release them with --lock first, or build "
                             "without --locked", where=str(lock_path))
    return out


def _locked_base(engine: Engine, lock_path: str | os.PathLike[str], key: str, entry: LockEntry,
                 env: Mapping[str, str], say: Callable[[str], None]) -> str:
    """The base entry `key` recorded: a local tag naming its image on the engine, else a registry reference that
    serves it (`from_registry`)."""
    digest = entry.base_digest
    if not (DIGEST_RE.match(digest) or ("@" in digest and DIGEST_RE.match(digest.rsplit("@", 1)[1]))):
        raise UserInputError(f"base_digest {digest!r} is not sha256:<64 hex> or repo@sha256:<64 hex>",
                             where=f"{lock_path}:variants.{key}")
    info = engine.image(digest)
    if info is None:
        return from_registry(engine, entry, env, say)
    tag = locked_base_tag(key.replace(ARCH_SEPARATOR, "-"), digest)
    engine.tag(info.id, tag)
    return tag


def locked_audits(lock_path: str | os.PathLike[str], variants: Iterable[Variant]) -> dict[str, str]:
    """{variant: the audit document its release's SBOM step mounted}, for the variants whose lockfile entry
    records one (audit/vex.py): `build --locked` rebuilds the released SBOM layer, whatever the audit would say
    today. A variant without one is built as not audited, as any build without `--advisories`."""
    entries = read_lock(lock_path)
    return {v.name: document_text(entries[v.name].audit or {}) for v in variants
            if v.name in entries and entries[v.name].audit}
