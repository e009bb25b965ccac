"""The driver floor, tested from its table (`recipe.drivers`, ``data/drivers.yaml``):

* every CUDA line of the compatibility data has a row, and every row its sources;
* every variant of the shipped recipes: a GPU variant's label (`DRIVER_MIN_LABEL`), its labels file, its
  ``NVIDIA_REQUIRE_CUDA`` (the Dockerfile's last instruction, so no step re-runs for it) and ``list --json``'s
  ``driver_min`` all state its CUDA major's floor; a CPU variant states none, and its Dockerfile is untouched;
* every row x a driver below, at and above its floor: the in-image ``gpu`` check's rule (`driver_short`) fails below,
  naming both versions, and passes from the floor on; a driver whose version cannot be read fails too;
* the driver's version as the kernel module's banner gives it;
* the support matrix's driver column, from the CUDA runtime a lockfile entry read back.

In-process: no engine (``list --json`` finds no engine and says what is built as nothing).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainimg.cli.app import main
from trainimg.plan.stages import plans, static_labels
from trainimg.publish.lockfile import LockEntry
from trainimg.publish.matrix import COLUMNS, matrix_row
from trainimg.recipe.compat import load_compat
from trainimg.recipe.drivers import REQUIRE_CUDA, driver_table, floor_for, require_cuda
from trainimg.recipe.loading import load_recipes
from trainimg.runtime.contract import DRIVER_MIN_LABEL, LABELS_PATH
from trainimg.runtime.gpus import driver_version
from trainimg.runtime.probe_platform import driver_short

ROOT = Path(__file__).resolve().parent.parent
RECIPES = load_recipes(ROOT / "recipes")
VARIANTS = {v.name: v for v in RECIPES.variants}


def test_every_cuda_line_has_a_floor() -> None:
    table = driver_table()
    assert table.source.startswith("https://docs.nvidia.com/") and table.release_notes.startswith("https://")
    for line in load_compat().cuda:
        assert floor_for(line).driver.split(".")[0] == floor_for(line).branch.removeprefix("R"), line


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_variant_states_the_driver_it_needs(name: str) -> None:
    v = VARIANTS[name]
    labels = dict(static_labels(v, load_compat()))
    for plan in plans(RECIPES, [v]):  # each architecture's Dockerfile
        dockerfile = (ROOT / plan.dockerfile_path()).read_text()
        if not v.gpu:
            assert DRIVER_MIN_LABEL not in labels and REQUIRE_CUDA not in dockerfile and "driver_min" not in dockerfile
            continue
        floor = floor_for(str(v.cuda))
        assert labels[DRIVER_MIN_LABEL] == floor.driver
        assert f'"{DRIVER_MIN_LABEL}":"{floor.driver}"' in dockerfile  # the labels file selftest reads
        assert f"> {LABELS_PATH}" in dockerfile
        last = dockerfile.rstrip("\n").splitlines()[-1]
        assert last == f'ENV {REQUIRE_CUDA}="{require_cuda(str(v.cuda))}"' == \
            f'ENV {REQUIRE_CUDA}="cuda>={v.cuda.split(".")[0]}.0"'


def test_list_json_gives_each_gpu_variant_its_driver_floor(capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/trainimg-test.sock")
    assert main(["--recipes", str(ROOT / "recipes"), "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["name"] for r in rows} == set(VARIANTS)
    for row in rows:
        keys = [k for k in row if "driver" in k]
        assert keys == ["driver_min"], row
        want = floor_for(row["versions"]["cuda"]).driver if row["gpu"] else None
        assert row["driver_min"] == want, row


def _below(driver: str) -> str:
    parts = [int(p) for p in driver.split(".")]
    return f"{parts[0] - 1}.999.99" if len(parts) == 1 or not any(parts[1:]) else ".".join(
        map(str, [*parts[:-1], parts[-1] - 1]))


@pytest.mark.parametrize("major", sorted(driver_table().majors))
def test_the_gpu_check_holds_the_driver_to_the_floor(major: str) -> None:
    floor = driver_table().majors[major].driver
    low = _below(floor)
    assert driver_short(low, None, floor, f"{major}.9") == (
        f"NVIDIA driver {low} is older than the {floor} this image needs ({DRIVER_MIN_LABEL}, CUDA {major}.9)")
    for fine in (floor, f"{floor}.1" if floor.count(".") < 2 else floor, f"{int(floor.split('.')[0]) + 1}.10.01"):
        assert driver_short(fine, None, floor, f"{major}.0") is None, fine
    assert "cannot be read (no nvidia-smi)" in str(driver_short(None, "no nvidia-smi", floor, major))


def test_the_driver_version_is_read_from_the_kernel_modules_banner(tmp_path: Path) -> None:
    banner = tmp_path / "version"
    banner.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct  2 12:00:00 UTC 2026\n"
                      "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
    assert driver_version(path="", version_file=str(banner)) == ("580.159.04", None)
    open_kernel = tmp_path / "open"
    open_kernel.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  575.57.08  Release Build\n")
    assert driver_version(path="", version_file=str(open_kernel)) == ("575.57.08", None)
    version, why = driver_version(path="", version_file=str(tmp_path / "missing"))
    assert version is None and "nor nvidia-smi" in str(why)


@pytest.mark.parametrize(("cuda", "shown"), [("12.9.79", ">= 525.60.13"), ("13.0.96", ">= 580"), (None, "—")])
def test_the_matrix_shows_the_driver_of_the_cuda_read_back(cuda: str | None, shown: str) -> None:
    entry = LockEntry(variant="v", recipe="r.yaml", tag="trainimg/v:1", image_id="sha256:0", base_image="b",
                      base_digest="sha256:1", versions={"framework": "1.0", "cuda": cuda, "python": "3.11.2"})
    cells = dict(zip(COLUMNS, matrix_row(entry).cells()))
    assert cells["driver"] == shown and cells["CUDA"] == (cuda or "—")
