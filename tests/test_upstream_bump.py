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
TF_CPU = JAX_CPU.replace("jax", "tensorflow", 1).replace("0.10.2", "2.20.0").replace("JAX", "TensorFlow")
# PyTorch's PyPI CUDA build: 2.14's is CUDA 13.0, 2.15's CUDA 13.2 (compat.yaml, from the wheels' METADATA).
TORCH_CU130 = """framework: pytorch
repository: trainimg-test/bump
matrix:
  - version: ["2.14.1"]
    cuda: ["13.0"]   # PyPI's build
    os: [ubuntu24.04]
    python: ["3.12"]
"""


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


def no_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """uv's indexes: one that does not answer, and an empty wheel folder."""
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple/")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "no-wheels"))
    (tmp_path / "no-wheels").mkdir()


def bump(capsys: pytest.CaptureFixture[str], root: Path, index: LocalIndex, *args: str) -> tuple[int, dict, str]:
    capsys.readouterr()
    rc = main(["--recipes", str(root / "recipes"), "bump", *args, "--index-url", index.url, "--json"])
    captured = capsys.readouterr()
    (step,) = yaml.safe_load(captured.out)
    return rc, step, captured.err


def test_a_change_that_cannot_lock_is_rolled_back_to_the_byte(index: LocalIndex, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    root = checkout(tmp_path, TF_CPU)
    (root / "images" / "bump-2.20.0-cpu-py3.11" / "notes.txt").write_text("kept")
    before = files(root)
    no_index(tmp_path, monkeypatch)  # tensorflow-cpu 2.21.0 comes from PyPI: uv cannot resolve it
    rc, step, err = bump(capsys, root, index)
    assert rc == 1, err
    assert "rolled back" in err.strip().splitlines()[-1]
    assert step["from"] == "2.20.0" and step["to"] is None and "2.21.0" not in str(step["variants_after"])
    assert step["failed"]
    assert files(root) == before  # recipes, images/ and the file that was not trainimg's: all as they were
    assert not (root / "images" / "bump-2.21.0-cpu-py3.11").exists()


def test_a_build_only_an_unreachable_index_serves_moves_with_a_lock_saying_where(
        index: LocalIndex, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """torch's +cpu build is on download.pytorch.org only (not answering here): the bump moves, and its lock says
    where to make it, as `trainimg lock` leaves such a lock (the cu126 lock of the shipped recipes, too)."""
    root = checkout(tmp_path, TORCH_CPU + "    arch: [amd64, arm64]\n")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "no-wheels"))  # uv reads PyPI as `trainimg lock` does
    (tmp_path / "no-wheels").mkdir()
    assert main(["--recipes", str(root / "recipes"), "lock", "bump-2.13.0-cpu-py3.11"]) == 1  # not lockable either
    assert (root / "images" / "bump-2.13.0-cpu-py3.11" / "arm64" / "requirements.lock").is_file()
    rc, step, err = bump(capsys, root, index)
    assert rc == 0, err
    assert step["to"] == "2.15.0" and step["variants_after"] == ["bump-2.15.0-cpu-py3.11"] and not step["failed"]
    assert not (root / "images" / "bump-2.13.0-cpu-py3.11").exists()  # every architecture's lock went with it
    assert "not lockable here" in (root / "images" / "bump-2.15.0-cpu-py3.11" / "arm64" / "requirements.lock").read_text()
    lock = (root / "images" / "bump-2.15.0-cpu-py3.11" / "requirements.lock").read_text()
    assert "# not lockable here: https://download.pytorch.org/whl/cpu" in lock
    assert step["locks"] == [f"images/bump-2.15.0-cpu-py3.11/requirements.lock: not lockable here: "
                             f"{lock.split('# not lockable here: ', 1)[1].strip()}"]
    assert main(["--recipes", str(root / "recipes"), "render", "--check"]) == 0


def test_a_release_whose_build_moved_to_a_newer_cuda_line_moves_the_recipes_cuda(
        index: LocalIndex, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """torch 2.15's PyPI build is CUDA 13.2: the variant's cuda moves with the version (its comment kept), and
    --mode beside, which would move the old version's line too, is refused naming why."""
    root = checkout(tmp_path, TORCH_CU130)
    no_index(tmp_path, monkeypatch)  # the lock fails (PyPI's torch), so nothing stays: the failure names the move
    rc, step, err = bump(capsys, root, index)
    assert rc == 1 and "lock bump-2.15.0-cu132-py3.12" in step["failed"], step
    assert step["cuda_moved"] == [{"key": "matrix[0].cuda", "from": "13.0", "to": "13.2"}], step
    assert (root / "recipes" / "x.yaml").read_text() == TORCH_CU130  # rolled back
    rc, step, err = bump(capsys, root, index, "--mode", "beside")
    assert rc == 0 and step["to"] is None, step
    assert any("2.15.0: " in r and "build for CUDA 13.0 is gone (it builds 13.2)" in r for r in step["refused"]), step


def test_a_cuda_line_other_versions_read_is_not_moved(index: LocalIndex, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """One cuda axis for two versions: moving it for one would move the other's; the gate refuses instead."""
    shared = TORCH_CU130.replace('version: ["2.14.1"]', 'version: ["2.13.0", "2.14.1"]')
    root = checkout(tmp_path, shared)
    before = files(root)
    rc, step, err = bump(capsys, root, index, "pytorch-2.14.1-*".replace("pytorch", "bump"))
    assert rc == 0 and step["to"] is None and step["cuda_moved"] == [], step
    assert any("2.15.0: " in r and "CUDA" in r for r in step["refused"]), step
    assert files(root) == before


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
