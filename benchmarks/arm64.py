"""The arm64 figures (issue 46): what building and gating the arm64 image of a variant costs under emulation
(qemu-aarch64, registered by .ci/setup-host) against the same variant's amd64 image, in one run, and whether two
builds of the arm64 image without cache give the same layers.

The variant is the suite's arm64 CPU variant, the shipped JAX CPU one (read from recipes/ by its facts: jaxlib's
aarch64 wheels are the CPU build), on its own OS's local bases, copied under trainimg-bench/ so no shipped tag moves. Each build runs every step anew (`--no-cache`: the
engine's other users keep their cache, which a prune would take; the wheel cache mount stays, so the network
weighs on neither architecture), amd64 and arm64 alternated; each gate is `trainimg test --arch A`, the in-image
checks and the two-replica all-reduce.

* `arm64_build_ratio`: the arm64 build's seconds / the amd64 build's, each every step anew.
* `arm64_gate_ratio`: the arm64 gate's seconds / the amd64 gate's.
* `arm64_layer_diffs`: layers that differ between two arm64 builds without cache (`RootFS.Layers`), 0 wanted.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from figures import ratio
from harness import SHIPPED_RECIPES, Harness, StepFailed, log, step

from trainimg.recipe.compat import load_compat
from trainimg.recipe.loading import load_recipes

_JAX = next(v for v in load_recipes(SHIPPED_RECIPES).variants
            if v.framework == "jax" and not v.gpu and "arm64" in v.arch and not v.extends)
VARIANT = _JAX.name
# The local bases .ci/setup-host makes for its OS: local/debian:<codename> and its -arm64 twin.
BASE_IMAGE = "local/" + (load_compat().operating_systems[_JAX.os].cpu_image or "").split("-slim")[0]
ARM64_BASE = f"{BASE_IMAGE}-arm64"
SAMPLES = 2  # each build without cache; the arm64 one runs for minutes under emulation


def bench_recipes(bench: Harness) -> Path:
    """The shipped JAX CPU recipe under trainimg-bench/, with its committed locks (both architectures')."""
    import shutil

    folder = bench.tmp / "arm64"
    (folder / "recipes").mkdir(parents=True, exist_ok=True)
    text = (SHIPPED_RECIPES / "jax.yaml").read_text(encoding="utf-8")
    (folder / "recipes" / "jax.yaml").write_text(text.replace("repository: trainimg/jax",
                                                               "repository: trainimg-bench/jax"), encoding="utf-8")
    shutil.copytree(SHIPPED_RECIPES.parent / "images" / VARIANT, folder / "images" / VARIANT, dirs_exist_ok=True)
    return folder / "recipes"


def build(bench: Harness, recipes: Path, arch: str) -> tuple[float, dict]:
    report = bench.tmp / f"arm64-{arch}.json"
    res = bench.trainimg("build", VARIANT, "--arch", arch, "--no-cache", "--base-image", BASE_IMAGE,
                         "--base-image", f"arm64={ARM64_BASE}", "--wheelhouse", "/opt/pypi", "--progress", "quiet",
                         "--json", str(report), recipes=recipes)
    (row,) = json.loads(report.read_text())
    log(f"  {arch}: built {row['tag']} without cache in {res.seconds:.1f} s ({row['size'] / 1e6:.0f} MB)")
    return res.seconds, row


def gate(bench: Harness, recipes: Path, arch: str) -> float:
    res = bench.trainimg("test", VARIANT, "--arch", arch, "--progress", "quiet", recipes=recipes)
    log(f"  {arch}: gate {res.seconds:.1f} s")
    return res.seconds


def layers(bench: Harness, image_id: str) -> list[str]:
    return json.loads(bench.docker("image", "inspect", "-f", "{{json .RootFS.Layers}}", image_id).stdout)


def measure_arm64(bench: Harness) -> None:
    if bench.docker("image", "inspect", ARM64_BASE, check=False).stdout.strip() in ("", "[]"):
        raise StepFailed(f"no {ARM64_BASE} on this engine: `make bench` makes it (.ci/setup-host --bench)")
    recipes = bench_recipes(bench)
    builds: dict[str, list[float]] = {"amd64": [], "arm64": []}
    arm_layers: list[list[str]] = []
    for _ in range(SAMPLES):
        for arch in ("amd64", "arm64"):
            seconds, row = build(bench, recipes, arch)
            builds[arch].append(seconds)
            if arch == "arm64":
                arm_layers.append(layers(bench, row["image_id"]))
    gates = {arch: gate(bench, recipes, arch) for arch in ("amd64", "arm64")}
    amd, arm = statistics.median(builds["amd64"]), statistics.median(builds["arm64"])
    differing = sum(a != b for a, b in zip(*arm_layers)) + abs(len(arm_layers[0]) - len(arm_layers[1]))
    bench.details["arm64"] = {"variant": VARIANT, "build_s": builds, "gate_s": gates,
                              "arm64_layers": arm_layers}
    bench.set("arm64_build_ratio", ratio(arm, amd),
              f"`trainimg build {VARIANT} --arch A --no-cache`, median of {SAMPLES}: arm64 {arm:.0f} s under "
              f"qemu-aarch64 / amd64 {amd:.0f} s")
    bench.set("arm64_gate_ratio", ratio(gates["arm64"], gates["amd64"]),
              f"`trainimg test {VARIANT} --arch A` (in-image checks, all-reduce x2): arm64 {gates['arm64']:.1f} s "
              f"under emulation / amd64 {gates['amd64']:.1f} s")
    bench.set("arm64_layer_diffs", differing,
              f"layers differing between the two arm64 builds without cache ({len(arm_layers[0])} layers each)")


def measure(bench: Harness) -> None:
    step("arm64_build_ratio", bench, lambda: measure_arm64(bench))
