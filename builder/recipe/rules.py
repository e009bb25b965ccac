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

from .compat import Compat, minor_of

if TYPE_CHECKING:
    from .loading import Variant, _Fields


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
        raise f.fail("nccl", f"NCCL {v.nccl} is below {compat.nccl.minimum}, the minimum the Vertex AI "
                             f"Reduction Server needs (seed 003); use {compat.nccl.minimum} or newer")
    for req in v.extras:
        name = Requirement(req).name.lower().replace("_", "-")
        owned = {compat.frameworks[fw].pip_name for fw in compat.frameworks} | {"cloudml-hypertune", "tensorflow-cpu",
                                                                                 "jaxlib"}
        if name in owned or name.startswith("nvidia-nccl"):
            raise f.fail("extras", f"{name} is managed by trainimg (framework, hypertune or NCCL fields); "
                                   f"set that field instead of listing it in extras")

    if v.cuda is None:
        return _check_cpu(v, f, compat, pip_name, release)
    return _check_gpu(v, f, compat, pip_name, release)


def _check_cpu(v: Variant, f: _Fields, compat: Compat, pip_name: str, release) -> Variant:
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
    return replace(v, base_image=v.base_image or os_info.cpu_image)


def _check_gpu(v: Variant, f: _Fields, compat: Compat, pip_name: str, release) -> Variant:
    cuda = compat.cuda.get(v.cuda)
    if release is not None and v.cuda not in release.cuda:
        raise f.fail("cuda", f"{pip_name} {release.line} is built for CUDA {_fmt(list(release.cuda))}; got {v.cuda}")
    if cuda is None:
        raise f.fail("cuda", f"trainimg has no nvidia/cuda data for CUDA {v.cuda}; known: {_fmt(list(compat.cuda))}")
    if v.os not in cuda.os:
        raise f.fail("os", f"nvidia/cuda {cuda.image_version} images exist for {', '.join(cuda.os)}; got {v.os}")
    if v.cudnn_image and v.flavour == "base":
        raise f.fail("cudnn", "NVIDIA publishes cuDNN images only for the runtime and devel flavours; "
                              "set flavour: runtime or devel")
    if release is not None:
        pins = release.cuda[v.cuda]
        if v.cudnn_image:
            raise f.fail("cudnn", f"{pip_name} {release.line} brings cuDNN {pins.cudnn} as a pip wheel; the -cudnn- "
                                  f"image would put a second cuDNN in the image; remove cudnn")
        if v.nccl is not None and v.nccl != pins.nccl:
            raise f.fail("nccl", f"{pip_name} {release.line} with CUDA {v.cuda} pins NCCL {pins.nccl} "
                                 f"({pins.nccl_wheel}); got {v.nccl}")
        nccl, cudnn = pins.nccl, pins.cudnn
    else:
        if v.flavour == "base":
            raise f.fail("flavour", "without a framework, NCCL comes from NVIDIA's runtime or devel image; "
                                    "set flavour: runtime or devel")
        if v.nccl is not None and v.nccl != cuda.nccl:
            raise f.fail("nccl", f"nvidia/cuda {cuda.image_version} carries NCCL {cuda.nccl}; got {v.nccl}")
        nccl = cuda.nccl
        cudnn = cuda.cudnn if v.cudnn_image else None
    if nccl is None or Version(nccl) < Version(compat.nccl.minimum):
        raise f.fail("nccl", f"this combination gives NCCL {nccl}, below {compat.nccl.minimum} "
                             f"(the Reduction Server's minimum, seed 003)")
    flavour = f"cudnn-{v.flavour}" if v.cudnn_image else v.flavour
    image = v.base_image or f"nvidia/cuda:{cuda.image_version}-{flavour}-{v.os}"
    return replace(v, nccl=nccl, cudnn=cudnn, base_image=image)
