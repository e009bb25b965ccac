"""A lock that matches its recipe or no lock (issue 33): every committed images/*/requirements.lock read against its
recipe and compat data (generated over the images folder); locks made wrong on purpose from each committed one (a
second NCCL, a CUDA wheel of the other major, a framework build of another line) refused, by the check and by a
real `render --check`; `trainimg lock` with the index a recipe needs unreachable fails in one line (real uv).
Fast apart from the one uv run: no Docker."""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest
from packaging.version import Version

from conftest import CPU_VARIANT, ROOT, trainimg
from shipped import pick, shipped
from trainimg.plan.locktruth import NOT_LOCKABLE, build_major, lock_problems, not_lockable
from trainimg.plan.requirements import lock_states, locked_input, pins, variant_requirements
from trainimg.recipe.arches import ARCHES, arch_key
from trainimg.recipe.compat import load_compat
from trainimg.recipe.loading import Variant, load_recipes

# Every architecture's lock: amd64's beside the Dockerfile, another's in images/<variant>/<arch>/.
LOCKS = sorted([*(ROOT / "images").glob("*/requirements.lock"), *(ROOT / "images").glob("*/*/requirements.lock")])
PINNED = [lock for lock in LOCKS if pins(lock.read_text(encoding="utf-8"))]  # a not-lockable file holds no pin
# By their facts (tests/shipped.py): the CUDA 12.6 PyTorch variant (download.pytorch.org/whl/cu126 does not answer
# here: its lock says so), PyPI's CUDA 13 PyTorch build, and the one of those this machine builds.
UNLOCKABLE = next(v.name for v in shipped().variants if v.framework == "pytorch" and v.cuda == "12.6")
CU13 = pick("pytorch", gpu=True, arch="arm64", buildable=False)
GPU = pick("pytorch", gpu=True).name


@cache
def variants() -> dict[str, Variant]:
    return {v.name: v for v in load_recipes(ROOT / "recipes").variants}


def owner(lock: Path) -> tuple[str, str]:
    """(variant, architecture) of a committed lock's path."""
    if lock.parent.name in ARCHES:
        return lock.parent.parent.name, lock.parent.name
    return lock.parent.name, "amd64"


def lock_id(lock: Path) -> str:
    return arch_key(*owner(lock))


@pytest.mark.parametrize("lock", LOCKS, ids=lock_id)
def test_every_committed_lock_holds_what_its_recipe_asks(lock: Path) -> None:
    name, arch = owner(lock)
    v = variants()[name]
    text = lock.read_text(encoding="utf-8")
    state = {(s.variant, s.arch): s for s in lock_states(list(variants().values()), load_compat(), ROOT)}[name, arch]
    reason = not_lockable(text)
    if reason is not None:
        assert state.state == "unlockable" and pins(text) == {}, (state, pins(text))
        index = variant_requirements(v, load_compat(), arch=arch).indexes[0]
        assert index in reason and f"trainimg lock {v.name}" in reason, reason
        return
    assert state.state == "fresh", state
    assert lock_problems(v, load_compat(), pins(text), arch) == []


def test_the_variants_that_cannot_be_locked_here_are_said_so() -> None:
    """Every build only another index serves (the cu126 build's, the +cpu torch's: PyPI's torch is the CUDA build,
    on aarch64 too), but one this machine's wheel folder holds (the demo's: /opt/wheels)."""
    marked = [lock_id(p) for p in LOCKS if not_lockable(p.read_text(encoding="utf-8")) is not None]
    elsewhere = [arch_key(v.name, arch) for v in variants().values() for arch in v.arch
                 if variant_requirements(v, load_compat(), arch=arch).indexes and not in_wheel_folder(v, arch)]
    assert sorted(marked) == sorted(elsewhere) and UNLOCKABLE in marked, (marked, elsewhere)


def in_wheel_folder(v: Variant, arch: str) -> bool:
    """Whether /opt/wheels holds the framework's wheel of `v`'s build for its Python and `arch`."""
    minor = v.python.replace(".", "")
    machine = ARCHES[arch].machine
    return any(Path("/opt/wheels").glob(f"torch-{v.version}+*-cp{minor}-cp{minor}-*{machine}.whl"))


def other_major(major: int) -> int:
    return 12 if major != 12 else 13


def wrongs(v: Variant, pinned: dict[str, str]) -> dict[str, dict[str, str]]:
    """Ways to make `v`'s lock wrong, generated from its own pins: what the check must say about each."""
    major = build_major(v, load_compat())
    other = other_major(major or 13)
    nccl = next((n for n in pinned if n.startswith("nvidia-nccl")), None)
    out = {f"CUDA {other} wheel": {**pinned, f"nvidia-cudnn-cu{other}": "9.10.2.21"},
           f"CUDA {other} runtime": {**pinned, "nvidia-cuda-runtime": f"{other}.0.96"}}
    if major is not None and nccl is not None:
        out["NCCL distributions"] = {**pinned, f"nvidia-nccl-cu{other}": "2.29.3"}
        out["0 NCCL"] = {n: ver for n, ver in pinned.items() if n != nccl}
    return out


@pytest.mark.parametrize("lock", PINNED, ids=lock_id)
def test_a_lock_made_wrong_is_refused(lock: Path) -> None:
    name, arch = owner(lock)
    v = variants()[name]
    pinned = pins(lock.read_text(encoding="utf-8"))
    for said, wrong in wrongs(v, pinned).items():
        problems = lock_problems(v, load_compat(), wrong, arch)
        assert problems and any(said in p or said.split()[0] in p for p in problems), (said, problems)


def test_the_cuda13_build_under_a_cuda126_name_is_refused() -> None:
    """What the committed cu126 lock held: PyPI's torch (CUDA 13) with its CUDA 13 wheels and two NCCLs."""
    cu13 = pins((ROOT / "images" / CU13.name / "requirements.lock").read_text(encoding="utf-8"))
    version = variants()[UNLOCKABLE].version
    problems = lock_problems(variants()[UNLOCKABLE], load_compat(),
                             {**cu13, "torch": version, "nvidia-nccl-cu12": "2.29.3"})
    text = "\n".join(problems)
    runtime = f"nvidia-cuda-runtime=={cu13['nvidia-cuda-runtime']} is a CUDA 13 wheel"
    assert "2 NCCL distributions" in text and runtime in text, text
    assert f"torch=={version} is not the cu126 build" in text, text


def copy_repo(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    shutil.copytree(ROOT / "images", tmp_path / "images")
    return tmp_path


def test_render_check_refuses_a_wrong_lock_and_accepts_not_lockable(tmp_path: Path) -> None:
    root = copy_repo(tmp_path)
    r = trainimg("--recipes", str(root / "recipes"), "render", "--check")
    assert r.returncode == 0, r.stdout + r.stderr
    lock = root / "images" / GPU / "requirements.lock"
    text = lock.read_text(encoding="utf-8")
    line = next(ln for ln in text.splitlines() if ln.startswith("nvidia-nccl-cu13=="))
    lock.write_text(text.replace(line, "nvidia-nccl-cu12==2.29.3 \\\n    --hash=sha256:" + "0" * 64 + "\n" + line),
                    encoding="utf-8")
    assert locked_input(lock.read_text(encoding="utf-8")) == locked_input(text)  # current, yet wrong
    r = trainimg("--recipes", str(root / "recipes"), "render", "--check")
    assert r.returncode == 1
    said = [ln for ln in r.stdout.splitlines() if "wrong lock" in ln]
    assert len(said) == 1 and "2 NCCL distributions" in said[0] and said[0].startswith(
        f"images/{GPU}/requirements.lock: "), r.stdout


def test_lock_fails_when_the_index_the_recipe_needs_is_unreachable(tmp_path: Path) -> None:
    root = copy_repo(tmp_path)
    lock = root / "images" / UNLOCKABLE / "requirements.lock"
    lock.unlink()
    r = trainimg("--recipes", str(root / "recipes"), "lock", UNLOCKABLE, CPU_VARIANT, timeout=600)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    # the other variant is still locked (its +cpu build is in this machine's wheel folder)
    assert re.search(rf"^images/{re.escape(CPU_VARIANT)}/requirements\.lock: [0-9]+ packages locked \(unchanged\)$",
                     r.stdout, re.MULTILINE), r.stdout
    assert r.stderr.startswith(f"lock {UNLOCKABLE} (amd64): https://download.pytorch.org/whl/cu126, the only index "
                               "that serves this build"), r.stderr
    assert lock.read_text(encoding="utf-8") == (ROOT / "images" / UNLOCKABLE / "requirements.lock").read_text(
        encoding="utf-8")  # the not-lockable file, as committed
    assert NOT_LOCKABLE in lock.read_text(encoding="utf-8")


def test_an_arm64_lock_that_cannot_be_made_is_named_as_arm64s(tmp_path: Path) -> None:
    """A team's recipes folder without locks: a variant extending the CPU PyTorch one (amd64 and arm64). Its amd64
    lock resolves (the +cpu wheel is in this machine's wheel folder); arm64's +cpu torch is on download.pytorch.org
    only, which does not answer here. `audit` locks both, from the wheel folders a build uses, before it reads any
    advisory: amd64's locks, and the failure names arm64."""
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "base.yaml").write_text("framework: pytorch\nrepository: trainimg/pytorch\nversion: '2.13.0'\n"
                                       "os: debian12\npython: '3.11'\narch: [amd64, arm64]\n", encoding="utf-8")
    (recipes / "team.yaml").write_text("extends: pytorch-2.13.0-cpu-py3.11\nname: team-a\nrepository: team/a\n"
                                       "extras: [six==1.16.0]\n", encoding="utf-8")
    (tmp_path / "osv").mkdir()
    r = trainimg("--recipes", str(recipes), "audit", "team-a", "--advisories", str(tmp_path / "osv"), timeout=600)
    *locked, failed = r.stderr.splitlines()
    assert r.returncode == 1 and [re.sub(r"[0-9]+ packages", "N packages", line) for line in locked] == [
        "images/pytorch-2.13.0-cpu-py3.11/requirements.lock: N packages locked",
        "images/team-a/requirements.lock: N packages locked"], r.stderr
    assert failed.startswith("lock pytorch-2.13.0-cpu-py3.11 (arm64): https://download.pytorch.org/whl/cpu, the only "
                             "index that serves this build, did not answer here"), r.stderr


def test_a_glibc_newer_than_uv_names_is_locked_for_uvs_newest_manylinux() -> None:
    """uv's --python-platform names manylinux platforms up to UV_MANYLINUX_NEWEST (read from the uv trainimg runs,
    its own help); an OS whose glibc is newer (Debian 13: 2.41) is locked for that one, every other for its own."""
    from trainimg.imagebuild.lockcompile import uv_binary
    from trainimg.plan.installer import UV_MANYLINUX_NEWEST

    said = subprocess.run([uv_binary(), "pip", "compile", "--help"], capture_output=True, text=True, timeout=60).stdout
    named = {tuple(map(int, m)) for m in re.findall(r"x86_64-manylinux_(\d+)_(\d+)", said)}
    assert max(named) == tuple(map(int, UV_MANYLINUX_NEWEST.split("."))), sorted(named)[-3:]
    newer = [v for v in variants().values()
             if Version(load_compat().operating_systems[v.os].glibc) > Version(UV_MANYLINUX_NEWEST)]
    assert newer, "a shipped variant's OS has a glibc newer than uv names (Debian 13's 2.41)"
    for v in variants().values():
        glibc = min(load_compat().operating_systems[v.os].glibc, UV_MANYLINUX_NEWEST, key=Version)
        platform = variant_requirements(v, load_compat()).platform
        assert platform == f"x86_64-manylinux_{glibc.replace('.', '_')}", (v.name, platform)
