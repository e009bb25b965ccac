"""A `trainimg bump` of one recipe, end to end: a CPU JAX variant one release line behind the shipped one (its own
recipes folder and repository, on the shipped variant's OS and Python) moves to the newest release the gate accepts,
and the result validates, renders as committed with a fresh lock that passes lock's truth checks (`render
--check`), and builds.

The releases come from the real index's recorded answers; the locks resolve from PyPI as `trainimg lock` does. The
old variant's lock is made from the shipped JAX CPU lock (uv keeps its pins and moves only jax and jaxlib back), so
the bump's lock is the shipped one again and the build reuses the layers of the session's JAX CPU image
(`framework_images`, which the suite builds for its framework tests anyway). The shipped variant and the release
behind it are read from the recipes and compat.yaml (tests/shipped.py), so a bump of the recipes moves this too.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import docker
from conftest import ROOT, remove_image, trainimg
from localindex import LocalIndex
from packaging.version import Version
from shipped import local_base, pick

from trainimg.plan.requirements import pins
from trainimg.recipe.compat import load_compat

RUN = uuid.uuid4().hex[:8]
JAX = pick("jax", gpu=False)
SHIPPED = ROOT / "images" / JAX.name / "requirements.lock"
BEHIND = max((r.version for r in load_compat().frameworks["jax"].releases
              if Version(r.version) < Version(JAX.version or "0") and r.python_spec.contains(JAX.python)), key=Version)
RECIPE = f"""# A test recipe: JAX on CPU, one release line behind.
framework: jax
repository: trainimg-test/bump-{RUN}
matrix:
  - version: ["{BEHIND}"]
    os: [{JAX.os}]
    python: ["{JAX.python}"]
"""


def test_a_bumped_cpu_variant_validates_renders_locks_and_builds(tmp_path: Path, state_env: dict[str, str],
                                                                 client: docker.DockerClient,
                                                                 framework_images: dict[str, str],
                                                                 image_matrix: list[str]) -> None:
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "jax.yaml").write_text(RECIPE)
    old, new = f"bump-{RUN}-{BEHIND}-cpu-py{JAX.python}", f"bump-{RUN}-{JAX.version}-cpu-py{JAX.python}"
    (tmp_path / "images" / old).mkdir(parents=True)
    shutil.copyfile(SHIPPED, tmp_path / "images" / old / SHIPPED.name)
    for verb in (["lock", old], ["render"]):
        r = trainimg("--recipes", str(recipes), *verb, env=state_env, timeout=600)
        assert r.returncode == 0, r.stderr
    with LocalIndex() as index:
        r = trainimg("--recipes", str(recipes), "bump", "--index-url", index.url, env=state_env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[0] == f"trainimg bump: jax {BEHIND} -> {JAX.version} (recipes/jax.yaml)", r.stdout
    assert f'"{JAX.version}"' in (recipes / "jax.yaml").read_text() and not (tmp_path / "images" / old).exists()
    for verb in (["validate"], ["render", "--check"]):
        r = trainimg("--recipes", str(recipes), *verb, env=state_env)
        assert r.returncode == 0, r.stdout + r.stderr
    lock = tmp_path / "images" / new / SHIPPED.name
    assert pins(lock.read_text()) == pins(SHIPPED.read_text())  # only jax and jaxlib moved, back to the shipped
    tag = f"trainimg-test/bump-{RUN}:{JAX.version}-cpu-py{JAX.python}"
    try:
        r = trainimg("--recipes", str(recipes), "build", new, "--base-image", local_base(JAX.os), *image_matrix,
                     "--progress", "plain", env=state_env, timeout=1800)
        assert r.returncode == 0, r.stderr[-3000:]
        labels = client.images.get(tag).labels
        assert labels["trainimg.version.framework"].startswith(JAX.version or "-"), labels
    finally:
        remove_image(client, tag)
