"""Release across runners: each CI job stages its variants (`release --stage`: immutable tags pushed, one part per
variant in `lock.d/`), and one final job promotes them (`trainimg promote lock.d/`): every part there and
well-formed, every digest in the registry with a passed record, or nothing moves. Then each moving tag is a
registry manifest copy of its winner (no layer pulled or pushed) and the parts are merged into `images.lock`, all
or nothing (a failed copy puts the moved tags back and writes no lockfile).

A part is a lockfile (publish/lockfile.py's format) holding exactly one variant, named `<variant>.json`: the same
reader checks both, and a part is what that variant's entry in `images.lock` becomes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from pathlib import Path

from ..errors import UserInputError
from ..recipe.variant import RecipeSet
from .lockfile import LockEntry, PendingLock, read_lock, write_lock
from .movingtags import copy_moving_tags, moving_of, planned_moves
from ..registry.references import RegistryTarget
from ..registry.registryapi import RegistryAPI

PART_SUFFIX = ".json"


def part_path(lock_dir: str | Path, variant: str) -> Path:
    return Path(lock_dir) / f"{variant}{PART_SUFFIX}"


def write_parts(lock_dir: str | Path, entries: Iterable[LockEntry]) -> list[Path]:
    """One part per entry (replacing an older part of the same variant)."""
    paths = []
    for entry in entries:
        path = part_path(lock_dir, entry.variant)
        path.unlink(missing_ok=True)
        write_lock(path, [entry])
        paths.append(path)
    return paths


def _read_part(path: Path, variant: str) -> LockEntry | str:
    """The part's one entry, or the problem with it (one line)."""
    try:
        entries = read_lock(path)
    except UserInputError as err:
        return f"{variant}: malformed part: {err}"
    if list(entries) != [variant]:
        return f"{variant}: {path} holds {', '.join(sorted(entries)) or 'no variant'}, not exactly {variant}"
    return entries[variant]


def _check_entry(entry: LockEntry, path: Path, api: RegistryAPI, target: RegistryTarget) -> str | None:
    """The problem with one staged entry, None when its digest is in the registry with a passed record."""
    ref = target.ref(entry.tag)
    if not entry.conformance.get("passed"):
        failed = ", ".join(entry.conformance.get("failed") or []) or "no passed record"
        return f"{entry.variant}: failed conformance ({failed}) in {path}"
    digest = entry.pushed.get(ref)
    if digest is None:
        return f"{entry.variant}: {path} records no push of {ref} (staged to another registry?)"
    name, tag = ref.split("/", 1)[1].rsplit(":", 1)
    remote = api.remote_digest(name, tag)
    if remote != digest:
        return f"{entry.variant}: the registry serves {remote or 'nothing'} for {ref}, the part says {digest}"
    return None


def check_parts(recipes: RecipeSet, lock_dir: Path, variants: Iterable[str], api: RegistryAPI,
                target: RegistryTarget) -> tuple[dict[str, LockEntry], list[str]]:
    """The staged entries of the expected variants (`variants`, default all, with their parents) and every
    problem found, one line each: a missing or malformed part, a failed record, a digest the registry lacks."""
    expected = recipes.with_parents(recipes.select(list(variants)))
    entries: dict[str, LockEntry] = {}
    problems: list[str] = []
    for v in expected:
        path = part_path(lock_dir, v.name)
        if not path.is_file():
            problems.append(f"{v.name}: no part {path} (its stage job did not finish)")
            continue
        got = _read_part(path, v.name)
        problem = got if isinstance(got, str) else _check_entry(got, path, api, target)
        if problem:
            problems.append(problem)
        elif isinstance(got, LockEntry):
            entries[v.name] = got
    return entries, problems


def promote(entries: Mapping[str, LockEntry], api: RegistryAPI, target: RegistryTarget,
            lock_path: str | Path) -> dict[str, LockEntry]:
    """Set the moving tags of checked `entries` by registry manifest copies and merge them into `lock_path`;
    returns the entries as written. All or nothing, as a release's last step: the lockfile is written beside its
    path first, the tags move (a failed copy puts the moved ones back), then the lockfile is put in place."""
    digests = {e.tag: e.pushed[target.ref(e.tag)] for e in entries.values()}
    moves = planned_moves(target, digests)
    out = []
    for e in entries.values():
        pushed = {target.ref(e.tag): digests[e.tag]}
        pushed.update({res.ref: res.digest for mt, res in moves.items() if moving_of(mt, e.tag)
                       and res.digest == digests[e.tag]})
        out.append(dataclasses.replace(e, pushed=dict(sorted(pushed.items()))))
    with PendingLock(lock_path, out) as pending:
        copy_moving_tags(api, target, digests)
        pending.commit()
    return {e.variant: e for e in out}
