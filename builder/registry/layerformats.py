"""How trainimg's registry client writes a layer blob and names it, for each `--compression` (options/compression.py).

Both compressions are deterministic: the same layer tar gives the same blob on every machine with the same library,
so an unchanged layer is never sent twice and two pushes of one image give one manifest digest. gzip: level 6,
header time 0, no file name, written as pigz writes it: the tar cut in 4 MiB pieces, each deflated on its own thread
(zlib lets go of the GIL) primed with the 32 KiB before it, so the ratio is a single stream's (the 954 MB torch layer:
256.9 MB against 256.2 MB) and one layer uses every core (37.4 s on one core here, 21.4 s on two); the pieces end on
a byte boundary (a sync flush) and join into one deflate stream any gunzip reads. The blob depends on the piece size
and zlib, never on the thread count. zstd: one thread (zstd's multi-threaded frames differ from
its single-threaded ones), no content size (not known when streaming), no checksum, no dictionary ID, the input read
in fixed 1 MiB pieces; the blob is a function of the bytes and of the libzstd that the `zstandard` wheel bundles
(pinned in pyproject.toml). A gzip image keeps Docker's schema 2 media types (every blob pushed before stays
valid); a zstd one must be OCI (`tar+zstd` has no Docker media type), so its manifest and config are OCI's too.
"""

from __future__ import annotations

import hashlib
import os
import struct
import zlib
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import zstandard

from ..options.compression import ESTARGZ, GZIP, GZIP_LEVEL, ZSTD, Compression

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_GZIP_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_GZIP_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_ZSTD_LAYER = "application/vnd.oci.image.layer.v1.tar+zstd"
IMAGE_MANIFESTS = (DOCKER_MANIFEST, OCI_MANIFEST)
_PIECE = 1 << 20  # bytes read and written at a time (zstd's output depends on nothing else)
_GZIP_PIECE = 4 << 20  # the pieces a gzip layer is deflated in: the blob depends on this size
_WINDOW = 32 << 10  # deflate's window: each piece is primed with this much of the one before
# magic, deflate, no flags (no file name), time 0, no extra flags, OS unknown: Python's gzip with mtime=0, filename=""
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
THREADS = os.cpu_count() or 1
DEFLATERS = ThreadPoolExecutor(THREADS, thread_name_prefix="deflate")  # shared by the layers compressed at once


@dataclass(frozen=True)
class Format:
    """The media types an image pushed with one compression carries, and the layer blobs a push may reuse."""

    manifest: str
    config: str
    layer: str
    reusable: frozenset[str]  # layer media types whose blobs serve this format as they are


FORMATS = {
    GZIP: Format(DOCKER_MANIFEST, DOCKER_CONFIG, DOCKER_GZIP_LAYER, frozenset({DOCKER_GZIP_LAYER, OCI_GZIP_LAYER})),
    ZSTD: Format(OCI_MANIFEST, OCI_CONFIG, OCI_ZSTD_LAYER, frozenset({OCI_ZSTD_LAYER})),
    # An eStargz blob unpacks to a tar of its own (its TOC and landmark in it): no registry manifest says which
    # engine layer it came from, so only the layer memory and the blob cache find one again (keyed by the order).
    ESTARGZ: Format(OCI_MANIFEST, OCI_CONFIG, OCI_GZIP_LAYER, frozenset()),
}


@dataclass(frozen=True)
class LayerBlob:
    """A layer as the registry holds it: its blob's digest and size; `config_diff_id`, the digest of the tar the
    blob unpacks to when that is not the engine's layer (an eStargz tar holds its TOC and landmark), which the image
    config names instead; `annotations`, its descriptor's (an eStargz's TOC digest and uncompressed size)."""

    digest: str
    size: int
    config_diff_id: str = ""
    annotations: tuple[tuple[str, str], ...] = ()

    def descriptor(self, media_type: str) -> dict[str, Any]:
        """The manifest's descriptor of this layer."""
        out: dict[str, Any] = {"mediaType": media_type, "size": self.size, "digest": self.digest}
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out

    def to_json(self) -> dict[str, Any]:
        """What the layer memory and the blob cache keep of it."""
        out: dict[str, Any] = {"digest": self.digest, "size": self.size}
        if self.config_diff_id:
            out["config_diff_id"] = self.config_diff_id
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out

    @classmethod
    def from_json(cls, data: Any) -> LayerBlob:
        """A kept `to_json`; raises KeyError, TypeError or ValueError on anything else."""
        annotations = data.get("annotations") or {}
        if not isinstance(annotations, dict):
            raise TypeError("annotations are a mapping")
        return cls(str(data["digest"]), int(data["size"]), str(data.get("config_diff_id") or ""),
                   tuple(sorted((str(k), str(v)) for k, v in annotations.items())))


class HashingWriter:
    """A file writer that hashes and counts what passes through (the compressor's sink)."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh, self.sha, self.size = fh, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self.fh.write(data)

    def flush(self) -> None:
        self.fh.flush()


def gzip_layer(src: IO[bytes], dest: Path, pool: ThreadPoolExecutor = DEFLATERS) -> tuple[str, int]:
    """Compress a layer tar into `dest` as deterministic gzip (pieces deflated on `pool`'s threads, at most two per
    core waiting); returns its blob digest and size."""
    waiting: deque[Future[bytes]] = deque()
    crc = length = 0
    with dest.open("wb") as raw:
        sink = HashingWriter(raw)
        sink.write(GZIP_HEADER)
        window = b""
        for piece, last in _pieces(src):
            crc, length = zlib.crc32(piece, crc), length + len(piece)
            waiting.append(pool.submit(_deflate, piece, window, last))
            window = piece[-_WINDOW:]
            while len(waiting) > 2 * THREADS or (last and waiting):
                sink.write(waiting.popleft().result())
        sink.write(struct.pack("<II", crc, length & 0xFFFFFFFF))
    return f"sha256:{sink.sha.hexdigest()}", sink.size


def _pieces(src: IO[bytes]) -> Iterator[tuple[bytes, bool]]:
    """The tar in `_GZIP_PIECE`-byte pieces whatever sizes `src`'s reads return, each with whether it is the last
    (an empty tar is one empty last piece)."""
    piece = _read_full(src, _GZIP_PIECE)
    while True:
        following = _read_full(src, _GZIP_PIECE) if len(piece) == _GZIP_PIECE else b""
        yield piece, not following
        if not following:
            return
        piece = following


def _read_full(src: IO[bytes], size: int) -> bytes:
    parts, left = [], size
    while left and (part := src.read(left)):
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def _deflate(piece: bytes, window: bytes, last: bool) -> bytes:
    """One piece as raw deflate primed with `window`, ending the stream (`last`) or on a byte boundary."""
    deflater = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS, zlib.DEF_MEM_LEVEL,
                                zlib.Z_DEFAULT_STRATEGY, *([window] if window else []))
    return deflater.compress(piece) + deflater.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


def zstd_layer(src: IO[bytes], dest: Path, level: int) -> tuple[str, int]:
    """Compress a layer tar into `dest` as deterministic zstd at `level`; returns its blob digest and size."""
    compressor = zstandard.ZstdCompressor(level=level, threads=0, write_checksum=False, write_content_size=False,
                                          write_dict_id=False)
    with dest.open("wb") as raw:
        sink = HashingWriter(raw)
        compressor.copy_stream(src, cast(IO[bytes], sink), read_size=_PIECE, write_size=_PIECE)
    return f"sha256:{sink.sha.hexdigest()}", sink.size


def compress_layer(src: IO[bytes], dest: Path, compression: Compression) -> tuple[str, int]:
    """Compress a layer tar into `dest` as `compression` says; returns its blob digest and size."""
    if compression.algorithm == ZSTD:
        return zstd_layer(src, dest, compression.level)
    return gzip_layer(src, dest)


def plain_layer(blob: IO[bytes], media_type: str) -> IO[bytes]:
    """A layer blob's tar stream: a zstd blob decompressed as it is read; gzip and plain ones as they are (tarfile
    reads gzip itself)."""
    if media_type == OCI_ZSTD_LAYER:
        return zstandard.ZstdDecompressor().stream_reader(blob, read_size=_PIECE)
    return blob
