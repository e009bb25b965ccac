"""The image matrix's fixtures (tier 4): the GPU variant of each framework and the other frameworks' CPU variants.

Session-scoped and defined here, once, so each image is built once per run whichever modules use it (they were
module-scoped and imported into other modules, which built the same image again per importing module). Each
requests `image_matrix`, which is how tests/conftest.py knows a test that uses them is tier 4. The images keep
the shipped variants' tags (the next run's build is a cache hit), so nothing is left behind that a later run does
not reuse. Import them from tests/conftest.py with `from conftest_images import *  # noqa: F401,F403`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from onceperrun import built_once
from shipped import build_base, gpu_words, local_base, pick

#: The OS of the CPU variants of the other frameworks the suite builds and gates (FRAMEWORK_IMAGES).
CPU_OS = "debian13"

__all__ = ["CPU_OS", "CUDA_TAG", "CUDA_VARIANT", "FRAMEWORK_BASE", "FRAMEWORK_BUILD", "FRAMEWORK_IMAGES", "GPU_BUILD",
           "GPU_VARIANTS",
           "LOCAL_BASE", "WHEELHOUSES", "cuda_image", "framework_images", "gpu_images", "image_matrix", "pinned_cuda_image",
           "pinned_framework_images"]

# the base the CPU PyTorch and GPU fixture images are built on (.ci/setup-host makes it with debootstrap)
LOCAL_BASE = os.environ.get("TRAINIMG_LOCAL_BASE", "local/debian:bookworm")
# The variants, chosen by what they are from recipes/ (tests/shipped.py), so a bump changes data only: the GPU
# variant of each framework this machine can build (on a Debian base that has its Python), the GPU PyTorch one the
# image the GPU tests share.
_GPU = {fw: pick(fw, gpu=True) for fw in ("pytorch", "tensorflow", "jax")}
assert {build_base(v) for v in _GPU.values()} == {LOCAL_BASE}, "the GPU variants build on one base (GPU_BUILD)"
CUDA_VARIANT = _GPU["pytorch"].name
CUDA_TAG = _GPU["pytorch"].tag
# variant -> words its framework, NCCL and cuDNN checks must say (the CUDA build; the recipe's constraint)
GPU_VARIANTS = {v.name: gpu_words(v) for v in _GPU.values()}
# this machine's local indexes: torch 2.13.0 CPU and 2.14.1 CUDA, tensorflow-cpu, jax (and what pip would fetch)
WHEELHOUSES = ["--wheelhouse", "/opt/wheels", "--wheelhouse", "/opt/pypi", "--wheelhouse", "/opt/pypi-more"]
# The other frameworks' CPU variants: those on Debian 13 (trixie), the CPU base under regular security support, with
# its Python 3.13.
_FRAMEWORKS = {fw: pick(fw, gpu=False, os_name=CPU_OS) for fw in ("tensorflow", "jax")}
FRAMEWORK_IMAGES = {fw: (v.name, v.tag) for fw, v in _FRAMEWORKS.items()}
FRAMEWORK_BASE = local_base(CPU_OS)
# The fixtures' `trainimg build` arguments (.ci/touch_images.py rebuilds the same from cache)
GPU_BUILD = [*GPU_VARIANTS, "--base-image", LOCAL_BASE, "--allow-missing", "google-reduction-server", *WHEELHOUSES]
FRAMEWORK_BUILD = [*(v for v, _ in FRAMEWORK_IMAGES.values()), "--base-image", FRAMEWORK_BASE, "--arch", "amd64",
                   *WHEELHOUSES]


@pytest.fixture(scope="session")
def image_matrix(docker_engine: str) -> list[str]:
    """What building more than the one CPU image needs: the engine and this machine's local wheel indexes (the
    `--wheelhouse` arguments). A fixture that builds another framework, a GPU variant, a release or a fleet of
    variants requests this one: that request is what makes its tests tier 4 (tests/conftest.py)."""
    missing = [p for p in WHEELHOUSES[1::2] if not Path(p).is_dir()]
    if missing:
        pytest.fail(f"this machine's local wheel indexes are missing: {', '.join(missing)} (.ci/setup-host)")
    return WHEELHOUSES


@pytest.fixture(scope="session")
def gpu_images(image_matrix: list[str], state_env: dict[str, str],
               tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """The three GPU variants built in one run, once per suite run (tests/onceperrun.py): name -> its build row."""
    return _gpu_rows(state_env, tmp_path_factory)


def _gpu_rows(state_env: dict[str, str], factory: pytest.TempPathFactory) -> dict[str, dict]:
    return built_once(factory, "gpu", GPU_BUILD, state_env, timeout=3000)


@pytest.fixture(scope="session")
def cuda_image(gpu_images: dict[str, dict]) -> str:
    return str(gpu_images[CUDA_VARIANT]["tag"])


@pytest.fixture(scope="session")
def pinned_cuda_image(image_matrix: list[str], state_env: dict[str, str],
                      tmp_path_factory: pytest.TempPathFactory) -> str:
    """The CUDA PyTorch image under the name no test moves (tests/onceperrun.py): for the second engine lane."""
    return str(_gpu_rows(state_env, tmp_path_factory)[CUDA_VARIANT]["pinned"])


def _framework_rows(state_env: dict[str, str], factory: pytest.TempPathFactory) -> dict[str, dict]:
    return built_once(factory, "frameworks", FRAMEWORK_BUILD, state_env, timeout=1800)


@pytest.fixture(scope="session")
def framework_images(image_matrix: list[str], state_env: dict[str, str],
                     tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The TF and JAX CPU variants, built in one run so they share the python and comms parents, once per suite
    run: framework -> tag."""
    _framework_rows(state_env, tmp_path_factory)
    return {fw: tag for fw, (_, tag) in FRAMEWORK_IMAGES.items()}


@pytest.fixture(scope="session")
def pinned_framework_images(image_matrix: list[str], state_env: dict[str, str],
                            tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """framework_images under the names no test moves (tests/onceperrun.py): for the second engine lane."""
    rows = _framework_rows(state_env, tmp_path_factory)
    return {fw: str(rows[variant]["pinned"]) for fw, (variant, _) in FRAMEWORK_IMAGES.items()}
