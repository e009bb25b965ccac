"""eStargz layers (issue 58, item 1): trainimg's client writes each layer as eStargz (registry/estargz.py) that any
runtime still pulls whole and stargz-snapshotter's own reader verifies. In process: the format (one gzip member per
payload and chunk, the TOC as the last entry, the footer pointing at it, the tar it unpacks to is its diff ID, the
layer's entries and headers unchanged), the prefetch order (files first, the landmark after them, the spec's
`.no.prefetch.landmark` in a layer holding none), one blob for one input. With Go (tier 2): Debian's copy of the
snapshotter's `estargz` package opens each blob and verifies its TOC digest and every chunk digest
(tests/estargzcheck.py). On the engine: a push is one digest, each layer carries the TOC digest and uncompressed-size
annotations, the config's diff IDs are the eStargz tars', and Docker 20.10 pulls and runs it whole. The gate's
recorded order in a pushed CPU image is tests/test_estargz_gate.py.

`verify` against an eStargz push (registry/estargzread.py, publish/verify.py): in process, a layer hashed in its
eStargz's TOC order is that eStargz's diff ID and its files are the TOC's; a changed byte, a changed mode or a TOC
that says other than its tar are named. On the engine and the registry, an image pushed as eStargz (reordered by a
prefetch order) compares identical with the engine's image from its TOCs alone, and a changed file in one of its
layers, or a TOC digest that is not its TOC's, is named, never the TOC or the landmark. `verify` after a no-cache
rebuild against the eStargz push of a gated image is tests/test_layers.py."""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
import os
import struct
import subprocess
import tarfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import pytest
from conftest import remove_image
from conftest_registry import RegistryLogin
from estargzcheck import gunzip, tar_digest, verify

from trainimg.engine.docker import DockerEngine
from trainimg.options.compression import Compression
from trainimg.plan.reproducible import LAYER_EPOCH
from trainimg.publish.push import push
from trainimg.registry.blobcache import BlobCache
from trainimg.registry.estargz import (CHUNK, FOOTER_SIZE, NO_PREFETCH_LANDMARK, PREFETCH_LANDMARK, TOC_DIGEST,
                                       TOC_NAME, UNCOMPRESSED_SIZE, estargz_layer, footer, gzip_member,
                                       own_entry_header, padded)
from trainimg.publish.verify import compare, report_lines
from trainimg.registry.estargzread import Toc, read_toc, reordered
from trainimg.errors import RegistryError
from trainimg.registry.layerfiles import differences, entries, saved_layers
from trainimg.registry.layerformats import OCI_GZIP_LAYER, OCI_MANIFEST
from trainimg.registry.layermemory import LayerMemory
from trainimg.registry.references import RegistryTarget
from trainimg.registry.registryapi import RegistryAPI

ESTARGZ = Compression.parse("estargz")
OWN = {TOC_NAME, PREFETCH_LANDMARK, NO_PREFETCH_LANDMARK}


def _layer(path: Path) -> Path:
    """A layer tar as an engine saves one: folders, files (one of 2.5 chunks, one empty), a symlink, a hard link, an
    xattr in a pax header."""
    files = {"usr/lib/libbig.so": os.urandom(CHUNK) + bytes(CHUNK + CHUNK // 2), "usr/lib/python3/a.py": b"x" * 700,
             "etc/empty": b"", "opt/data.bin": bytes(range(256)) * 64}
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for folder in ("etc/", "opt/", "usr/", "usr/lib/", "usr/lib/python3/"):
            info = tarfile.TarInfo(folder)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, LAYER_EPOCH
            tar.addfile(info)
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime, info.uname = len(data), 0o644, LAYER_EPOCH, "root"
            if name.endswith(".so"):
                info.pax_headers = {"SCHILY.xattr.security.capability": "\x01\x00\x00\x02"}
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("usr/lib/libbig.so.1")
        link.type, link.linkname = tarfile.SYMTYPE, "libbig.so"
        tar.addfile(link)
        hard = tarfile.TarInfo("opt/same.bin")
        hard.type, hard.linkname = tarfile.LNKTYPE, "opt/data.bin"
        tar.addfile(hard)
    return path


def _unpacked(blob: Path) -> tuple[bytes, list[str], dict[str, Any]]:
    """What a puller that knows nothing of eStargz gets: the tar, its entry names in order, and the TOC in it."""
    plain = gunzip(blob)
    with tarfile.open(fileobj=io.BytesIO(plain)) as tar:
        names = tar.getnames()
        toc = json.load(tar.extractfile(TOC_NAME))  # type: ignore[arg-type]
    return plain, names, toc


def test_a_layer_becomes_one_estargz_blob_any_gunzip_reads(tmp_path: Path) -> None:
    layer = _layer(tmp_path / "layer.tar")
    first = estargz_layer(layer, tmp_path / "a.esgz")
    assert estargz_layer(layer, tmp_path / "b.esgz") == first  # one input, one blob
    blob = (tmp_path / "a.esgz").read_bytes()
    assert f"sha256:{hashlib.sha256(blob).hexdigest()}" == first.digest and len(blob) == first.size
    plain, names, toc = _unpacked(tmp_path / "a.esgz")
    assert f"sha256:{hashlib.sha256(plain).hexdigest()}" == first.diff_id and len(plain) == first.uncompressed_size
    assert names[-1] == TOC_NAME and names[0] == NO_PREFETCH_LANDMARK  # no order: the spec's no-prefetch landmark
    # The layer's own entries, unchanged (contents, sizes, modes, times, link targets), and nothing else.
    ours = entries(io.BytesIO(plain))
    assert {k: v for k, v in ours.items() if k not in OWN} == entries(layer.open("rb"))
    # The footer: an empty gzip member whose extra field points at the TOC's member.
    footer = blob[-FOOTER_SIZE:]
    assert footer[:4] == b"\x1f\x8b\x08\x04" and footer[12:16] == b"SG\x16\x00" and footer[32:38] == b"STARGZ"
    toc_offset = int(footer[16:32], 16)
    toc_member = gzip.GzipFile(fileobj=io.BytesIO(blob[toc_offset:-FOOTER_SIZE])).read()
    toc_json = tarfile.open(fileobj=io.BytesIO(toc_member)).extractfile(TOC_NAME).read()  # type: ignore[union-attr]
    assert f"sha256:{hashlib.sha256(toc_json).hexdigest()}" == first.toc_digest
    # Each payload (each chunk of the big file) starts a gzip member at its TOC offset, and holds what it says.
    chunks = [e for e in toc["entries"] if e.get("chunkDigest")]
    assert [e["type"] for e in chunks if e["name"] == "usr/lib/libbig.so"] == ["reg", "chunk", "chunk"]
    sizes = {e["name"]: e.get("size", 0) for e in toc["entries"] if e["type"] == "reg"}
    for e in chunks:
        length = e.get("chunkSize") or sizes[e["name"]] - e.get("chunkOffset", 0)
        assert blob[e["offset"]:e["offset"] + 3] == b"\x1f\x8b\x08"
        data = gzip.GzipFile(fileobj=io.BytesIO(blob[e["offset"]:])).read(length)
        assert f"sha256:{hashlib.sha256(data).hexdigest()}" == e["chunkDigest"]
    assert dict(first.annotations()) == {TOC_DIGEST: first.toc_digest, UNCOMPRESSED_SIZE: str(len(plain))}


def test_the_prefetched_files_come_first_then_the_landmark(tmp_path: Path) -> None:
    layer = _layer(tmp_path / "layer.tar")
    order = ["/opt/same.bin", "/usr/lib/python3/a.py", "/usr/lib/libbig.so.1", "/not/in/this/layer"]
    written = estargz_layer(layer, tmp_path / "ordered.esgz", order)
    _, names, _ = _unpacked(tmp_path / "ordered.esgz")
    # The hard link after its target and its folder; each file after its folders; a symlink is not a file to fetch.
    assert names[:names.index(PREFETCH_LANDMARK)] == ["opt", "opt/data.bin", "opt/same.bin", "usr", "usr/lib",
                                                      "usr/lib/python3", "usr/lib/python3/a.py"]
    assert names[names.index(PREFETCH_LANDMARK) + 1:] == ["etc", "usr/lib/libbig.so", "etc/empty",
                                                          "usr/lib/libbig.so.1", TOC_NAME]
    assert NO_PREFETCH_LANDMARK not in names
    elsewhere = estargz_layer(layer, tmp_path / "none.esgz", ["/usr/bin/python3"])  # an order, none of it here
    assert _unpacked(tmp_path / "none.esgz")[1][0] == NO_PREFETCH_LANDMARK and elsewhere.digest != written.digest
    assert estargz_layer(layer, tmp_path / "again.esgz", order) == written


def test_the_order_names_its_blobs_in_the_cache_and_the_memory(tmp_path: Path) -> None:
    """Another order is another blob: each is kept and recalled under its own key, with its diff ID and
    annotations (what the config and the descriptor need when no `docker save` is read)."""
    layer = _layer(tmp_path / "layer.tar")
    diff_id = f"sha256:{hashlib.sha256(layer.read_bytes()).hexdigest()}"
    ordered = ESTARGZ.ordered(["/usr/lib/python3/a.py"])
    assert len({ESTARGZ.key, ordered.key, Compression().key}) == 3
    written = estargz_layer(layer, tmp_path / "x.esgz", ordered.prefetch)
    cache = BlobCache(tmp_path / "cache", 1 << 30)
    cache.keep(diff_id, ordered, tmp_path / "x.esgz", written.digest, written.size, config_diff_id=written.diff_id,
               annotations=written.annotations())
    found = cache.find(diff_id, ordered)
    assert found is not None and found.layer().config_diff_id == written.diff_id
    assert dict(found.layer().annotations)[TOC_DIGEST] == written.toc_digest and cache.find(diff_id, ESTARGZ) is None
    memory = LayerMemory(tmp_path / "memory")
    memory.remember(diff_id, ordered, written.digest, written.size, "reg:5000", "team/a",
                    config_diff_id=written.diff_id, annotations=written.annotations())
    recalled = memory.recall(diff_id, ordered, "reg:5000")
    assert recalled is not None and recalled.layer() == found.layer() and memory.recall(diff_id, ESTARGZ, "reg:5000") \
        is None


@pytest.fixture(scope="session")
def estargz_verify(host_tool: Callable[[str], str]) -> Callable[..., dict[str, Any]]:
    """`estargz_verify(blob, toc_digest, *names)`: stargz-snapshotter's reader on the blob (tests/estargzcheck.py)."""
    return functools.partial(verify, host_tool("go"))


def test_the_snapshotters_reader_verifies_every_chunk(tmp_path: Path,
                                                     estargz_verify: Callable[..., dict[str, Any]]) -> None:
    layer = _layer(tmp_path / "layer.tar")
    order = ["/usr/lib/python3/a.py", "/opt/same.bin"]
    written = estargz_layer(layer, tmp_path / "ordered.esgz", order)
    seen = estargz_verify(tmp_path / "ordered.esgz", written.toc_digest, "usr/lib/python3/a.py", "opt/data.bin",
                          "usr/lib/libbig.so")
    assert seen["toc_digest"] == written.toc_digest and seen["landmark"] == PREFETCH_LANDMARK
    assert seen["files"] == 5 and seen["chunks"] == 7  # 4 files (the big one in 3 chunks), the landmark, the link
    offsets = seen["offsets"]  # what the snapshotter prefetches: the blob before the landmark
    assert offsets["usr/lib/python3/a.py"] < seen["landmark_offset"] and offsets["opt/data.bin"] < \
        seen["landmark_offset"] < offsets["usr/lib/libbig.so"]
    with pytest.raises(AssertionError, match="VerifyTOC"):  # the descriptor's digest is what is checked
        estargz_verify(tmp_path / "ordered.esgz", "sha256:" + "0" * 64)
    plain = estargz_layer(layer, tmp_path / "plain.esgz")
    assert estargz_verify(tmp_path / "plain.esgz", plain.toc_digest)["landmark"] == NO_PREFETCH_LANDMARK


def _blob(api: RegistryAPI, repository: str, digest: str, dest: Path) -> Path:
    with api.open_blob(repository, digest) as resp, dest.open("wb") as fh:
        for chunk in resp.iter_content(1 << 20):
            fh.write(chunk)
    return dest


def test_an_estargz_push_is_one_digest_and_docker_pulls_it_whole(
        registry_client: docker.DockerClient, registry: RegistryLogin, registry_image: Callable[[], str],
        docker_cli: str, tmp_path: Path, estargz_verify: Callable[..., dict[str, Any]]) -> None:
    image_id = registry_image()  # a random 1 MiB file over the base: a layer of its own
    creds = {"username": registry.username, "password": registry.password}
    target = RegistryTarget.parse(f"{registry.host}/esgz{uuid.uuid4().hex[:8]}")
    engine = DockerEngine(registry_client)
    said: list[str] = []
    first = push(engine, image_id, target, "trainimg/a:v1", credentials=creds, compression=ESTARGZ,
                 on_progress=said.append)
    second = push(engine, image_id, target, "trainimg/b:v1", credentials=creds, compression=ESTARGZ)  # fresh repo
    assert first.digest == second.digest and first.bytes_uploaded == second.bytes_uploaded > 0
    assert len(said) == 1 and "no prefetch order" in said[0] and "not gated" in said[0], said  # no gate: says so
    api = RegistryAPI(target, creds)
    repository = target.repository("trainimg/a")
    body, media_type, _ = api.manifest_json(repository, "v1")  # type: ignore[misc]
    manifest = json.loads(body)
    config = json.loads(api.blob(repository, manifest["config"]["digest"]))
    assert media_type == OCI_MANIFEST and len(manifest["layers"]) == len(config["rootfs"]["diff_ids"]) == 2
    for layer, config_diff_id in zip(manifest["layers"], config["rootfs"]["diff_ids"]):
        assert layer["mediaType"] == OCI_GZIP_LAYER and set(layer["annotations"]) == {TOC_DIGEST, UNCOMPRESSED_SIZE}
        blob = _blob(api, repository, layer["digest"], tmp_path / "layer.esgz")
        seen = estargz_verify(blob, layer["annotations"][TOC_DIGEST])
        assert seen["landmark"] == NO_PREFETCH_LANDMARK and seen["files"] > 0, seen
        unpacked, size = tar_digest(blob)  # the config names the tar the blob unpacks to
        assert unpacked == config_diff_id and layer["annotations"][UNCOMPRESSED_SIZE] == str(size)
    ref = target.ref("trainimg/a:v1")
    env = {**os.environ, "DOCKER_CONFIG": str(tmp_path / "docker")}  # a login of its own, not the user's
    subprocess.run([docker_cli, "login", registry.host, "-u", registry.username, "--password-stdin"],
                   input=registry.password, text=True, check=True, env=env, capture_output=True)
    try:
        pulled = subprocess.run([docker_cli, "pull", ref], env=env, capture_output=True, text=True, timeout=600)
        assert pulled.returncode == 0, pulled.stderr
        assert registry_client.images.get(ref).id == manifest["config"]["digest"]  # the config it was pushed with
        ran = subprocess.run([docker_cli, "run", "--rm", ref, "sh", "-c", "cat /trainimg-test-* | wc -c"], env=env,
                             capture_output=True, text=True, timeout=600)
        assert ran.returncode == 0 and ran.stdout.split()[-1] == "1048576", ran.stdout + ran.stderr
    finally:
        remove_image(registry_client, ref)


def test_footer_layout_is_the_specs() -> None:
    data = footer(0x1234)
    assert len(data) == FOOTER_SIZE and gzip.decompress(data) == b""
    assert struct.unpack("<H", data[10:12]) == (26,) and data[16:38] == b"0000000000001234STARGZ"


def _toc(blob: Path, toc_digest: str) -> Toc:
    data = blob.read_bytes()
    return read_toc(lambda start, end: data[start:end], len(data), toc_digest, blob.name)


def _changed(layer: Path, dest: Path, name: str, mode: int | None = None, flip: int | None = None) -> Path:
    """`layer` with its member `name` changed: its mode, or one byte of its content at `flip`; the rest as it is."""
    with tarfile.open(layer) as src, tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as out:
        for member in src.getmembers():
            data = src.extractfile(member).read() if member.isfile() else None  # type: ignore[union-attr]
            if member.name == name and mode is not None:
                member.mode = mode
            if member.name == name and flip is not None and data is not None:
                data = data[:flip] + bytes([data[flip] ^ 1]) + data[flip + 1:]
            out.addfile(member, io.BytesIO(data) if data is not None else None)
    return dest


def test_a_layer_is_its_estargz_in_the_tocs_order_and_a_change_is_named(tmp_path: Path) -> None:
    """What `verify` decides an eStargz layer by: the rebuild's layer tar hashed in the TOC's order (the prefetched
    first, the landmark among them, the TOC's member last) is the eStargz tar's diff ID, and the TOC's files are
    the tar's (the TOC and the landmark left out). A byte, a mode or a TOC that lies is a difference, named."""
    layer = _layer(tmp_path / "layer.tar")
    order = ["/opt/same.bin", "/usr/lib/python3/a.py"]
    written = estargz_layer(layer, tmp_path / "a.esgz", order)
    toc = _toc(tmp_path / "a.esgz", written.toc_digest)
    assert PREFETCH_LANDMARK in [e["name"] for e in toc.entries] and toc.entries[0]["name"] != "etc/"  # reordered
    same = reordered(layer.open("rb"), toc)
    assert same.diff_id == written.diff_id and not same.chunks
    assert differences(same.files, toc.files()) == [] and set(toc.files()) == set(entries(layer.open("rb")))
    for changed, named in [(_changed(layer, tmp_path / "byte.tar", "usr/lib/libbig.so", flip=CHUNK + 7),
                            "usr/lib/libbig.so: content sha256:"),
                           (_changed(layer, tmp_path / "mode.tar", "usr/lib/python3/a.py", mode=0o755),
                            "usr/lib/python3/a.py: mode -rwxr-xr-x != -rw-r--r--")]:
        other = reordered(changed.open("rb"), toc)
        lines = differences(other.files, toc.files())
        assert other.diff_id != written.diff_id and len(lines) == 1 and lines[0].startswith(named), lines
    # A TOC that says other than its tar (the tar's bytes, so the diff ID, unchanged): each field a lazy node takes
    # from the TOC is compared too.
    for name, change, line in [
            ("etc/empty", {"mode": 0o600}, "mode -rw-r--r-- != -rw-------"),
            ("etc/empty", {"uid": 1000}, "owner 0:0 != 1000:0"),
            ("etc/empty", {"modtime": "2001-09-09T01:46:40Z"}, f"mtime {LAYER_EPOCH} != 1000000000"),
            ("usr/lib/libbig.so", {"xattrs": {}}, "xattrs security.capability=AQAAAg== != none"),
            ("usr/lib/libbig.so.1", {"linkName": "libother.so"}, "content -> libbig.so != -> libother.so"),
            ("opt/data.bin", {"digest": "sha256:" + "0" * 64}, "content sha256:")]:
        lying = Toc([{**e, **change} if e["name"] == name else e for e in toc.entries], toc.tail)
        told = reordered(layer.open("rb"), lying)
        lines = differences(told.files, lying.files())
        assert told.diff_id == written.diff_id and len(lines) == 1 and lines[0].startswith(f"{name}: {line}"), lines
    second = next(e for e in toc.entries if e["type"] == "chunk")  # a chunk's digest that is not its bytes'
    wrong = Toc([{**e, "chunkDigest": "sha256:" + "0" * 64} if e is second else e for e in toc.entries], toc.tail)
    assert reordered(layer.open("rb"), wrong).chunks == [
        f"usr/lib/libbig.so: chunk at {CHUNK}: TOC sha256:{'0' * 64} != layer "
        f"sha256:{hashlib.sha256(bytes(CHUNK)).hexdigest()}"]
    with pytest.raises(RegistryError, match="not the one its descriptor's toc.digest names"):
        _toc(tmp_path / "a.esgz", "sha256:" + "0" * 64)


def _put_layer(api: RegistryAPI, repository: str, tag: str, to: str, index: int, blob: Path,
               descriptor: dict[str, Any], diff_id: str) -> None:
    """The image under `tag` again under `to`, its layer `index` replaced by `blob` (`descriptor`, `diff_id`)."""
    body, media_type, _ = api.manifest_json(repository, tag)  # type: ignore[misc]
    manifest = json.loads(body)
    config = json.loads(api.blob(repository, manifest["config"]["digest"]))
    config["rootfs"]["diff_ids"][index] = diff_id
    config_bytes = json.dumps(config).encode()
    manifest["config"].update(digest=api.put_blob(repository, config_bytes), size=len(config_bytes))
    if not api.has_blob(repository, descriptor["digest"]):
        api.upload_file(repository, blob, descriptor["digest"])
    manifest["layers"][index] = descriptor
    api.put_manifest(repository, to, json.dumps(manifest).encode(), media_type)


def _toc_says(blob: Path, dest: Path, name: str, mode: int) -> tuple[dict[str, Any], str]:
    """The eStargz `blob` with its TOC saying `mode` for the file `name`, everything else as it was: (its layer
    descriptor, its diff ID)."""
    data = blob.read_bytes()
    offset = int(data[-FOOTER_SIZE:][16:32], 16)
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data[offset:-FOOTER_SIZE]))) as tar:
        toc = json.load(tar.extractfile(TOC_NAME))  # type: ignore[arg-type]
    toc["entries"] = [{**e, "mode": mode} if e["name"] == name else e for e in toc["entries"]]
    text = json.dumps(toc, separators=(",", ":")).encode()
    dest.write_bytes(data[:offset] + gzip_member(own_entry_header(TOC_NAME, len(text)) + padded(text) + bytes(1024))
                     + footer(offset))
    return ({"mediaType": OCI_GZIP_LAYER, "size": dest.stat().st_size, "digest": _sha256_file(dest),
             "annotations": {TOC_DIGEST: f"sha256:{hashlib.sha256(text).hexdigest()}"}}, tar_digest(dest)[0])


def _sha256_file(path: Path) -> str:
    return f"sha256:{hashlib.sha256(path.read_bytes()).hexdigest()}"


def test_verify_finds_an_estargz_push_identical_and_names_a_changed_file(
        registry_client: docker.DockerClient, registry: RegistryLogin, registry_image: Callable[[], str],
        tmp_path: Path) -> None:
    """`verify`'s comparison (publish/verify.py) of an engine's image with its eStargz push, reordered by an order:
    identical from the TOCs alone. The same push with one byte changed in a file of its top layer (written as
    eStargz again, its TOC digest annotated): that layer and that file only, not the TOC or the landmark. With a
    TOC that says another mode than its tar (the tar, so the diff ID, the rebuild's but for that TOC): that file's
    mode. With a TOC digest that is not its TOC's: the layer differs, saying so, read whole, and its files do not."""
    image_id = registry_image()
    creds = {"username": registry.username, "password": registry.password}
    target = RegistryTarget.parse(f"{registry.host}/esgzv{uuid.uuid4().hex[:8]}")
    engine = DockerEngine(registry_client)
    push(engine, image_id, target, "trainimg/v:v1", credentials=creds, compression=ESTARGZ,
         gate=lambda _: ["/usr/bin/bash", "/etc/passwd"])  # as a gate's record gives the order
    api = RegistryAPI(target, creds)
    repository = target.repository("trainimg/v")
    manifest = json.loads(api.manifest_json(repository, "v1")[0])  # type: ignore[index]
    base = manifest["layers"][0]
    toc = read_toc(lambda a, b: api.blob_range(repository, base["digest"], a, b), base["size"],
                   base["annotations"][TOC_DIGEST], "base")
    assert [e["name"] for e in toc.entries].index(PREFETCH_LANDMARK) > 2  # the order's files went first

    verdict = compare(engine, api, image_id, "trainimg/v:v1")
    lines = report_lines(verdict)
    assert verdict.identical and verdict.estargz == 2 and verdict.config == manifest["config"]["digest"], lines
    assert lines == [f"{target.host}/{repository}:v1: identical, 2 of 2 layers: the rebuild's config, naming the "
                     f"eStargz tars' diff IDs, is the registry's, {verdict.config}; 2 eStargz layers hold the "
                     "rebuild's entries byte for byte, their order, TOC and landmark aside (read from their TOCs)"]

    engine.save(image_id, tmp_path / "image.tar")
    with saved_layers(tmp_path / "image.tar") as (names, outer):
        (tmp_path / "top.tar").write_bytes(outer.extractfile(names[1]).read())  # type: ignore[union-attr]
    with tarfile.open(tmp_path / "top.tar") as tar:
        (name,) = [m.name for m in tar.getmembers() if m.name.startswith("trainimg-test-")]
    bad = estargz_layer(_changed(tmp_path / "top.tar", tmp_path / "bad.tar", name, flip=4096), tmp_path / "bad.esgz")
    _put_layer(api, repository, "v1", "v2", 1, tmp_path / "bad.esgz",
               {"mediaType": OCI_GZIP_LAYER, "size": bad.size, "digest": bad.digest,
                "annotations": dict(bad.annotations())}, bad.diff_id)
    verdict = compare(engine, api, image_id, "trainimg/v:v2")
    lines = report_lines(verdict)
    assert not verdict.identical and lines[0].endswith(": 1 of 2 layers differ from the rebuild"), lines
    assert lines[1].startswith("layer 2: rebuild sha256:") and lines[1].endswith(f"registry {bad.diff_id}"), lines
    assert len(lines) == 3 and lines[2].startswith(f"  {name}: content sha256:"), lines

    top = manifest["layers"][1]
    blob = _blob(api, repository, top["digest"], tmp_path / "top.esgz")
    lying = _toc_says(blob, tmp_path / "lying.esgz", name, 0o600)  # the tar's bytes as they were, but its TOC
    _put_layer(api, repository, "v1", "v4", 1, tmp_path / "lying.esgz", lying[0], lying[1])
    lines = report_lines(compare(engine, api, image_id, "trainimg/v:v4"))
    assert lines[2:] == [f"  {name}: mode -rw-r--r-- != -rw-------"], lines

    config = json.loads(api.blob(repository, manifest["config"]["digest"]))
    _put_layer(api, repository, "v1", "v3", 1, tmp_path / "unused",
               {**top, "annotations": {**top["annotations"], TOC_DIGEST: "sha256:" + "1" * 64}},
               config["rootfs"]["diff_ids"][1])
    lines = report_lines(compare(engine, api, image_id, "trainimg/v:v3"))
    assert len(lines) == 3 and lines[2].startswith("  its TOC was not read, so the whole layer was: eStargz layer "
                                                   f"{top['digest']}: its TOC is not the one"), lines
