"""How trainimg's registry client writes a layer blob and names it, for each `--compression` (options/compression.py).

Both compressions are deterministic: the same layer tar gives the same blob on every machine with the same library,
so an unchanged layer is never sent twice and two pushes of one image give one manifest digest. gzip: level 6,
header time 0, no file name (`DETERMINISTIC_GZIP`, zlib). zstd: one thread (zstd's multi-threaded frames differ from
its single-threaded ones), no content size (not known when streaming), no checksum, no dictionary ID, the input read
in fixed 1 MiB pieces; the blob is a function of the bytes and of the libzstd that the `zstandard` wheel bundles
(pinned in pyproject.toml). A gzip image keeps Docker's schema 2 media types (every blob pushed before stays
valid); a zstd one must be OCI (`tar+zstd` has no Docker media type), so its manifest and config are OCI's too.
"""

from __future__ import annotations

import gzip
import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import zstandard

from ..options.compression import GZIP, GZIP_LEVEL, ZSTD, Compression

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_GZIP_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_GZIP_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_ZSTD_LAYER = "application/vnd.oci.image.layer.v1.tar+zstd"
IMAGE_MANIFESTS = (DOCKER_MANIFEST, OCI_MANIFEST)
DETERMINISTIC_GZIP: dict[str, Any] = {"compresslevel": GZIP_LEVEL, "mtime": 0, "filename": ""}
_PIECE = 1 << 20  # bytes read and written at a time (zstd's output depends on nothing else)


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
}


class _Hashing:
    """A file writer that hashes and counts what passes through (the compressor's sink)."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh, self.sha, self.size = fh, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self.fh.write(data)

    def flush(self) -> None:
        self.fh.flush()


def gzip_layer(src: IO[bytes], dest: Path) -> tuple[str, int]:
    """Compress a layer tar into `dest` as deterministic gzip; returns its blob digest and size."""
    with dest.open("wb") as raw:
        sink = _Hashing(raw)
        with gzip.GzipFile(fileobj=sink, mode="wb", **DETERMINISTIC_GZIP) as gz:
            shutil.copyfileobj(src, gz, _PIECE)
    return f"sha256:{sink.sha.hexdigest()}", sink.size


def zstd_layer(src: IO[bytes], dest: Path, level: int) -> tuple[str, int]:
    """Compress a layer tar into `dest` as deterministic zstd at `level`; returns its blob digest and size."""
    compressor = zstandard.ZstdCompressor(level=level, threads=0, write_checksum=False, write_content_size=False,
                                          write_dict_id=False)
    with dest.open("wb") as raw:
        sink = _Hashing(raw)
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
