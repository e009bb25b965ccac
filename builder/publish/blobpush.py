"""Pushing a saved image through trainimg's registry client: only the layers the registry lacks are sent.

Docker 20.10 asks the registry about a layer only when its own metadata store maps that layer to a registry digest;
an engine that never pushed or pulled it (an ephemeral CI runner) gzips and uploads every layer, even those the
registry holds (moby `distribution/push_v2.go`; shared/reference/layers.md). Here the registry is asked instead:
the image it holds under the tag (and any other references given) maps each layer's diff ID to its blob, so a
layer it has is neither compressed nor sent (`HEAD /v2/<name>/blobs/<digest>` confirms it). The image is streamed
from the engine's `docker save` (one layer on disk at a time, not a copy of a 10 GB image); the layers the registry
lacks are gzipped deterministically (`DETERMINISTIC_GZIP`: level 6, header time 0, no file name),
so an unchanged layer compresses to the same blob on every machine running the same zlib; then the image config
(its exact bytes: the pulled image keeps the local image ID) and a Docker schema 2 manifest.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import posixpath
import shutil
import tarfile
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..engine.base import Engine
from ..errors import RegistryError, UserInputError
from .registryapi import RegistryAPI

MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_TYPE = "application/vnd.docker.container.image.v1+json"
LAYER_TYPE = "application/vnd.docker.image.rootfs.diff.tar.gzip"
DETERMINISTIC_GZIP: dict[str, Any] = {"compresslevel": 6, "mtime": 0, "filename": ""}


@dataclass
class BlobPush:
    """What a client push sent: the manifest digest, and per layer whether it was uploaded."""

    digest: str
    layers: int
    uploaded: list[str] = field(default_factory=list)  # blob digests of the layers sent
    mounted: list[str] = field(default_factory=list)  # blob digests linked from another repository, not sent
    bytes_uploaded: int = 0
    compressed_bytes: int = 0  # the image's layers, compressed, as the manifest lists them


class _Hashing:
    """A file writer that hashes and counts what passes through (the gzip stream's sink)."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh, self.sha, self.size = fh, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self.fh.write(data)

    def flush(self) -> None:
        self.fh.flush()


def gzip_layer(src: IO[bytes], dest: Path) -> tuple[str, int]:
    """Compress a layer tar into `dest` deterministically; returns its blob digest and size."""
    with dest.open("wb") as raw:
        sink = _Hashing(raw)
        with gzip.GzipFile(fileobj=sink, mode="wb", **DETERMINISTIC_GZIP) as gz:
            shutil.copyfileobj(src, gz, 1 << 20)
    return f"sha256:{sink.sha.hexdigest()}", sink.size


def known_layers(api: RegistryAPI, refs: Iterable[tuple[str, str]]) -> dict[str, tuple[str, int, str]]:
    """diff ID -> (blob digest, size, repository) of every layer of the image manifests `refs` ((repository,
    reference) pairs) name; the first ref naming a layer wins."""
    known: dict[str, tuple[str, int, str]] = {}
    for repository, ref in refs:
        got = api.manifest_json(repository, ref)
        if got is None or got[1] != MANIFEST_TYPE:
            continue
        manifest = json.loads(got[0])
        config = json.loads(api.blob(repository, manifest["config"]["digest"]))
        for diff_id, layer in zip(config["rootfs"]["diff_ids"], manifest["layers"]):
            known.setdefault(diff_id, (layer["digest"], int(layer["size"]), repository))
    return known


def push_saved(engine: Engine, local_ref: str, api: RegistryAPI, repository: str, tag: str,
               also_known: Iterable[str] = (), siblings: Iterable[tuple[str, str]] = ()) -> BlobPush:
    """Push local image `local_ref` as `repository:tag`, sending only the layers the registry lacks.

    `also_known` are other tags of `repository`; `siblings` ((repository, tag) pairs: the release's other images, an
    extended parent) are read too, and a layer one of them holds is mounted from its repository, not sent."""
    info = engine.image(local_ref)
    if info is None:
        raise UserInputError(f"no local image {local_ref}: build it first")
    known = known_layers(api, [(repository, t) for t in (tag, *also_known)] + [s for s in siblings
                                                                                if s[0] != repository])
    result = BlobPush("", len(info.layers))
    blobs: dict[str, tuple[str, int]] = {}  # the saved tar's layer member -> (blob digest, compressed size)
    links: dict[str, str] = {}  # a layer tar saved as a link -> the member it links to (before or after it)
    entry: dict[str, Any] = {}
    config = b""
    with tempfile.TemporaryDirectory(prefix="trainimg-push-") as tmp:
        with tarfile.open(fileobj=_ChunkReader(engine.save_stream(local_ref)), mode="r|") as outer:
            for member in outer:
                if member.name.endswith("/layer.tar") and member.issym():  # a repeated layer: a link to its tar
                    links[member.name] = posixpath.normpath(posixpath.join(posixpath.dirname(member.name),
                                                                           member.linkname))
                elif member.name.endswith("/layer.tar"):
                    blobs[member.name] = _layer_blob(api, repository, _member(outer, member), Path(tmp), known,
                                                     result)
                elif member.name == "manifest.json":
                    (entry,) = json.load(_member(outer, member))
                elif member.name.endswith(".json") and "/" not in member.name:
                    config = _member(outer, member).read()  # the image config: `<digest>.json` at the top
    blobs.update({name: blobs[target] for name, target in links.items() if target in blobs})
    if not entry or not config or set(entry["Layers"]) - set(blobs):
        raise RegistryError(f"the engine's save of {local_ref} lacks its manifest.json, image config or a layer")
    layers: list[dict[str, Any]] = [{"mediaType": LAYER_TYPE, "size": blobs[name][1], "digest": blobs[name][0]}
                                    for name in entry["Layers"]]
    config_digest = api.put_blob(repository, config)
    manifest = {"schemaVersion": 2, "mediaType": MANIFEST_TYPE,
                "config": {"mediaType": CONFIG_TYPE, "size": len(config), "digest": config_digest},
                "layers": layers}
    result.digest = api.put_manifest(repository, tag, json.dumps(manifest, indent=3).encode(), MANIFEST_TYPE)
    result.compressed_bytes = sum(int(layer["size"]) for layer in layers)
    return result


def _layer_blob(api: RegistryAPI, repository: str, layer: IO[bytes], tmp: Path,
                known: dict[str, tuple[str, int, str]], result: BlobPush) -> tuple[str, int]:
    """One layer tar of the saved stream -> its blob in the registry: reused when the registry holds it (its diff ID,
    the tar's digest, is known) in this repository, mounted when in another, else gzipped and uploaded. Only this
    layer is ever on disk, uncompressed."""
    plain, sha = tmp / "layer.tar", hashlib.sha256()
    with plain.open("wb") as fh:
        while chunk := layer.read(1 << 20):
            sha.update(chunk)
            fh.write(chunk)
    digest, size, source = known.get(f"sha256:{sha.hexdigest()}", ("", 0, ""))
    if digest and _held(api, repository, digest, source, result):
        plain.unlink()
        return digest, size
    gz = tmp / "layer.tar.gz"
    with plain.open("rb") as src:
        digest, size = gzip_layer(src, gz)
    plain.unlink()
    if not api.has_blob(repository, digest):
        api.upload_file(repository, gz, digest)
        result.uploaded.append(digest)
        result.bytes_uploaded += size
    gz.unlink()
    return digest, size


def _held(api: RegistryAPI, repository: str, digest: str, source: str, result: BlobPush) -> bool:
    """Whether `repository` holds blob `digest` now: it did, or it was mounted from `source`, which holds it."""
    if api.has_blob(repository, digest):
        return True
    if source != repository and api.has_blob(source, digest) and api.mount_blob(repository, digest, source):
        result.mounted.append(digest)
        return True
    return False


class _ChunkReader(io.RawIOBase):
    """The engine's `docker save` chunks as a readable stream, for tarfile's stream mode (`r|`)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks, self._rest = iter(chunks), b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._rest:
            self._rest = next(self._chunks, b"")
            if not self._rest:
                return 0
        n = min(len(buffer), len(self._rest))
        buffer[:n], self._rest = self._rest[:n], self._rest[n:]
        return n


def _member(outer: tarfile.TarFile, member: tarfile.TarInfo) -> IO[bytes]:
    fh = outer.extractfile(member)
    if fh is None:
        raise RegistryError(f"the saved image's {member.name} is not a file")
    return fh
