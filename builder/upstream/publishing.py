"""How each framework publishes a release on PyPI: where its wheels carry each compatibility fact, and which facts
only other indexes hold. One table, each row with its source; `derive` reads it, nothing else names a project.

What PyPI's wheels say (read by range requests, never whole): the Python versions (the `cpXY` tags of the binary
project's Linux wheels), the CUDA build (the `Requires-Dist` of the CUDA runtime, cuDNN and NCCL wheels: of the
wheel itself for torch, of its `and-cuda` extra for TensorFlow, of the `cudaNN` extras' plugins for JAX), and the
GPU architectures where a wheel states them in a file (torch's `libtorch_cuda.so` holds its `-gencode` flags,
what `torch._C._cuda_getArchFlags()` returns; TensorFlow's `build_info.py` holds `cuda_compute_capabilities`, what
`tf.sysconfig.get_build_info()` returns). What they cannot say is listed per row with why: it is left out of a
derived entry and said, never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..runtime.frameworks import FrameworkName

#: The CUDA build of a release comes from the wheel's own requirements (torch), from one extra (TensorFlow's
#: `and-cuda`), or from each `cudaNN` extra's plugin project and its `with-cuda` extra (JAX).
OWN, EXTRA, PLUGINS = "own", "extra", "plugins"


@dataclass(frozen=True)
class ArchSource:
    """Where a framework's wheel states the GPU architectures its CUDA build carries."""

    member: str  # the file inside the wheel (a name suffix)
    pattern: re.Pattern[bytes]  # what states them, read as it is inflated (`wheelzip.RemoteWheel.scan`)
    limit: int  # compressed bytes read at most before giving up (said: "not found in the first N MB")
    what: str  # how the source line says it


@dataclass(frozen=True)
class Publishing:
    """One framework's publishing on PyPI."""

    project: str  # the framework's project (its version is the release)
    binary: str  # the project whose `cpXY` Linux wheels say the Python versions
    cuda_from: str  # OWN, EXTRA or PLUGINS
    cuda_extra: str | None  # EXTRA: the extra's name; PLUGINS: the extras' pattern (cuda12, cuda13)
    cpu_project: str | None  # a CPU build under another name on PyPI (its page must hold the version)
    cpu_index: str | None  # a CPU build on another index: a fact of the framework's install page, not read here
    archs: ArchSource | None
    elsewhere: tuple[tuple[str, str], ...]  # (field, why it is not read here)
    source: str  # the framework's own statement of how it publishes


GENCODE = re.compile(rb"-gencode;arch=compute_[0-9]+,code=[a-z]+_[0-9]+[a-z]?(?:;-gencode;arch=compute_[0-9]+,"
                     rb"code=[a-z]+_[0-9]+[a-z]?)*")
BUILD_INFO = re.compile(rb"\('cuda_compute_capabilities', \[[^\]]*\]\)")

PUBLISHING: dict[FrameworkName, Publishing] = {
    "pytorch": Publishing(
        project="torch", binary="torch", cuda_from=OWN, cuda_extra=None, cpu_project=None,
        cpu_index="https://download.pytorch.org/whl/cpu",
        archs=ArchSource("torch/lib/libtorch_cuda.so", GENCODE, 64 * 1024 * 1024,
                         "the -gencode flags compiled into torch/lib/libtorch_cuda.so (torch._C._cuda_getArchFlags())"),
        elsewhere=(
            ("cuda builds other than PyPI's", "PyTorch serves them from https://download.pytorch.org/whl/cuXYZ, "
                                              "which does not answer here"),
            ("cpu_pip_index", "taken from PyTorch's install page (the CPU build of every release is on "
                              "https://download.pytorch.org/whl/cpu); that index does not answer here"),
            ("tested", "no wheel states a tested cuDNN/NCCL beside what it pins"),
        ),
        source="https://pytorch.org/get-started/locally/",
    ),
    "tensorflow": Publishing(
        project="tensorflow", binary="tensorflow", cuda_from=EXTRA, cuda_extra="and-cuda",
        cpu_project="tensorflow-cpu", cpu_index=None,
        archs=ArchSource("tensorflow/python/platform/build_info.py", BUILD_INFO, 64 * 1024,
                         "build_info.py's cuda_compute_capabilities (tf.sysconfig.get_build_info())"),
        elsewhere=(("arch:arm64", "TensorFlow's aarch64 wheels are CPU-only builds whatever their and-cuda extra "
                                  "resolves: only their build_info.py (is_cuda_build) says so, not their METADATA"),
                   ("tested", "the tested cuDNN is in TensorFlow's docs (tested build configurations), not in a "
                              "wheel: its build_info.py says only the cuDNN major"),),
        source="https://www.tensorflow.org/install/pip",
    ),
    "jax": Publishing(
        project="jax", binary="jaxlib", cuda_from=PLUGINS, cuda_extra=r"cuda[0-9]+", cpu_project=None,
        cpu_index=None, archs=None,
        elsewhere=(
            ("gpu_archs", "no file of the wheels states them: the kernels' architectures are only in the fatbin of "
                          "jax_plugins/xla_cudaNN/xla_cuda_plugin.so (192 MB compressed, the whole jax-cuda12-pjrt "
                          "wheel): whole wheels are never read"),
            ("tested", "no JAX source states a tested cuDNN/NCCL"),
        ),
        source="https://docs.jax.dev/en/latest/installation.html#pip-installation-nvidia-gpu-cuda-installed-via-pip",
    ),
}
