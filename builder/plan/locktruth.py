"""Whether a lock holds what its recipe asks for: the framework's CUDA build, one NCCL, CUDA wheels of one line.

Why: a lock's header says what it was compiled *from*; nothing said what it *holds*. When download.pytorch.org
was unreachable, ``pytorch-2.14.1-cu126-py3.12``'s lock resolved ``torch==2.14.1`` from PyPI, the CUDA 13 build,
with CUDA 13 runtime wheels and two NCCLs: a CUDA 12.6 variant installing CUDA 13, a wrong image with a right name,
and `render --check` said "up to date". Every lock is now read against its variant (`lock_problems`) when written
and whenever its state is asked (`render --check`, `build`), from the pins `requirements.pins` reads.

The facts are NVIDIA's and PyPI's wheel naming, one table below with its source: a CUDA wheel names its CUDA major
as a ``-cuNN`` suffix (``nvidia-nccl-cu12``, ``jax-cuda12-plugin``), or, from CUDA 13 on, drops the suffix and
carries the CUDA version as its own (``nvidia-cuda-runtime==13.0.96``); a framework built against an extra index
carries the build in its local version (``torch==2.14.1+cu126``, ``+cpu``).

A variant whose index cannot be reached where it is locked is *not lockable here*: its lock file is a header that
says so (`not_lockable_text`), with no pins; `render --check` accepts it, `build` and `release` refuse it naming
the index and the command to run where the index answers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from packaging.version import InvalidVersion, Version

from ..recipe.arches import DEFAULT_ARCH
from ..recipe.compat import Compat
from ..recipe.loading import Variant

NOT_LOCKABLE = "# not lockable here:"
_SUFFIXED = re.compile(r"^(?:nvidia-[a-z0-9-]+-cu|[a-z0-9-]+-cuda)([0-9]+)(?:-[a-z0-9-]+)?$")
_NCCL = re.compile(r"^nvidia-nccl(?:-cu[0-9]+)?$")
_LOCAL_CUDA = re.compile(r"^cu([0-9]+)([0-9])$")
#: CUDA 13's unsuffixed wheels whose version is the CUDA version they belong to (NVIDIA's pip wheels:
#: https://docs.nvidia.com/cuda/cuda-installation-guide-linux/#pip-wheels, and each wheel's PyPI page); others
#: (nvidia-cufft 12.x, nvidia-curand 10.x on CUDA 13) carry their library's own version and are not read.
VERSIONED_AS_CUDA = ("nvidia-cuda-runtime", "nvidia-cuda-nvrtc", "nvidia-cuda-cupti", "nvidia-cuda-nvcc",
                     "nvidia-cuda-crt", "nvidia-nvjitlink", "nvidia-nvvm", "nvidia-cublas", "cuda-toolkit",
                     "cuda-bindings")


def wheel_cuda_major(name: str, version: str) -> int | None:
    """The CUDA major a pinned distribution belongs to, or None for one that belongs to none (or says none)."""
    match = _SUFFIXED.match(name)
    if match:
        return int(match.group(1))
    if name in VERSIONED_AS_CUDA:
        try:
            return Version(version).major
        except InvalidVersion:
            return None
    return None


def build_major(v: Variant, compat: Compat) -> int | None:
    """The CUDA major of the framework build `v` installs (TensorFlow's 12.5 build on a 12.6 base: 12), None: CPU."""
    if v.cuda is None or v.framework == "none" or v.version is None:
        return None
    line, _ = compat.build(v.framework, v.version, v.cuda)
    return Version(line).major


def lock_problems(v: Variant, compat: Compat, pinned: Mapping[str, str], arch: str = DEFAULT_ARCH) -> list[str]:
    """What in a lock of `arch` (`pinned`: normalized name -> version) contradicts `v`'s recipe and compat data; []
    if nothing does."""
    if v.framework == "none" or v.version is None:
        return []
    major = build_major(v, compat)
    problems = []
    ncc = sorted(n for n in pinned if _NCCL.match(n))
    if major is not None and len(ncc) != 1:
        problems.append(f"{len(ncc)} NCCL distributions ({', '.join(ncc) or 'none'}); a build holds exactly one")
    problems += _framework_build(v, compat, pinned, arch)
    for name, version in sorted(pinned.items()):
        wheel = wheel_cuda_major(name, version)
        if wheel is not None and wheel != major:
            build = "a CPU build" if major is None else f"built for CUDA {major}"
            problems.append(f"{name}=={version} is a CUDA {wheel} wheel; {v.name} is {build}")
    return problems


def _framework_build(v: Variant, compat: Compat, pinned: Mapping[str, str], arch: str) -> list[str]:
    """The framework's own pin: the local build label its index gives (``+cu126``, ``+cpu``) where it has one; a
    CPU build's distribution is the one `arch` has (tensorflow-cpu publishes no aarch64 wheel)."""
    release = compat.release(v.framework, v.version)  # type: ignore[arg-type]
    if release is None:
        return []
    pip_name = compat.frameworks[v.framework].pip_name  # type: ignore[index]
    if v.cuda is None:
        pip_name, index, want = compat.cpu_pip_name(v.framework, v.version, arch), release.cpu_pip_index, "cpu"  # type: ignore[arg-type]
    else:
        line, wheels = compat.build(v.framework, v.version, v.cuda)  # type: ignore[arg-type]
        index, want = wheels.pip_index, "cu" + line.replace(".", "")
    found = pinned.get(pip_name)
    if found is None:
        return [f"no {pip_name} pin; {v.name} installs {pip_name} {v.version}"]
    local = Version(found).local
    if index is not None and local != want:
        return [f"{pip_name}=={found} is not the {want} build that {index} serves"]
    cuda = _LOCAL_CUDA.match(local or "")
    major = build_major(v, compat)
    if cuda and int(cuda.group(1)) != major:
        return [f"{pip_name}=={found} is a CUDA {cuda.group(1)} build; {v.name} is built for CUDA {major}"]
    return []


def not_lockable(lock_text: str) -> str | None:
    """Why a lock file says its variant is not lockable here, or None for a lock."""
    for line in lock_text.splitlines():
        if line.startswith(NOT_LOCKABLE):
            return line[len(NOT_LOCKABLE):].strip()
    return None


def not_lockable_reason(variant: str, index: str) -> str:
    return (f"{index}, the only index that serves this build, did not answer here; run "
            f"`trainimg lock {variant}` where it is reachable, and commit the lock")


def not_lockable_text(header: str, variant: str, index: str) -> str:
    """A lock file that holds no pins, only its header and why (`not_lockable` reads it back)."""
    return f"{header}{NOT_LOCKABLE} {not_lockable_reason(variant, index)}\n"


def judge(v: Variant, compat: Compat, state: str, text: str | None, pinned: Mapping[str, str],
          arch: str = DEFAULT_ARCH) -> tuple[str, str]:
    """A current ("fresh") lock's verdict: still "fresh", "unlockable" (a not-lockable-here file) or "wrong" (it
    contradicts its recipe), with the reason; other states pass unchanged."""
    if state != "fresh" or text is None:
        return state, ""
    reason = not_lockable(text)
    if reason is not None:
        return "unlockable", reason
    problems = lock_problems(v, compat, pinned, arch)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return "wrong", problems[0] + more
    return state, ""


def state_line(path: str, state: str, variant: str, source: str, why: str) -> str:
    """The one line `render` and `build` say about a lock that is not fresh."""
    if state == "stale":
        return f"{path}: stale lock: {source} changed for {variant} since it was locked; run `trainimg lock {variant}`"
    if state == "missing":
        return f"{path}: missing lock for {variant} ({source}); run `trainimg lock {variant}`"
    if state == "unlockable":
        return f"{path}: {variant} is not lockable here: {why}"
    return f"{path}: wrong lock for {variant}: {why}; run `trainimg lock {variant}` where its indexes are reachable"
