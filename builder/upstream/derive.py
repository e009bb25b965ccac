"""A release's compatibility entry derived from its own wheels (`trainimg compat add FRAMEWORK==VERSION`), and the
comparison of a derivation with what `compat.yaml` holds.

Every value comes with its source (the index page or the wheel and the file inside it); a value the wheels on this
index cannot give is in `unread` with why (`publishing.PUBLISHING` lists them per framework), never guessed. What
is read: the release date (the first upload of the version's files), the Python versions and machines (the binary
project's Linux wheel tags), each CUDA build PyPI serves (its requirements), the CPU build's name or index, and the
GPU architectures where a wheel states them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from ..errors import UserInputError
from ..recipe.arches import ARCHES, DEFAULT_ARCH
from ..recipe.compat import ArchBuild, Compat, FrameworkRelease
from ..runtime.frameworks import FrameworkName
from .publishing import EXTRA, OWN, PUBLISHING, Publishing
from .simpleapi import IndexFile, Project, SimpleIndex
from .wheelfacts import Build, active, archs_of, cpython_minors, cuda_build, machines, python_spec, representative
from .wheelzip import RemoteWheel, metadata

SPEC_FIELDS = ("python", "cudnn", "nccl", "cuda_lines")


@dataclass(frozen=True)
class Fact:
    value: Any
    source: str


@dataclass
class Derivation:
    """What the wheels of `framework` `version` say, field by field (`facts`), and what they cannot (`unread`).
    Keys: ``released``, ``python``, ``cpu_pip_name``, ``cpu_pip_index``, ``cuda:<line>`` (the build's fields),
    ``archs:<line>`` (its GPU architectures)."""

    framework: FrameworkName
    version: str
    facts: dict[str, Fact] = field(default_factory=dict)
    unread: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def builds(self) -> dict[str, dict[str, str]]:
        return {k.split(":", 1)[1]: f.value for k, f in self.facts.items() if k.startswith("cuda:")}

    def archs(self) -> dict[str, tuple[str, ...]]:
        return {k.split(":", 1)[1]: f.value for k, f in self.facts.items() if k.startswith("archs:")}


def parse_request(text: str, compat: Compat) -> tuple[FrameworkName, str]:
    """``FRAMEWORK==VERSION`` (the framework's name or its pip name: ``torch==2.15.0``) -> (framework, version)."""
    name, sep, version = text.partition("==")
    by_pip = {fw.pip_name: key for key, fw in compat.frameworks.items()}
    framework = name.strip().lower()
    framework = by_pip.get(framework, framework)
    if not sep or framework not in compat.frameworks:
        raise UserInputError(f"{text!r}: give FRAMEWORK==VERSION, FRAMEWORK one of "
                             f"{', '.join(sorted({*compat.frameworks, *by_pip}))}", where="FRAMEWORK==VERSION")
    try:
        parsed = Version(version.strip())
    except InvalidVersion:
        raise UserInputError(f"{version!r} is not a version", where="FRAMEWORK==VERSION") from None
    if parsed.is_prerelease or parsed.local:
        raise UserInputError(f"{parsed} is a pre-release or local build: compat data holds releases",
                             where="FRAMEWORK==VERSION")
    return framework, str(parsed)


def derive(index: SimpleIndex, framework: FrameworkName, version: str, *, archs: bool = True) -> Derivation:
    """Read `framework` `version` off the index's wheels (metadata and small members by range requests)."""
    pub = PUBLISHING[framework]
    project = index.project(pub.project)
    if Version(version) not in project.versions():
        newest = project.newest()
        raise UserInputError(f"{pub.project} {version} is not on {index.url} (newest release: {newest})",
                             where="FRAMEWORK==VERSION")
    d = Derivation(framework, version, unread=dict(pub.elsewhere))
    files = project.files_of(version)
    d.facts["released"] = Fact(project.released(version), f"{project.url} (upload-time of the first file of "
                                                           f"{version})")
    wheel = representative(files)
    if wheel is None:
        raise UserInputError(f"{pub.project} {version} has no Linux x86_64 wheel on {index.url}")
    msg, where = metadata(index.http, wheel)
    binary = index.project(pub.binary) if pub.binary != pub.project else project
    minors = cpython_minors(binary.files_of(version))
    tags = f"cp3{minors[0]}..cp3{minors[-1]} Linux wheels" if minors else "no cpXY wheel"
    d.facts["python"] = Fact(python_spec(minors, msg.get("Requires-Python")),
                             f"{binary.url}: {tags} of {version}; Requires-Python {msg.get('Requires-Python')} "
                             f"in {where}")
    d.notes.append(f"{pub.binary} {version}'s Linux wheels are built for {', '.join(machines(binary.files_of(version)))}"
                   f" ({binary.url})")
    _cpu(index, pub, version, d)
    python = f"3.{minors[-1]}" if minors else "3.12"
    for extra, build, source, arch_wheel in _builds(index, pub, msg, where, wheel, version, python):
        d.facts[f"cuda:{build.line}"] = Fact(build.fields(extra), source)
        if archs and pub.archs is not None:
            _read_archs(index, pub, arch_wheel, build.line, d)
    if not archs and pub.archs is not None:
        d.unread["gpu_archs"] = "not asked for (--no-archs)"
    _machine_builds(index, pub, (msg, where), files, machines(binary.files_of(version)), version, python, d)
    return d


def _machine_builds(index: SimpleIndex, pub: Publishing, plain: tuple[Any, str], files: list[IndexFile],
                    built_for: list[str], version: str, python: str, d: Derivation) -> None:
    """Per CPU architecture other than amd64 that the binary's Linux wheels are built for, the CUDA builds PyPI
    serves for it (``arch:<arch>``: their lines and the CUDA lines they run on), read from that machine's wheels as
    amd64's are from x86_64's: torch's aarch64 wheel is a CUDA build of its own (2.15's: 13.2)."""
    for arch in ARCHES.values():
        key = f"arch:{arch.name}"
        if arch.name == DEFAULT_ARCH or arch.machine not in built_for or key in d.unread:
            continue
        msg, where = plain
        wheel = representative(files, arch.machine)
        if pub.cuda_from == OWN:
            if wheel is None:
                continue
            msg, where = metadata(index.http, wheel)
        builds = _builds(index, pub, msg, where, wheel or files[0], version, python, arch.machine)
        lines = sorted((b.line for _, b, _, _ in builds), key=Version)
        spec = builds[0][1].cuda_lines if len(builds) == 1 else (
            f">={lines[0]},<{Version(lines[-1]).major + 1}" if lines else None)
        d.facts[key] = Fact({"builds": tuple(lines), "cuda": spec},
                            "; ".join(source for _, _, source, _ in builds) or f"{where}: no CUDA build")


def _cpu(index: SimpleIndex, pub: Publishing, version: str, d: Derivation) -> None:
    if pub.cpu_project:
        cpu = index.project(pub.cpu_project)
        if cpu.files_of(version):
            d.facts["cpu_pip_name"] = Fact(pub.cpu_project, f"{cpu.url} (holds {version})")
        else:
            d.unread["cpu_pip_name"] = f"{cpu.url} has no {version}"
    if pub.cpu_index:
        d.facts["cpu_pip_index"] = Fact(pub.cpu_index, pub.source)


def _builds(index: SimpleIndex, pub: Publishing, msg: Any, where: str, wheel: IndexFile, version: str,
            python: str, machine: str = "x86_64") -> list[tuple[str | None, Build, str, IndexFile]]:
    """(pip extra, build, source, the wheel holding its architectures) for each CUDA build PyPI serves for
    `machine`."""
    requires = msg.get_all("Requires-Dist") or []
    if pub.cuda_from in (OWN, EXTRA):
        extra = pub.cuda_extra if pub.cuda_from == EXTRA else None
        build = cuda_build(active(requires, extra or "", python, machine))
        return [(extra, build, _said(where, build), wheel)] if build else []
    found = []
    for extra in msg.get_all("Provides-Extra") or []:
        if not re.fullmatch(pub.cuda_extra or "", extra):
            continue
        plugins = [r for r in active(requires, extra, python, machine) if "with-cuda" in r.extras]
        for plugin in plugins:
            page: Project = index.project(plugin.name)
            pwheel = representative(page.files_of(version), machine)
            if pwheel is None:
                continue
            pmsg, pwhere = metadata(index.http, pwheel)
            build = cuda_build(active(pmsg.get_all("Requires-Dist") or [], "with-cuda", python, machine))
            if build:
                found.append((extra, build, f"{where}: extra {extra} requires {plugin}; " + _said(pwhere, build),
                              pwheel))
    return found


def _said(where: str, build: Build) -> str:
    return f"{where}: {build.defining}; {build.cudnn_wheel}{build.cudnn}; {build.nccl_wheel}{build.nccl}"


def _read_archs(index: SimpleIndex, pub: Publishing, wheel: IndexFile, line: str, d: Derivation) -> None:
    assert pub.archs is not None
    remote = RemoteWheel(index.http, wheel)
    member = remote.member(pub.archs.member)
    found, read = remote.scan(member, pub.archs.pattern, pub.archs.limit)
    if found is None:
        d.unread[f"archs:{line}"] = (f"{pub.archs.what}: not found in the first {read / 1e6:.0f} MB of "
                                     f"{member.name} ({wheel.url})")
        return
    size = f" of the {wheel.size / 1e6:.0f} MB wheel" if wheel.size else ""
    amount = f"{read / 1e6:.1f} MB" if read >= 100_000 else f"{read:,} bytes"
    d.facts[f"archs:{line}"] = Fact(archs_of(found), f"{wheel.url} ({pub.archs.what}; {amount}{size} read by range "
                                                     "requests)")


# -- comparing with compat.yaml ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Agreement:
    """One field of a derivation against compat.yaml: `state` is "agrees", "differs", "new" (compat has nothing
    there), or "unread" (compat has it, the wheels here cannot say: `derived` holds why)."""

    key: str
    state: str
    derived: Any
    written: Any
    source: str


def arch_entry(compat: Compat, framework: str, version: str, line: str) -> ArchBuild | None:
    """The gpu_archs entry covering `framework` `version`'s CUDA `line` build (the first that matches, as
    `recipe.gpuarch` reads them)."""
    for entry in compat.gpu_archs:
        if (entry.framework == framework and Version(version) in SpecifierSet(entry.versions)
                and Version(line) in SpecifierSet(entry.cuda)):
            return entry
    return None


def _same(key: str, a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    if key.startswith("arch:"):  # the entry's CUDA lines hold every build PyPI serves for the architecture
        return all(Version(line) in SpecifierSet(str(b)) for line in a["builds"])
    if key.rsplit("/", 1)[-1] in SPEC_FIELDS:
        return SpecifierSet(str(a)) == SpecifierSet(str(b))
    return str(a) == str(b)


def compare(d: Derivation, compat: Compat) -> list[Agreement]:
    """Every field of the derivation and of compat.yaml's entry for the same release line, side by side (a build's
    fields keyed ``cuda:<line>/<field>``)."""
    rel = compat.release(d.framework, d.version)
    out: list[Agreement] = []
    written: dict[str, Any] = _written(rel) if rel is not None else {}
    derived: dict[str, tuple[Any, str]] = {}
    for key, fact in d.facts.items():
        if key.startswith("cuda:"):
            derived.update({f"{key}/{k}": (v, fact.source) for k, v in fact.value.items()})
        elif key.startswith("archs:"):
            derived[key] = (fact.value, fact.source)
            entry = arch_entry(compat, d.framework, d.version, key.split(":", 1)[1])
            written[key] = entry.archs if entry else None
        elif key.startswith("arch:"):
            derived[key] = (fact.value, fact.source)
            builds = compat.arch_builds(d.framework, d.version, key.split(":", 1)[1])
            written[key] = (builds.cuda or "none") if builds else None
        else:
            derived[key] = (fact.value, fact.source)
    for key in sorted(set(derived) | set(written)):
        value, source = derived.get(key, (None, ""))
        have = written.get(key)
        if key not in derived:
            out.append(Agreement(key, "unread", _why(d, key), have, ""))
        elif have is None:
            out.append(Agreement(key, "new", value, None, source))
        else:
            out.append(Agreement(key, "agrees" if _same(key, value, have) else "differs", value, have, source))
    return out


def _written(rel: FrameworkRelease) -> dict[str, Any]:
    out: dict[str, Any] = {"released": rel.released, "python": rel.python, "cpu_pip_name": rel.cpu_pip_name,
                           "cpu_pip_index": rel.cpu_pip_index, "version": rel.version}
    for line, w in rel.cuda.items():
        for k in ("cudnn", "nccl", "cuda_lines", "cudnn_wheel", "nccl_wheel", "pip_extra", "pip_index"):
            out[f"cuda:{line}/{k}"] = getattr(w, k)
    return {k: v for k, v in out.items() if v is not None and k != "version"}


def _why(d: Derivation, key: str) -> str:
    """Why a field compat.yaml holds is not derived: a build served by another index, or an `unread` reason."""
    if key.startswith("cuda:") and key.split("/", 1)[0] not in d.facts:
        return d.unread.get("cuda builds other than PyPI's", "PyPI serves no such build")
    if key.endswith("/pip_index"):
        return d.unread.get("cuda builds other than PyPI's", "")
    base = key.split("/", 1)[-1]
    return d.unread.get(key) or d.unread.get(base) or "not read"



def _shown(value: Any) -> str:
    return ", ".join(f"{k} {', '.join(v) if isinstance(v, tuple) else v}" for k, v in value.items()) \
        if isinstance(value, dict) else str(value)


def report(d: Derivation, agreements: list[Agreement]) -> list[str]:
    """What `compat add` prints: one line per field or build (its values, and compat.yaml's where they differ),
    each with a numbered source, then the sources and what was not read."""
    sources: dict[str, int] = {}
    rows: dict[str, list[Agreement]] = {}
    for a in agreements:
        rows.setdefault(a.key.split("/", 1)[0], []).append(a)
    lines = [f"{d.framework} {d.version}:"]
    for group, items in rows.items():
        states = {a.state for a in items}
        state = "differs" if "differs" in states else "new" if "new" in states else min(states)
        if state == "unread":
            lines.append(f"  {'unread':>7}  {group}: compat.yaml has it; not read here: {items[0].derived}")
            continue
        shown = ", ".join(f"{a.key.split('/', 1)[1]} {a.derived}" if "/" in a.key else _shown(a.derived)
                          for a in items if a.state != "unread")
        differ = [f"{a.key.split('/', 1)[-1]} {a.written}" for a in items if a.state == "differs"]
        ref = sources.setdefault(items[0].source, len(sources) + 1)
        lines.append(f"  {state:>7}  {group}: {shown}" + (f" (compat.yaml: {', '.join(differ)})" if differ else "")
                     + f" [{ref}]")
    lines += [f"  [{n}] {source}" for source, n in sources.items()]
    lines += [f"  not read here: {key}: {why}" for key, why in sorted(d.unread.items())
              if not key.startswith("archs:") and key not in rows]
    lines += [f"  note: {note}" for note in d.notes]
    return lines
