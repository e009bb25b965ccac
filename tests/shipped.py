"""The shipped recipes' variants, chosen by what they are (framework, CPU or GPU, OS, Python, architecture, whether
this machine can build them), never by a version string: a bump changes the recipes and their locks (data), and
every test that builds "the CPU PyTorch variant" or "the Debian 13 JAX variant" follows.

What "buildable here" means is read from the data too: the variant's amd64 lock is one (not a file saying the only
index that serves its build does not answer here), and a local Debian base provides its Python: its own OS's for a
CPU variant (`local/debian:<codename>`, made by .ci/setup-host from compat.yaml's cpu_image), the Debian release
whose Python it is for a GPU variant (built on that base instead of NVIDIA's, which cannot be pulled here).
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

from packaging.version import Version

from trainimg.plan.locktruth import not_lockable
from trainimg.plan.requirements import lock_path
from trainimg.recipe.compat import load_compat, spoken
from trainimg.recipe.loading import load_recipes
from trainimg.recipe.variant import RecipeSet, Variant
from trainimg.runtime.lockpins import pins

ROOT = Path(__file__).resolve().parent.parent
#: The environment variables .ci/setup-host reads for the local bases' names (codename -> amd64, arm64).
BASE_ENV = {"bookworm": ("TRAINIMG_LOCAL_BASE", "TRAINIMG_LOCAL_BASE_ARM64"),
            "trixie": ("TRAINIMG_LOCAL_BASE_TRIXIE", "TRAINIMG_LOCAL_BASE_TRIXIE_ARM64")}


@cache
def shipped() -> RecipeSet:
    """recipes/, as trainimg loads it."""
    return load_recipes(ROOT / "recipes")


def codename(os_name: str) -> str | None:
    """The Debian codename of an OS compat.yaml gives a CPU image for (``debian:trixie-slim`` -> ``trixie``)."""
    image = load_compat().operating_systems[os_name].cpu_image or ""
    return image.split(":", 1)[1].split("-", 1)[0] if image.startswith("debian:") else None


def local_base(os_name: str, arch: str = "amd64") -> str:
    """The base .ci/setup-host makes for `os_name` here: ``local/debian:trixie``, ``local/debian:trixie-arm64``."""
    name = codename(os_name)
    if name is None:
        raise LookupError(f"{os_name} has no local base here (.ci/setup-host makes Debian's only)")
    default = f"local/debian:{name}" + ("" if arch == "amd64" else f"-{arch}")
    env = BASE_ENV.get(name)
    return os.environ.get(env[arch != "amd64"], default) if env else default


def base_os(v: Variant) -> str | None:
    """The OS whose local base builds `v` here: its own for a CPU variant, for a GPU one the Debian release that
    provides its Python (None: none does, e.g. Ubuntu 24.04's 3.12)."""
    if not v.gpu:
        return v.os if codename(v.os) else None
    debian = [name for name, info in load_compat().operating_systems.items()
              if codename(name) and v.python in info.python]
    return debian[0] if debian else None


def lockable(v: Variant, arch: str = "amd64") -> bool:
    """Whether `v`'s committed lock for `arch` pins wheels (not a file saying it cannot be locked here)."""
    path = lock_path(ROOT, v.name, arch)
    return path.is_file() and not_lockable(path.read_text(encoding="utf-8")) is None


def pick(framework: str, *, gpu: bool, os_name: str | None = None, arch: str = "amd64",
         buildable: bool = True) -> Variant:
    """The newest shipped root variant of `framework` with these facts (`buildable`: this machine can lock and
    build it); LookupError naming the facts when the recipes have none."""
    hits = [v for v in shipped().variants
            if not v.extends and v.framework == framework and v.gpu == gpu and arch in v.arch
            and (os_name is None or v.os == os_name)
            and (not buildable or (lockable(v, arch) and base_os(v) is not None))]
    if not hits:
        raise LookupError(f"recipes/ has no {'buildable ' if buildable else ''}{framework} "
                          f"{'GPU' if gpu else 'CPU'} variant{f' on {os_name}' if os_name else ''} for {arch}")
    return max(hits, key=lambda v: Version(v.version or "0"))


def build_base(v: Variant, arch: str = "amd64") -> str:
    """The `--base-image` that builds `v` here (`base_os`)."""
    os_name = base_os(v)
    if os_name is None:
        raise LookupError(f"{v.name}: no local base provides Python {v.python}")
    return local_base(os_name, arch)


def gpu_words(v: Variant) -> tuple[str, str, str]:
    """What a GPU variant's gate says of it: its CUDA build (the major: torch says 13.2, JAX's plugin 13), and the
    recipe's NCCL and cuDNN constraints as the checks word them."""
    return (f"CUDA {(v.cuda or '').split('.')[0]}", f"the recipe asks for {spoken(v.nccl or '')}",
            f"the recipe asks for {spoken(v.cudnn or '')}")


def locked(v: Variant, distribution_prefix: str) -> str:
    """The version `v`'s amd64 lock pins for the one distribution whose name starts with `distribution_prefix`
    (``nvidia-nccl-`` -> ``2.30.7``): what its image holds, read from the data a bump rewrites."""
    found = {name: version for name, version in pins(lock_path(ROOT, v.name).read_text(encoding="utf-8")).items()
             if name.startswith(distribution_prefix)}
    if len(found) != 1:
        raise LookupError(f"{v.name}'s lock pins {sorted(found) or 'nothing'} for {distribution_prefix}*")
    return next(iter(found.values()))

