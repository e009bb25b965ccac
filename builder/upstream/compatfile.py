"""Writing a derived release into `builder/recipe/data/compat.yaml` as text, so its comments (every entry's
sources) survive: the entry of the release's line is replaced, or a new one is placed in version order (newest
first), with comments saying where each value was read and what was not; a GPU architecture list the data does
not already hold for that build goes into `gpu_archs`, before the broader entries (the first match wins).

What the wheels cannot say is never invented: for a line compat.yaml already has, such values (builds served by
another index, `tested` versions) are kept from its entry and said so; for a new line they are left out and said.
The new text is parsed and validated as compat data, and read back to hold what was derived, before it replaces
the file (atomically): a failure leaves the file as it was.
"""

from __future__ import annotations

import datetime
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from packaging.version import Version

from ..errors import CheckFailed, UserInputError
from ..recipe.compat import Compat, FrameworkRelease
from .derive import Derivation, arch_entry
from .publishing import PUBLISHING

ENTRY_INDENT, FIELD_INDENT = 6, 8


@dataclass(frozen=True)
class Written:
    """What `write_entry` changed: the release entry's text before (None: new) and after, and any archs entry."""

    before: str | None
    after: str
    archs: tuple[str, ...]  # the gpu_archs entries added
    kept: tuple[str, ...]  # what was kept from the entry before, said
    machines: tuple[str, ...] = ()  # the architectures entries added

    @property
    def changed(self) -> bool:
        return self.before != self.after or bool(self.archs) or bool(self.machines)


def _q(value: Any) -> str:
    """A scalar as YAML reads it back as the same string (JSON's quoting is YAML's)."""
    return json.dumps(str(value))


def _flow(mapping: dict[str, Any]) -> str:
    parts = [f"{k}: {_flow(v) if isinstance(v, dict) else _q(v)}" for k, v in mapping.items() if v is not None]
    return "{" + ", ".join(parts) + "}"


def _builds(d: Derivation, old: FrameworkRelease | None) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The entry's `cuda` mapping: the derived builds (keeping a `tested` the entry before had) and the builds
    the entry before had that PyPI does not serve (kept); and what was kept, said."""
    builds: dict[str, dict[str, Any]] = {}
    kept = []
    for line, fields in d.builds().items():
        builds[line] = dict(fields)
        previous = old.cuda.get(line) if old else None
        if previous is not None and previous.tested is not None:
            builds[line]["tested"] = previous.tested.model_dump(exclude_none=True)
            kept.append(f"cuda {line} tested (no wheel states it)")
    for line, w in (old.cuda.items() if old else ()):
        if line not in builds:
            builds[line] = w.model_dump(exclude_none=True, exclude_defaults=True)
            kept.append(f"cuda {line} ({w.pip_index or 'not served by this index'}: not read here)")
    return dict(sorted(builds.items(), key=lambda kv: Version(kv[0]))), kept


def entry_text(d: Derivation, old: FrameworkRelease | None, today: datetime.date) -> tuple[str, list[str]]:
    """The release entry's YAML lines (indented as compat.yaml's releases), and what it kept from `old`."""
    pub = PUBLISHING[d.framework]
    pad, sub = " " * ENTRY_INDENT, " " * FIELD_INDENT
    builds, kept = _builds(d, old)
    lines = [f"{pad}- version: {d.version}", f"{sub}released: {d.facts['released'].value}",
             f"{sub}# Derived by `trainimg compat add {pub.project}=={d.version}` on {today}; each value's source:"]
    lines += [f"{sub}#   {key}: {fact.source}" for key, fact in d.facts.items()]
    lines += [f"{sub}# Not read here: {key}: {why}" for key, why in sorted(d.unread.items())]
    lines += [f"{sub}# {note}" for note in d.notes]
    lines += [f"{sub}# Kept from the entry before: {what}" for what in kept]
    lines.append(f"{sub}python: {_q(d.facts['python'].value)}")
    for key in ("cpu_pip_name", "cpu_pip_index"):
        value = d.facts[key].value if key in d.facts else getattr(old, key, None)
        if value is not None:
            lines.append(f"{sub}{key}: {value}")
    if old is not None and not old.cpu:
        lines.append(f"{sub}cpu: false")
    if builds:
        lines.append(f"{sub}cuda:")
        lines += [f"{sub}  {_q(line)}: {_flow(fields)}" for line, fields in builds.items()]
    lines.append(f"{sub}source: https://pypi.org/project/{pub.project}/{d.version}/")
    return "\n".join(lines) + "\n", kept


def _block(lines: list[str], start: int) -> int:
    """The end (exclusive) of the release entry starting at `start`."""
    end = start + 1
    while end < len(lines):
        text = lines[end]
        indent = len(text) - len(text.lstrip())
        if text.strip() and (indent < ENTRY_INDENT or (indent == ENTRY_INDENT and text.lstrip().startswith("- "))):
            break
        end += 1
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    return end


def _releases_at(lines: list[str], framework: str) -> int:
    """The line index of `frameworks.<framework>.releases:`."""
    section = next(i for i, t in enumerate(lines) if t.rstrip() == "frameworks:")
    mine = next(i for i in range(section, len(lines)) if lines[i].rstrip() == f"  {framework}:")
    return next(i for i in range(mine, len(lines)) if lines[i].rstrip() == "    releases:")


def place(lines: list[str], framework: str, version: Version) -> tuple[int, int]:
    """Where the entry goes: (start, end) of the same line's entry to replace, or (at, at) to insert at."""
    i = _releases_at(lines, framework) + 1
    while i < len(lines):
        text = lines[i]
        indent = len(text) - len(text.lstrip())
        if text.strip() and indent < ENTRY_INDENT:
            return i, i
        if indent == ENTRY_INDENT and text.lstrip().startswith("- version:"):
            have = Version(text.split(":", 1)[1].strip())
            if (have.major, have.minor) == (version.major, version.minor):
                return i, _block(lines, i)
            if have < version:
                return i, i
        i += 1
    return i, i


def _archs_texts(d: Derivation, compat: Compat, today: datetime.date) -> list[str]:
    pub = PUBLISHING[d.framework]
    v = Version(d.version)
    out = []
    for line, archs in d.archs().items():
        entry = arch_entry(compat, d.framework, d.version, line)
        if entry is not None and tuple(entry.archs) == tuple(archs):
            continue
        out.append(f"  - framework: {d.framework}\n    versions: {_q(f'=={v.major}.{v.minor}.*')}\n"
                   f"    cuda: {_q(f'=={line}.*')}\n"
                   f"    # Read by `trainimg compat add {pub.project}=={d.version}` on {today}.\n"
                   f"    archs: [{', '.join(archs)}]\n    source: {_q(d.facts[f'archs:{line}'].source)}\n")
    return out


def _machine_texts(d: Derivation, compat: Compat, today: datetime.date) -> list[str]:
    """An `architectures` entry for the release's line per architecture whose CUDA builds on PyPI the data's entry
    does not hold (torch 2.15's aarch64 wheel is CUDA 13.2; the entry for 2.12-2.15 said 12.6 to 13.0): whether a
    CPU build exists there, and under what name, is kept from that entry (it comes from another index), and said."""
    pub = PUBLISHING[d.framework]
    v = Version(d.version)
    out = []
    for key, fact in d.facts.items():
        if not key.startswith("arch:"):
            continue
        arch = key.split(":", 1)[1]
        old = compat.arch_builds(d.framework, d.version, arch)
        if old is not None and old.cuda and all(old.has_cuda(line) for line in fact.value["builds"]):
            continue
        builds = ", ".join(fact.value["builds"]) or "no"
        note = f"{pub.project} {d.version}'s {arch} wheels on PyPI are its CUDA {builds} build"
        kept = ""
        if old is not None:
            note += f"; {'a CPU build is published too' if old.cpu else 'no CPU build'} (the entry for {old.versions})"
            kept = f" cpu{' and cpu_pip_name' if old.cpu_pip_name else ''} kept from the entry for {old.versions}."
        lines = [f"  - framework: {d.framework}", f"    versions: {_q(f'=={v.major}.{v.minor}.*')}", f"    arch: {arch}",
                 f"    # Read by `trainimg compat add {pub.project}=={d.version}` on {today}.{kept}",
                 f"    cpu: {'true' if old is None or old.cpu else 'false'}"]
        if old is not None and old.cpu_pip_name:
            lines.append(f"    cpu_pip_name: {old.cpu_pip_name}")
        lines += [f"    cuda: {_q(fact.value['cuda']) if fact.value['cuda'] else 'null'}", f"    note: {_q(note)}",
                  f"    source: {_q(fact.source)}"]
        out.append("\n".join(lines) + "\n")
    return out


def _insert_after(lines: list[str], header: str, texts: list[str]) -> None:
    """`texts` as the first entries of the list under the top-level `header` (the first match wins there)."""
    if texts:
        at = next(i for i, t in enumerate(lines) if t.rstrip() == header) + 1
        while at < len(lines) and (lines[at].startswith("#") or not lines[at].strip()):
            at += 1
        lines[at:at] = texts


def new_text(text: str, d: Derivation, compat: Compat, today: datetime.date) -> tuple[str, Written]:
    """compat.yaml's text with `d` written in."""
    old = compat.release(d.framework, d.version)
    if old is not None and Version(old.version) > Version(d.version):
        raise UserInputError(f"compat.yaml holds {old.version}, newer in the {old.line} line: each line holds its "
                             f"newest release", where="FRAMEWORK==VERSION")
    lines = text.splitlines(keepends=True)
    start, end = place(lines, d.framework, Version(d.version))
    body, kept = entry_text(d, old, today)
    before = "".join(lines[start:end]) if end > start else None
    lines[start:end] = [body]
    archs = _archs_texts(d, compat, today)
    _insert_after(lines, "gpu_archs:", archs)
    machine = _machine_texts(d, compat, today)
    _insert_after(lines, "architectures:", machine)
    return "".join(lines), Written(before, body, tuple(archs), tuple(kept), tuple(machine))


def check_text(text: str, d: Derivation) -> Compat:
    """The new data, validated, holding exactly what was derived (a writer slip fails here, before the file)."""
    try:
        compat = Compat.model_validate(yaml.safe_load(text))
    except Exception as exc:  # pydantic's or YAML's: either way the text is not written
        raise CheckFailed(f"the derived entry does not make valid compat data: {exc}") from None
    rel = compat.release(d.framework, d.version)
    assert rel is not None and rel.version == d.version
    for line, fields in d.builds().items():
        got = rel.cuda[line].model_dump(include=set(fields))
        if got != fields:
            raise CheckFailed(f"the written {line} build reads back as {got}, not {fields}")
    for key, fact in d.facts.items():
        if not key.startswith("arch:"):
            continue
        arch = key.split(":", 1)[1]
        builds = compat.arch_builds(d.framework, d.version, arch)
        if not (builds and all(builds.has_cuda(x) for x in fact.value["builds"])):
            raise CheckFailed(f"the written {arch} builds of {d.version} read back as "
                              f"{builds.cuda if builds else 'none'}, not CUDA {fact.value['builds']}")
    return compat


def write_entry(path: Path, d: Derivation, compat: Compat, today: datetime.date | None = None) -> Written:
    """Write `d` into the compat file at `path` (atomically; unchanged bytes are not rewritten)."""
    text = path.read_text(encoding="utf-8")
    updated, written = new_text(text, d, compat, today or datetime.date.today())
    check_text(updated, d)
    if updated != text:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(updated)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return written
