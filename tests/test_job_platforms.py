"""The `trainimg spec` platform registry (`jobs.platforms`), checked against the contract's name list and the code.

Generated from the tables: every platform of `platforms.MODULES` is one of the contract's, the cloud ones are
exactly `contract.CLOUD_PLATFORMS`, every jobs/ module that gives a ``JOB`` is in the one list, and no module of
jobs/ or cli/ other than a platform's own compares anything with a spec platform's name (what the registry replaced:
``if opts.platform == SAGEMAKER``). In-process: no Docker, no network.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest
from trainimg import jobs
from trainimg.jobs.jobplatform import JobPlatform
from trainimg.jobs.platforms import BY_NAME, MODULES, PLATFORMS, job_platform
from trainimg.errors import UserInputError
from trainimg.runtime import contract

BUILDER = Path(jobs.__file__).resolve().parents[1]
NAMES = set(BY_NAME)  # the spec platforms (UAI, JAXJOB and MPI are replay-only: `jobs.run`, runtime/platforms)
# The contract's constants that hold a spec platform's name (SAGEMAKER = "sagemaker", ...).
CONSTANTS = {name for name, value in vars(contract).items() if name.isupper() and isinstance(value, str) and value in NAMES}


def test_registry_matches_the_contract() -> None:
    assert set(BY_NAME) <= set(contract.PLATFORMS) and len(BY_NAME) == len(PLATFORMS)
    assert tuple(p.name for p in PLATFORMS if p.body is not None) == contract.CLOUD_PLATFORMS
    for platform in PLATFORMS:
        assert (platform.write is None) != (platform.body is None), platform.name
        assert (platform.name_limit is not None) or platform.body is not None, platform.name
    assert [module.PLATFORM for module in MODULES] == list(BY_NAME)


def test_every_module_with_a_job_is_in_the_one_list() -> None:
    found = []
    for info in pkgutil.iter_modules(jobs.__path__):
        module = importlib.import_module(f"{jobs.__name__}.{info.name}")
        if isinstance(getattr(module, "JOB", None), JobPlatform):
            found.append(module)
    assert sorted(m.__name__ for m in found) == sorted(m.__name__ for m in MODULES)


def _compares_a_name(node: ast.Compare) -> bool:
    for side in (node.left, *node.comparators):
        if isinstance(side, ast.Constant) and side.value in NAMES:
            return True
        if isinstance(side, ast.Name) and side.id in CONSTANTS:
            return True
    return False


@pytest.mark.parametrize("path", sorted([*BUILDER.glob("jobs/*.py"), *BUILDER.glob("cli/*.py")]),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_branch_on_a_platform_name_outside_its_module(path: Path) -> None:
    if path.stem in {m.__name__.rpartition(".")[2] for m in MODULES}:
        return  # a platform's own module may name itself
    tree = ast.parse(path.read_text(encoding="utf-8"))
    hits = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Compare) and _compares_a_name(node)]
    assert hits == [], f"{path.name} compares with a platform name at lines {hits}: dispatch through job_platform"


@pytest.mark.parametrize("bad", ["", "SageMaker", "uai", None])
def test_an_unknown_platform_is_one_line(bad: object) -> None:
    with pytest.raises(UserInputError) as info:
        job_platform(bad)  # type: ignore[arg-type]
    assert info.value.where == "--platform" and "\n" not in str(info.value)
