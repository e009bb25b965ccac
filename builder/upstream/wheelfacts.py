"""Compatibility facts read off wheels: Python versions and machines from their tags, a CUDA build from their
requirements, GPU architectures from the text a wheel states them in. Pure functions of what `simpleapi` and
`wheelzip` read; the rules are those of the compatibility data's conventions (builder/recipe/data/compat.yaml's
header): `python` spans the `cpXY` tags published, a build's key is its CUDA line, requirements are PEP 440 sets.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from packaging.requirements import Requirement
from packaging.specifiers import Specifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from ..plan.locktruth import VERSIONED_AS_CUDA
from .simpleapi import IndexFile

_CPYTHON = re.compile(r"^cp3([0-9]+)$")
_MACHINE = re.compile(r"(x86_64|aarch64|ppc64le|s390x|armv7l|i686)$")
_SUFFIX = re.compile(r"-cu[0-9]+$")
_NCCL = re.compile(r"^nvidia-nccl(?:-cu[0-9]+)?$")
#: The wheels that are the CUDA runtime: a pin of one of them names the line a build was made for.
RUNTIME = ("cuda-toolkit", "nvidia-cuda-runtime")
_CUDNN = re.compile(r"^nvidia-cudnn(?:-cu[0-9]+)?$")
_ARCH = re.compile(r"(?:sm|compute)_[0-9]+[a-z]?")
_GENCODE = re.compile(r"code=((?:sm|compute)_[0-9]+[a-z]?)")
LOWER_FIRST = {">=": 0, ">": 0, "==": 0, "~=": 0, "===": 0, "<=": 1, "<": 1, "!=": 2}


def linux_wheels(files: Iterable[IndexFile]) -> list[IndexFile]:
    """The Linux wheels (manylinux, musllinux or linux platform tags) among `files`."""
    return [f for f in files if f.is_wheel and any("linux" in t.platform for t in f.tags())]


def machines(files: Iterable[IndexFile]) -> list[str]:
    """The CPU architectures the Linux wheels are built for (``x86_64``, ``aarch64``), sorted."""
    return sorted({m.group() for f in linux_wheels(files) for t in f.tags() if (m := _MACHINE.search(t.platform))})


def cpython_minors(files: Iterable[IndexFile]) -> list[int]:
    """The CPython 3 minors with a wheel of their own ABI (``cp312-cp312``; free-threaded ``cp314t`` not counted)."""
    minors = set()
    for f in linux_wheels(files):
        for t in f.tags():
            m = _CPYTHON.match(t.interpreter)
            if m and t.abi == t.interpreter:
                minors.add(int(m.group(1)))
    return sorted(minors)


def python_spec(minors: list[int], requires_python: str | None) -> str:
    """The specifier the compat data writes for the minors published: ``>=3.10,<3.15`` for cp310..cp314; with
    pure-Python wheels only (no cpXY tag), the wheel's Requires-Python as it stands."""
    if minors:
        return f">=3.{minors[0]},<3.{minors[-1] + 1}"
    return str(SpecifierSet(requires_python or ""))


def representative(files: Iterable[IndexFile], machine: str = "x86_64") -> IndexFile | None:
    """The wheel whose metadata speaks for the release on Linux `machine`: the one for the newest CPython (or a
    pure ``py3`` wheel), so every requirement with a Python marker is in force."""
    best: tuple[int, IndexFile] | None = None
    for f in files:
        if not f.is_wheel:
            continue
        for t in f.tags():
            if not (t.platform.endswith(machine) or t.platform == "any"):
                continue
            m = _CPYTHON.match(t.interpreter)
            rank = int(m.group(1)) if m and t.abi == t.interpreter else (0 if t.interpreter.startswith("py3") else -1)
            if rank >= 0 and (best is None or rank > best[0]):
                best = (rank, f)
    return best[1] if best else None


def active(requirements: Iterable[str], extra: str = "", python: str = "3.12", machine: str = "x86_64"
           ) -> list[Requirement]:
    """The requirements in force on Linux `machine` for `extra` ('' for none), with markers evaluated; an extra's
    own requirements only (those the plain install also has are left out when `extra` is given)."""
    env = {"platform_system": "Linux", "sys_platform": "linux", "os_name": "posix", "platform_machine": machine,
           "python_version": python, "python_full_version": f"{python}.0", "implementation_name": "cpython",
           "platform_python_implementation": "CPython"}
    found = []
    for text in requirements:
        req = Requirement(text)
        if req.marker is None:
            if not extra:
                found.append(req)
            continue
        with_extra = req.marker.evaluate({**env, "extra": extra})
        without = req.marker.evaluate({**env, "extra": ""})
        if with_extra and (not extra or not without):
            found.append(req)
    return found


def canonical_spec(spec: SpecifierSet) -> str:
    """A specifier set as the compat data writes it: lower bounds first (``>=9.3.0.75,<10.0``)."""
    parts: list[Specifier] = sorted(spec, key=lambda s: (LOWER_FIRST.get(s.operator, 3), str(s)))
    return ",".join(str(s) for s in parts)


@dataclass(frozen=True)
class Build:
    """One CUDA build as its requirements state it, in the compat data's fields."""

    line: str  # the CUDA major.minor it is built for: the highest line among its CUDA-versioned wheels' floors
    cudnn: str
    nccl: str
    cuda_lines: str
    cudnn_wheel: str
    nccl_wheel: str
    defining: str  # the requirement that set the line, as the source says it

    def fields(self, pip_extra: str | None) -> dict[str, str]:
        out = {"cudnn": self.cudnn, "nccl": self.nccl, "cuda_lines": self.cuda_lines,
               "cudnn_wheel": self.cudnn_wheel, "nccl_wheel": self.nccl_wheel}
        return {**out, "pip_extra": pip_extra} if pip_extra else out


def _cuda_line(req: Requirement) -> tuple[Version, bool] | None:
    """The CUDA line (major.minor) a CUDA-versioned wheel's pin or floor names, and whether it is a pin."""
    base = _SUFFIX.sub("", str(canonicalize_name(req.name)))
    if base not in VERSIONED_AS_CUDA:
        return None
    for s in req.specifier:
        if s.operator in ("==", "===", ">=", ">", "~=") and "*" not in s.version:
            v = Version(s.version)
            return Version(f"{v.major}.{v.minor}"), s.operator in ("==", "===")
    return None


def cuda_build(requirements: list[Requirement]) -> Build | None:
    """The build `requirements` describe, or None when they hold no CUDA runtime, cuDNN or NCCL wheel.

    Its line: a pin of the CUDA runtime itself (`cuda-toolkit==13.0.2`, `nvidia-cuda-runtime-cu12==12.5.82`) names
    it exactly (torch 2.12 pins the 13.0.2 toolkit beside a cuBLAS of 13.1: built for 13.0), and the build runs on
    that line only; without one, the highest floor among the CUDA-versioned wheels is the oldest line they all fit
    (JAX's cuda12 plugin: nvidia-cuda-nvcc-cu12>=12.6.85, so 12.6), and any line of that major after it."""
    named = {str(canonicalize_name(r.name)): r for r in requirements}
    nccl = [r for n, r in named.items() if _NCCL.match(n)]
    cudnn = [r for n, r in named.items() if _CUDNN.match(n)]
    lines = [(found, r) for r in requirements if (found := _cuda_line(r)) is not None]
    if not (nccl and cudnn and lines):
        return None
    pins = [(found, r) for found, r in lines if found[1] and _SUFFIX.sub("", str(canonicalize_name(r.name))) in RUNTIME]
    (line, pinned), req = pins[0] if pins else max(lines, key=lambda item: item[0][0])
    cuda_lines = f"=={line}.*" if pinned else f">={line},<{line.major + 1}"
    return Build(line=str(line), cudnn=canonical_spec(cudnn[0].specifier), nccl=canonical_spec(nccl[0].specifier),
                 cuda_lines=cuda_lines, cudnn_wheel=str(canonicalize_name(cudnn[0].name)),
                 nccl_wheel=str(canonicalize_name(nccl[0].name)), defining=str(req))


def archs_of(found: bytes) -> tuple[str, ...]:
    """The architectures a matched text names, in the compat data's spelling: ``-gencode;arch=compute_90,code=sm_90``
    gives ``sm_90`` (``code=compute_90`` would be PTX: ``compute_90``); a build-info list gives its items."""
    text = found.decode("ascii", "replace")
    names = _GENCODE.findall(text) if "gencode" in text else _ARCH.findall(text)
    return tuple(dict.fromkeys(names))
