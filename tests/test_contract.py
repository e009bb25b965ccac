"""The host<->image contract lives in one module: labels, paths, platforms, checks and exit codes are spelled there
only, templates get them passed in, and the NCCL floor travels from the compatibility data to the probe."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from trainimg.conformance.suite import expectations
from trainimg.errors import CheckFailed, UserInputError
from trainimg.recipe.compat import load_compat
from trainimg.recipe.loading import load_recipes
from trainimg.plan.stages import make_plan, static_labels
from trainimg.runtime import contract, probe
from trainimg.runtime.platforms.tfconfig import VERTEX_POOLS
from trainimg.runtime.topology import PLATFORMS

ROOT = Path(__file__).resolve().parent.parent
BUILDER = ROOT / "builder"


def _string_constants(path: Path) -> set[str]:
    return {n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)}


def _facts() -> set[str]:
    """Every label key, in-image path and platform name the contract defines (the spelled-out strings)."""
    values = {v for k, v in vars(contract).items() if k.isupper() and isinstance(v, str)}
    return {v for v in values if v.startswith(("trainimg.", "org.opencontainers.", "/")) or v in contract.PLATFORMS}


def test_contract_is_standard_library_only() -> None:
    tree = ast.parse((BUILDER / "runtime" / "contract.py").read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= {"__future__"}


def test_no_other_module_spells_a_contract_string() -> None:
    # Platform names also appear as data (the probe's sample envs); the bare prefixes name JUnit classes too.
    facts = _facts() - {contract.VERTEX, contract.AIPLATFORM, contract.UAI, contract.LABEL_PREFIX}
    found = {}
    for path in BUILDER.rglob("*.py"):
        if path.name == "contract.py":
            continue
        spelled = _string_constants(path) & facts
        if spelled:
            found[str(path.relative_to(ROOT))] = sorted(spelled)
    assert found == {}


def test_templates_get_paths_passed_in() -> None:
    paths = [v for v in _facts() if v.startswith("/")] + [contract.RUNTIME_PACKAGE]
    for template in (BUILDER / "plan" / "templates").rglob("*.j2"):
        text = template.read_text()
        assert [p for p in paths if p in text] == [], template.name


def test_both_sides_share_the_same_objects() -> None:
    assert probe.CHECK_NAMES is contract.CHECK_NAMES
    assert tuple(probe.CHECKS) == contract.CHECK_NAMES  # the probe runs exactly the contract's checks, in its order
    assert VERTEX_POOLS is contract.VERTEX_POOLS
    assert PLATFORMS is contract.PLATFORMS
    assert (UserInputError("x").exit_code, CheckFailed("x").exit_code) == (contract.EXIT_USAGE, contract.EXIT_FAILED)


def test_nccl_floor_goes_from_compat_data_to_the_label_to_the_probe() -> None:
    compat = load_compat()
    rs = load_recipes(ROOT / "recipes", compat=compat)
    gpu = next(v for v in rs.variants if v.gpu)
    cpu = next(v for v in rs.variants if not v.gpu)
    labels = dict(static_labels(gpu, compat))
    assert labels[contract.NCCL_MINIMUM_LABEL] == compat.nccl.minimum
    assert contract.NCCL_MINIMUM_LABEL not in dict(static_labels(cpu, compat))
    assert f'{contract.NCCL_MINIMUM_LABEL}="{compat.nccl.minimum}"' in make_plan(gpu, compat).stages[-1].text
    assert expectations(labels)["nccl_minimum"] == compat.nccl.minimum
    # A floor rendered into an image is what that image is held to, whatever today's data says.
    assert expectations({**labels, contract.NCCL_MINIMUM_LABEL: "2.18"})["nccl_minimum"] == "2.18"
    older = {k: v for k, v in labels.items() if k != contract.NCCL_MINIMUM_LABEL}
    assert expectations(older)["nccl_minimum"] == compat.nccl.minimum


@pytest.mark.parametrize("literal", [r'"2\.7"', r"'2\.7'"])
def test_the_nccl_floor_is_not_a_literal_in_code(literal: str) -> None:
    hits = [p.name for p in BUILDER.rglob("*.py") if re.search(literal, p.read_text())]
    assert hits == []
