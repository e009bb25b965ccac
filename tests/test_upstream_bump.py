"""`trainimg bump` through the gate, without an engine: the releases come from the real index's recorded answers
(tests/localindex.py). A release the gate refuses is named with the gate's own line and nothing is written; a
change that fails later (here uv, given an index that does not answer) is rolled back to the byte, images/
included; the recipe edit keeps the file's text, for every way a recipe writes a version (generated below).
The successful bump that locks and builds is tests/test_upstream_bump_build.py.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from localindex import LocalIndex

from trainimg.cli.app import main
from trainimg.errors import UserInputError
from trainimg.upstream.recipeedit import Occurrence, edit

JAX_CPU = """# JAX on CPU (Debian 12 ships Python 3.11 only).
framework: jax
repository: trainimg-test/bump
matrix:
  - version: ["0.10.2"]   # the CPU variant
    os: [debian12]
    python: ["3.11"]
"""
TORCH_CPU = JAX_CPU.replace("jax", "pytorch", 1).replace("0.10.2", "2.13.0").replace("JAX", "PyTorch")


@pytest.fixture(scope="module")
def index() -> Iterator[LocalIndex]:
    with LocalIndex() as served:
        yield served


def checkout(tmp_path: Path, recipe: str) -> Path:
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "x.yaml").write_text(recipe)
    assert main(["--recipes", str(tmp_path / "recipes"), "render"]) == 0
    return tmp_path


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_releases_the_gate_refuses_are_named_and_nothing_moves(index: LocalIndex, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    root = checkout(tmp_path, JAX_CPU)
    before = files(root)
    capsys.readouterr()
    assert main(["--recipes", str(root / "recipes"), "bump", "--index-url", index.url]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "trainimg bump: nothing moved", out
    for line in ("jax 0.12", "jax 0.11"):  # each newer line, refused by the gate's own rule
        assert f"{line} supports Python >=3.12,<3.16; got 3.11" in out, out
    assert "recipes/x.yaml:7:matrix[0].python" in out
    assert files(root) == before


def test_a_change_that_cannot_lock_is_rolled_back_to_the_byte(index: LocalIndex, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    root = checkout(tmp_path, TORCH_CPU)
    (root / "images" / "bump-2.13.0-cpu-py3.11" / "notes.txt").write_text("kept")
    before = files(root)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple/")  # uv: an index that does not answer
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "no-wheels"))
    (tmp_path / "no-wheels").mkdir()
    capsys.readouterr()
    rc = main(["--recipes", str(root / "recipes"), "bump", "--index-url", index.url, "--json"])
    captured = capsys.readouterr()
    assert rc == 1, captured.err
    assert "rolled back" in captured.err.strip().splitlines()[-1]
    (step,) = yaml.safe_load(captured.out)
    assert step["from"] == "2.13.0" and step["to"] is None and "torch-2.15.0" not in str(step["variants_after"])
    assert step["failed"]
    assert files(root) == before  # recipes, images/ and the file that was not trainimg's: all as they were
    assert not (root / "images" / "bump-2.15.0-cpu-py3.11").exists()


# Every way a recipe writes the version a variant comes from, and what move / beside make of it.
FORMS = [
    ('version: "0.10.1"\n', "version", 'version: "0.10.2"\n', None),
    ("version: 0.10.1  # pinned\n", "version", 'version: "0.10.2"  # pinned\n', None),
    ('matrix:\n  - version: ["0.10.1"]\n', "matrix[0].version", 'matrix:\n  - version: ["0.10.2"]\n',
     'matrix:\n  - version: ["0.10.1", "0.10.2"]\n'),
    ("matrix:\n  version: ['0.9.0', '0.10.1']\n", "matrix.version", "matrix:\n  version: ['0.9.0', '0.10.2']\n",
     "matrix:\n  version: ['0.9.0', '0.10.1', '0.10.2']\n"),
    ("matrix:\n  - os: [debian12]\n  - version:\n      - 0.10.1\n", "matrix[1].version",
     'matrix:\n  - os: [debian12]\n  - version:\n      - "0.10.2"\n',
     'matrix:\n  - os: [debian12]\n  - version:\n      - 0.10.1\n      - "0.10.2"\n'),
]


@pytest.mark.parametrize(("text", "path", "moved", "beside"), FORMS, ids=[f[1] + str(i) for i, f in enumerate(FORMS)])
@pytest.mark.parametrize("mode", ["move", "beside"])
def test_the_recipe_edit_touches_only_the_version(text: str, path: str, moved: str, beside: str | None, mode: str,
                                                  tmp_path: Path) -> None:
    recipe = tmp_path / "x.yaml"
    recipe.write_text(text)
    occ = Occurrence("x.yaml", path, "0.10.1")
    if mode == "beside" and beside is None:
        with pytest.raises(UserInputError, match="needs a matrix list"):
            edit(recipe, text, occ, "0.10.2", beside=True)
        return
    assert edit(recipe, text, occ, "0.10.2", beside=mode == "beside") == (moved if mode == "move" else beside)


def test_the_summary_file_is_written_for_the_merge_request(index: LocalIndex, tmp_path: Path) -> None:
    root = checkout(tmp_path, JAX_CPU)
    summary = tmp_path / "out" / "bump.md"
    assert main(["--recipes", str(root / "recipes"), "bump", "--index-url", index.url, "--summary",
                 str(summary)]) == 0
    assert summary.read_text().splitlines()[0] == "trainimg bump: nothing moved"
    shutil.rmtree(tmp_path / "out")
