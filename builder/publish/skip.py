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
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass

from ..errors import RegistryError, UserInputError
from ..recipe.arches import DEFAULT_ARCH, arch_key, split_key
from ..recipe.variant import Variant
from ..registry.imageindex import architectures
from ..runtime.contract import INPUTS_LABEL
from .lockfile import LockEntry
from .passrecord import registry_entry
from ..registry.references import RegistryTarget, split_tag
from ..registry.registryapi import RegistryAPI

SKIPPED, BUILDING = "skipped", "building"  # the first word of a decision line


@dataclass(frozen=True)
class Decision:
    """Whether one variant is built for one architecture; `reason` is the one line the CLI prints. A skipped one
    names the registry `digest` of its image manifest it keeps, the digest its tag names now (`tag_digest`: the
    index's, for a variant of several architectures) and the lock `entry` that vouches for it."""

    variant: str
    tag: str
    skip: bool
    reason: str
    digest: str | None = None
    entry: LockEntry | None = None
    arch: str = DEFAULT_ARCH
    tag_digest: str | None = None

    @property
    def key(self) -> str:
        return arch_key(self.variant, self.arch)

    def line(self) -> str:
        return f"{SKIPPED if self.skip else BUILDING} {self.key}: {self.reason}"


_DECISION_LINE_RE = re.compile(rf"^({SKIPPED}|{BUILDING}) (\S+): (.*)$", re.MULTILINE)


def read_decisions(output: str) -> dict[str, tuple[bool, str]]:
    """{variant: (skipped, reason)} from the decision lines in `release`/`build` output (`Decision.line`), for
    CI logs, the tests and the bench."""
    return {m.group(2): (m.group(1) == SKIPPED, m.group(3)) for m in _DECISION_LINE_RE.finditer(output)}


def _short(key: str | None) -> str:
    return key.split(":", 1)[-1][:12] if key else "none"


def remote_inputs(api: RegistryAPI, repository: str, tag: str) -> dict[str, tuple[str, str | None]] | None:
    """{architecture: (its image manifest's digest, its `trainimg.inputs` label)} of what `repository:tag` names
    (one image, or an index of several), and the tag's own digest under ``""``; None when the tag is not there."""
    got = api.manifest_json(repository, tag)
    if got is None:
        return None
    found: dict[str, tuple[str, str | None]] = {"": (got[2], None)}
    for arch, digest in architectures(api, repository, got).items():
        labels = api.image_labels(repository, digest)
        found[arch] = (digest, labels[1].get(INPUTS_LABEL) if labels is not None else None)
    return found


def decide(api: RegistryAPI, target: RegistryTarget, variants: Sequence[Variant], keys: Mapping[str, str],
           entries: Mapping[str, LockEntry], rebuild: bool) -> dict[str, Decision]:
    """A Decision per (variant, architecture) of `keys` ({`arch_key`: inputs key}, the release's variants of
    `variants`), by `arch_key`, against the registry (each architecture's manifest under the tag) and lock
    `entries`."""
    out: dict[str, Decision] = {}
    for v in variants:
        name, tag = split_tag(v.tag)
        remote = None if rebuild else remote_inputs(api, target.repository(name), tag)
        for key in (k for k in keys if split_key(k)[0] == v.name):
            arch = split_key(key)[1]
            out[key] = _decision(api, target, v, arch, keys[key], remote, entries.get(key), rebuild, out)
    return out


def _decision(api: RegistryAPI, target: RegistryTarget, v: Variant, arch: str, key: str,
              remote: dict[str, tuple[str, str | None]] | None, entry: LockEntry | None, rebuild: bool,
              made: Mapping[str, Decision]) -> Decision:
    ref = target.ref(v.tag)
    if rebuild:
        return Decision(v.name, v.tag, False, "--rebuild", arch=arch)
    if remote is None or arch not in remote:
        where = ref if remote is None else f"an {arch} image under {ref}"
        return Decision(v.name, v.tag, False, f"{where} is not in the registry", arch=arch)
    digest, held = remote[arch]
    if held != key:
        parent = made.get(arch_key(v.extends, arch)) if v.extends else None
        why = "its parent changed" if parent is not None and not parent.skip else "inputs changed"
        return Decision(v.name, v.tag, False, f"{why} (registry {_short(held)}, now {_short(key)})", arch=arch)
    return _unchanged(api, target, v, arch, key, digest, remote[""][0], entry)


def _unchanged(api: RegistryAPI, target: RegistryTarget, v: Variant, arch: str, key: str, digest: str,
               tag_digest: str, entry: LockEntry | None) -> Decision:
    """The decision for a variant's `arch` image whose registry manifest carries its inputs key: skipped when the
    lockfile `entry`, else the release record beside that manifest (passrecord.py), says it passed conformance."""
    ref = target.ref(v.tag)
    shown = f"{ref}@{digest}" + ("" if arch == DEFAULT_ARCH else f" ({arch})")
    if entry is not None and entry.image_digest(ref) == digest and entry.conformance.get("passed"):
        return Decision(v.name, v.tag, True, f"inputs {_short(key)} unchanged; {shown} passed conformance "
                                             "(lockfile)", digest, entry, arch, tag_digest)
    try:  # a registry that answers the referrers lookup oddly costs a build, never the release
        beside, problem = registry_entry(api, target, v.tag, digest, v.name, key, arch), ""
    except RegistryError as exc:
        beside, problem = None, f" ({exc.message})"
    if beside is not None:
        return Decision(v.name, v.tag, True, f"inputs {_short(key)} unchanged; {shown} passed conformance "
                                             "(record beside the image)", digest, beside, arch, tag_digest)
    return Decision(v.name, v.tag, False, f"inputs {_short(key)} unchanged but no passed conformance record of "
                                          f"{shown} in the lockfile or beside the image{problem}", arch=arch)


def check_whole(chosen: Sequence[Variant], decisions: Mapping[str, Decision], left: Set[tuple[str, str]]) -> None:
    """A release that moves a variant's tag puts every architecture it is built for (not those of `left`, which no
    build here makes: `lockcompile.left_out`) in the tag's index: one left out by `--arch` (and not kept as
    unchanged) would vanish from the tag. `--stage` jobs are exempt: `promote` puts the index together from every
    architecture's part."""
    for v in chosen:
        missing = [a for a in v.arch if (v.name, a) not in left and arch_key(v.name, a) not in decisions]
        if missing and any(split_key(k)[0] == v.name for k in decisions):
            raise UserInputError(f"{v.name} is built for {', '.join(v.arch)}: releasing it without {', '.join(missing)} "
                                 f"would take {', '.join(missing)} out of {v.tag}; release every architecture, or "
                                 "use --stage (promote puts the index together)", where="--arch")
