"""`--compression gzip|zstd[:LEVEL]` of `push` and `release`: how trainimg's registry client compresses layers.

gzip is what every runtime pulls (Docker 20.10 included) and stays the default, at the one level its blobs have
always been written with (6), so a registry's gzip blobs are reused by every later push. zstd unpacks near the
disk's write speed (shared/reference/nodes.md: one 521 MB torch layer into containerd 1.6, gzip-6 6.24 s, zstd-3
4.75 s) but only containerd >= 1.5, Docker >= 23 and CRI-O pull it; Docker 20.10 downloads it and then fails
("archive/tar: invalid tar header"). So zstd goes under a repository or tag of its own, chosen with `--registry`.
Levels above 19 are zstd's "ultra" levels: a window of up to 128 MiB every node needs to decompress, and minutes
of CPU per gigabyte to compress; they are refused. eStargz (registry/estargz.py) is gzip that every runtime still
pulls whole, each file in its own gzip member behind a table of contents, so a node with a lazy-pulling snapshotter
(stargz-snapshotter, k3s `--snapshotter=stargz`) starts the container before the layers have arrived, fetching
first the files the gate's run read (`prefetch`, from the conformance record); it is written at the gzip level.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..errors import UserInputError

GZIP, ZSTD, ESTARGZ = "gzip", "zstd", "estargz"
COMPRESSIONS = (GZIP, ZSTD, ESTARGZ)
GZIP_LEVEL = 6  # the one gzip level: every blob trainimg ever wrote (registry/blobpush.py DETERMINISTIC_GZIP)
ZSTD_LEVELS = range(1, 20)  # 1..19: the levels without `--ultra`
ZSTD_DEFAULT_LEVEL = 3  # zstd's own default: 120.2 MB for the 521 MB torch layer (gzip-6: 134.6 MB)
FLAG = "--compression"


@dataclass(frozen=True)
class Compression:
    """A layer compression: the algorithm and its level; for eStargz also the files to put first in each layer
    (`prefetch`: absolute paths in first-read order), which change its blobs as the level does."""

    algorithm: str = GZIP
    level: int = GZIP_LEVEL
    prefetch: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.algorithm not in COMPRESSIONS:
            raise UserInputError(f"{self.algorithm!r}: use gzip, zstd[:LEVEL] or estargz", where=FLAG)
        if self.prefetch and self.algorithm != ESTARGZ:
            raise ValueError("a prefetch order is written by eStargz only")
        if self.algorithm in (GZIP, ESTARGZ) and self.level != GZIP_LEVEL:
            raise UserInputError(f"{self.algorithm} is written at level {GZIP_LEVEL} only (its blobs stay the same on "
                                 "every push); a level is for zstd: zstd:LEVEL", where=FLAG)
        if self.algorithm == ZSTD and self.level not in ZSTD_LEVELS:
            raise UserInputError(f"zstd level {self.level}: use {ZSTD_LEVELS.start} to {ZSTD_LEVELS.stop - 1} "
                                 "(above 19 needs zstd's ultra mode and more memory on every node)", where=FLAG)

    @classmethod
    def parse(cls, text: str) -> Compression:
        """`gzip`, `zstd`, `zstd:LEVEL` or `estargz` (one line naming the flag on anything else)."""
        algorithm, sep, level = text.strip().lower().partition(":")
        if algorithm in (GZIP, ESTARGZ) and not sep:
            return cls(algorithm, GZIP_LEVEL)
        if algorithm != ZSTD or (sep and not level.isdigit()):
            raise UserInputError(f"{text!r}: use gzip, zstd, zstd:LEVEL (LEVEL {ZSTD_LEVELS.start} to "
                                 f"{ZSTD_LEVELS.stop - 1}) or estargz", where=FLAG)
        return cls(ZSTD, int(level) if sep else ZSTD_DEFAULT_LEVEL)

    def ordered(self, prefetch: Sequence[str]) -> Compression:
        """This compression writing `prefetch` first (eStargz; the others have no order and stay as they are)."""
        return replace(self, prefetch=tuple(prefetch)) if self.algorithm == ESTARGZ else self

    @property
    def key(self) -> str:
        """What names this compression's blobs in the blob cache and the layer memory: the algorithm and level, and
        for an eStargz with an order the order's digest (another order is another blob)."""
        key = f"{self.algorithm}-{self.level}"
        if self.prefetch:
            key += "-" + hashlib.sha256("\n".join(self.prefetch).encode()).hexdigest()[:16]
        return key

    def __str__(self) -> str:
        return self.algorithm if self.algorithm != ZSTD else f"{ZSTD}:{self.level}"


DEFAULT_COMPRESSION = Compression()
