"""zstd layers (issue 47) on the real registry and a real node runtime: a small image pushed by trainimg's client with
`compression=zstd` is an OCI manifest of `tar+zstd` layers, the same digest on every push of the same image into a
fresh repository, pulled and run by containerd 1.6 (its own instance, tests/containerdnode.py); a gzip push beside
it reuses none of the zstd blobs. The release's zstd push, with its SBOM beside, is in tests/test_layers.py."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

import docker
from conftest_registry import RegistryLogin
from containerdnode import containerd

from trainimg.engine.docker import DockerEngine
from trainimg.options.compression import Compression
from trainimg.publish.push import push
from trainimg.registry.layerformats import DOCKER_GZIP_LAYER, DOCKER_MANIFEST, OCI_MANIFEST, OCI_ZSTD_LAYER
from trainimg.registry.references import RegistryTarget
from trainimg.registry.registryapi import RegistryAPI

ZSTD = Compression.parse("zstd:3")


def test_a_zstd_push_is_one_digest_and_containerd_runs_it(registry_client: docker.DockerClient,
                                                         registry: RegistryLogin, registry_image: Callable[[], str],
                                                         tmp_path: Path) -> None:
    image_id = registry_image()  # a random 1 MiB file over the base: a layer of its own
    creds = {"username": registry.username, "password": registry.password}
    target = RegistryTarget.parse(f"{registry.host}/zstd{uuid.uuid4().hex[:8]}")
    engine = DockerEngine(registry_client)
    first = push(engine, image_id, target, "trainimg/a:v1", credentials=creds, compression=ZSTD)
    second = push(engine, image_id, target, "trainimg/b:v1", credentials=creds, compression=ZSTD)  # a fresh one
    assert first.digest == second.digest and first.bytes_uploaded == second.bytes_uploaded > 0
    again = push(engine, image_id, target, "trainimg/a:v1", credentials=creds, compression=ZSTD)
    assert (again.digest, again.bytes_uploaded) == (first.digest, 0)

    api = RegistryAPI(target, creds)
    body, media_type, _ = api.manifest_json(target.repository("trainimg/a"), "v1")  # type: ignore[misc]
    manifest = json.loads(body)
    assert media_type == OCI_MANIFEST and {layer["mediaType"] for layer in manifest["layers"]} == {OCI_ZSTD_LAYER}
    gz = push(engine, image_id, target, "trainimg/a:v1-gzip", credentials=creds, siblings=["trainimg/a:v1"])
    gz_body, gz_type, _ = api.manifest_json(target.repository("trainimg/a"), "v1-gzip")  # type: ignore[misc]
    assert gz_type == DOCKER_MANIFEST and gz.bytes_uploaded > 0 and gz.digest != first.digest
    assert {layer["mediaType"] for layer in json.loads(gz_body)["layers"]} == {DOCKER_GZIP_LAYER}

    node = containerd(tmp_path)
    with node as ctr:
        ref = target.ref("trainimg/a:v1")
        pulled = ctr("images", "pull", "--plain-http", "--user", f"{registry.username}:{registry.password}", ref)
        assert pulled.returncode == 0, pulled.stdout + pulled.stderr
        listed = ctr("images", "ls", "-q")
        assert ref in listed.stdout.split(), listed.stdout
        ran = ctr("run", "--rm", *node.run_args(), ref, f"zstd-{uuid.uuid4().hex[:8]}", "sh", "-c",
                       "cat /trainimg-test-* | wc -c")
        assert ran.returncode == 0 and ran.stdout.split()[-1] == "1048576", ran.stdout + ran.stderr
