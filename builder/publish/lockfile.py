"""The release lockfile, images.lock: its entries, how it is read and written, and the entries of a release.

`trainimg release --lock FILE` records, per variant, exactly what was released: the image ID, the base it was
built on resolved to a digest, the versions read back from the image, every pushed reference with its registry
digest, and a summary of the conformance run. `trainimg build --locked` rebuilds on the recorded bases.

The file is JSON, keys sorted, two-space indent, one trailing newline, so the same release writes the same bytes
and a diff of the file in review shows only what changed. Writing merges: entries for variants not in this
release are kept as they were.

The locked bases `build --locked` makes from it are `lockedbases`; the moving tags and the ordered push of a
release are `movingtags`.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..audit.gate import CHECK_NAME as AUDIT_CHECK
from ..engine.base import Engine
from ..errors import UserInputError
from ..imagebuild.builder import VariantBuild, installed_versions
from ..recipe.variant import RecipeSet
from ..runtime.report import Suite
from ..userfiles import read_json_object
from .movingtags import moving_of
from .push import PushResult

LOCK_FORMAT = 1
DEFAULT_LOCK = "images.lock"


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
    # The advisory audit document the build's SBOM step mounted (audit/vex.py: its state and VEX), so `build
    # --locked` rebuilds the same SBOM layer; older files lack it.
    audit: dict[str, Any] | None = None

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
        for key in ("versions", "pushed", "conformance", "audit"):
            if not isinstance(data.get(key) or {}, dict):
                raise UserInputError(f"{key!r} is not an object", where=where)
        for key, kind in (("size", int), ("released", str), ("inputs", str)):
            if data.get(key) is not None and (isinstance(data[key], bool) or not isinstance(data[key], kind)):
                raise UserInputError(f"{key!r} is not a {kind.__name__}", where=where)
        unknown = set(data) - {*required, "versions", "pushed", "conformance", "size", "released", "inputs", "audit"}
        if unknown:
            raise UserInputError(f"unknown key(s) {', '.join(sorted(unknown))}", where=where)
        return cls(**{k: data[k] for k in required},
                   versions=dict(data.get("versions", {})), pushed=dict(data.get("pushed", {})),
                   conformance=dict(data.get("conformance", {})), size=data.get("size"),
                   released=data.get("released"), inputs=data.get("inputs"),
                   audit=dict(data["audit"]) if data.get("audit") else None)


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


class PendingLock:
    """A lockfile update written beside its path at once and put in place by `commit()`, as one rename.

    A release and `promote` make it before they move any tag (a lockfile that cannot be written fails while nothing
    has moved) and commit it only after every tag moved; leaving the `with` block without a commit (an error)
    removes the file written beside it, so the lockfile is the old one or the whole new one, never half."""

    def __init__(self, path: str | os.PathLike[str], entries: Mapping[str, LockEntry] | Iterable[LockEntry]) -> None:
        new = dict(entries) if isinstance(entries, Mapping) else {e.variant: e for e in entries}
        self.path = Path(path)
        self.merged = {**read_lock(self.path), **new}
        self._tmp = ""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, self._tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(dumps_lock(self.merged))
        except OSError as exc:
            self.discard()
            raise UserInputError(f"cannot write the lockfile: {exc.strerror or exc}", where=str(self.path)) from None
        except BaseException:
            self.discard()
            raise

    def commit(self) -> dict[str, LockEntry]:
        """Put the new lockfile in place; returns every entry it holds."""
        os.replace(self._tmp, self.path)
        return self.merged

    def discard(self) -> None:
        if self._tmp:
            Path(self._tmp).unlink(missing_ok=True)

    def __enter__(self) -> PendingLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()  # after a commit there is nothing left to remove


def write_lock(path: str | os.PathLike[str], entries: Mapping[str, LockEntry] | Iterable[LockEntry]
               ) -> dict[str, LockEntry]:
    """Merge `entries` into the lockfile at `path` (other variants' entries are kept) and write it atomically.
    Returns every entry the file now holds."""
    with PendingLock(path, entries) as pending:
        return pending.commit()


def base_digest(engine: Engine, ref: str) -> str:
    """The resolved base: the image's first RepoDigest (``repo@sha256:...``) when it came from a registry, else its
    image ID (``sha256:...``)."""
    info = engine.image(ref)
    if info is None:
        raise UserInputError(f"base image {ref} is not on this engine")
    return info.repo_digests[0] if info.repo_digests else info.id


# -- entries from a release ---------------------------------------------------------------------------------------


def conformance_summary(suite: Suite | Mapping[str, Any]) -> dict[str, Any]:
    """{passed, counts, failed, platform, replicas} of a report.Suite (or its to_json() dict)."""
    data = suite if isinstance(suite, Mapping) else suite.to_json()
    summary = {
        "passed": bool(data.get("passed")),
        "counts": dict(data.get("counts", {})),
        "failed": sorted(c["name"] for c in data.get("checks", []) if c.get("status") == "failed"),
        "platform": data.get("platform"),
        "replicas": data.get("replicas"),
    }
    # The advisory audit the release ran (or skipped, saying so): source, data date, findings, waivers.
    audited = next((c.get("details") for c in data.get("checks", []) if c.get("name") == AUDIT_CHECK), None)
    if audited is not None:
        summary["advisories"] = audited
    return summary


def lock_entry(build: VariantBuild, *, recipe: str, base_digest: str, suite: Suite | Mapping[str, Any] | None = None,
               pushed: Mapping[str, PushResult | str] | None = None, audit: str | None = None) -> LockEntry:
    """The entry for one build. `pushed` maps a local tag (or remote ref) to a `PushResult` (or a digest string);
    the entry keys them by remote ref."""
    refs = {}
    for key, res in (pushed or {}).items():
        refs[key if isinstance(res, str) else res.ref] = res if isinstance(res, str) else res.digest
    return LockEntry(
        variant=build.name, recipe=recipe, tag=build.tag, image_id=build.image_id, base_image=build.base_image,
        base_digest=base_digest, versions=dict(installed_versions(build.manifest)), pushed=dict(sorted(refs.items())),
        conformance=conformance_summary(suite) if suite is not None else {},
        size=build.size, released=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), inputs=build.inputs,
        audit=json.loads(audit) if audit else None,
    )


def release_entries(engine: Engine, recipes: RecipeSet, builds: Iterable[VariantBuild], suites: Iterable[Suite],
                    pushed: Mapping[str, PushResult], audits: Mapping[str, str] | None = None) -> list[LockEntry]:
    """An entry per build (suites matched by variant name, pushes by local tag: `pushed` as push_immutable and
    planned_moves give it; `audits`: the audit document each variant's build mounted)."""
    by_suite = {s.name: s for s in suites}
    entries = []
    for b in builds:
        v = recipes.by_name.get(b.name)
        mine = {t: r for t, r in pushed.items() if t == b.tag or moving_of(t, b.tag)}
        entries.append(lock_entry(b, recipe=v.source if v is not None else "",
                                  base_digest=base_digest(engine, b.base_image), suite=by_suite.get(b.name),
                                  pushed=mine, audit=(audits or {}).get(b.name)))
    return entries
