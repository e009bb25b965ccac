"""The `trainimg spec` platforms: the one list of their modules, in ``--platform``'s order (cloud first).

Why the only place that names them: each module (its ``JOB``, `jobplatform.JobPlatform`) holds everything
``spec`` knows of its platform (flags, name limit, writer, GPU hooks); `specflags`, `spec`, `clusterspec`,
`gpucheck` and the CLI reach a platform through `job_platform` only. Adding a platform is its module, its line
here, the contract's name list (`runtime.contract`) and its tests.
"""

from __future__ import annotations

from types import ModuleType

from ..errors import UserInputError
from . import aiplatform, azureml, jobset, pytorchjob, sagemaker, slurm, tfjob, trainjob, vertex
from .jobplatform import JobPlatform

MODULES: tuple[ModuleType, ...] = (vertex, aiplatform, trainjob, pytorchjob, tfjob, jobset, slurm, azureml, sagemaker)
PLATFORMS: tuple[JobPlatform, ...] = tuple(module.JOB for module in MODULES)
BY_NAME: dict[str, JobPlatform] = {platform.name: platform for platform in PLATFORMS}


def job_platform(name: str) -> JobPlatform:
    """The platform called `name`; anything else is one line naming the platforms."""
    try:
        return BY_NAME[name]
    except (KeyError, TypeError):
        raise UserInputError(f"expected one of {', '.join(BY_NAME)}, got {name!r}", where="--platform") from None
