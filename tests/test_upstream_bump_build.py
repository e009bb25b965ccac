"""A `trainimg bump` of one recipe, end to end: a CPU JAX variant one release behind (its own recipes folder and
repository) moves to the newest release the gate accepts on Debian 12's Python 3.11, and the result validates,
renders as committed with a fresh lock that passes lock's truth checks (`render --check`), and builds.

The releases come from the real index's recorded answers; the locks resolve from PyPI as `trainimg lock` does. The
old variant's lock is made from the shipped jax-0.10.2 CPU lock (uv keeps its pins and moves only jax and jaxlib
back), so the bump's lock is the shipped one again and the build reuses the layers of the session's JAX CPU image
(`framework_images`, which the suite builds for its framework tests anyway).
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import docker
from conftest import LOCAL_BASE, ROOT, remove_image, trainimg
from localindex import LocalIndex

from trainimg.plan.requirements import pins

RUN = uuid.uuid4().hex[:8]
SHIPPED = ROOT / "images" / "jax-0.10.2-cpu-py3.11" / "requirements.lock"
RECIPE = f"""# A test recipe: JAX on CPU, one release behind.
framework: jax
repository: trainimg-test/bump-{RUN}
matrix:
  - version: ["0.10.1"]
    os: [debian12]
    python: ["3.11"]
"""


def test_a_bumped_cpu_variant_validates_renders_locks_and_builds(tmp_path: Path, state_env: dict[str, str],
                                                                 client: docker.DockerClient,
                                                                 framework_images: dict[str, str],
                                                                 image_matrix: list[str]) -> None:
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "jax.yaml").write_text(RECIPE)
    old, new = f"bump-{RUN}-0.10.1-cpu-py3.11", f"bump-{RUN}-0.10.2-cpu-py3.11"
    (tmp_path / "images" / old).mkdir(parents=True)
    shutil.copyfile(SHIPPED, tmp_path / "images" / old / SHIPPED.name)
    for verb in (["lock", old], ["render"]):
        r = trainimg("--recipes", str(recipes), *verb, env=state_env, timeout=600)
        assert r.returncode == 0, r.stderr
    with LocalIndex() as index:
        r = trainimg("--recipes", str(recipes), "bump", "--index-url", index.url, env=state_env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[0] == "trainimg bump: jax 0.10.1 -> 0.10.2 (recipes/jax.yaml)", r.stdout
    assert '"0.10.2"' in (recipes / "jax.yaml").read_text() and not (tmp_path / "images" / old).exists()
    for verb in (["validate"], ["render", "--check"]):
        r = trainimg("--recipes", str(recipes), *verb, env=state_env)
        assert r.returncode == 0, r.stdout + r.stderr
    lock = tmp_path / "images" / new / SHIPPED.name
    assert pins(lock.read_text()) == pins(SHIPPED.read_text())  # only jax and jaxlib moved, back to the shipped
    tag = f"trainimg-test/bump-{RUN}:0.10.2-cpu-py3.11"
    try:
        r = trainimg("--recipes", str(recipes), "build", new, "--base-image", LOCAL_BASE, *image_matrix,
                     "--progress", "plain", env=state_env, timeout=1800)
        assert r.returncode == 0, r.stderr[-3000:]
        labels = client.images.get(tag).labels
        assert labels["trainimg.version.framework"].startswith("0.10.2"), labels
    finally:
        remove_image(client, tag)
