"""Compatibility checks of one variant against the project's data (`compat.yaml`).

Each rule raises a `RecipeError` at the key that broke it, saying what was asked, why it cannot work and what
would fit, e.g. ``recipes/pytorch.yaml:matrix.cuda: torch 2.13 is built for CUDA 12.6, 13.0; got 11.8``.
Decisions and version arithmetic happen here, so templates only lay out text.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from packaging.requirements import Requirement
from packaging.version import Version

from ..runtime.manifest import distribution_key
from .compat import Compat, FrameworkRelease, WheelVariant, as_constraint, floor_of, is_pin, minor_of, spoken

if TYPE_CHECKING:
    from .fields import _Fields
    from .variant import Variant


def _fmt(items: list[str]) -> str:
    return ", ".join(sorted(items, key=Version))


def check_variant(v: Variant, f: _Fields, compat: Compat) -> Variant:
    """Return `v` with NCCL, cuDNN and the base image resolved, or raise at the first impossible value."""
    pip_name = compat.frameworks[v.framework].pip_name if v.framework != "none" else "framework"
    os_info = compat.operating_systems[v.os]
    release = None
    if v.framework == "none":
        if v.version is not None:
            raise f.fail("version", "framework none takes no version; remove it or choose a framework")
    else:
        if v.version is None:
            raise f.fail("version", f"missing; {pip_name} versions trainimg knows: "
                                    f"{_fmt(compat.known_versions(v.framework))}")
        release = compat.release(v.framework, v.version)
        if release is None:
            raise f.fail("version", f"trainimg has no compatibility data for {pip_name} {minor_of(v.version)}; "
                                    f"known: {_fmt(compat.known_versions(v.framework))}")
        if Version(v.version) > Version(release.version):
            raise f.fail("version", f"{pip_name} {v.version} is newer than the newest release trainimg knows "
                                    f"in that line ({release.version})")
        if not release.python_spec.contains(v.python):
            raise f.fail("python", f"{pip_name} {release.line} supports Python {release.python}; got {v.python}")
    if v.python not in os_info.python:
        raise f.fail("python", f"{v.os} provides Python {', '.join(os_info.python)}; got {v.python}")
    if v.hypertune is not None and v.hypertune not in compat.hypertune:
        raise f.fail("hypertune", f"cloudml-hypertune {v.hypertune} is not released; known: "
                                  f"{', '.join(compat.hypertune)}")
    if v.nccl is not None and Version(v.nccl) < Version(compat.nccl.minimum):
        raise f.fail("nccl", f"NCCL {v.nccl} is below {compat.nccl.minimum}, the minimum Google's "
                             f"Reduction Server needs (seed 003); use {compat.nccl.minimum} or newer")
    check_extras(v.extras, f, compat)
    check_arches(v, f, compat, pip_name, release)

    if v.cuda is None:
        return _check_cpu(v, f, compat, pip_name, release)
    return _check_gpu(v, f, compat, pip_name, release)


def check_arches(v: Variant, f: _Fields, compat: Compat, pip_name: str, release: FrameworkRelease | None) -> None:
    """Every architecture the recipe lists has a base and framework builds for it (compat data's `architectures`
    and the bases' `arches`); amd64 is what every other rule checks. The first that has none is refused, quoting
    the fact behind it."""
    cuda = compat.cuda.get(v.cuda or "")
    base = cuda.arches if v.cuda and cuda else compat.operating_systems[v.os].arches
    where = f"nvidia/cuda {cuda.image_version}" if v.cuda and cuda else (
        compat.operating_systems[v.os].cpu_image or v.os)
    for arch in v.arch:
        if arch == "amd64":
            continue
        if not v.base_image and arch not in base:
            raise f.fail("arch", f"{where} is published for {', '.join(base)}, not {arch}; set base_image to an "
                                 f"{arch} mirror or remove {arch}")
        if release is None or v.version is None:
            continue
        builds = compat.arch_builds(v.framework, v.version, arch)  # type: ignore[arg-type]
        if builds is None:
            raise f.fail("arch", f"trainimg has no {arch} data for {pip_name} {release.line}; remove {arch}")
        if v.cuda is None and not builds.cpu:
            raise f.fail("arch", f"{pip_name} {release.line} has no CPU build for {arch}: {builds.note}")
        build = release.build_for(v.cuda) if v.cuda else None
        line = build[0] if build else None
        if line is not None and not builds.has_cuda(line):
            raise f.fail("arch", f"{pip_name} {release.line}'s CUDA {line} build has no {arch} wheels: "
                                 f"{builds.note}")


def check_extras(extras: tuple[str, ...], f: _Fields, compat: Compat) -> None:
    """The managed-package guard, for roots and extending variants alike: the framework, hypertune and NCCL are
    set by their fields (and held by the constraints file), never by `extras`."""
    owned = {compat.frameworks[fw].pip_name for fw in compat.frameworks} | {"cloudml-hypertune", "tensorflow-cpu",
                                                                             "jaxlib"}
    for req in extras:
        name = distribution_key(Requirement(req).name)
        if name in owned or name.startswith("nvidia-nccl"):
            raise f.fail("extras", f"{name} is managed by trainimg (framework, hypertune or NCCL fields); "
                                   f"set that field instead of listing it in extras")


def _check_cpu(v: Variant, f: _Fields, compat: Compat, pip_name: str, release: FrameworkRelease | None) -> Variant:
    os_info = compat.operating_systems[v.os]
    if release is not None and not release.cpu:
        raise f.fail("cuda", f"{pip_name} {release.line} has no CPU build; set cuda to one of "
                             f"{_fmt(list(release.cuda))}")
    if v.nccl is not None:
        raise f.fail("nccl", "a CPU variant has no NCCL; remove nccl or set cuda")
    if v.reduction_server:
        raise f.fail("reduction_server", "the Reduction Server needs GPU workers with NCCL (seed 003); "
                                         "a CPU variant cannot use it: remove reduction_server or set cuda")
    if v.cudnn_image:
        raise f.fail("cudnn", "cuDNN needs a CUDA base; remove cudnn or set cuda")
    if "flavour" in f.values and v.flavour != "base":
        raise f.fail("flavour", "flavour applies to nvidia/cuda bases; a CPU variant starts from "
                                f"{os_info.cpu_image or 'its OS image'}")
    if os_info.cpu_image is None and not v.base_image:
        raise f.fail("os", f"trainimg has no CPU base image for {v.os}; use one of "
                           f"{', '.join(k for k, o in compat.operating_systems.items() if o.cpu_image)}")
    return replace(v, base_image=v.base_image or os_info.cpu_image or "")


def _nccl_rule(pip_name: str, line: str, key: str, wheels: WheelVariant) -> str:
    """The real rule, as the wheels state it: a pin names the build line, a range the wheels' CUDA major."""
    required = as_constraint(wheels.nccl)
    if is_pin(required):
        return f"{pip_name} {line} with CUDA {key} pins NCCL {required} ({wheels.nccl_wheel})"
    return f"{pip_name} {line} with CUDA {Version(key).major} needs {wheels.nccl_wheel} {spoken(required)}"


def _check_gpu(v: Variant, f: _Fields, compat: Compat, pip_name: str, release: FrameworkRelease | None) -> Variant:
    cuda = compat.cuda.get(v.cuda or "")
    build = release.build_for(v.cuda) if release is not None and v.cuda else None
    if release is not None and build is None:
        runs_on = "; ".join(f"{w.cuda_lines} ({key} build)" for key, w in release.cuda.items())
        raise f.fail("cuda", f"{pip_name} {release.line} is built for CUDA {_fmt(list(release.cuda))}; got {v.cuda} "
                             f"(its wheels run on CUDA {runs_on})")
    if cuda is None:
        raise f.fail("cuda", f"trainimg has no nvidia/cuda data for CUDA {v.cuda}; known: {_fmt(list(compat.cuda))}")
    if v.os not in cuda.os:
        raise f.fail("os", f"nvidia/cuda {cuda.image_version} images exist for {', '.join(cuda.os)}; got {v.os}")
    if v.cudnn_image and v.flavour == "base":
        raise f.fail("cudnn", "NVIDIA publishes cuDNN images only for the runtime and devel flavours; "
                              "set flavour: runtime or devel")
    if release is not None:
        key, wheels = build  # type: ignore[misc]
        if v.cudnn_image:
            raise f.fail("cudnn", f"{pip_name} {release.line} brings cuDNN {spoken(wheels.default('cudnn'))} as a pip "
                                  f"wheel; the -cudnn- image would put a second cuDNN in the image; remove cudnn")
        if v.nccl is not None and not wheels.allows("nccl", v.nccl):
            raise f.fail("nccl", _nccl_rule(pip_name, release.line, key, wheels) + f"; got {v.nccl}")
        nccl, cudnn = v.nccl or wheels.default("nccl"), wheels.default("cudnn")
    else:
        if v.flavour == "base":
            raise f.fail("flavour", "without a framework, NCCL comes from NVIDIA's runtime or devel image; "
                                    "set flavour: runtime or devel")
        if v.nccl is not None and v.nccl != cuda.nccl:
            raise f.fail("nccl", f"nvidia/cuda {cuda.image_version} carries NCCL {cuda.nccl}; got {v.nccl}")
        nccl = cuda.nccl
        cudnn = cuda.cudnn if v.cudnn_image else None
    low = floor_of(nccl) if nccl is not None else None
    if low is None or low < Version(compat.nccl.minimum):
        raise f.fail("nccl", f"this combination gives NCCL {spoken(nccl) if nccl else None}, which may be below "
                             f"{compat.nccl.minimum} (the Reduction Server's minimum, seed 003); pin NCCL "
                             f"{compat.nccl.minimum} or newer")
    flavour = f"cudnn-{v.flavour}" if v.cudnn_image else v.flavour
    image = v.base_image or f"nvidia/cuda:{cuda.image_version}-{flavour}-{v.os}"
    return replace(v, nccl=nccl, cudnn=cudnn, base_image=image)
