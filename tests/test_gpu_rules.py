"""Range vs pin: what each framework's CUDA build REQUIRES (ranges from its wheels) and what a recipe may pin.

For every framework release and CUDA line in the compatibility data: the default is the tested version where a
source gives one, else the required range itself (never its floor by accident); a pin inside the range is
accepted; a pin outside is refused through the CLI with one line quoting the real rule. Then the CUDA line a base
may carry, and the probe's constraint arithmetic (the image side has no `packaging`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from trainimg.cli.app import main
from trainimg.recipe.compat import as_constraint, constraint_spec, is_pin, load_compat, spoken
from trainimg.recipe.loading import load_recipes
from trainimg.runtime.versions import satisfies
from trainimg.runtime.versions import spoken as probe_spoken

COMPAT = load_compat()
BUILDS = [(fw, rel.version, key) for fw, f in COMPAT.frameworks.items() for rel in f.releases for key in rel.cuda]


def _recipe(framework: str, version: str, cuda: str, nccl: str | None = None) -> str:
    """A recipe for that build on the first OS whose Python the release supports."""
    rel = COMPAT.release(framework, version)  # type: ignore[arg-type]
    assert rel is not None
    os_name, python = next((o, py) for o in COMPAT.cuda[cuda].os for py in COMPAT.operating_systems[o].python
                           if Version(py) in rel.python_spec)
    text = (f"framework: {framework}\nversion: '{version}'\ncuda: '{cuda}'\nos: {os_name}\n"
            f"python: '{python}'\n")
    return text + (f"nccl: '{nccl}'\n" if nccl else "")


def _load(tmp_path: Path, text: str):  # noqa: ANN202 - a Variant
    d = tmp_path / "recipes"
    d.mkdir(exist_ok=True)
    (d / "x.yaml").write_text(text, encoding="utf-8")
    (v,) = load_recipes(d).variants
    return v


def _below(version: Version) -> str:
    """A released-looking version just under `version`, still above the Reduction Server's 2.7."""
    major, minor, *rest = version.release + (0, 0)
    patch = rest[0]
    return f"{major}.{minor}.{patch - 1}" if patch else f"{major}.{minor - 1}.99"


@pytest.mark.parametrize("framework,version,key", BUILDS)
def test_default_is_tested_else_the_range(tmp_path: Path, framework: str, version: str, key: str) -> None:
    wheels = COMPAT.release(framework, version).cuda[key]  # type: ignore[union-attr]
    v = _load(tmp_path, _recipe(framework, version, key))
    for kind, got in (("nccl", v.nccl), ("cudnn", v.cudnn)):
        required = as_constraint(getattr(wheels, kind))
        tested = getattr(wheels.tested, kind, None) if wheels.tested else None
        if tested:
            assert got == tested and Version(tested) in SpecifierSet(getattr(wheels, kind)), (kind, got)
        else:
            assert got == required, (kind, got)  # a range stays a range: pip installs the newest in it
        if not is_pin(required) and not tested:
            assert not is_pin(got), f"{kind} {got}: the floor of {required} taken as a pin"


@pytest.mark.parametrize("framework,version,key", BUILDS)
def test_pin_inside_the_range_is_accepted(tmp_path: Path, framework: str, version: str, key: str) -> None:
    wheels = COMPAT.release(framework, version).cuda[key]  # type: ignore[union-attr]
    spec = SpecifierSet(wheels.nccl)
    floor = next(s.version for s in spec if s.operator in ("==", ">="))
    inside = [floor] + ([] if is_pin(as_constraint(wheels.nccl)) else ["2.29.3", "2.30.7"])
    for pin in (p for p in inside if Version(p) in spec):
        v = _load(tmp_path, _recipe(framework, version, key, pin))
        assert v.nccl == pin


@pytest.mark.parametrize("framework,version,key", BUILDS)
def test_pin_outside_the_range_quotes_the_rule(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               framework: str, version: str, key: str) -> None:
    rel = COMPAT.release(framework, version)
    wheels = rel.cuda[key]  # type: ignore[union-attr]
    required = as_constraint(wheels.nccl)
    floor = next(Version(s.version) for s in SpecifierSet(wheels.nccl) if s.operator in ("==", ">="))
    d = tmp_path / "recipes"
    d.mkdir()
    (d / "x.yaml").write_text(_recipe(framework, version, key, _below(floor)), encoding="utf-8")
    capsys.readouterr()
    assert main(["--recipes", str(d), "validate"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    pip = COMPAT.frameworks[framework].pip_name
    if is_pin(required):
        rule = f"{pip} {rel.line} with CUDA {key} pins NCCL {required} ({wheels.nccl_wheel})"  # type: ignore[union-attr]
    else:
        rule = f"{pip} {rel.line} with CUDA {Version(key).major} needs {wheels.nccl_wheel} {spoken(required)}"  # type: ignore[union-attr]
    assert line.endswith(f"x.yaml:6:nccl: {rule}; got {_below(floor)}"), line  # file:line:key


def test_the_issue_s_example_rule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "recipes"
    d.mkdir()
    (d / "x.yaml").write_text(_recipe("jax", "0.10.2", "12.6", "2.17.1"), encoding="utf-8")
    capsys.readouterr()
    assert main(["--recipes", str(d), "validate"]) == 2
    assert "jax 0.10 with CUDA 12 needs nvidia-nccl-cu12 >= 2.18.1; got 2.17.1" in capsys.readouterr().err


def test_range_upper_bound_is_enforced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "recipes"
    d.mkdir()
    (d / "x.yaml").write_text(_recipe("tensorflow", "2.21.0", "12.5", "3.0.1"), encoding="utf-8")
    capsys.readouterr()
    assert main(["--recipes", str(d), "validate"]) == 2
    assert "tensorflow 2.21 with CUDA 12 needs nvidia-nccl-cu12 >= 2.27.7, < 3.0; got 3.0.1" in capsys.readouterr().err


def test_tensorflow_2_21_runs_on_a_cuda_12_6_base(tmp_path: Path) -> None:
    """Its wheels bring CUDA >=12.5.82,<13: a 12.6 base (the base flavour carries no toolkit) is fine."""
    v = _load(tmp_path, _recipe("tensorflow", "2.21.0", "12.6"))
    assert v.base_image == "nvidia/cuda:12.6.3-base-ubuntu22.04"
    assert v.nccl == ">=2.27.7,<3.0" and v.cudnn == "9.3.0.75"
    assert COMPAT.build("tensorflow", "2.21.0", "12.6")[0] == "12.5"


@pytest.mark.parametrize("framework,version,cuda,words", [
    ("tensorflow", "2.21.0", "13.0", "tensorflow 2.21 is built for CUDA 12.5; got 13.0 (its wheels run on CUDA >=12.5,<13"),
    ("pytorch", "2.14.1", "12.8", "torch 2.14 is built for CUDA 12.6, 13.0, 13.2; got 12.8"),
    ("tensorflow", "2.19.1", "12.6", "tensorflow 2.19 is built for CUDA 12.5; got 12.6 (its wheels run on CUDA ==12.5.*"),
])
def test_a_base_outside_the_wheels_cuda_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   framework: str, version: str, cuda: str, words: str) -> None:
    d = tmp_path / "recipes"
    d.mkdir()
    (d / "x.yaml").write_text(f"framework: {framework}\nversion: '{version}'\ncuda: '{cuda}'\nos: ubuntu22.04\n"
                              f"python: '3.11'\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["--recipes", str(d), "validate"]) == 2
    assert words in capsys.readouterr().err


@pytest.mark.parametrize("actual,constraint,width,ok", [
    ("2.32.3", ">=2.27.7,<3.0", None, True),
    ("2.26.5", ">=2.27.7,<3.0", None, False),
    ("3.0.0", ">=2.27.7,<3.0", None, False),
    ("2.30.7", "2.30.7", None, True),
    ("2.30.7+cuda13.0", "2.30.7", None, True),
    ("2.29.3", "2.30.7", None, False),
    ("9.3.0", "9.3.0.75", 3, True),  # cudnnGetVersion answers three parts of a four-part wheel version
    ("9.3.0", ">=9.3.0.75,<10.0", 3, True),
    ("9.28.0", ">=9.8,<10.0", 3, True),
    ("9.7.1", ">=9.8,<10.0", 3, False),
    ("13.0.96", "==13.0.*", None, True),
    ("13.2.0", "==13.0.*", None, False),
    ("2.18.1", ">=2.18.1", None, True),
])
def test_probe_constraints_match_packaging(actual: str, constraint: str, width: int | None, ok: bool) -> None:
    """The in-image arithmetic agrees with `packaging` (which the host uses) on every case above."""
    assert satisfies(actual, constraint, width) is ok
    if width is None and "+" not in actual:
        assert (Version(actual) in constraint_spec(constraint)) is ok
    assert probe_spoken(constraint) == spoken(constraint)
