"""The release lockfile (images.lock) and the ordered push of a release.

`trainimg release --lock FILE` records, per variant, exactly what was released: the image ID, the base it was
built on resolved to a digest, the versions read back from the image, every pushed reference with its registry
digest, and a summary of the conformance run. `trainimg build --locked` rebuilds on the recorded bases.

The file is JSON, keys sorted, two-space indent, one trailing newline, so the same release writes the same bytes
and a diff of the file in review shows only what changed. Writing merges: entries for variants not in this
release are kept as they were.

Locked bases. BuildKit (the Docker 20.10 engine's, driven by DOCKER_BUILDKIT=1) cannot use an image ID as a
FROM: ``FROM sha256:<id>`` is read as the Docker Hub image ``library/sha256`` and the build fails resolving it.
It does resolve a local *tag* from the engine's image store without a registry, so `locked_bases` tags the
recorded image as ``trainimg-locked/<variant>:<first 12 hex digits of the digest>`` and passes that tag as the
variant's base. The tag names the exact content: it is made from the digest, and `locked_bases` re-tags it each
time from the digest, so it can never point elsewhere for long. A base recorded as ``repo@sha256:...`` (a base
pulled from a registry) must be on the engine (``docker pull repo@sha256:...``); a base recorded as an image ID
must still be on the engine.

Only root variants have a base; a variant that `extends` another is always built on its parent built in the same
run, and its recorded `base_digest` (the parent's image ID) is for the record only.

Moving tags. Besides its immutable tag (``trainimg/pytorch:2.13.0-cpu-py3.11``) a released variant gets one
moving tag ``<repository>:<framework major.minor>-<cpu|cuXYZ>`` (``trainimg/pytorch:2.13-cpu``,
``trainimg/pytorch:2.14-cu130``). When several variants of one release map to the same moving tag (Python
versions of one CUDA build) the highest framework version wins, then the highest Python. Variants without a
framework version (``base-cpu-py3.11``) get no moving tag. `push_release` pushes every immutable tag first and the
moving tags last, and checks that each moving tag's registry digest equals its immutable tag's, so a moving tag
never points at anything not also reachable by an immutable tag.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..engine.base import Engine
from ..errors import CheckFailed, UserInputError
from ..userfiles import read_json_object
from ..recipe.grammar import DIGEST_RE, VARIANT_TAG_RE

LOCK_FORMAT = 1
DEFAULT_LOCK = "images.lock"
LOCKED_REPOSITORY = "trainimg-locked"



@dataclass(frozen=True)
class LockEntry:
    """One released variant, as images.lock records it."""

    variant: str
    recipe: str
    tag: str
    image_id: str
    base_image: str
    base_digest: str
    versions: dict[str, str | None] = field(default_factory=dict)
    pushed: dict[str, str] = field(default_factory=dict)  # remote ref -> manifest digest
    conformance: dict[str, Any] = field(default_factory=dict)  # passed, counts, failed, platform, replicas
    size: int | None = None  # the image's size on the engine, bytes (the support matrix shows it)
    released: str | None = None  # when the entry was made, UTC `YYYY-MM-DDTHH:MM:SSZ`
    inputs: str | None = None  # the inputs key (publish/inputs.py) the image was built from; older files lack it

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any, where: str) -> LockEntry:
        if not isinstance(data, dict):
            raise UserInputError("expected an object", where=where)
        required = ("variant", "recipe", "tag", "image_id", "base_image", "base_digest")
        for key in required:
            if not isinstance(data.get(key), str):
                raise UserInputError(f"{key!r} is missing or not a string", where=where)
        for key in ("versions", "pushed", "conformance"):
            if not isinstance(data.get(key, {}), dict):
                raise UserInputError(f"{key!r} is not an object", where=where)
        for key, kind in (("size", int), ("released", str), ("inputs", str)):
            if data.get(key) is not None and (isinstance(data[key], bool) or not isinstance(data[key], kind)):
                raise UserInputError(f"{key!r} is not a {kind.__name__}", where=where)
        unknown = set(data) - {*required, "versions", "pushed", "conformance", "size", "released", "inputs"}
        if unknown:
            raise UserInputError(f"unknown key(s) {', '.join(sorted(unknown))}", where=where)
        return cls(**{k: data[k] for k in required},
                   versions=dict(data.get("versions", {})), pushed=dict(data.get("pushed", {})),
                   conformance=dict(data.get("conformance", {})), size=data.get("size"),
                   released=data.get("released"), inputs=data.get("inputs"))


def read_lock(path: str | os.PathLike[str]) -> dict[str, LockEntry]:
    """Entries by variant name; a missing file is an empty lock, a malformed one a UserInputError naming it."""
    p = Path(path)
    data = read_json_object(p, "the lockfile", "fix or delete it and release again")
    if data is None:
        return {}
    if not isinstance(data.get("variants"), dict):
        raise UserInputError("not a trainimg lockfile (expected an object with a 'variants' object)", where=str(p))
    if data.get("format", LOCK_FORMAT) != LOCK_FORMAT:
        raise UserInputError(f"lockfile format {data.get('format')!r}; this trainimg reads format {LOCK_FORMAT}",
                             where=str(p))
    entries = {}
    for name, raw in data["variants"].items():
        entry = LockEntry.from_json(raw, f"{p}:variants.{name}")
        if entry.variant != name:
            raise UserInputError(f"entry says variant {entry.variant!r}", where=f"{p}:variants.{name}")
        entries[name] = entry
    return entries


def dumps_lock(entries: Mapping[str, LockEntry]) -> str:
    data = {"format": LOCK_FORMAT, "variants": {name: entries[name].to_json() for name in sorted(entries)}}
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def write_lock(path: str | os.PathLike[str], entries: Mapping[str, LockEntry] | Iterable[LockEntry]
               ) -> dict[str, LockEntry]:
    """Merge `entries` into the lockfile at `path` (other variants' entries are kept) and write it atomically.
    Returns every entry the file now holds."""
    new = dict(entries) if isinstance(entries, Mapping) else {e.variant: e for e in entries}
    p = Path(path)
    merged = {**read_lock(p), **new}
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(dumps_lock(merged))
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return merged


# ----------------------------------------------------------------------------------------------------------------
# Bases


def cache_sources(entries: Mapping[str, LockEntry], variants: Iterable[str]) -> tuple[str, ...]:
    """One image a previous release pushed per variant in `variants`: `release`'s default `--cache-from`."""
    return tuple(sorted(entries[name].pushed)[0] for name in variants if name in entries and entries[name].pushed)


def base_digest(engine: Engine, ref: str) -> str:
    """The resolved base: the image's first RepoDigest (``repo@sha256:...``) when it came from a registry, else its
    image ID (``sha256:...``)."""
    info = engine.image(ref)
    if info is None:
        raise UserInputError(f"base image {ref} is not on this engine")
    return info.repo_digests[0] if info.repo_digests else info.id


def _digest_hex(digest: str) -> str:
    return digest.rsplit("sha256:", 1)[-1]


def locked_base_tag(variant: str, digest: str) -> str:
    return f"{LOCKED_REPOSITORY}/{variant}:{_digest_hex(digest)[:12]}"


def locked_bases(engine: Engine, lock_path: str | os.PathLike[str], variants: Iterable[Any]) -> dict[str, str]:
    """For `build --locked`: {variant name: a local tag of the recorded base} for every root variant among
    `variants` (recipe Variants; those that `extends` another are skipped: they build on their parent).

    Raises UserInputError naming the lockfile when a root variant has no entry, or its base is not on the engine.
    """
    entries = read_lock(lock_path)
    out: dict[str, str] = {}
    missing = []
    for v in variants:
        if getattr(v, "extends", None):
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


# ----------------------------------------------------------------------------------------------------------------
# Entries from a release


def conformance_summary(suite: Any) -> dict[str, Any]:
    """{passed, counts, failed, platform, replicas} of a report.Suite (or its to_json() dict)."""
    data = suite if isinstance(suite, Mapping) else suite.to_json()
    return {
        "passed": bool(data.get("passed")),
        "counts": dict(data.get("counts", {})),
        "failed": sorted(c["name"] for c in data.get("checks", []) if c.get("status") == "failed"),
        "platform": data.get("platform"),
        "replicas": data.get("replicas"),
    }


def lock_entry(build: Any, *, recipe: str, base_digest: str, suite: Any = None,
               pushed: Mapping[str, Any] | None = None) -> LockEntry:
    """The entry for one build.VariantBuild. `pushed` maps a local tag (or remote ref) to a registry.PushResult
    (or a digest string); the entry keys them by remote ref."""
    from ..imagebuild.builder import installed_versions

    refs = {}
    for key, res in (pushed or {}).items():
        refs[getattr(res, "ref", key)] = getattr(res, "digest", res)
    return LockEntry(
        variant=build.name, recipe=recipe, tag=build.tag, image_id=build.image_id, base_image=build.base_image,
        base_digest=base_digest, versions=dict(installed_versions(build.manifest)), pushed=dict(sorted(refs.items())),
        conformance=conformance_summary(suite) if suite is not None else {},
        size=getattr(build, "size", None), released=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        inputs=getattr(build, "inputs", None),
    )


def release_entries(engine: Engine, recipes: Any, builds: Iterable[Any], suites: Iterable[Any],
                    pushed: Mapping[str, Any]) -> list[LockEntry]:
    """An entry per build (suites matched by variant name, pushes by local tag: `pushed` as push_release returns
    it)."""
    by_suite = {s.name: s for s in suites}
    entries = []
    for b in builds:
        v = recipes.by_name.get(b.name)
        mine = {t: r for t, r in pushed.items() if t == b.tag or _moving_of(t, b.tag)}
        entries.append(lock_entry(b, recipe=getattr(v, "source", "") or "",
                                  base_digest=base_digest(engine, b.base_image), suite=by_suite.get(b.name),
                                  pushed=mine))
    return entries


# ----------------------------------------------------------------------------------------------------------------
# Ordered pushes


def moving_tag(tag: str) -> str | None:
    """`<repository>:<major.minor>-<cpu|cuXYZ>` for an immutable variant tag, or None (no framework version)."""
    repo, _, version = tag.rpartition(":")
    m = VARIANT_TAG_RE.match(version)
    if not repo or not m:
        return None
    return f"{repo}:{m.group(1)}.{m.group(2)}-{m.group(4)}"


def _version_key(tag: str) -> tuple[int, ...]:
    m = VARIANT_TAG_RE.match(tag.rpartition(":")[2])
    assert m is not None
    patch = tuple(int(x) for x in m.group(3).split(".") if x)
    return (int(m.group(1)), int(m.group(2)), *patch, -1, int(m.group(5)), int(m.group(6)))


def _moving_of(candidate: str, tag: str) -> bool:
    return candidate != tag and moving_tag(tag) == candidate


def moving_tags(tags: Iterable[str]) -> dict[str, str]:
    """{moving tag: the immutable tag it points at} for a release's immutable tags (ties: see the module doc)."""
    best: dict[str, str] = {}
    for tag in tags:
        mt = moving_tag(tag)
        if mt and (mt not in best or _version_key(tag) > _version_key(best[mt])):
            best[mt] = tag
    return best


def copy_moving_tags(api: Any, target: Any, digests: Mapping[str, str]) -> dict[str, Any]:
    """Point each moving tag of the immutable tags in `digests` ({local tag: registry digest}) at its winner by a
    registry manifest copy (no layer pulled or pushed); {local moving tag: PushResult}. A copy the registry names
    by another digest is CheckFailed (nothing further is moved)."""
    from .push import PushResult
    from .references import split_tag

    results = {}
    for mt, tag in sorted(moving_tags(digests).items()):
        name, moving = split_tag(mt)
        got = api.copy_manifest(target.repository(name), digests[tag], moving)
        if got != digests[tag]:
            raise CheckFailed(f"moving tag {target.ref(mt)} got digest {got} but {target.ref(tag)} is "
                              f"{digests[tag]}: the registry rewrote the manifest; moving tags must name the "
                              "released manifest")
        results[mt] = PushResult(ref=target.ref(mt), digest=got, bytes_uploaded=0, attempts=1)
    return results


def push_release(engine: Engine, builds: Iterable[Any], target: Any, credentials: dict[str, str] | None,
                 gate: Callable[[str, str], Any] | None = None, *,
                 on_pushed: Callable[[str, Any], None] | None = None, kept: Mapping[str, str] | None = None,
                 moving: bool = True, **push_kwargs: Any) -> dict[str, Any]:
    """Push every build's immutable tag, then set the moving tags; {local tag: registry.PushResult} in push order.

    `builds` are build.VariantBuild (anything with `.tag` and `.image_id`); `gate(image_id, tag)` runs before each
    push (records.require_pass with the env bound). `kept` ({immutable tag: registry digest}) are the variants of
    the release skipped as unchanged: they compete for the moving tags like the builds. The moving tags are set by
    a registry manifest copy (`copy_moving_tags`); `moving=False` (a `--stage` job) sets none.
    `on_pushed(tag, result)` is called after each push (for progress lines).
    """
    from .push import push, reachable_target
    from .registryapi import RegistryAPI

    builds = list(builds)
    results: dict[str, Any] = {}

    def one(local: str, image_id: str) -> Any:
        image = engine.image(local)
        if image is None or image.id != image_id:
            raise CheckFailed(f"{local} now points at {image.id[7:19] if image else 'nothing'}, not the released {image_id[7:19]}: "
                              "did another build retag it? nothing more pushed")
        def gate_this(iid: str) -> None:
            if gate is not None:
                gate(iid, local)

        res = push(engine, local, target, local, credentials=credentials, gate=gate_this if gate else None,
                   **push_kwargs)
        results[local] = res
        if on_pushed:
            on_pushed(local, res)
        return res

    for b in builds:
        one(b.tag, b.image_id)
    if moving:
        digests = {**(kept or {}), **{tag: res.digest for tag, res in results.items()}}
        api = RegistryAPI(reachable_target(engine, target), credentials)
        for mt, res in copy_moving_tags(api, target, digests).items():
            results[mt] = res
            if on_pushed:
                on_pushed(mt, res)
    return results
