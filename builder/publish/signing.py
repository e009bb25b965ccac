"""What `release`, `push` and `promote` sign with `--sign-key`: each image they pushed, by digest, for the repository
it was pushed to, with its SLSA provenance (trust/).

The provenance says only what is known here: what the image's own labels record (its variant, recipe, the
requirements lock's digest, the source repository and revision, the base it was built on, its inputs key: read
from the registry's copy of the image config, so the same for a release, a push and a promote); the base by
digest where the lock entry resolved it; the recipe file and the rendered Dockerfile only when this run built the
image from them (a release); the artifacts pushed beside the image (the SBOM, the release record) as byproducts, by the digests
the registry lists them under; and the build's start and end times only where this run saw them.
"""

from __future__ import annotations

import hashlib
from functools import partial
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from dataclasses import dataclass
from pathlib import Path

from ..engine.base import Engine
from ..imagebuild.builder import VariantBuild
from ..plan.requirements import lock_path
from ..plan.stages import dockerfile_path
from ..recipe.arches import ARCHES, DEFAULT_ARCH
from ..recipe.variant import RecipeSet, Variant
from ..registry.referrers import referrers
from ..registry.references import RegistryTarget, split_tag
from ..registry.registryapi import RegistryAPI
from ..runtime.contract import (INPUTS_LABEL, LOCK_DIGEST_LABEL, OCI_BASE_NAME, OCI_REVISION, OCI_SOURCE,
                                RECIPE_LABEL, VARIANT_LABEL)
from ..runtime.sbom import MEDIA_TYPE as SBOM_TYPE
from ..trust.provenance import Build, Resource
from ..trust.signer import Signer
from .lockfile import LockEntry, base_digest
from .push import PushResult
from .skip import Decision
from .passrecord import RECORD_TITLE, RECORD_TYPE
from .sbom import SBOM_TITLE

# The artifacts beside an image its provenance names (by the digest of the artifact's manifest), and their files.
BYPRODUCTS = {SBOM_TYPE: SBOM_TITLE, RECORD_TYPE: RECORD_TITLE}


@dataclass(frozen=True)
class Signed:
    """One image to sign: where it was pushed, and what this run knows of its build beyond the image's labels."""

    repository: str
    digest: str
    base_digest: str | None = None  # the lock entry's resolved base (``repo@sha256:...`` or an image ID)
    made_from: tuple[Resource, ...] = ()  # what this run built it from (its recipe file, the rendered Dockerfile)
    started: str | None = None
    finished: str | None = None
    arch: str = DEFAULT_ARCH  # its architecture: which of the variant's locks it was built from


def _sha256(value: str) -> dict[str, str] | None:
    """{"sha256": hex} of a ``...sha256:<hex>`` digest, None when it is not one."""
    head, sep, hexpart = value.rpartition("sha256:")
    return {"sha256": hexpart} if sep and len(hexpart) == 64 else None


def provenance_of(api: RegistryAPI, image: Signed) -> Build:
    """The provenance facts of `image` (see the module doc)."""
    got = api.image_labels(image.repository, image.digest)
    labels = got[1] if got is not None else {}
    variant, recipe, base = labels.get(VARIANT_LABEL, ""), labels.get(RECIPE_LABEL, ""), labels.get(OCI_BASE_NAME, "")
    parameters = {key: value for key, value in (("variant", variant), ("recipe", recipe), ("baseImage", base))
                  if value}
    dependencies: list[Resource | None] = []
    revision = labels.get(OCI_REVISION, "")
    if revision and revision != "unknown":
        dependencies.append(Resource("source", {"gitCommit": revision}, uri=labels.get(OCI_SOURCE) or None))
    lock = _sha256(labels.get(LOCK_DIGEST_LABEL, ""))
    if lock and variant:
        dependencies.append(Resource(lock_path(Path(), variant, image.arch).as_posix(), lock))
    base_digest = _sha256(image.base_digest or "")
    if base and base_digest:
        dependencies.append(Resource(base, base_digest))
    dependencies += image.made_from
    found = referrers(api, image.repository, image.digest)
    byproducts = tuple(Resource(BYPRODUCTS[str(m["artifactType"])], {"sha256": str(m.get("digest")).split(":")[-1]},
                                media_type=str(m["artifactType"])) for m in found
                       if m.get("artifactType") in BYPRODUCTS)
    extra = {"inputsKey": labels[INPUTS_LABEL]} if labels.get(INPUTS_LABEL) else {}
    return Build(parameters, tuple(d for d in dependencies if d is not None), byproducts, image.started,
                 image.finished, extra)


def sign_all(signer: Signer, api: RegistryAPI, images: Iterable[Signed]) -> None:
    """Sign each image once per (repository, digest), its provenance from `provenance_of`; a failure raises at
    once (the caller then moves no tag)."""
    done: set[tuple[str, str]] = set()
    for image in images:
        if (image.repository, image.digest) not in done:
            signer.sign(api, image.repository, image.digest, partial(provenance_of, api, image))
            done.add((image.repository, image.digest))


def entry_image(target: RegistryTarget, entry: LockEntry) -> Signed:
    """What a lock entry (a promoted part, a variant a release kept) names on `target`: its immutable tag's digest
    in its repository (its moving tags name the same digest there), its base as the entry resolved it."""
    return Signed(target.repository(split_tag(entry.tag)[0]), entry.manifest or entry.pushed[target.ref(entry.tag)],
                  base_digest=entry.base_digest, arch=entry.arch)


def utc_now() -> str:
    """Now, as SLSA's timestamps are written (RFC 3339, UTC, seconds)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _made_from(root: Path, variant: Variant, build: VariantBuild) -> tuple[Resource, ...]:
    """The files a build of this run read: the recipe (from the checkout) and the Dockerfile rendered from it."""
    recipe = root / variant.source
    found = [Resource(variant.source, {"sha256": hashlib.sha256(recipe.read_bytes()).hexdigest()})] \
        if recipe.is_file() else []
    dockerfile = _sha256(build.dockerfile or "")
    if dockerfile:
        found.append(Resource(dockerfile_path(variant.name, build.arch), dockerfile))
    return tuple(found)


def release_images(engine: Engine, recipes: RecipeSet, root: Path, target: RegistryTarget,
                   builds: Iterable[VariantBuild], pushed: Mapping[str, PushResult], kept: Iterable[Decision],
                   started: str) -> list[Signed]:
    """What a release signs: each build it pushed (from this checkout, between `started` and now, on the base the
    engine resolves) and each variant it kept (its registry digest, its base as its lock entry resolved it): every
    image a moving tag of the release may name."""
    finished = utc_now()
    builds = list(builds)
    built = [Signed(target.repository(split_tag(b.tag)[0]), _pushed_digest(b, pushed), base_digest(engine, b.base_image),
                    _made_from(root, recipes.by_name[b.name], b), started, finished, b.arch) for b in builds]
    # A variant of several architectures: its tag names the index of their manifests, signed as well.
    indexes = [Signed(target.repository(split_tag(tag)[0]), r.digest, started=started, finished=finished)
               for tag, r in pushed.items() if r.index]
    kept_ = []
    for d in kept:
        repository = target.repository(split_tag(d.tag)[0])
        if d.digest:
            kept_.append(Signed(repository, d.digest, d.entry.base_digest if d.entry is not None else None,
                                arch=d.arch))
        if d.tag_digest and d.tag_digest != d.digest and d.tag not in pushed:  # its index, not pushed anew
            kept_.append(Signed(repository, d.tag_digest))
    return [*built, *indexes, *kept_]


def _pushed_digest(build: VariantBuild, pushed: Mapping[str, PushResult]) -> str:
    """The registry digest of `build`'s image: its own push's, or its architecture's manifest in its variant's
    index (a variant of several architectures)."""
    own = pushed.get(build.tag)
    if own is not None and not own.index:
        return own.digest
    return pushed[build.variant_tag].manifests[build.arch]


def pushed_image(engine: Engine, target: RegistryTarget, tag: str, digest: str) -> Signed:
    """What `push` signs for local `tag`, pushed to `target` as `digest`: its base resolved on this engine, where
    the engine has it (else the provenance names it by its label alone)."""
    info = engine.image(tag)
    base = (info.labels if info is not None else {}).get(OCI_BASE_NAME)
    resolved = base_digest(engine, base) if base and engine.image(base) is not None else None
    return Signed(target.repository(split_tag(tag)[0]), digest, base_digest=resolved,
                  arch=info.architecture if info is not None and info.architecture in ARCHES else DEFAULT_ARCH)
