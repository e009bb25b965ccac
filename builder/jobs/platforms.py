"""The `trainimg spec` platforms: each name of the contract's list (`runtime.contract.PLATFORMS`) that has a module
here of the same name (``jobs/<name>.py``), imported by name, in the contract's order.

Why the only place that reaches them: each module (its ``JOB``, `jobplatform.JobPlatform`) holds everything
``spec`` knows of its platform (flags, name limit, writer, GPU hooks); `specflags`, `spec`, `clusterspec`,
`gpucheck` and the CLI reach a platform through `job_platform` only. Adding a platform is its module, the
contract's name list and its tests: nothing here names one. A platform the runtime replays but ``spec`` writes no
job for (UAI, a JAXJob, plain mpirun) simply has no module here.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from ..errors import UserInputError
from ..runtime.contract import PLATFORMS as NAMES
from .jobplatform import JobPlatform

MODULES: tuple[ModuleType, ...] = tuple(importlib.import_module(f"{__package__}.{name}") for name in NAMES
                                        if importlib.util.find_spec(f"{__package__}.{name}") is not None)
PLATFORMS: tuple[JobPlatform, ...] = tuple(module.JOB for module in MODULES)
BY_NAME: dict[str, JobPlatform] = {platform.name: platform for platform in PLATFORMS}


def job_platform(name: str) -> JobPlatform:
    """The platform called `name`; anything else is one line naming the platforms."""
    try:
        return BY_NAME[name]
    except (KeyError, TypeError):
        raise UserInputError(f"expected one of {', '.join(BY_NAME)}, got {name!r}", where="--platform") from None
