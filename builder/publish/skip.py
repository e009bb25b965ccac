"""Deciding what to build: a variant whose inputs key the registry's image already carries, and whose image has a
passed conformance record, is skipped (no build, no test, no push), from two small requests per variant: its
immutable tag's manifest and that manifest's config blob (the labels). No layer is ever read.

The record is the lockfile entry that pushed exactly that digest with a passed conformance summary (a runner that
starts empty trusts the lockfile the repository keeps, not its own engine), else the release record pushed beside
the image (passrecord.py: the same entry, as an OCI artifact whose subject is that digest; a runner without the
lockfile reads it, two or three more small requests). `--rebuild` builds everything.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import RegistryError
from ..recipe.variant import Variant
from ..runtime.contract import INPUTS_LABEL
from .lockfile import LockEntry
from .passrecord import registry_entry
from ..registry.references import RegistryTarget, split_tag
from ..registry.registryapi import RegistryAPI

SKIPPED, BUILDING = "skipped", "building"  # the first word of a decision line


@dataclass(frozen=True)
class Decision:
    """Whether one variant is built; `reason` is the one line the CLI prints. A skipped variant names the
    registry `digest` it keeps and the lock `entry` that vouches for it."""

    variant: str
    tag: str
    skip: bool
    reason: str
    digest: str | None = None
    entry: LockEntry | None = None

    def line(self) -> str:
        return f"{SKIPPED if self.skip else BUILDING} {self.variant}: {self.reason}"


_DECISION_LINE_RE = re.compile(rf"^({SKIPPED}|{BUILDING}) (\S+): (.*)$", re.MULTILINE)


def read_decisions(output: str) -> dict[str, tuple[bool, str]]:
    """{variant: (skipped, reason)} from the decision lines in `release`/`build` output (`Decision.line`), for
    CI logs, the tests and the bench."""
    return {m.group(2): (m.group(1) == SKIPPED, m.group(3)) for m in _DECISION_LINE_RE.finditer(output)}


def _short(key: str | None) -> str:
    return key.split(":", 1)[-1][:12] if key else "none"


def remote_inputs(api: RegistryAPI, repository: str, tag: str) -> tuple[str, str | None] | None:
    """(manifest digest, its `trainimg.inputs` label) of `repository:tag`, None when the tag is not there (an index
    has no labels: trainimg pushes none, so it was not made by a release)."""
    got = api.image_labels(repository, tag)
    return None if got is None else (got[0], got[1].get(INPUTS_LABEL))


def decide(api: RegistryAPI, target: RegistryTarget, variants: Sequence[Variant], keys: Mapping[str, str],
           entries: Mapping[str, LockEntry], rebuild: bool) -> dict[str, Decision]:
    """A Decision per variant of `variants` (with their inputs `keys`), against the registry and lock `entries`."""
    out: dict[str, Decision] = {}
    for v in variants:
        ref = target.ref(v.tag)
        if rebuild:
            out[v.name] = Decision(v.name, v.tag, False, "--rebuild")
            continue
        name, tag = split_tag(v.tag)
        remote = remote_inputs(api, target.repository(name), tag)
        if remote is None:
            out[v.name] = Decision(v.name, v.tag, False, f"{ref} is not in the registry")
            continue
        digest, key = remote
        if key != keys[v.name]:
            why = "its parent changed" if v.extends and not out.get(v.extends, Decision("", "", True, "")).skip \
                else "inputs changed"
            out[v.name] = Decision(v.name, v.tag, False, f"{why} (registry {_short(key)}, now "
                                                         f"{_short(keys[v.name])})")
        else:
            out[v.name] = _unchanged(api, target, v, keys[v.name], digest, entries.get(v.name))
    return out


def _unchanged(api: RegistryAPI, target: RegistryTarget, v: Variant, key: str, digest: str,
               entry: LockEntry | None) -> Decision:
    """The decision for a variant whose registry image carries its inputs key: skipped when the lockfile `entry`,
    else the release record beside the image (passrecord.py), says that digest passed conformance."""
    ref = target.ref(v.tag)
    if entry is not None and entry.pushed.get(ref) == digest and entry.conformance.get("passed"):
        return Decision(v.name, v.tag, True, f"inputs {_short(key)} unchanged; {ref}@{digest} passed conformance "
                                             "(lockfile)", digest, entry)
    try:  # a registry that answers the referrers lookup oddly costs a build, never the release
        beside, problem = registry_entry(api, target, v.tag, digest, v.name, key), ""
    except RegistryError as exc:
        beside, problem = None, f" ({exc.message})"
    if beside is not None:
        return Decision(v.name, v.tag, True, f"inputs {_short(key)} unchanged; {ref}@{digest} passed conformance "
                                             "(record beside the image)", digest, beside)
    return Decision(v.name, v.tag, False, f"inputs {_short(key)} unchanged but no passed conformance record of "
                                          f"{ref}@{digest} in the lockfile or beside the image{problem}")
