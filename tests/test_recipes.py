"""Recipes through the CLI: every bad recipe is exit 2 and ONE stderr line ``recipes/<file>:<key>: <reason>``.

Each case writes its files into a fresh ``recipes/`` folder under tmp_path and runs ``trainimg validate`` in
process. Good cases check matrix expansion, ``extends`` and the ``list --json`` contract on the shipped recipes.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from trainimg.cli.app import main
from packaging.version import Version
from shipped import pick

from trainimg.recipe.compat import load_compat
from trainimg.recipe.loading import load_recipes

REPO = Path(__file__).resolve().parents[1]

CPU = """\
framework: pytorch
version: "2.13.0"
os: debian12
python: "3.11"
"""
GPU = """\
framework: pytorch
version: "2.14.1"
cuda: "13.0"
os: ubuntu24.04
python: "3.12"
"""


def _d(text: str) -> str:
    return textwrap.dedent(text)


def write_recipes(root: Path, files: dict[str, str]) -> Path:
    d = root / "recipes"
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name).write_text(text, encoding="utf-8")
    return d


def run_cli(capsys, *argv: str) -> tuple[int, str, list[str]]:
    capsys.readouterr()
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err.splitlines()


# (id, files, file the error is in, key, words the reason must contain)
BAD: list[tuple[str, dict[str, str], str, str, tuple[str, ...]]] = [
    ("unknown-top-level-key", {"x.yaml": CPU + "verison: '2.13.0'\n"}, "x.yaml", "verison",
     ("unknown key", "did you mean 'version'")),
    ("unknown-top-level-key-no-hint", {"x.yaml": CPU + "zzzzzz: 1\n"}, "x.yaml", "zzzzzz",
     ("unknown key", "known keys:", "framework")),
    ("unknown-matrix-axis", {"x.yaml": "framework: pytorch\nmatrix:\n  cudaa: ['13.0']\n"}, "x.yaml",
     "matrix.cudaa", ("unknown key", "did you mean 'cuda'")),
    ("unknown-matrix-axis-in-group", {"x.yaml": "framework: pytorch\nmatrix:\n  - version: ['2.13.0']\n"
                                                "  - pythn: ['3.11']\n"}, "x.yaml", "matrix[1].pythn",
     ("unknown key", "did you mean 'python'")),
    ("non-list-axis", {"x.yaml": "framework: pytorch\nmatrix:\n  cuda: '13.0'\n"}, "x.yaml", "matrix.cuda",
     ("non-empty list",)),
    ("empty-axis", {"x.yaml": "framework: pytorch\nmatrix:\n  cuda: []\n"}, "x.yaml", "matrix.cuda",
     ("non-empty list",)),
    ("empty-matrix-list", {"x.yaml": CPU + "matrix: []\n"}, "x.yaml", "matrix", ("empty matrix", "no variants")),
    ("empty-matrix-mapping", {"x.yaml": CPU + "matrix: {}\n"}, "x.yaml", "matrix", ("mapping of axes",)),
    ("matrix-group-not-mapping", {"x.yaml": CPU + "matrix:\n  - [1, 2]\n"}, "x.yaml", "matrix[0]",
     ("mapping of axes",)),
    ("exclude-not-list", {"x.yaml": CPU + "exclude: {python: '3.11'}\n"}, "x.yaml", "exclude",
     ("list of mappings",)),
    ("exclude-unknown-key", {"x.yaml": CPU + "exclude:\n  - {pyton: '3.11'}\n"}, "x.yaml", "exclude[0].pyton",
     ("unknown key", "did you mean 'python'")),
    ("not-a-mapping", {"x.yaml": "- framework: pytorch\n- version: 1\n"}, "x.yaml", "", ("is a mapping",)),
    ("empty-file", {"x.yaml": "# nothing\n"}, "x.yaml", "", ("is a mapping",)),
    ("missing-framework", {"x.yaml": "version: '2.13.0'\nos: debian12\npython: '3.11'\n"}, "x.yaml", "framework",
     ("missing", "pytorch, tensorflow, jax")),
    ("unknown-framework", {"x.yaml": CPU.replace("pytorch", "pytorchh")}, "x.yaml", "framework",
     ("'pytorchh' is not one of", "pytorch, tensorflow, jax, none")),
    ("framework-not-string", {"x.yaml": CPU.replace("pytorch", "[pytorch]")}, "x.yaml", "framework",
     ("not one of",)),
    ("missing-version", {"x.yaml": CPU.replace('version: "2.13.0"\n', "")}, "x.yaml", "version",
     ("missing", "torch versions trainimg knows", "2.13.0", "2.14.1")),
    ("unknown-version-line", {"x.yaml": CPU.replace("2.13.0", "2.99.0")}, "x.yaml", "version",
     ("no compatibility data for torch 2.99", "known:", "2.12.1", "2.15.0")),
    ("version-newer-than-known", {"x.yaml": CPU.replace("2.13.0", "2.13.7")}, "x.yaml", "version",
     ("torch 2.13.7 is newer than the newest release", "(2.13.0)")),
    ("version-not-pep440", {"x.yaml": CPU.replace("2.13.0", "2.13.x")}, "x.yaml", "version",
     ("'2.13.x' is not a PEP 440 version",)),
    ("version-bad-chars", {"x.yaml": CPU.replace('"2.13.0"', '"2.13.0; rm -rf /"')}, "x.yaml", "version",
     ("is not a version",)),
    ("version-bool", {"x.yaml": CPU.replace('"2.13.0"', "true")}, "x.yaml", "version",
     ("expected a version", "got bool")),
    ("python-bool", {"x.yaml": CPU.replace('"3.11"', "yes")}, "x.yaml", "python",
     ("expected a Python major.minor", "got bool")),
    ("name-bool", {"x.yaml": CPU + "name: false\n"}, "x.yaml", "name", ("expected a lowercase name", "got bool")),
    ("repository-bool", {"x.yaml": CPU + "repository: true\n"}, "x.yaml", "repository", ("got bool",)),
    ("python-list", {"x.yaml": CPU.replace('"3.11"', "['3.11']")}, "x.yaml", "python", ("got list",)),
    ("missing-os", {"x.yaml": CPU.replace("os: debian12\n", "")}, "x.yaml", "os",
     ("missing", "debian12", "ubuntu24.04")),
    ("unknown-os", {"x.yaml": CPU.replace("debian12", "debian11")}, "x.yaml", "os",
     ("'debian11' is not one of", "debian12")),
    ("missing-python", {"x.yaml": CPU.replace('python: "3.11"\n', "")}, "x.yaml", "python", ("missing",)),
    ("python-not-major-minor", {"x.yaml": CPU.replace('"3.11"', '"3.11.2"')}, "x.yaml", "python",
     ("'3.11.2' is not a Python major.minor",)),
    ("python-not-supported-by-framework",
     {"x.yaml": "framework: jax\nversion: '0.10.2'\nos: ubuntu22.04\nmatrix:\n  python: ['3.10']\n"},
     "x.yaml", "matrix.python", ("jax 0.10 supports Python >=3.11,<3.15; got 3.10",)),
    ("python-not-offered-by-os", {"x.yaml": CPU.replace('"3.11"', '"3.12"')}, "x.yaml", "python",
     ("debian12 provides Python 3.11; got 3.12",)),
    ("cuda-not-built-for-framework",
     {"x.yaml": "framework: pytorch\nversion: '2.13.0'\nos: ubuntu22.04\npython: '3.11'\n"
                "matrix:\n  cuda: ['11.8']\n"},
     "x.yaml", "matrix.cuda", ("torch 2.13 is built for CUDA 12.6, 13.0, 13.2; got 11.8",)),
    ("cuda-unknown",
     {"x.yaml": "framework: none\ncuda: '11.8'\nflavour: runtime\nos: ubuntu22.04\npython: '3.11'\n"},
     "x.yaml", "cuda", ("no nvidia/cuda data for CUDA 11.8", "known:", "12.6", "13.0")),
    ("cuda-not-major-minor", {"x.yaml": GPU.replace('"13.0"', '"13"')}, "x.yaml", "cuda",
     ("'13' is not a CUDA major.minor",)),
    ("os-without-cuda-image",
     {"x.yaml": "framework: pytorch\nversion: '2.14.1'\ncuda: '13.0'\nos: debian12\npython: '3.11'\n"},
     "x.yaml", "os", ("nvidia/cuda 13.0.3 images exist for ubuntu22.04, ubuntu24.04; got debian12",)),
    ("nccl-below-minimum-gpu", {"x.yaml": GPU + "nccl: '2.6.4'\n"}, "x.yaml", "nccl",
     ("NCCL 2.6.4 is below 2.7", "Reduction Server")),
    ("nccl-below-minimum-cpu", {"x.yaml": CPU + "nccl: '2.4.8'\n"}, "x.yaml", "nccl", ("NCCL 2.4.8 is below 2.7",)),
    ("nccl-not-wheel-pin", {"x.yaml": GPU + "nccl: '2.29.3'\n"}, "x.yaml", "nccl",
     ("torch 2.14 with CUDA 13.0 pins NCCL 2.30.7 (nvidia-nccl-cu13); got 2.29.3",)),
    ("nccl-on-cpu", {"x.yaml": CPU + "nccl: '2.30.7'\n"}, "x.yaml", "nccl", ("CPU variant has no NCCL",)),
    ("nccl-not-version", {"x.yaml": GPU + "nccl: latest\n"}, "x.yaml", "nccl", ("'latest' is not a version",)),
    ("reduction-server-on-cpu", {"x.yaml": CPU + "reduction_server: true\n"}, "x.yaml", "reduction_server",
     ("CPU variant cannot use it",)),
    ("reduction-server-not-bool", {"x.yaml": GPU + "reduction_server: 'yes please'\n"}, "x.yaml",
     "reduction_server", ("expected true or false",)),
    ("cudnn-with-pip-framework", {"x.yaml": GPU + "cudnn: true\nflavour: runtime\n"}, "x.yaml", "cudnn",
     ("torch 2.14 brings cuDNN 9.24.0.43 as a pip wheel", "second cuDNN", "remove cudnn")),
    ("cudnn-with-flavour-base", {"x.yaml": GPU + "cudnn: true\n"}, "x.yaml", "cudnn",
     ("only for the runtime and devel flavours",)),
    ("cudnn-on-cpu", {"x.yaml": CPU + "cudnn: true\n"}, "x.yaml", "cudnn", ("cuDNN needs a CUDA base",)),
    ("flavour-on-cpu", {"x.yaml": CPU + "flavour: runtime\n"}, "x.yaml", "flavour",
     ("CPU variant starts from debian:bookworm-slim",)),
    ("bad-flavour", {"x.yaml": GPU + "flavour: slim\n"}, "x.yaml", "flavour",
     ("'slim' is not one of base, runtime, devel",)),
    ("framework-none-base-flavour",
     {"x.yaml": "framework: none\ncuda: '12.6'\nos: ubuntu22.04\npython: '3.11'\n"}, "x.yaml", "flavour",
     ("set flavour: runtime or devel",)),
    ("framework-none-with-version", {"x.yaml": CPU.replace("pytorch", "none")}, "x.yaml", "version",
     ("framework none takes no version",)),
    ("cpu-on-os-without-cpu-image",
     {"x.yaml": "framework: pytorch\nversion: '2.13.0'\nos: ubuntu22.04\npython: '3.11'\n"}, "x.yaml", "os",
     ("no CPU base image for ubuntu22.04", "debian12")),
    ("hypertune-unknown", {"x.yaml": CPU + "hypertune: '0.2.0'\n"}, "x.yaml", "hypertune",
     ("cloudml-hypertune 0.2.0 is not released", "known: 0.1.0.dev6")),
    ("extras-not-list", {"x.yaml": CPU + "extras: numpy==2.1.3\n"}, "x.yaml", "extras", ("expected a list",)),
    ("extras-unpinned", {"x.yaml": CPU + "extras: [numpy]\n"}, "x.yaml", "extras",
     ("'numpy' is not a pinned requirement NAME==VERSION",)),
    ("extras-range", {"x.yaml": CPU + "extras: ['numpy>=2']\n"}, "x.yaml", "extras", ("not a pinned requirement",)),
    ("extras-url", {"x.yaml": CPU + "extras: ['numpy @ https://example.com/numpy-2.1.3.whl']\n"}, "x.yaml",
     "extras", ("not a pinned requirement", "no URLs or markers")),
    ("extras-marker", {"x.yaml": CPU + "extras: ['numpy==2.1.3; python_version < \"3.12\"']\n"}, "x.yaml",
     "extras", ("not a pinned requirement", "no URLs or markers")),
    ("extras-duplicate", {"x.yaml": CPU + "extras: [numpy==2.1.3, NumPy==2.1.2]\n"}, "x.yaml", "extras",
     ("a package is listed twice",)),
    ("extras-names-framework", {"x.yaml": CPU + "extras: [torch==2.13.0]\n"}, "x.yaml", "extras",
     ("torch is managed by trainimg",)),
    ("extras-names-nccl", {"x.yaml": GPU + "extras: [nvidia-nccl-cu13==2.30.7]\n"}, "x.yaml", "extras",
     ("nvidia-nccl-cu13 is managed by trainimg",)),
    ("extras-names-hypertune", {"x.yaml": CPU + "extras: [cloudml_hypertune==0.1.0.dev6]\n"}, "x.yaml", "extras",
     ("cloudml-hypertune is managed by trainimg",)),
    ("extras-item-not-string", {"x.yaml": CPU + "extras: [{numpy: 2}]\n"}, "x.yaml", "extras",
     ("is not a pinned requirement",)),
    ("labels-not-mapping", {"x.yaml": CPU + "labels: [a, b]\n"}, "x.yaml", "labels", ("expected a mapping",)),
    ("bad-label-key", {"x.yaml": CPU + "labels: {Maintainer: me}\n"}, "x.yaml", "labels",
     ("'Maintainer' is not a label key",)),
    ("bad-label-key-space", {"x.yaml": CPU + "labels: {'a b': me}\n"}, "x.yaml", "labels",
     ("'a b' is not a label key",)),
    ("reserved-label-trainimg", {"x.yaml": CPU + "labels: {trainimg.variant: x}\n"}, "x.yaml", "labels",
     ("'trainimg.variant' is set by trainimg itself",)),
    ("reserved-label-oci", {"x.yaml": CPU + "labels: {org.opencontainers.image.title: x}\n"}, "x.yaml", "labels",
     ("'org.opencontainers.image.title' is set by trainimg itself",)),
    ("label-value-dollar", {"x.yaml": CPU + "labels: {team: '$HOME'}\n"}, "x.yaml", "labels",
     ("value of 'team' has characters outside",)),
    ("label-value-newline", {"x.yaml": CPU + "labels: {team: \"a\\nb\"}\n"}, "x.yaml", "labels",
     ("value of 'team' has characters outside",)),
    ("label-value-trailing-newline", {"x.yaml": CPU + "labels: {team: \"ab\\n\"}\n"}, "x.yaml", "labels",
     ("value of 'team' has characters outside",)),
    ("label-value-mapping", {"x.yaml": CPU + "labels: {team: {a: b}}\n"}, "x.yaml", "labels",
     ("value of 'team' must be a string",)),
    ("name-trailing-newline", {"x.yaml": CPU + "name: \"foo\\n\"\n"}, "x.yaml", "name",
     ("is not a lowercase name",)),
    ("python-trailing-newline", {"x.yaml": CPU.replace('"3.11"', '"3.11\\n"')}, "x.yaml", "python",
     ("is not a Python major.minor",)),
    ("bad-name", {"x.yaml": CPU + "name: Foo Bar\n"}, "x.yaml", "name", ("'Foo Bar' is not a lowercase name",)),
    ("bad-base-image", {"x.yaml": CPU + "base_image: 'debian:bookworm slim'\n"}, "x.yaml", "base_image",
     ("is not an image reference",)),
    ("bad-base-image-uppercase", {"x.yaml": CPU + "base_image: 'Debian:bookworm'\n"}, "x.yaml", "base_image",
     ("is not an image reference",)),
    ("bad-repository", {"x.yaml": CPU + "repository: Trainimg/PyTorch\n"}, "x.yaml", "repository",
     ("is not a lowercase repository path",)),
    ("bad-repository-with-tag", {"x.yaml": CPU + "repository: 'trainimg/pytorch:1'\n"}, "x.yaml", "repository",
     ("is not a lowercase repository path",)),
    ("matrix-value-origin", {"x.yaml": "framework: pytorch\nos: debian12\npython: '3.11'\n"
                                       "matrix:\n  - version: ['2.13.0']\n  - version: ['2.13.9']\n"},
     "x.yaml", "matrix[1].version", ("newer than the newest release",)),
    ("extends-unknown",
     {"a.yaml": CPU, "b.yaml": "extends: pytorch-2.13.0-cpu-py3.1\nname: mine\n"}, "b.yaml", "extends",
     ("no variant named 'pytorch-2.13.0-cpu-py3.1'", "did you mean pytorch-2.13.0-cpu-py3.11?")),
    ("extends-cycle",
     {"a.yaml": "extends: two\nname: one\n", "b.yaml": "extends: one\nname: two\n"}, "a.yaml", "extends",
     ("extends forms a cycle",)),
    ("extends-self", {"a.yaml": CPU, "b.yaml": "extends: me\nname: me\n"}, "b.yaml", "extends",
     ("extends forms a cycle",)),
    ("extends-chain-missing-root",
     {"a.yaml": "extends: two\nname: one\n", "b.yaml": "extends: nowhere\nname: two\n"}, "b.yaml", "extends",
     ("no variant named 'nowhere'",)),
    ("extends-forbidden-key",
     {"a.yaml": CPU, "b.yaml": "extends: pytorch-2.13.0-cpu-py3.11\nname: mine\npython: '3.12'\n"}, "b.yaml",
     "python", ("set by the variant this one extends", "extends, name, repository, extras, labels")),
    ("extends-without-name", {"a.yaml": CPU, "b.yaml": "extends: pytorch-2.13.0-cpu-py3.11\n"}, "b.yaml",
     "extends", ("needs its own `name`",)),
    ("extends-bad-extras",
     {"a.yaml": CPU, "b.yaml": "extends: pytorch-2.13.0-cpu-py3.11\nname: mine\nextras: [numpy]\n"}, "b.yaml",
     "extras", ("not a pinned requirement",)),
    ("extends-reserved-label",
     {"a.yaml": CPU, "b.yaml": "extends: pytorch-2.13.0-cpu-py3.11\nname: mine\nlabels: {trainimg.x: y}\n"},
     "b.yaml", "labels", ("set by trainimg itself",)),
    ("duplicate-variant-name", {"a.yaml": CPU, "b.yaml": CPU.replace("pytorch\n", "pytorch\nrepository: x/y\n")
                                + "name: pytorch-2.13.0-cpu-py3.11\n"},
     "b.yaml", "name", ("variant name 'pytorch-2.13.0-cpu-py3.11' is also produced by recipes/a.yaml",)),
    ("duplicate-tag", {"a.yaml": CPU, "b.yaml": CPU + "name: another\n"}, "b.yaml", "repository",
     ("image tag trainimg/pytorch:2.13.0-cpu-py3.11 is also produced by recipes/a.yaml",)),
    ("bad-yaml", {"x.yaml": "framework: pytorch\nversion: [2.13.0\nos: debian12\n"}, "x.yaml", "",
     ("not valid YAML: ",)),
]


@pytest.mark.parametrize("files, file, key, words", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_recipe_is_one_line_naming_file_and_key(tmp_path, capsys, files, file, key, words):
    d = write_recipes(tmp_path, files)
    rc, out, err = run_cli(capsys, "--recipes", str(d), "validate")
    assert rc == 2, (out, err)
    # One line per mistake (a case may hold others, e.g. a minimal recipe without `os`), then the count.
    lines = err if len(err) == 1 else err[:-1]
    if len(err) > 1:
        assert re.fullmatch(r"trainimg validate: [0-9]+ mistakes in 1 file", err[-1]), err
    # file:line:key, the line wherever YAML gives one (a missing key has none)
    prefix = rf"recipes/{re.escape(file)}:([0-9]+:)?{re.escape(key)}: " if key else rf"recipes/{file}(:[0-9]+)?: "
    assert [line for line in lines if re.match(prefix, line) and all(w in line for w in words)], err
    assert all(re.match(r"recipes/[^:]+:", line) for line in lines), err
    assert "Traceback" not in "".join(err) and "internal error" not in "".join(err)


def test_at_least_thirty_bad_cases():
    assert len(BAD) >= 30


def test_bad_yaml_names_the_line(tmp_path, capsys):
    d = write_recipes(tmp_path, {"x.yaml": "framework: pytorch\nos: debian12\nversion: [2.13.0\npython: x\n"})
    rc, _, err = run_cli(capsys, "--recipes", str(d), "validate")
    assert rc == 2 and len(err) == 1
    m = re.match(r"recipes/x.yaml:([0-9]+): not valid YAML: ", err[0])
    assert m, err[0]
    assert 3 <= int(m.group(1)) <= 5


def test_unprintable_unknown_key_stays_one_line(tmp_path, capsys):
    d = write_recipes(tmp_path, {"x.yaml": CPU + '"evil\\rkey\\u2028x": 1\n'})
    rc, _, err = run_cli(capsys, "--recipes", str(d), "validate")
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith("recipes/x.yaml:5:'evil\\rkey\\u2028x': unknown key")


def test_validate_missing_path(tmp_path, capsys):
    d = write_recipes(tmp_path, {"a.yaml": CPU})
    missing = d / "nope.yaml"
    rc, _, err = run_cli(capsys, "--recipes", str(d), "validate", str(missing))
    assert rc == 2
    assert err == ["recipes/nope.yaml: cannot read: No such file or directory"], err


def test_validate_one_path_ignores_other_files(tmp_path, capsys):
    d = write_recipes(tmp_path, {"a.yaml": CPU, "b.yaml": "broken: [\n"})
    rc, out, err = run_cli(capsys, "--recipes", str(d), "validate", str(d / "a.yaml"))
    assert rc == 0, err
    assert "1 variant valid in 1 file" in out


def test_missing_recipes_folder(tmp_path, capsys):
    rc, _, err = run_cli(capsys, "--recipes", str(tmp_path / "none"), "validate")
    assert rc == 2 and len(err) == 1 and err[0].startswith("--recipes: ")


def test_empty_recipes_folder(tmp_path, capsys):
    d = write_recipes(tmp_path, {})
    rc, _, err = run_cli(capsys, "--recipes", str(d), "validate")
    assert rc == 2 and len(err) == 1 and "no recipe files" in err[0]


# --- good cases -------------------------------------------------------------------------------------------------


def test_matrix_expansion_groups_and_exclude(tmp_path, capsys):
    d = write_recipes(tmp_path, {"x.yaml": _d("""\
        framework: pytorch
        repository: trainimg/pytorch
        matrix:
          - version: ["2.13.0", "2.14.1", "2.12.1"]
            os: [debian12]
            python: ["3.11"]
          - version: ["2.13.0", "2.14.1"]
            cuda: ["12.6", "13.0", "13.2"]
            os: [ubuntu22.04, ubuntu24.04]
            python: ["3.11", "3.12"]
        exclude:
          - {os: ubuntu22.04, python: "3.12"}
          - {os: ubuntu24.04, python: "3.11"}
          - {cuda: "13.2", version: "2.13.0"}
        """)})
    rs = load_recipes(d)
    # group 1: 3; group 2: 2 versions x 3 cuda x (2 valid os/python pairs) = 12, minus 2 (13.2 x 2.13.0 x 2 os)
    assert len(rs.variants) == 3 + 12 - 2
    rc, out, err = run_cli(capsys, "--recipes", str(d), "validate")
    assert rc == 0 and err == [] and "13 variants valid in 1 file" in out
    names = [v.name for v in rs.variants]
    assert len(set(names)) == len(names)
    assert names[:3] == ["pytorch-2.13.0-cpu-py3.11", "pytorch-2.14.1-cpu-py3.11", "pytorch-2.12.1-cpu-py3.11"]
    assert "pytorch-2.13.0-cu132-py3.12" not in names
    assert "pytorch-2.14.1-cu132-py3.12" in names
    gpu = rs.by_name["pytorch-2.14.1-cu126-py3.11"]
    assert gpu.base_image == "nvidia/cuda:12.6.3-base-ubuntu22.04"
    assert gpu.nccl == "2.29.3" and gpu.cudnn == "9.10.2.21" and gpu.reduction_server
    assert gpu.origin["cuda"] == "matrix[1].cuda" and gpu.origin["framework"] == "framework"


def test_yaml_floats_read_back_as_written(tmp_path):
    d = write_recipes(tmp_path, {"x.yaml": "framework: pytorch\nversion: 2.14.1\ncuda: 13.0\nos: ubuntu24.04\n"
                                           "python: 3.12\n"})
    (v,) = load_recipes(d).variants
    assert (v.cuda, v.python, v.version) == ("13.0", "3.12", "2.14.1")
    assert v.tag == "trainimg/pytorch:2.14.1-cu130-py3.12"


def test_defaults_and_framework_none(tmp_path):
    d = write_recipes(tmp_path, {
        "a.yaml": CPU,
        "b.yaml": "framework: none\ncuda: '12.6'\nflavour: runtime\nos: ubuntu22.04\npython: '3.10'\n",
        "c.yaml": CPU.replace("pytorch", "tensorflow").replace("2.13.0", "2.21.0") + "hypertune: null\n",
    })
    rs = load_recipes(d)
    cpu, none, tf = rs.variants
    assert cpu.name == "pytorch-2.13.0-cpu-py3.11" and cpu.repository == "trainimg/pytorch"
    assert cpu.base_image == "debian:bookworm-slim" and cpu.hypertune == "0.1.0.dev6"
    assert not cpu.reduction_server and cpu.nccl is None and cpu.cuda is None
    assert none.name == "base-base-cu126-py3.10" and none.tag == "trainimg/base:base-cu126-py3.10"
    assert none.base_image == "nvidia/cuda:12.6.3-runtime-ubuntu22.04" and none.nccl == "2.23.4"
    assert tf.hypertune is None


def test_extends_child_inherits(tmp_path, capsys):
    d = write_recipes(tmp_path, {
        # the child's file sorts before its parent's: order of files does not matter
        "a-child.yaml": _d("""\
            extends: pytorch-2.14.1-cu130-py3.12
            name: my-trainer
            extras: [numpy==2.1.3]
            labels: {team: vision}
            """),
        "b-grandchild.yaml": "extends: my-trainer\nname: my-trainer-2\nrepository: acme/trainer\n",
        "pytorch.yaml": GPU + "labels: {maintainer: trainimg}\n",
    })
    rs = load_recipes(d)
    parent = rs.by_name["pytorch-2.14.1-cu130-py3.12"]
    child = rs.by_name["my-trainer"]
    grand = rs.by_name["my-trainer-2"]
    assert child.extends == parent.name and grand.extends == "my-trainer"
    assert child.tag == "trainimg/my-trainer:2.14.1-cu130-py3.12"
    assert grand.tag == "acme/trainer:2.14.1-cu130-py3.12"
    for field in ("framework", "version", "cuda", "os", "python", "nccl", "cudnn", "base_image",
                  "reduction_server", "hypertune", "flavour"):
        assert getattr(child, field) == getattr(parent, field), field
    assert child.extras == ("numpy==2.1.3",) and child.labels == (("team", "vision"),)
    assert child.source == "recipes/a-child.yaml"
    assert [v.name for v in rs.with_parents([grand])] == [parent.name, "my-trainer", "my-trainer-2"]
    rc, out, _ = run_cli(capsys, "--recipes", str(d), "list", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert rc == 0 and rows["my-trainer"]["extends"] == parent.name
    assert rows["my-trainer"]["tag"] == "trainimg/my-trainer:2.14.1-cu130-py3.12"


def test_extras_and_labels_normalised(tmp_path):
    d = write_recipes(tmp_path, {"x.yaml": CPU + "extras: [Pillow==11.0.0, numpy==2.1.3, 'ray[default]==2.40.0']\n"
                                                 "labels: {zeta: 1, alpha: 'a b (c)'}\n"})
    (v,) = load_recipes(d).variants
    assert v.extras == ("numpy==2.1.3", "Pillow==11.0.0", "ray[default]==2.40.0")
    assert v.labels == (("alpha", "a b (c)"), ("zeta", "1"))


# --- the shipped recipes ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shipped():
    return load_recipes(REPO / "recipes")


def test_list_json_shape(capsys):
    rc, out, err = run_cli(capsys, "--recipes", str(REPO / "recipes"), "list", "--json")
    assert rc == 0 and err == []
    rows = json.loads(out)
    assert isinstance(rows, list) and len(rows) >= 8
    for r in rows:
        assert {"name", "tag", "dockerfile", "framework", "base", "versions"} <= set(r)
        assert r["dockerfile"] == f"images/{r['name']}/Dockerfile"
        assert r["tag"].startswith(f"trainimg/{r['framework']}:")
        assert {"cuda", "cudnn", "nccl", "python", "framework"} <= set(r["versions"])
        assert (r["versions"]["cuda"] is None) == (not r["gpu"])
        if r["versions"]["cuda"] is None:
            assert r["versions"]["nccl"] is None and r["versions"]["cudnn"] is None
            assert "-cpu-" in r["tag"]
        else:
            assert r["versions"]["nccl"] and r["base"].startswith("nvidia/cuda:")
    by_name = {r["name"]: r for r in rows}
    want = pick("pytorch", gpu=False)  # tests/shipped.py: the CPU PyTorch variant this machine builds
    cpu = by_name[want.name]
    assert cpu["tag"] == f"trainimg/pytorch:{want.version}-cpu-py{want.python}"
    assert cpu["dockerfile"] == f"images/{want.name}/Dockerfile"
    assert cpu["framework"] == "pytorch" and cpu["base"] == load_compat().operating_systems[want.os].cpu_image
    assert cpu["os"] == want.os and cpu["versions"]["cuda"] is None and cpu["versions"]["python"] == want.python
    assert cpu["versions"]["framework"] == want.version


def test_list_json_holds_the_newest_releases_and_a_debian13_python313_cpu_base(capsys):
    """The issue's contract: a PyTorch and a JAX variant at the newest release compat.yaml knows (PyPI's newest,
    `trainimg outdated` says when it is not), and a CPU variant on Debian 13 with Python 3.13."""
    rc, out, _ = run_cli(capsys, "--recipes", str(REPO / "recipes"), "list", "--json")
    rows = json.loads(out)
    compat = load_compat()
    for fw in ("pytorch", "jax", "tensorflow"):
        newest = max((r.version for r in compat.frameworks[fw].releases), key=Version)
        assert any(r["framework"] == fw and r["versions"]["framework"] == newest for r in rows), (fw, newest)
    trixie = [r for r in rows if not r["gpu"] and r["os"] == "debian13" and r["versions"]["python"] == "3.13"]
    assert {r["framework"] for r in trixie} == {"pytorch", "jax", "tensorflow"}, trixie
    assert all(r["base"] == "debian:trixie-slim" for r in trixie)


def test_list_plain(capsys):
    rc, out, _ = run_cli(capsys, "--recipes", str(REPO / "recipes"), "list")
    assert rc == 0
    assert any(line.startswith(f"{pick('pytorch', gpu=False).name} ") for line in out.splitlines())


def test_shipped_recipes_cover_the_matrix(shipped):
    vs = shipped.variants
    assert len(vs) >= 8
    for fw in ("pytorch", "tensorflow", "jax"):
        assert any(v.framework == fw and v.gpu for v in vs), fw
        cpu = [v for v in vs if v.framework == fw and not v.gpu]
        assert any(v.os == "debian13" and v.python == "3.13" for v in cpu), fw  # a CPU base under security support
    assert len({v.cuda for v in vs if v.gpu}) >= 2
    for v in vs:
        if v.gpu:
            assert v.nccl is not None and v.reduction_server


def test_shipped_recipes_validate(capsys):
    rc, out, err = run_cli(capsys, "--recipes", str(REPO / "recipes"), "validate")
    assert rc == 0 and err == [] and "variants valid" in out
