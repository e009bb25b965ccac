"""The prefetch order from the gate (issue 58, item 2) on the CPU PyTorch image: `trainimg test` records the image's
files its start read (the framework import, the all-reduce, the in-image checks) in the conformance record, and the
same order again when gated again, and `trainimg push --compression estargz` writes them first in their layers,
before `.prefetch.landmark`: stargz-snapshotter's reader (tests/estargzcheck.py) finds torch's `__init__` and
`libtorch_cpu.so` in the range it prefetches, and verifies every layer's TOC and chunks. A record without an order
(one an earlier trainimg wrote) still pushes, saying so in one line, every layer with the no-prefetch landmark."""

from __future__ import annotations

import functools
import json
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import pytest
from conftest import _cpu_row, remove_image, trainimg
from conftest_registry import RegistryLogin
from estargzcheck import verify

from trainimg.conformance import records
from trainimg.registry.estargz import NO_PREFETCH_LANDMARK, PREFETCH_LANDMARK, TOC_DIGEST
from trainimg.registry.references import RegistryTarget
from trainimg.registry.registryapi import RegistryAPI

TORCH_INIT = re.compile(r"/site-packages/torch/(__init__\.py|__pycache__/__init__\.cpython-\d+\.pyc)$")
LIBTORCH = re.compile(r"/site-packages/torch/lib/libtorch_cpu\.so$")


@pytest.fixture(scope="session")
def estargz_verify(host_tool: Callable[[str], str]) -> Callable[..., dict[str, Any]]:
    return functools.partial(verify, host_tool("go"))


def _layers(api: RegistryAPI, repository: str, tag: str) -> list[dict[str, Any]]:
    found = api.manifest_json(repository, tag)
    assert found is not None, f"{repository}:{tag} is not in the registry"
    return list(json.loads(found[0])["layers"])


def _verified(api: RegistryAPI, repository: str, layer: dict[str, Any], folder: Path,
              estargz_verify: Callable[..., dict[str, Any]], *names: str) -> dict[str, Any]:
    """The snapshotter's reader on one pushed layer (streamed to disk, removed after)."""
    blob = folder / layer["digest"].removeprefix("sha256:")
    with api.open_blob(repository, layer["digest"]) as resp, blob.open("wb") as fh:
        for chunk in resp.iter_content(1 << 20):
            fh.write(chunk)
    try:
        return estargz_verify(blob, layer["annotations"][TOC_DIGEST], *names)
    finally:
        blob.unlink()


def test_the_gates_order_goes_first_in_the_estargz_layers(pinned_cpu_image: str, client: docker.DockerClient,
                                                          registry: RegistryLogin, state_env: dict[str, str],
                                                          tmp_path: Path, tmp_path_factory: pytest.TempPathFactory,
                                                          estargz_verify: Callable[..., dict[str, Any]]) -> None:
    env = {**state_env, "TRAINIMG_STATE_DIR": str(tmp_path / "state")}  # a record of this test's own
    # This run's build, by ID, under a name of its own: the pin's name is the machine's, and another run on this
    # engine may move it (to an image whose runtime records nothing, or another test's record).
    image_id = str(_cpu_row(state_env, tmp_path_factory)["image_id"])
    image = f"trainimg-test/estargz:{uuid.uuid4().hex[:8]}"
    client.images.get(image_id).tag(image)
    where = f"{registry.host}/lazy{uuid.uuid4().hex[:8]}"
    try:
        _gate_and_push(image, image_id, where, env, registry, tmp_path, estargz_verify)
    finally:
        for name in (image, f"{where}/{image}", f"{where}/old/{image}"):  # the names the pushes gave it too
            remove_image(client, name)


def _gate_and_push(image: str, image_id: str, where: str, env: dict[str, str], registry: RegistryLogin,
                   tmp_path: Path, estargz_verify: Callable[..., dict[str, Any]]) -> None:
    gated = trainimg("test", image, "--progress", "quiet", env=env, timeout=1200)
    assert gated.returncode == 0, gated.stdout[-2000:] + gated.stderr[-3000:]
    order = records.prefetch_order(image_id, env)
    torch_init = [p for p in order if TORCH_INIT.search(p)]
    libtorch = [p for p in order if LIBTORCH.search(p)]
    assert torch_init and libtorch, order[:50]
    assert not [p for p in order if p.startswith(("/proc/", "/dev/", "/sys/", "/tmp/", "/run/", "/opt/trainimg-host/"))]
    assert any("/trainimg_runtime/" in p and "/allreduce." in p for p in order)  # the all-reduce's own code
    # The same start read again gives the same order (libraries by name within an import, nodes by name), so a
    # release that gates an unchanged image again pushes the same eStargz digest.
    again_env = {**env, "TRAINIMG_STATE_DIR": str(tmp_path / "state-again")}
    regated = trainimg("test", image, "--progress", "quiet", env=again_env, timeout=1200)
    assert regated.returncode == 0, regated.stderr[-3000:]
    assert records.prefetch_order(image_id, again_env) == order

    target = RegistryTarget.parse(where)
    login = ("--username", registry.username, "--password-stdin")
    pushed = trainimg("push", image, "--registry", where, "--compression", "estargz", *login, env=env,
                      input=registry.password, timeout=1800)
    assert pushed.returncode == 0, pushed.stderr[-3000:]
    assert "no prefetch order" not in pushed.stdout + pushed.stderr
    api = RegistryAPI(target, {"username": registry.username, "password": registry.password})
    name, tag = image.rsplit(":", 1)
    repository = target.repository(name)
    wanted = sorted([torch_init[0].lstrip("/"), libtorch[0].lstrip("/")], key=lambda n: order.index(f"/{n}"))
    # a file of torch's layer no start reads (a C++ header): after the landmark, fetched only when read
    unread = torch_init[0].lstrip("/").split("torch/", 1)[0] + "torch/include/ATen/ATen.h"
    assert f"/{unread}" not in order
    landmarks, torch_layers = [], 0
    for layer in _layers(api, repository, tag):
        seen = _verified(api, repository, layer, tmp_path, estargz_verify, *wanted, unread)
        landmarks.append(seen["landmark"])
        offsets = [seen["offsets"][n] for n in wanted]
        if min(offsets) >= 0:  # torch's layer: both files before the landmark, in the gate's order, the rest after
            torch_layers += 1
            assert seen["landmark"] == PREFETCH_LANDMARK and offsets == sorted(offsets), seen
            assert max(offsets) < seen["landmark_offset"] < seen["offsets"][unread], seen
    assert torch_layers == 1 and PREFETCH_LANDMARK in landmarks, landmarks

    # A record an earlier trainimg wrote (no order): the push still goes, says so once, no layer is prefetched.
    record_file = Path(env["TRAINIMG_STATE_DIR"]) / "conformance" / f"{image_id.split(':', 1)[1]}.json"
    record = json.loads(record_file.read_text())
    del record[records.PREFETCH]
    record_file.write_text(json.dumps(record))
    again = trainimg("push", image, "--registry", f"{where}/old", "--compression", "estargz", *login,
                     env=env, input=registry.password, timeout=1800)
    assert again.returncode == 0, again.stderr[-3000:]
    lines = [line for line in again.stdout.splitlines() if "no prefetch order" in line]
    assert len(lines) == 1 and "predates" in lines[0], again.stdout
    old = RegistryTarget.parse(f"{where}/old")
    first = _layers(api, old.repository(name), tag)[-1]
    assert _verified(api, old.repository(name), first, tmp_path, estargz_verify)["landmark"] == NO_PREFETCH_LANDMARK
