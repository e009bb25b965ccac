"""The `make lint` structure gates (.ci/lint_layers.py, .ci/lint_sizes.py) on small packages made to break them.

The real tree is checked by `make lint` itself (in .ci/run); these tests show that each rule catches what it
claims, says where, and stays quiet on clean code.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CI = Path(__file__).resolve().parent.parent / ".ci"
sys.path.insert(0, str(CI))
from lint_layers import RANK  # noqa: E402  (the layer numbers the gate prints)

sys.path.remove(str(CI))


def make_package(root: Path, files: dict[str, str]) -> Path:
    package = root / "builder"
    for rel, text in files.items():
        path = package / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package


def lint(script: str, package: Path) -> tuple[int, list[str]]:
    done = subprocess.run([sys.executable, str(CI / script), str(package)], capture_output=True, text=True,
                          timeout=60, check=False)
    return done.returncode, done.stdout.splitlines()


CLEAN = {
    "__init__.py": "",
    "errors.py": "class TrainimgError(Exception):\n    pass\n",
    "recipe/__init__.py": "",
    "recipe/loading.py": "from ..errors import TrainimgError\n",
    "runtime/__init__.py": "",
    "runtime/cluster.py": "import json\n",
    "runtime/probe.py": "from . import cluster\n\n\ndef check() -> None:\n    import torch  # noqa\n",
    "cli/__init__.py": "",
    "cli/app.py": "from ..recipe import loading\nfrom .. import runtime\n",
}


def test_clean_package_passes_both_gates(tmp_path: Path) -> None:
    package = make_package(tmp_path, CLEAN)
    assert lint("lint_layers.py", package) == (0, [])
    assert lint("lint_sizes.py", package) == (0, [])


def test_layer_violations_are_each_reported_with_file_and_line(tmp_path: Path) -> None:
    package = make_package(tmp_path, CLEAN | {
        "recipe/loading.py": "from ..errors import TrainimgError\n\n\ndef f() -> None:\n    from ..cli import app\n",
        "runtime/cluster.py": "import json\nimport yaml\nfrom ..errors import TrainimgError\n",
        "runtime/launch.py": "import torch\n",
        "errors.py": "import trainimg.state\n",
        "gadgets.py": "",
    })
    rc, lines = lint("lint_layers.py", package)
    assert rc == 1
    assert "builder/recipe/loading.py:5: trainimg.recipe.loading (recipe, layer 2) imports trainimg.cli.app " \
           f"(cli, layer {RANK['cli']}): lower layers never import higher ones" in lines
    assert any(line.startswith("builder/runtime/cluster.py:2: the runtime imports yaml:") for line in lines)
    assert "builder/runtime/cluster.py:3: the runtime imports trainimg.errors from the host package" in lines
    assert any(line.startswith("builder/runtime/launch.py:1: the runtime imports torch:") for line in lines)
    assert "builder/errors.py:1: absolute import of trainimg.state: use a relative import" in lines
    assert "builder/gadgets.py:1: gadgets is in no layer: add it to LAYERS in .ci/lint_layers.py" in lines
    cycle = "(cycle: trainimg.cli.app <-> trainimg.recipe.loading)"  # cli/app imports recipe/loading
    assert f"builder/recipe/loading.py:5: import cycle: trainimg.recipe.loading imports trainimg.cli.app {cycle}" \
        in lines
    assert len(lines) == 8, lines


def test_only_the_engine_implementation_imports_docker(tmp_path: Path) -> None:
    package = make_package(tmp_path, CLEAN | {
        "engine/__init__.py": "",
        "engine/docker.py": "import docker\nimport docker.errors\n",
        "conformance/__init__.py": "",
        "conformance/replicas.py": "from ..engine import docker as engine_docker\n\n\ndef f() -> None:\n"
                                   "    from docker.errors import NotFound\n",
    })
    rc, lines = lint("lint_layers.py", package)
    assert rc == 1
    assert lines == ["builder/conformance/replicas.py:5: imports docker.errors: only trainimg.engine.docker talks "
                     "to Docker; take an engine.base.Engine"], lines


@pytest.mark.parametrize("hidden", ["def later() -> None:\n    from .a import x\n",
                                    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n"])
def test_a_cycle_is_found_even_when_an_import_is_hidden(tmp_path: Path, hidden: str) -> None:
    package = make_package(tmp_path, CLEAN | {"recipe/a.py": "from .b import y\nx = 1\n",
                                              "recipe/b.py": f"y = 2\n{hidden}"})
    rc, lines = lint("lint_layers.py", package)
    assert rc == 1
    line_in_b = hidden.count("\n")
    cycle = "(cycle: trainimg.recipe.a <-> trainimg.recipe.b)"
    assert lines == [f"builder/recipe/a.py:1: import cycle: trainimg.recipe.a imports trainimg.recipe.b {cycle}",
                     f"builder/recipe/b.py:{line_in_b + 1}: import cycle: trainimg.recipe.b imports "
                     f"trainimg.recipe.a {cycle}"]


@pytest.mark.parametrize("script", ["lint_layers.py", "lint_sizes.py"])
def test_a_file_that_does_not_parse_is_one_line_not_a_traceback(tmp_path: Path, script: str) -> None:
    package = make_package(tmp_path, CLEAN | {"recipe/conflict.py": "x = 1\n<<<<<<< HEAD\n"})
    rc, lines = lint(script, package)
    assert (rc, lines) == (1, ["builder/recipe/conflict.py:2: syntax error: invalid syntax"])


def test_sizes_count_code_not_data_tables(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(60))
    table = "TABLE = {\n" + "".join(f"    'k{i}': ({i}, 'v'),\n" for i in range(500)) + "}\n"
    program = "SCRIPT = '''\n" + "print(1)\n" * 401 + "'''\n"
    package = make_package(tmp_path, CLEAN | {
        "recipe/short.py": f"def fits() -> None:\n{body[: -len('    x59 = 59' + chr(10))]}",
        "recipe/long.py": "class K:\n    def method(self) -> None:\n" + body.replace("    ", "        "),
        "recipe/tables.py": table,
        "recipe/script.py": program,
    })
    rc, lines = lint("lint_sizes.py", package)
    assert rc == 1
    assert lines == [
        "builder/recipe/long.py:2: function K.method has 61 lines, over the limit of 60: split it",
        "builder/recipe/script.py:1: module has 403 lines, over the limit of 400: split it",
    ]


def test_stats_give_the_before_after_figures(tmp_path: Path) -> None:
    package = make_package(tmp_path, {"__init__.py": "", "a.py": "def f() -> None:\n    pass\n",
                                      "b.py": "x = 1\n" * 7})
    done = subprocess.run([sys.executable, str(CI / "lint_sizes.py"), "--stats", str(package)], capture_output=True,
                          text=True, timeout=60, check=True)
    assert done.stdout == ("modules: 3; lines: 9 (median 2, largest 7 in builder/b.py); "
                           "longest function: 2 lines (builder/a.py:f)\n")


def test_the_contributing_layout_names_every_module() -> None:
    """`ls builder/` plus CONTRIBUTING.md's Layout table show every stage: each module of the package is named there
    (as `name`, `name.py`, or a call form), so a module added without its line fails here, not in a reader's head."""
    root = CI.parent
    text = (root / "CONTRIBUTING.md").read_text(encoding="utf-8")
    start = text.index("## Layout")
    layout = text[start:text.index("\n## ", start + 1)]
    unnamed = [str(p.relative_to(root)) for p in sorted((root / "builder").rglob("*.py"))
               if p.stem != "__init__" and not any(form in layout for form in
                                                   (f"`{p.stem}`", f"`{p.stem}.py`", f"`{p.stem} ", f"`{p.stem}("))]
    assert unnamed == []
