"""Framework virtualenvs for the runtime tests that run on the host (probe, all-reduce), made once per machine
from the local wheels (torch 2.13.0 CPU with lightning-fabric 2.6.6, tensorflow-cpu 2.21.0, jax 0.10.2) and reused.

They are the host's Python (3.11 here), so they pin what runs on it, not what the shipped recipes hold: JAX 0.10 is
its last line for 3.11 (jaxlib 0.11 and later: cp312 and up), the CPU torch the wheelhouse holds is 2.13.0+cp311.
They exercise the runtime module's code against each framework's API; the shipped versions (JAX 0.12 and
TensorFlow 2.21 on Debian 13's Python 3.13, PyTorch 2.15) are gated inside their images (tests/conftest_images.py)."""

from __future__ import annotations

import fcntl
import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

# name -> (directory, pip requirements, modules that must be importable)
VENVS = {
    # lightning-fabric: its SLURMEnvironment is one of the clients tests/test_platform_clients.py checks Slurm with.
    "torch": ("/tmp/venv-torch", ["torch==2.13.0", "cloudml-hypertune==0.1.0.dev6", "lightning-fabric==2.6.6"],
              ["torch", "hypertune", "lightning_fabric"]),
    "tf": ("/tmp/venv-tf", ["tensorflow-cpu==2.21.0"], ["tensorflow"]),
    "jax": ("/tmp/venv-jax", ["jax==0.10.2", "jaxlib==0.10.2"], ["jax", "jaxlib"]),
    # sagemaker-training pins boto3, numpy, scipy and gevent of its own: kept apart from the frameworks.
    "sagemaker": ("/tmp/venv-sagemaker", ["sagemaker-training==5.1.4"], ["sagemaker_training"]),
}
# uv (the version pyproject.toml pins, beside this Python) makes them: pip took 16 s for the TensorFlow one and
# compiled every module's bytecode; uv takes 5 s, and a test's import compiles only what it imports.
UV = [sys.executable, "-m", "uv"]
_FAILURES: dict[str, str] = {}
_CHECK = "import importlib.util,sys; sys.exit(any(importlib.util.find_spec(m) is None for m in sys.argv[1:]))"


@functools.lru_cache(maxsize=None)
def _venv_python(name: str) -> str | None:
    directory, requirements, modules = VENVS[name]
    directory = os.environ.get(f"TRAINIMG_TEST_VENV_{name.upper()}", directory)
    python = os.path.join(directory, "bin", "python")
    # Two test runs on one machine (CI beside a developer's run) must not build the same venv at once.
    with open(f"{directory}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _make(directory, python, requirements, modules, name)


def _make(directory: str, python: str, requirements: list[str], modules: list[str], name: str) -> str | None:
    # The stamp is written once pip finished: an install cut short (a killed run) leaves importable packages with
    # files missing ("No module named 'tensorflow.python'"), which find_spec alone would take for a venv.
    stamp = os.path.join(directory, ".trainimg-installed")
    wanted = "\n".join(requirements) + "\n"
    if os.path.exists(python) and os.path.isfile(stamp) and Path(stamp).read_text(encoding="utf-8") == wanted and \
            subprocess.run([python, "-c", _CHECK, *modules]).returncode == 0:
        return python
    try:
        subprocess.run([*UV, "venv", "-q", "--allow-existing", "--python", sys.executable, directory], check=True,
                       capture_output=True, timeout=300)
        subprocess.run([*UV, "pip", "install", "-q", "--python", python, *_uv_indexes(), *requirements], check=True,
                       capture_output=True, timeout=1200)
    except (subprocess.SubprocessError, OSError) as err:
        _FAILURES[name] = f"could not make {directory} with {' '.join(requirements)}: {err}"
        return None
    if subprocess.run([python, "-c", _CHECK, *modules]).returncode != 0:
        return None
    with open(stamp, "w", encoding="utf-8") as fh:
        fh.write(wanted)
    return python


def _uv_indexes() -> list[str]:
    """pip's own configuration on this machine (its find-links and extra indexes: the local wheels), for uv, which
    does not read it; every index's versions compared, as pip does (torch 2.13.0+cpu from the local wheels)."""
    args = ["--index-strategy", "unsafe-best-match"]
    for key, flag in (("find-links", "--find-links"), ("extra-index-url", "--extra-index-url")):
        got = subprocess.run([sys.executable, "-m", "pip", "config", "get", f"global.{key}"], capture_output=True,
                             text=True, timeout=60)
        env = os.environ.get(f"PIP_{key.upper().replace('-', '_')}", "")
        for value in (env or got.stdout).split():
            args += [flag, value]
    return args


def venv(name: str) -> str:
    """The venv's python. The wheels are on this machine, so a venv that cannot be made is a failure, not a skip."""
    python = _venv_python(name)
    if python is None:
        pytest.fail(_FAILURES.get(name, f"venv {name} unusable"))
    return python
