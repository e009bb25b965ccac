"""Locks (issue 25): every shipped variant has a current requirements.lock whose pins keep the recipe's constraints;
`render --check` names a recipe changed since its lock; a wheel that differs from the locked one fails a real
build, with uv and with pip, in one line naming the package and both hashes."""

from __future__ import annotations

import hashlib
import shutil
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from conftest import CPU_VARIANT, LOCAL_BASE, ROOT, trainimg
from trainimg.plan.requirements import lock_digest, lock_path, lock_states, pins, variant_requirements
from trainimg.recipe.compat import load_compat
from trainimg.recipe.loading import load_recipes

PROBE = "trainimg-f-probe"
TAMPER_RECIPE = f"""\
framework: none
name: f-tamper
repository: trainimg-f/tamper
os: debian12
python: "3.11"
hypertune: null
extras: [{PROBE}==1.0]
"""


def test_every_shipped_lock_is_current_and_keeps_the_recipe_constraints() -> None:
    recipes, compat = load_recipes(ROOT / "recipes"), load_compat()
    states = lock_states(recipes.variants, compat, ROOT)
    # not lockable here (its index does not answer on this machine): tests/test_lock_truth.py checks those files.
    # By architecture: one architecture's lock being unlockable leaves the variant's others to check here.
    unlockable = {(s.variant, s.arch) for s in states if s.state == "unlockable"}
    assert [(s.variant, s.arch) for s in states if s.state != "fresh" and (s.variant, s.arch) not in unlockable] == []
    checked = [(v, arch) for v in recipes.variants for arch in v.arch if (v.name, arch) not in unlockable]
    assert {v.name for v, _ in checked} >= {CPU_VARIANT}  # the suite's own variant is among those checked
    for v, arch in checked:
        locked = pins(lock_path(ROOT, v.name, arch).read_text(encoding="utf-8"))
        for line in variant_requirements(v, compat, arch=arch).requirements:
            req = Requirement(line)
            name = req.name.lower().replace("_", "-")
            assert name in locked, f"{v.name} ({arch}): {name} is not in its lock"
            if req.specifier:  # pins and ranges (NCCL's) hold inside the lock
                assert SpecifierSet(str(req.specifier)).contains(Version(locked[name]), prereleases=True), (
                    f"{v.name} ({arch}): {name} {locked[name]} outside {req.specifier}")
        if v.framework == "pytorch":  # the NumPy decision: every PyTorch image carries it
            assert "numpy" in locked, f"{v.name} ({arch})"


def test_render_check_names_a_recipe_changed_since_its_lock(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    shutil.copytree(ROOT / "images", tmp_path / "images")
    recipe = tmp_path / "recipes" / "pytorch.yaml"
    recipe.write_text(recipe.read_text(encoding="utf-8").replace(
        "repository: trainimg/pytorch", "repository: trainimg/pytorch\nextras: [six==1.16.0]"), encoding="utf-8")
    r = trainimg("--recipes", str(tmp_path / "recipes"), "render", "--check")
    assert r.returncode == 1
    stale = [ln for ln in r.stdout.splitlines() if "stale lock" in ln]
    expected = [(v.name, a) for v in load_recipes(ROOT / "recipes").variants if v.framework == "pytorch" for a in v.arch]
    assert len(stale) == len(expected) > 1  # each PyTorch variant's lock of each architecture, on one line each
    assert all(ln.startswith("images/pytorch-") and "recipes/pytorch.yaml" in ln for ln in stale)


def test_lock_digest_is_the_sha256_of_the_committed_file() -> None:
    folder = ROOT / "images" / CPU_VARIANT
    expected = hashlib.sha256((folder / "requirements.lock").read_bytes()).hexdigest()
    assert lock_digest(folder) == f"sha256:{expected}"


def _wheel(folder: Path, payload: str) -> Path:
    """A real, minimal wheel of the probe package: the same file name, whatever the payload."""
    dist = "trainimg_f_probe-1.0"
    path = folder / f"{dist}-py3-none-any.whl"
    files = {
        "trainimg_f_probe.py": f"VALUE = {payload!r}\n",
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {PROBE}\nVersion: 1.0\n",
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: trainimg-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{n},,\n" for n in files) + f"{dist}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in {**files, f"{dist}.dist-info/RECORD": record}.items():
            zf.writestr(name, text)
    return path


@pytest.fixture(scope="module")
def tampered(tmp_path_factory: pytest.TempPathFactory, state_env: dict[str, str]) -> tuple[Path, Path, str, str]:
    """A recipes folder whose lock pins the good probe wheel, and a wheel folder that now holds another one."""
    root = tmp_path_factory.mktemp("f-tamper")
    (root / "recipes").mkdir()
    (root / "recipes" / "t.yaml").write_text(TAMPER_RECIPE, encoding="utf-8")
    wheels = root / "wheels"
    wheels.mkdir()
    good = hashlib.sha256(_wheel(wheels, "good").read_bytes()).hexdigest()
    r = trainimg("--recipes", str(root / "recipes"), "lock", "--wheelhouse", str(wheels), env=state_env)
    assert r.returncode == 0, r.stderr
    assert f"--hash=sha256:{good}" in (root / "images" / "f-tamper" / "requirements.lock").read_text()
    bad = hashlib.sha256(_wheel(wheels, "substituted").read_bytes()).hexdigest()
    assert bad != good
    return root, wheels, good, bad


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_a_substituted_wheel_fails_the_build_in_one_line(tampered: tuple[Path, Path, str, str], installer: str,
                                                         docker_engine: str, state_env: dict[str, str]) -> None:
    root, wheels, good, bad = tampered
    r = trainimg("--recipes", str(root / "recipes"), "build", "f-tamper", "--base-image", LOCAL_BASE,
                 "--wheelhouse", str(wheels), "--installer", installer, "--progress", "quiet", env=state_env)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr[-2000:]
    assert PROBE in lines[0].replace("_", "-") and f"expected sha256:{good}" in lines[0] and f"found sha256:{bad}" in lines[0]
