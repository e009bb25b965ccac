"""eStargz pushes (issue 58) on a real lazy-pulling node: the CPU PyTorch image, gated (its pass record holds the files
the start read) and pushed by `trainimg push --compression estargz`, is pulled lazily by containerd 1.6 with
stargz-snapshotter (tests/containerdnode.py's lazy_node: `ctr-remote image rpull`, then `ctr run --snapshotter
stargz`) and trains there: `import torch` and a one-process all-reduce through the image's own `trainimg-runtime`
verbs; so do the TensorFlow and JAX CPU images (tier 4), each as the one replica of a Vertex AI job, as the gate
replays it. Evidence that it was lazy is the snapshotter's and the kernel's, not ours: every layer logged
`"remote-snapshot-prepared":"true"` and is a FUSE mount, the content store holds no layer, and the layer holding the
gate's files was prefetched up to its landmark. Everyone else still gets an ordinary gzip image: containerd's
overlayfs snapshotter and dockerd pull the same tag whole and run it, and each layer's TOC digest, read by
stargz-snapshotter's own `ctr-remote image get-toc-digest` from the blob, is the one its descriptor announces.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid
from pathlib import Path
from typing import Any

import docker
import pytest
from conftest import _cpu_row, remove_image, trainimg
from conftest_registry import RegistryLogin
from containerdnode import STARGZ, containerd, lazy_node, one_replica

from trainimg.registry.layerformats import OCI_MANIFEST
from trainimg.registry.references import RegistryTarget
from trainimg.registry.registryapi import RegistryAPI
from trainimg.runtime.frameworks import FRAMEWORKS

TOC_DIGEST = "containerd.io/snapshot/stargz/toc.digest"
PREPARED = "remote-snapshot-prepared"
PREFETCHED = re.compile(r"prefetch_size=(\d+) bytes")
CPU_FRAMEWORKS = ("tensorflow", "jax")  # besides PyTorch: the tier-4 images (conftest_images.FRAMEWORK_IMAGES)


def start(framework: str) -> str:
    """One process's start, as the gate's replicas do it: the framework's import, then a one-rank gloo all-reduce
    through the image's own verbs (its last line: the all-reduce's verdict)."""
    module = FRAMEWORKS[framework].module
    return (f"python -c 'import {module}' && trainimg-runtime launch --framework {framework} -- "
            f"trainimg-runtime allreduce --framework {framework} --backend gloo")


def gated_push(image_id: str, registry: RegistryLogin, env: dict[str, str], client: docker.DockerClient,
               state: Path) -> dict[str, Any]:
    """`image_id` under a name of its own (a shipped tag or the pin's name is the machine's: another run on this
    engine may move it between the gate and the push), gated in `state`, then pushed by `trainimg push --compression
    estargz` under a prefix of its own: {ref, layers (their descriptors), user}."""
    env = {**env, "TRAINIMG_STATE_DIR": str(state), "TRAINIMG_REGISTRY_PASSWORD": registry.password}
    image = f"trainimg-test/lazy:{uuid.uuid4().hex[:8]}"
    client.images.get(image_id).tag(image)
    target = f"{registry.host}/lazy{uuid.uuid4().hex[:8]}"
    try:
        r = trainimg("test", image, "--progress", "quiet", env=env, timeout=900)
        assert r.returncode == 0, r.stderr[-3000:]
        r = trainimg("push", image, "--registry", target, "--username", registry.username, "--compression",
                     "estargz", env=env, timeout=1800)
        assert r.returncode == 0, r.stderr[-3000:]
    finally:
        remove_image(client, f"{target}/{image}")  # the name the push gave the image
        client.api.remove_image(image)  # the name only: the image is the suite's
    api = RegistryAPI(RegistryTarget.parse(target), {"username": registry.username, "password": registry.password})
    name, tag = image.rsplit(":", 1)
    got = api.manifest_json(api.target.repository(name), tag)
    assert got is not None, f"nothing under {target}/{image}"
    body, media_type, _ = got
    assert media_type == OCI_MANIFEST, media_type
    return {"ref": f"{target}/{image}", "layers": json.loads(body)["layers"],
            "user": f"{registry.username}:{registry.password}"}


@pytest.fixture(scope="module")
def pushed(pinned_cpu_image: str, registry: RegistryLogin, state_env: dict[str, str], client: docker.DockerClient,
           tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """This run's CPU PyTorch image (`pinned_cpu_image` builds it once per run), gated and pushed as eStargz."""
    image_id = str(_cpu_row(state_env, tmp_path_factory)["image_id"])
    return gated_push(image_id, registry, state_env, client, tmp_path_factory.mktemp("lazy-state"))


def assert_starts_lazily(pushed: dict[str, Any], framework: str, registry: RegistryLogin, folder: Path) -> None:
    """On a lazy node: the start runs (import, one-rank all-reduce) in a container of the image pulled lazily, which
    the snapshotter and the kernel say it was: every layer a remote snapshot and a FUSE mount, no layer in the
    content store, the gate's files prefetched."""
    layers = pushed["layers"]
    with lazy_node(folder, {registry.host: (registry.username, registry.password)}) as node:
        pulled = node.ctr_remote("image", "rpull", "--plain-http", "--user", pushed["user"], pushed["ref"])
        assert pulled.returncode == 0, pulled.stdout + pulled.stderr
        ran = node.ctr("run", "--rm", "--snapshotter", STARGZ, *node.containerd.run_args(),
                       *one_replica(folder, framework), pushed["ref"], f"lazy-{uuid.uuid4().hex[:8]}", "sh", "-c",
                       start(framework))
        assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
        verdict = json.loads(ran.stdout.strip().splitlines()[-1])
        assert verdict["ok"] is True and verdict["world_size"] == 1, verdict
        records = node.snapshotter.log_records()
        prepared = [r[PREPARED] for r in records if PREPARED in r]
        assert prepared == ["true"] * len(layers), (prepared, node.snapshotter.log_tail())
        assert len(node.snapshotter.fuse_mounts()) == len(layers), node.snapshotter.fuse_mounts()
        compressed = sum(layer["size"] for layer in layers)
        assert node.containerd.content_bytes() < compressed // 100, (node.containerd.content_bytes(), compressed)
        prefetched = [int(m.group(1)) for r in records if r.get("operation") == "prefetch_total"
                      for m in [PREFETCHED.search(str(r.get("msg", "")))] if m]
        # one prefetch per distinct blob (a layer the image holds twice, an empty one, is one layer to the snapshotter)
        distinct = {layer["digest"] for layer in layers}
        assert len(prefetched) == len(distinct) and max(prefetched) > 0, (prefetched, node.snapshotter.log_tail())


def test_an_estargz_push_is_pulled_lazily_and_trains(pushed: dict[str, Any], registry: RegistryLogin,
                                                     tmp_path: Path) -> None:
    assert_starts_lazily(pushed, "pytorch", registry, tmp_path)


@pytest.mark.parametrize("framework", CPU_FRAMEWORKS)
def test_every_cpu_framework_starts_lazily(framework: str, framework_images: dict[str, str],
                                           registry: RegistryLogin, state_env: dict[str, str],
                                           client: docker.DockerClient, tmp_path: Path) -> None:
    """TensorFlow's and JAX's CPU images the same way, each gated and pushed as eStargz (tier 4: the image matrix)."""
    image_id = str(client.images.get(framework_images[framework]).id)
    pushed = gated_push(image_id, registry, state_env, client, tmp_path / "state")
    assert_starts_lazily(pushed, framework, registry, tmp_path)


def test_its_toc_digests_verify_and_containerd_pulls_it_whole(pushed: dict[str, Any], tmp_path: Path) -> None:
    """containerd's default (overlayfs) snapshotter: the whole image in the content store, unpacked, run; each
    layer's TOC digest as stargz-snapshotter reads it from the blob's footer and TOC."""
    layers = pushed["layers"]
    node = containerd(tmp_path)
    with node as ctr:
        pulled = ctr("images", "pull", "--plain-http", "--user", pushed["user"], pushed["ref"])
        assert pulled.returncode == 0, pulled.stdout + pulled.stderr
        assert node.content_bytes() >= sum(layer["size"] for layer in layers)
        for layer in layers:
            toc = node.ctr("image", "get-toc-digest", layer["digest"], program="ctr-remote")
            assert toc.returncode == 0, toc.stderr
            assert toc.stdout.strip() == layer["annotations"][TOC_DIGEST], (layer, toc.stdout)
        ran = ctr("run", "--rm", *node.run_args(), pushed["ref"], f"whole-{uuid.uuid4().hex[:8]}", "sh", "-c",
                  start("pytorch"))
        assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
        assert json.loads(ran.stdout.strip().splitlines()[-1])["ok"] is True


def test_dockerd_pulls_it_whole(pushed: dict[str, Any], registry: RegistryLogin, docker_cli: str,
                               client: docker.DockerClient, tmp_path: Path) -> None:
    """Docker 20.10, which knows nothing of eStargz: an OCI image of gzip layers, pulled and run."""
    env = {**os.environ, "DOCKER_CONFIG": str(tmp_path / "docker")}  # a login of its own, not the user's
    subprocess.run([docker_cli, "login", registry.host, "-u", registry.username, "--password-stdin"],
                   input=registry.password, text=True, check=True, env=env, capture_output=True)
    try:
        pulled = subprocess.run([docker_cli, "pull", pushed["ref"]], env=env, capture_output=True, text=True,
                                timeout=1800)
        assert pulled.returncode == 0, pulled.stderr
        ran = subprocess.run([docker_cli, "run", "--rm", "--network", "none", "--entrypoint", "sh", pushed["ref"],
                              "-c", "python -c 'import torch; print(torch.__version__)'"], env=env,
                             capture_output=True, text=True, timeout=600)
        assert ran.returncode == 0 and ran.stdout.strip().endswith("+cpu"), ran.stdout + ran.stderr
    finally:
        remove_image(client, pushed["ref"])
