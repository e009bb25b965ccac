"""Recipes YAML would accept but a person did not mean, refused as exit 2 with one line ``file:line:key: reason``
that says the fix; files and folders (sub-folders, `validate FILE...`, `--recipes FILE`, unreadable files).

Every case runs the real CLI in process (`trainimg.cli.app.main`) on recipes written to a fresh folder.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from trainimg.cli.app import main

CPU = 'framework: pytorch\nversion: "2.13.0"\nos: debian12\npython: "3.11"\n'
GPU_HEAD = "framework: pytorch\nversion: '2.14.1'\nos: ubuntu24.04\n"
PARENT = "pytorch-2.13.0-cpu-py3.11"
REPO = Path(__file__).resolve().parents[1]


def write_recipes(root: Path, files: dict[str, str | bytes]) -> Path:
    d = root / "recipes"
    for name, text in files.items():
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            (d / name).write_bytes(text)
        else:
            (d / name).write_text(text, encoding="utf-8")
    d.mkdir(exist_ok=True)
    return d


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, list[str]]:
    capsys.readouterr()
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err.splitlines()


def refused(capsys: pytest.CaptureFixture[str], d: Path, *argv: str) -> str:
    """Run `validate` (or argv); assert exit 2 and exactly one stderr line; return it."""
    rc, out, err = cli(capsys, "--recipes", str(d), *(argv or ("validate",)))
    assert rc == 2, (out, err)
    assert len(err) == 1, err
    assert "internal error" not in err[0] and "Traceback" not in err[0]
    return err[0]


def names(capsys: pytest.CaptureFixture[str], d: Path) -> list[str]:
    rc, out, err = cli(capsys, "--recipes", str(d), "list", "--json")
    assert rc == 0, err
    return [r["name"] for r in json.loads(out)]


# --- what YAML would read differently from what was meant --------------------------------------------------------

def test_duplicate_top_level_key(tmp_path, capsys):
    d = write_recipes(tmp_path, {"x.yaml": CPU + 'python: "3.12"\n'})
    line = refused(capsys, d)
    assert line.startswith("recipes/x.yaml:5:python: duplicate key (first at line 4)"), line
    assert "remove one" in line


def test_duplicate_key_inside_matrix(tmp_path, capsys):
    d = write_recipes(tmp_path, {"x.yaml": "framework: pytorch\nmatrix:\n  - version: ['2.13.0']\n"
                                           "    os: [debian12]\n    python: ['3.11']\n    os: [debian12]\n"})
    assert refused(capsys, d).startswith("recipes/x.yaml:6:os: duplicate key (first at line 4)")


def test_yaml_merge_override_is_not_a_duplicate(tmp_path, capsys):
    d = write_recipes(tmp_path, {"x.yaml": "framework: pytorch\nmatrix:\n  - &cpu {version: ['2.13.0'], "
                                           "os: [debian12], python: ['3.11']}\n  - <<: *cpu\n"
                                           "    version: ['2.12.1']\n"})
    assert names(capsys, d) == ["pytorch-2.13.0-cpu-py3.11", "pytorch-2.12.1-cpu-py3.11"]


@pytest.mark.parametrize("text, where, written, read, fix", [
    ("framework: pytorch\nversion: '2.13.0'\nos: debian12\nmatrix:\n  python: [3.10]\n",
     "5:matrix.python", "3.10", "3.1", 'python: ["3.10"]'),
    (GPU_HEAD + "python: '3.12'\nmatrix:\n  - cuda: [12.10]\n", "6:matrix[0].cuda", "12.10", "12.1",
     'cuda: ["12.10"]'),
    ("framework: pytorch\nversion: '2.13.0'\nos: debian12\npython: 3.10\n", "4:python", "3.10", "3.1",
     'python: "3.10"'),
])
def test_unquoted_number_that_yaml_shortens_says_quote_it(tmp_path, capsys, text, where, written, read, fix):
    d = write_recipes(tmp_path, {"x.yaml": text})
    line = refused(capsys, d)
    assert line == f"recipes/x.yaml:{where}: YAML reads the unquoted {written} as the number {read}; quote it: {fix}"


def test_unquoted_numbers_that_read_back_as_written_still_work(tmp_path, capsys):
    d = write_recipes(tmp_path, {"x.yaml": GPU_HEAD + "matrix:\n  cuda: [12.6, 13.0]\n  python: [3.12]\n"})
    assert names(capsys, d) == ["pytorch-2.14.1-cu126-py3.12", "pytorch-2.14.1-cu130-py3.12"]


# --- exclude -----------------------------------------------------------------------------------------------------

def test_exclude_compares_values_as_written(tmp_path, capsys):
    d = write_recipes(tmp_path, {"x.yaml": GPU_HEAD + 'matrix:\n  cuda: ["12.6", "13.0"]\n  python: ["3.12"]\n'
                                                      "exclude:\n  - {cuda: 13.0}\n"})
    assert names(capsys, d) == ["pytorch-2.14.1-cu126-py3.12"]


def test_exclude_on_a_top_level_key(tmp_path, capsys):
    d = write_recipes(tmp_path, {"x.yaml": "framework: pytorch\nos: ubuntu24.04\npython: '3.12'\n"
                                           "matrix:\n  version: ['2.13.0', '2.14.1']\n  cuda: ['13.0']\n"
                                           "exclude:\n  - {os: ubuntu24.04, version: '2.13.0'}\n"})
    assert names(capsys, d) == ["pytorch-2.14.1-cu130-py3.12"]


def test_exclude_that_matches_nothing_is_refused(tmp_path, capsys):
    d = write_recipes(tmp_path, {"x.yaml": GPU_HEAD + 'matrix:\n  cuda: ["12.6", "13.0"]\n  python: ["3.12"]\n'
                                                      "exclude:\n  - {cuda: '13.0'}\n  - {cuda: '13.1'}\n"})
    line = refused(capsys, d)
    assert line.startswith("recipes/x.yaml:9:exclude[1]: matches no variant of this file"), line


def test_exclude_of_every_variant_is_refused(tmp_path, capsys):
    d = write_recipes(tmp_path, {"x.yaml": CPU + "exclude:\n  - {python: '3.11'}\n"})
    assert refused(capsys, d).startswith("recipes/x.yaml:5:exclude: excludes every variant of this file")


# --- framework versions --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, shown", [
    ('"2.14.0rc1"', "2.14.0rc1"), ('"2.13.0a0"', "2.13.0a0"), ('"2.13"', "2.13"), ("2.13", "2.13"),
    ('"2.13.0.post1"', "2.13.0.post1"), ('"2.13.0.dev1"', "2.13.0.dev1"), ('"2.13.0+cpu"', "2.13.0+cpu"),
    ('"2.13.00"', "2.13.00"), ('"1!2.13.0"', "1!2.13.0"), ('"2.13.0.1.2"', "2.13.0.1.2"),
])
def test_framework_version_is_a_full_release(tmp_path, capsys, value, shown):
    d = write_recipes(tmp_path, {"x.yaml": CPU.replace('"2.13.0"', value)})
    line = refused(capsys, d)
    assert line == (f"recipes/x.yaml:2:version: '{shown}' is not a full release: a framework version is X.Y.Z "
                    f"such as 2.13.0 (or X.Y.Z.N; no rc, a, b, dev, post or +local part)")


def test_local_version_with_name_never_reaches_a_tag(tmp_path, capsys):
    d = write_recipes(tmp_path, {"x.yaml": CPU.replace('"2.13.0"', '"2.13.0rc1+abc"') + "name: mine\n"})
    assert refused(capsys, d).startswith("recipes/x.yaml:2:version: '2.13.0rc1+abc' is not a full release")
    rc, out, err = cli(capsys, "--recipes", str(d), "render", "--output", str(tmp_path / "out"))
    assert rc == 2 and out == "" and not (tmp_path / "out").exists()


# --- extends: the same rules as a root -----------------------------------------------------------------------------

@pytest.mark.parametrize("extra, name", [("torch==1.13.1", "torch"), ("nvidia-nccl-cu13==2.3.0", "nvidia-nccl-cu13"),
                                         ("cloudml-hypertune==0.1.0.dev6", "cloudml-hypertune")])
def test_extending_variant_extras_pass_the_managed_package_guard(tmp_path, capsys, extra, name):
    d = write_recipes(tmp_path, {"a.yaml": CPU, "b.yaml": f"extends: {PARENT}\nname: mine\nextras: [{extra}]\n"})
    line = refused(capsys, d)
    assert line.startswith(f"recipes/b.yaml:3:extras: {name} is managed by trainimg"), line


def test_children_of_every_shipped_variant_resolve(tmp_path, capsys):
    """Children inherit resolved values (an NCCL range for TensorFlow and JAX) and still resolve."""
    d = tmp_path / "recipes"
    shutil.copytree(REPO / "recipes", d)
    parents = names(capsys, d)
    assert any(p.startswith("tensorflow-") and "-cu" in p for p in parents)
    for i, parent in enumerate(parents):
        (d / f"child{i}.yaml").write_text(f"extends: {parent}\nname: child{i}\nextras: [numpy==2.1.3]\n")
    rc, out, err = cli(capsys, "--recipes", str(d), "list", "--json")
    assert rc == 0, err
    rows = {r["name"]: r for r in json.loads(out)}
    for i, parent in enumerate(parents):
        assert rows[f"child{i}"]["versions"] == rows[parent]["versions"]


def test_grandchild_passes_the_guard_too(tmp_path, capsys):
    d = write_recipes(tmp_path, {"a.yaml": CPU, "b.yaml": f"extends: {PARENT}\nname: mine\n",
                                 "c.yaml": "extends: mine\nname: mine2\nextras: [jaxlib==0.10.2]\n"})
    assert refused(capsys, d).startswith("recipes/c.yaml:3:extras: jaxlib is managed by trainimg")


# --- files that cannot be read -------------------------------------------------------------------------------------

def test_non_utf8_file(tmp_path, capsys):
    d = write_recipes(tmp_path, {"x.yaml": CPU.encode() + b"labels: {team: caf\xe9}\n"})
    line = refused(capsys, d)
    assert line == "recipes/x.yaml:5: not UTF-8 text (byte 0xe9); save the file as UTF-8"


def test_symlink_loop(tmp_path, capsys):
    d = write_recipes(tmp_path, {"a.yaml": CPU})
    os.symlink("loop.yaml", d / "loop.yaml")
    line = refused(capsys, d)
    assert line.startswith("recipes/loop.yaml: cannot read: Too many levels of symbolic links"), line
    rc, _, err = cli(capsys, "--recipes", str(d), "validate", str(d / "loop.yaml"))
    assert rc == 2 and err == ["recipes/loop.yaml: cannot read: Too many levels of symbolic links"], err


def test_folder_link_loop_is_walked_once(tmp_path, capsys):
    d = write_recipes(tmp_path, {"a.yaml": CPU})
    os.symlink(".", d / "again")
    assert names(capsys, d) == [PARENT]


# --- folders and files -----------------------------------------------------------------------------------------------

def test_recipes_in_sub_folders_are_loaded(tmp_path, capsys):
    d = write_recipes(tmp_path, {"a.yaml": CPU, "team/vision/b.yml": f"extends: {PARENT}\nname: vision\n",
                                 ".drafts/c.yaml": "broken: [\n", "team/.d.yaml": "broken: [\n"})
    rc, out, err = cli(capsys, "--recipes", str(d), "list", "--json")
    assert rc == 0, err
    rows = {r["name"]: r for r in json.loads(out)}
    assert sorted(rows) == [PARENT, "vision"]
    assert rows["vision"]["recipe"] == "recipes/team/vision/b.yml"


def test_errors_in_sub_folders_name_the_file(tmp_path, capsys):
    d = write_recipes(tmp_path, {"a.yaml": CPU, "team/b.yaml": CPU.replace("debian12", "debian11") + "name: b\n"})
    assert refused(capsys, d).startswith("recipes/team/b.yaml:3:os: 'debian11' is not one of")


def test_validate_a_file_resolves_extends_against_the_folder(tmp_path, capsys):
    d = write_recipes(tmp_path, {"base.yaml": CPU, "team.yaml": f"extends: {PARENT}\nname: team\n"})
    rc, out, err = cli(capsys, "--recipes", str(d), "validate", str(d / "team.yaml"))
    assert rc == 0 and err == [], err
    assert out == "1 variant valid in 1 file (and 1 parent they extend, from other files)\n"  # what was given


def test_validate_a_file_reports_a_missing_parent(tmp_path, capsys):
    d = write_recipes(tmp_path, {"base.yaml": CPU, "team.yaml": "extends: pytorch-2.13.0-cpu-py3.1\nname: team\n"})
    line = refused(capsys, d, "validate", str(d / "team.yaml"))
    assert line.startswith("recipes/team.yaml:1:extends: no variant named 'pytorch-2.13.0-cpu-py3.1'; did you mean")


def test_validate_the_same_file_twice_is_not_a_duplicate(tmp_path, capsys, monkeypatch):
    d = write_recipes(tmp_path, {"a.yaml": CPU, "b.yaml": f"extends: {PARENT}\nname: b\n"})
    monkeypatch.chdir(d)
    rc, out, err = cli(capsys, "--recipes", str(d), "validate", "a.yaml", "./a.yaml", str(d / "a.yaml"))
    assert rc == 0 and out == "1 variant valid in 1 file\n", err
    rc, out, err = cli(capsys, "--recipes", str(d), "validate", "b.yaml", "a.yaml", "b.yaml")
    assert rc == 0 and out == "2 variants valid in 2 files\n", err


def test_recipes_option_naming_a_file(tmp_path, capsys):
    d = write_recipes(tmp_path, {"a.yaml": CPU})
    for verb in ("validate", "list", "render"):
        line = refused(capsys, d / "a.yaml", verb)
        assert line == f"--recipes: '{d / 'a.yaml'}' is a file; --recipes takes the folder that holds the recipes, " \
                       f"e.g. --recipes {d}"


def test_json_out_that_cannot_be_written(tmp_path, capsys):
    d = write_recipes(tmp_path, {"a.yaml": CPU})
    (tmp_path / "blocker").write_text("a file\n")
    line = refused(capsys, d, "bake", "--output", str(tmp_path / "blocker" / "bake.json"))
    assert line.startswith(f"trainimg bake: cannot write {tmp_path / 'blocker' / 'bake.json'}: ")
