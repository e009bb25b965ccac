"""Which GPUs a framework's CUDA build runs on: its architecture list (compat data) and the one rule that reads it.

Why a rule and not a list of GPUs: a build holds kernels for a few architectures, and NVIDIA's compatibility rules
say which other GPUs those kernels serve (CUDA C++ Programming Guide, "Binary Compatibility" and "Application
Compatibility", https://docs.nvidia.com/cuda/cuda-c-programming-guide/#binary-compatibility):

* ``sm_XY`` is machine code (SASS, a cubin) for compute capability X.Y; it runs on X.Z for every Z >= Y and on no
  other major (``sm_80`` runs on an A10G's 8.6 and an L4's 8.9; ``sm_90`` never on a B200's 10.0);
* ``compute_XY`` is PTX, which the driver compiles for the GPU it finds: it runs on every capability >= X.Y.

A job whose GPU is outside the list fails at its first kernel ("no kernel image is available for execution on the
device"), after it has queued for those GPUs: `trainimg spec` refuses it up front (`jobs.gpucheck`).
"""

from __future__ import annotations

import re

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from ..runtime.frameworks import NAMES
from .compat import ArchBuild, FrameworkName, load_compat

Capability = tuple[int, int]
_ARCH = re.compile(r"(sm|compute)_([0-9]+)([0-9])")
#: What CUDA 13 removed (CUDA 13.0 release notes): the reason a cu13 build lacks them, said in refusals.
CUDA13_DROPPED = ((5, 0), (7, 5), "CUDA 13 dropped Maxwell, Pascal and Volta")


def parse_arch(arch: str) -> tuple[str, Capability]:
    """``sm_86`` -> ``("sm", (8, 6))``; ``compute_120`` -> ``("compute", (12, 0))``: the last digit is the minor."""
    match = _ARCH.fullmatch(arch)
    if match is None:
        raise ValueError(f"not a CUDA architecture (sm_XY or compute_XY): {arch!r}")
    return match.group(1), (int(match.group(2)), int(match.group(3)))


def parse_capability(text: str) -> Capability:
    """``"8.6"`` -> ``(8, 6)``."""
    major, _, minor = text.partition(".")
    if not (major.isdigit() and minor.isdigit()):
        raise ValueError(f"not a compute capability (MAJOR.MINOR): {text!r}")
    return int(major), int(minor)


def show(cc: Capability) -> str:
    return f"{cc[0]}.{cc[1]}"


def runs_on(archs: tuple[str, ...], cc: Capability) -> bool:
    """The rule (module docstring): SASS of the same major and a minor <= the GPU's, or PTX <= the GPU's."""
    for arch in archs:
        kind, built = parse_arch(arch)
        if kind == "sm" and built[0] == cc[0] and built[1] <= cc[1]:
            return True
        if kind == "compute" and built <= cc:
            return True
    return False


def describe(archs: tuple[str, ...]) -> str:
    """The capabilities `archs` runs on, as a refusal says them: ``7.5-7.x, 8.x, 9.x, 10.x, 12.x`` or ``any >= 9.0
    (PTX)``."""
    lowest: dict[int, int] = {}
    ptx: Capability | None = None
    for arch in archs:
        kind, (major, minor) = parse_arch(arch)
        if kind == "compute":
            ptx = min(ptx or (major, minor), (major, minor))
        else:
            lowest[major] = min(lowest.get(major, minor), minor)
    parts = [f"{major}.x" if minor == 0 else f"{major}.{minor}-{major}.x" for major, minor in sorted(lowest.items())
             if ptx is None or (major, minor) < ptx]
    if ptx is not None:
        parts.append(f"any >= {show(ptx)} (PTX)")
    return ", ".join(parts)


def why_missing(cuda: str | None, cc: Capability) -> str:
    """A short reason a build lacks `cc`, when one is known (CUDA 13 removed sm_50..sm_72), else ''."""
    low, high, reason = CUDA13_DROPPED
    if cuda is not None and Version(cuda).major >= 13 and low <= cc < high:
        return f" ({reason})"
    return ""


def arch_build(framework: str, version: str | None, cuda: str | None, cpu: str = "amd64") -> ArchBuild | None:
    """The compat entry for `framework` `version`'s CUDA build installed on a CUDA `cuda` base, of its wheels for CPU
    architecture `cpu`, or None when the data has none (a CPU build, a release without an entry)."""
    if framework not in NAMES or version is None or cuda is None:
        return None
    compat = load_compat()
    name: FrameworkName = framework  # type: ignore[assignment]
    release = compat.release(name, version)
    build = release.build_for(cuda) if release is not None else None
    if build is None:
        return None
    for entry in compat.gpu_archs:
        if (entry.framework == framework and entry.arch == cpu and Version(version) in SpecifierSet(entry.versions)
                and Version(build[0]) in SpecifierSet(entry.cuda)):
            return entry
    return None


def archs_of(framework: str, version: str | None, cuda: str | None, cpu: str = "amd64") -> tuple[str, ...] | None:
    """The architecture list of that build (`arch_build`), or None when unknown."""
    entry = arch_build(framework, version, cuda, cpu)
    return entry.archs if entry is not None else None
