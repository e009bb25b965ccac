"""Reading files inside a wheel on an index by HTTP range requests: never the whole wheel.

A wheel is a zip: its central directory (at the end) says where each member starts, so a member is two ranges
away: the file's tail (end-of-central-directory record and, usually, the directory entries of the `.dist-info`
files, which wheel builders write last), then the member itself. `metadata` prefers what PEP 658 offers (the
index serves `<file>.metadata`, hash-checked) and falls back to the wheel's own `*.dist-info/METADATA` by ranges.
`scan` inflates one member from its start, range by range, until a pattern shows (the CUDA architecture flags
PyTorch compiles into `libtorch_cuda.so`'s read-only data, 16 MB into a 355 MB member) and stops there.

Zip facts (APPNOTE.TXT, PKWARE): end-of-central-directory 0x06054b50, ZIP64 locator 0x07064b50 and record
0x06064b50, central entry 0x02014b50 (46 fixed bytes), local header 0x04034b50 (30 fixed bytes), method 8 =
deflate (raw, wbits -15), 0 = stored.
"""

from __future__ import annotations

import hashlib
import re
import struct
import zlib
from dataclasses import dataclass
from email.message import Message
from email.parser import BytesParser

from .simpleapi import Http, IndexFile, IndexUnreadable

# Reads from the end: the EOCD and the last directory entries, where wheel builders put the .dist-info files
# (torch 2.14.1's METADATA is the 204th entry from the end: 30 KB)
TAILS = (16 * 1024, 64 * 1024)
HEAD = 16 * 1024  # after the first tail, the directory's first entries (TensorFlow writes .dist-info first)
CHUNK = 1024 * 1024  # range size while inflating a member
EOCD, ZIP64_LOCATOR, ZIP64_EOCD = 0x06054B50, 0x07064B50, 0x06064B50
CENTRAL, LOCAL = 0x02014B50, 0x04034B50
_CENTRAL_SIG, _EOCD_SIG = struct.pack("<I", CENTRAL), struct.pack("<I", EOCD)


@dataclass(frozen=True)
class Member:
    """One file of the zip as its central directory entry says it."""

    name: str
    method: int
    compressed: int
    size: int
    offset: int  # of its local header


def _zip64_extra(extra: bytes, size: int, compressed: int, offset: int) -> tuple[int, int, int]:
    """Sizes and offset from the ZIP64 extra field (id 1), in the order the fields were 0xFFFFFFFF."""
    pos = 0
    while pos + 4 <= len(extra):
        kind, length = struct.unpack_from("<HH", extra, pos)
        if kind == 1:
            values = list(struct.unpack_from(f"<{length // 8}Q", extra, pos + 4))
            if size == 0xFFFFFFFF:
                size = values.pop(0)
            if compressed == 0xFFFFFFFF:
                compressed = values.pop(0)
            if offset == 0xFFFFFFFF:
                offset = values.pop(0)
        pos += 4 + length
    return size, compressed, offset


def parse_entries(data: bytes, pos: int, end: int) -> list[Member] | None:
    """The directory entries from `pos` to exactly `end`, or None when they do not chain there (not a boundary)."""
    members = []
    while pos < end:
        if data[pos:pos + 4] != _CENTRAL_SIG or pos + 46 > end:
            return None
        method, = struct.unpack_from("<H", data, pos + 10)
        compressed, size, nlen, elen, clen = struct.unpack_from("<IIHHH", data, pos + 20)
        offset, = struct.unpack_from("<I", data, pos + 42)
        name = data[pos + 46:pos + 46 + nlen].decode("utf-8", "replace")
        extra = data[pos + 46 + nlen:pos + 46 + nlen + elen]
        size, compressed, offset = _zip64_extra(extra, size, compressed, offset)
        members.append(Member(name, method, compressed, size, offset))
        pos += 46 + nlen + elen + clen
    return members if pos == end else None


def _last_entries(data: bytes, end: int) -> list[Member]:
    """The entries that end the directory at `end`, parsed from the first boundary in `data` that chains there."""
    for match in re.finditer(re.escape(_CENTRAL_SIG), data[:end]):
        found = parse_entries(data, match.start(), end)
        if found is not None:
            return found
    return []


def _first_entries(data: bytes) -> list[Member]:
    """The whole entries at the start of a directory (`data` begins at its first entry)."""
    members, pos = [], 0
    while pos + 46 <= len(data) and data[pos:pos + 4] == _CENTRAL_SIG:
        nlen, elen, clen = struct.unpack_from("<HHH", data, pos + 28)
        step = 46 + nlen + elen + clen
        if pos + step > len(data):
            break
        members += parse_entries(data, pos, pos + step) or []
        pos += step
    return members


class RemoteWheel:
    """A wheel on an index, read by ranges: its directory once, then members on demand."""

    def __init__(self, http: Http, file: IndexFile) -> None:
        self.http, self.file = http, file
        self._members: list[Member] | None = None
        self._size = 0
        self._directory = (0, 0)  # start, end of the central directory

    def _tail(self, length: int) -> bytes:
        data, self._size = self.http.range(self.file.url, None, length)
        at = data.rfind(_EOCD_SIG)
        if at < 0:
            raise IndexUnreadable(f"{self.file.url}: no end-of-central-directory record in its last {length} "
                                  "bytes: not a zip (a wheel is one)")
        count, size, offset = struct.unpack_from("<HII", data, at + 10)
        if 0xFFFFFFFF in (size, offset) or count == 0xFFFF:
            locator = data[at - 20:at]
            if len(locator) != 20 or struct.unpack_from("<I", locator)[0] != ZIP64_LOCATOR:
                raise IndexUnreadable(f"{self.file.url}: a ZIP64 wheel without its locator")
            record_at, = struct.unpack_from("<Q", locator, 8)
            record, _ = self.http.range(self.file.url, record_at, record_at + 55)
            size, offset = struct.unpack_from("<QQ", record, 40)
        self._directory = (offset, offset + size)
        return data

    def members(self, wanted: str | None = None) -> list[Member]:
        """The directory's entries. With `wanted` (a name suffix), a part of the directory is enough when it holds
        a match: its last entries (the file's last TAILS bytes), where most builders put the `.dist-info` files, or
        its first HEAD bytes, where TensorFlow's put them; the whole directory (1.3 MB for torch's 13,000 files,
        3 MB for TensorFlow's 24,000) is read only when neither holds one."""
        if self._members is not None:
            return self._members
        for length in TAILS:
            tail = self._tail(length)
            tail_start = self._size - len(tail)
            start, end = self._directory
            if start >= tail_start:
                self._members = parse_entries(tail, start - tail_start, end - tail_start) or []
                return self._members
            if wanted is None:
                break
            last = _last_entries(tail, end - tail_start)
            if any(m.name.endswith(wanted) for m in last):
                return last
            if length == TAILS[0]:
                head, _ = self.http.range(self.file.url, start, min(start + HEAD, end) - 1)
                first = _first_entries(head)
                if any(m.name.endswith(wanted) for m in first):
                    return first
        data, _ = self.http.range(self.file.url, start, end - 1)
        self._members = parse_entries(data, 0, len(data)) or []
        return self._members

    def member(self, suffix: str) -> Member:
        found = [m for m in self.members(suffix) if m.name.endswith(suffix)]
        if len(found) != 1:
            raise IndexUnreadable(f"{self.file.url}: {len(found)} members named *{suffix}")
        return found[0]

    def _data_start(self, m: Member) -> int:
        header, _ = self.http.range(self.file.url, m.offset, m.offset + 29)
        if struct.unpack_from("<I", header)[0] != LOCAL:
            raise IndexUnreadable(f"{self.file.url}: no local header for {m.name} where the directory says")
        nlen, elen = struct.unpack_from("<HH", header, 26)
        return m.offset + 30 + nlen + elen

    def read(self, m: Member) -> bytes:
        """A small member whole (METADATA, a build-info module)."""
        start = self._data_start(m)
        raw, _ = self.http.range(self.file.url, start, start + m.compressed - 1) if m.compressed else (b"", 0)
        return zlib.decompress(raw, -15) if m.method == 8 else raw

    def scan(self, m: Member, pattern: re.Pattern[bytes], limit: int) -> tuple[bytes | None, int]:
        """Inflate `m` from its start, CHUNK by CHUNK, until `pattern` matches (returns the match and the compressed
        bytes read) or `limit` compressed bytes were read or the member ended (None)."""
        pos = self._data_start(m)
        end = pos + m.compressed
        inflate = zlib.decompressobj(-15) if m.method == 8 else None
        window, read = b"", 0
        while pos < end and read < limit:
            raw, _ = self.http.range(self.file.url, pos, min(pos + CHUNK, end) - 1)
            pos, read = pos + len(raw), read + len(raw)
            window = window[-4096:] + (inflate.decompress(raw) if inflate else raw)
            found = pattern.search(window)
            if found and found.end() < len(window) - 1:  # the whole match, not one cut at the window's end
                return found.group(), read
        return None, read


def metadata(http: Http, file: IndexFile) -> tuple[Message, str]:
    """A wheel's core metadata and where it was read: the index's PEP 658 file (hash-checked), else the wheel's
    ``*.dist-info/METADATA`` by ranges."""
    if file.has_metadata:
        data = http.get(file.url + ".metadata")
        if file.metadata_sha256 and hashlib.sha256(data).hexdigest() != file.metadata_sha256:
            raise IndexUnreadable(f"{file.url}.metadata does not match the hash the index gives for it")
        return BytesParser().parsebytes(data), f"{file.url}.metadata"
    wheel = RemoteWheel(http, file)
    m = wheel.member(".dist-info/METADATA")
    return BytesParser().parsebytes(wheel.read(m)), f"{file.url} ({m.name}, by range requests)"
