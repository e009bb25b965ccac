"""Pushing a saved image through trainimg's registry client: only the layers the registry lacks are sent.

Docker 20.10 asks the registry about a layer only when its own metadata store maps that layer to a registry digest;
an engine that never pushed or pulled it (an ephemeral CI runner) gzips and uploads every layer, even those the
registry holds (moby `distribution/push_v2.go`; shared/reference/layers.md). Here the registry is asked instead:
the image it holds under the tag (and any other references given) maps each layer's diff ID to its blob, so a
layer it has is neither compressed nor sent (`HEAD /v2/<name>/blobs/<digest>` confirms it). The image is streamed
from the engine's `docker save` (dockerd stages its export in its own tmp; here at most WORKERS + 1 layers are
on disk uncompressed, not a second copy of a 10 GB image); the layers the registry lacks are compressed
deterministically, gzip or zstd (layerformats.py), so an unchanged layer compresses to the same blob on every
machine, and kept in the blob cache within its budget (blobcache.py), so the next push of that layer to any
registry sends the same bytes without compressing them again; then the image config
with the build's clock times fixed and without the inline cache (imageconfig.py: one input, one digest), and the
manifest (Docker schema 2 for gzip, OCI for zstd). The build cache goes beside it as a manifest of its own, the same
layers and the config with the cache, under `<tag>.buildcache` (by digest only for one architecture of an index,
whose caches publish/indexpush.py puts in an index of their own under that tag). A base
image copied by digest (upstream/mirror.py) keeps its config's exact bytes: `exact_config`.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import tarfile
import tempfile
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..engine.base import ChunkReader as _ChunkReader, Engine
from ..errors import RegistryError, UserInputError
from ..options.compression import DEFAULT_COMPRESSION, ESTARGZ, GZIP, Compression
from .estargz import estargz_layer
from .imageconfig import cache_config, cache_tag, image_config
from .imageindex import INDEX_TYPES, entries
from .layermemory import LayerMemory
from .layerformats import FORMATS, IMAGE_MANIFESTS, Format, LayerBlob, compress_layer
from .registryapi import RegistryAPI, sha256_digest

# Layers compressed at once: gzip at level 6 makes ~26 MB/s of one core here, so a 9 GB GPU image's first push is
# bound by it; the engine's own push compresses up to 5 layers at once (dockerd's max-concurrent-uploads).
WORKERS = max(2, min(4, os.cpu_count() or 1))


@dataclass
class BlobPush:
    """What a client push sent: the manifest digest, and per layer whether it was uploaded."""

    digest: str
    layers: int
    uploaded: list[str] = field(default_factory=list)  # blob digests of the layers sent
    mounted: list[str] = field(default_factory=list)  # blob digests linked from another repository, not sent
    cached: list[str] = field(default_factory=list)  # blob digests sent from the blob cache, not compressed again
    bytes_uploaded: int = 0
    compressed_bytes: int = 0  # the image's layers, compressed, as the manifest lists them
    cache: str = ""  # the digest of the build cache's manifest pushed beside the image ("" when it had none)


def known_layers(api: RegistryAPI, refs: Iterable[tuple[str, str]], fmt: Format = FORMATS[GZIP]
                 ) -> dict[str, tuple[str, int, str]]:
    """diff ID -> (blob digest, size, repository) of every layer of the image manifests `refs` ((repository,
    reference) pairs) name, every architecture's of an index, whose blob serves `fmt` (a gzip blob never goes into a
    zstd image, nor the reverse); the first ref naming a layer wins."""
    known: dict[str, tuple[str, int, str]] = {}
    for repository, ref in refs:
        got = api.manifest_json(repository, ref)
        if got is not None and got[1] in INDEX_TYPES:
            found = [api.manifest_json(repository, e.digest) for e in entries(got[0])]
        else:
            found = [got]
        for one in found:
            if one is None or one[1] not in IMAGE_MANIFESTS:
                continue
            manifest = json.loads(one[0])
            config = json.loads(api.blob(repository, manifest["config"]["digest"]))
            for diff_id, layer in zip(config["rootfs"]["diff_ids"], manifest["layers"]):
                if layer.get("mediaType") in fmt.reusable:
                    known.setdefault(diff_id, (layer["digest"], int(layer["size"]), repository))
    return known


def push_saved(engine: Engine, local_ref: str, api: RegistryAPI, repository: str, tag: str,
               also_known: Iterable[str] = (), siblings: Iterable[tuple[str, str]] = (),
               known: dict[str, tuple[str, int, str]] | None = None, tagged: bool = True,
               compression: Compression = DEFAULT_COMPRESSION, exact_config: bool = False,
               memory: LayerMemory | None = None) -> BlobPush:
    """Push local image `local_ref` as `repository:tag`, sending only the layers the registry lacks.

    `also_known` are other tags of `repository`; `siblings` ((repository, tag) pairs: the release's other images, an
    extended parent) are read too, and a layer one of them holds is mounted from its repository, not sent. `known`
    is that reading when the caller has it already (`known_layers`). With `tagged` False the manifest is stored
    by its digest only: one architecture's image, which an index then names under `tag`. `compression`: how the
    layers the registry lacks are written (and which of its blobs serve). `exact_config`: the config as the engine
    holds it (a mirrored base, whose digest is its image ID), not the image's fixed one. `memory`: what earlier
    pushes from this machine left where (layermemory.py), asked after the registry's manifests and kept up to date;
    with every layer held and the config remembered, the engine's `docker save` is not read at all."""
    info = engine.image(local_ref)
    if info is None:
        raise UserInputError(f"no local image {local_ref}: build it first")
    if exact_config and compression.algorithm == ESTARGZ:
        raise UserInputError(f"{local_ref} keeps its exact config, whose diff IDs name its own layers: it cannot go "
                             "as eStargz, whose layers unpack to tars of their own")
    fmt = FORMATS[compression.algorithm]
    if known is None:
        known = known_layers(api, [(repository, t) for t in (tag, *also_known)]
                             + [s for s in siblings if s[0] != repository], fmt)
    result = BlobPush("", len(info.layers))
    sender = _Sender(api, repository, known, result, compression, memory)
    config = memory.config(info.id) if memory is not None else None
    blobs = _all_held(sender, info.layers) if config else None
    if config is None or blobs is None:
        config, blobs = _push_layers(engine, local_ref, sender)
        if memory is not None:
            memory.keep_config(info.id, config)  # read from the save: remembered for the next push
    layers: list[dict[str, Any]] = [blob.descriptor(fmt.layer) for blob in blobs]
    diff_ids = _config_diff_ids(info.layers, blobs)
    body = _put_image(api, repository, fmt, config if exact_config else image_config(config, diff_ids), layers)
    result.digest = api.put_manifest(repository, tag if tagged else sha256_digest(body), body, fmt.manifest)
    result.compressed_bytes = sum(int(layer["size"]) for layer in layers)
    with_cache = None if exact_config else cache_config(config, diff_ids)
    if with_cache is not None:
        result.cache = (held_cache(api, repository, tag, layers) if tagged else None) or ""
        if not result.cache:
            cache = _put_image(api, repository, fmt, with_cache, layers)
            result.cache = api.put_manifest(repository, cache_tag(tag) if tagged else sha256_digest(cache), cache,
                                            fmt.manifest)
    return result


def held_cache(api: RegistryAPI, repository: str, tag: str, layers: Sequence[dict[str, Any]]) -> str | None:
    """The digest of the build cache the registry holds beside `tag` when it is a cache of these same layers, which
    a push then keeps rather than replaces; else None. The first build of those layers ran their steps. A rebuild
    that took every step from that cache (an ephemeral runner's, `--cache-from`) re-exports it in a form BuildKit
    0.8 no longer matches in part: measured on empty engines, the cold build's cache gave a one-pin change 8 of
    13 steps, the rebuild's pushed over it 0 of 13 (benchmarks/runner.py)."""
    held = api.manifest_json(repository, cache_tag(tag))
    if held is None or held[1] not in IMAGE_MANIFESTS:
        return None  # none, or an index of several architectures' caches: replaced
    try:
        held_layers = [layer["digest"] for layer in json.loads(held[0])["layers"]]
    except (ValueError, KeyError, TypeError):
        return None  # not a manifest this client can read: replaced
    return held[2] if held_layers == [layer["digest"] for layer in layers] else None


def _config_diff_ids(engine_diff_ids: Sequence[str], blobs: Sequence[LayerBlob]) -> list[str] | None:
    """The diff IDs the pushed config names: the engine's, but where a blob unpacks to another tar (eStargz) that
    tar's digest, which is what a puller checks the unpacked layer against; None when every one is the engine's."""
    if not any(blob.config_diff_id for blob in blobs):
        return None
    return [blob.config_diff_id or diff_id for diff_id, blob in zip(engine_diff_ids, blobs, strict=True)]


def _all_held(sender: _Sender, diff_ids: Sequence[str]) -> list[LayerBlob] | None:
    """Each layer's blob in the image's order when the repository holds or took every one (from another repository
    or the blob cache); None at the first it cannot have without the engine's bytes."""
    held: dict[str, LayerBlob] = {}
    for diff_id in diff_ids:
        found = held.get(diff_id) or sender.reuse(diff_id) or sender.from_cache(diff_id)
        if found is None:
            return None
        held[diff_id] = found
    return [held[diff_id] for diff_id in diff_ids]


def _push_layers(engine: Engine, local_ref: str, sender: _Sender) -> tuple[bytes, list[LayerBlob]]:
    """Stream the engine's `docker save` of `local_ref`, putting each layer in the registry as it passes (`sender`);
    the image config's exact bytes and each layer's (blob digest, size) in the image's order."""
    futures: dict[str, Future[LayerBlob]] = {}  # the saved tar's layer member -> its blob
    links: dict[str, str] = {}  # a layer tar saved as a link -> the member it links to (before or after it)
    entry: dict[str, Any] = {}
    config = b""
    # Layers are compressed and sent by WORKERS threads (zlib lets go of the GIL) while the stream is read on; at
    # most WORKERS + 1 layers are on disk at once.
    slots = threading.BoundedSemaphore(WORKERS + 1)
    with tempfile.TemporaryDirectory(prefix="trainimg-push-") as tmp, ThreadPoolExecutor(WORKERS) as pool:
        with tarfile.open(fileobj=_ChunkReader(engine.save_stream(local_ref)), mode="r|") as outer:
            for member in outer:
                if member.name.endswith("/layer.tar") and member.issym():  # a repeated layer: a link to its tar
                    links[member.name] = posixpath.normpath(posixpath.join(posixpath.dirname(member.name),
                                                                           member.linkname))
                elif member.name.endswith("/layer.tar"):
                    slots.acquire()
                    plain, diff_id = _spool(_member(outer, member), Path(tmp))
                    futures[member.name] = pool.submit(sender.send, plain, diff_id)
                    futures[member.name].add_done_callback(lambda _: slots.release())
                elif member.name == "manifest.json":
                    (entry,) = json.load(_member(outer, member))
                elif member.name.endswith(".json") and "/" not in member.name:
                    config = _member(outer, member).read()  # the image config: `<digest>.json` at the top
        blobs = {name: future.result() for name, future in futures.items()}
    blobs.update({name: blobs[target] for name, target in links.items() if target in blobs})
    if not entry or not config or set(entry["Layers"]) - set(blobs):
        raise RegistryError(f"the engine's save of {local_ref} lacks its manifest.json, image config or a layer")
    return config, [blobs[name] for name in entry["Layers"]]


def _put_image(api: RegistryAPI, repository: str, fmt: Format, config: bytes, layers: list[dict[str, Any]]) -> bytes:
    """Put `config` in the registry; the manifest's bytes naming it and `layers` (for the caller to put)."""
    manifest = {"schemaVersion": 2, "mediaType": fmt.manifest,
                "config": {"mediaType": fmt.config, "size": len(config), "digest": api.put_blob(repository, config)},
                "layers": layers}
    return json.dumps(manifest, indent=3).encode()


def saved_config(engine: Engine, local_ref: str) -> bytes:
    """The image config of local image `local_ref`, its exact bytes (`Engine.image_config`: the engine's image store
    where it can be read, else its `docker save` stream)."""
    return engine.image_config(local_ref)


def _spool(layer: IO[bytes], tmp: Path) -> tuple[Path, str]:
    """One layer tar of the saved stream onto disk, uncompressed; returns its file and its diff ID (its digest)."""
    sha = hashlib.sha256()
    with tempfile.NamedTemporaryFile(dir=tmp, suffix=".tar", delete=False) as fh:
        while chunk := layer.read(1 << 20):
            sha.update(chunk)
            fh.write(chunk)
    return Path(fh.name), f"sha256:{sha.hexdigest()}"


@dataclass
class _Sender:
    """Puts one layer in the registry (on a worker thread): reused when the registry holds it (its diff ID is known
    from a manifest or remembered) in this repository, mounted when in another, else compressed and uploaded."""

    api: RegistryAPI
    repository: str
    known: dict[str, tuple[str, int, str]]
    result: BlobPush
    compression: Compression
    memory: LayerMemory | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reuse(self, diff_id: str) -> LayerBlob | None:
        """The blob of layer `diff_id` when the repository holds it now or took it by a mount; None otherwise."""
        digest, size, source = self.known.get(diff_id, ("", 0, ""))
        if digest and self._held(digest, (source,)):
            return self._remember(diff_id, LayerBlob(digest, size))
        remembered = self.memory.recall(diff_id, self.compression, self.api.target.host) if self.memory else None
        if remembered is not None and self._held(remembered.digest, remembered.repositories):
            return self._remember(diff_id, remembered.layer())
        return None

    def send(self, plain: Path, diff_id: str) -> LayerBlob:
        """The spooled layer tar `plain`, reused, or uploaded from the blob cache, or compressed (into the cache) and
        uploaded; the file is removed after."""
        try:
            reused = self.reuse(diff_id) or self.from_cache(diff_id)
            if reused is not None:
                return reused
            packed = plain.with_suffix(f".tar.{self.compression.algorithm}")
            blob = self._pack(plain, packed)
            plain.unlink()
            self._upload(packed, blob.digest, blob.size)
            if self.memory is not None and self.memory.blobs is not None:
                self.memory.blobs.keep(diff_id, self.compression, packed, blob.digest, blob.size,
                                       config_diff_id=blob.config_diff_id, annotations=blob.annotations)
            packed.unlink(missing_ok=True)
            return self._remember(diff_id, blob)
        finally:
            plain.unlink(missing_ok=True)

    def _pack(self, plain: Path, packed: Path) -> LayerBlob:
        """The layer tar `plain` compressed into `packed` (layerformats.py; estargz.py with the order)."""
        if self.compression.algorithm == ESTARGZ:
            written = estargz_layer(plain, packed, self.compression.prefetch)
            return LayerBlob(written.digest, written.size, written.diff_id, written.annotations())
        with plain.open("rb") as src:
            return LayerBlob(*compress_layer(src, packed, self.compression))

    def from_cache(self, diff_id: str) -> LayerBlob | None:
        """Layer `diff_id` uploaded from the blob cache, compressed by an earlier push; None when it is not kept (or
        went from the cache before it could be read)."""
        cached = self.memory.blobs.find(diff_id, self.compression) if self.memory and self.memory.blobs else None
        if cached is None:
            return None
        try:
            self._upload(cached.path, cached.digest, cached.size)
        except FileNotFoundError:
            return None
        with self.lock:
            self.result.cached.append(cached.digest)
        return self._remember(diff_id, cached.layer())

    def _upload(self, packed: Path, digest: str, size: int) -> None:
        if not self.api.has_blob(self.repository, digest):
            self.api.upload_file(self.repository, packed, digest)
            with self.lock:
                self.result.uploaded.append(digest)
                self.result.bytes_uploaded += size

    def _remember(self, diff_id: str, blob: LayerBlob) -> LayerBlob:
        if self.memory is not None:
            self.memory.remember(diff_id, self.compression, blob.digest, blob.size, self.api.target.host,
                                 self.repository, config_diff_id=blob.config_diff_id, annotations=blob.annotations)
        return blob

    def _held(self, digest: str, sources: Iterable[str]) -> bool:
        """Whether the repository holds blob `digest` now: it did, or it was mounted from one of `sources` (tried in
        order) that holds it."""
        if self.api.has_blob(self.repository, digest):
            return True
        for source in sources:
            if (source != self.repository and self.api.has_blob(source, digest)
                    and self.api.mount_blob(self.repository, digest, source)):
                with self.lock:
                    self.result.mounted.append(digest)
                return True
        return False


def _member(outer: tarfile.TarFile, member: tarfile.TarInfo) -> IO[bytes]:
    fh = outer.extractfile(member)
    if fh is None:
        raise RegistryError(f"the saved image's {member.name} is not a file")
    return fh
