"""eStargz layers: gzip every runtime pulls whole, which a lazy-pulling snapshotter reads file by file.

The format is stargz-snapshotter's `docs/estargz.md` (Debian's `stargz-snapshotter` ships it; the reference writer
is its Go package `estargz`, in `golang-github-containerd-stargz-snapshotter-dev`): the layer tar's entries, each
non-empty regular file's payload starting a gzip member of its own (a file over CHUNK bytes one member per chunk),
then the table of contents `stargz.index.json` as the last tar entry in a member of its own, then a 51-byte empty
gzip member whose extra field holds the TOC's offset (`%016xSTARGZ`). The TOC names every entry with its metadata,
each payload member's offset and each chunk's sha256; the layer descriptor carries the sha256 of the TOC's JSON
(TOC_DIGEST), which verifies the TOC, which verifies every chunk. Concatenated gzip members are one gzip stream, so
Docker 20.10 or any other puller unpacks the layer whole.

Prefetch: the files of `prefetch` (the gate's run read them, in that order) that the layer holds go first, each
after its parent folders and a hard link after its target, then the `.prefetch.landmark` entry: the snapshotter
fetches everything before it in one range request before the container starts. A layer holding none of them
starts with `.no.prefetch.landmark`, as the specification asks (Debian's ctr-remote 0.12 writes
`.prefetch.landmark` there). The other entries follow in the layer's own order.

Deterministic as the gzip path: each entry's header is copied byte for byte from the layer tar (only the order
changes), each member deflated at GZIP_LEVEL with header time 0 and OS unknown, a fixed chunk size, the TOC's JSON
compact in a fixed field order; the blob is a function of the layer tar, the order and zlib. The members are
deflated on the gzip path's threads. The tar the blob unpacks to is not the engine's layer (the landmark and the TOC
are entries of it): its digest is the image config's diff ID for the layer (`EstargzLayer.diff_id`: what the
reference writer's `Blob.DiffID` is) and its size the `io.containers.estargz.uncompressed-size` annotation.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import posixpath
import struct
import tarfile
import zlib
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, NamedTuple

from ..errors import RegistryError
from ..options.compression import GZIP_LEVEL
from .layerformats import DEFLATERS, GZIP_HEADER, THREADS, HashingWriter

TOC_NAME = "stargz.index.json"
PREFETCH_LANDMARK = ".prefetch.landmark"
NO_PREFETCH_LANDMARK = ".no.prefetch.landmark"
TOC_DIGEST = "containerd.io/snapshot/stargz/toc.digest"
UNCOMPRESSED_SIZE = "io.containers.estargz.uncompressed-size"
CHUNK = 4 << 20  # the reference writer's default chunk size
FOOTER_SIZE = 51
_LANDMARK_CONTENT = b"\x0f"  # "4 bits contents 0xf"
_BLOCK = 512
_BATCH = 1 << 20  # plaintext bytes of the members one task deflates (a layer has tens of thousands of small ones)
_XATTR = "SCHILY.xattr."
_TYPES = {tarfile.REGTYPE: "reg", tarfile.AREGTYPE: "reg", tarfile.CONTTYPE: "reg", tarfile.DIRTYPE: "dir",
          tarfile.SYMTYPE: "symlink", tarfile.LNKTYPE: "hardlink", tarfile.CHRTYPE: "char",
          tarfile.BLKTYPE: "block", tarfile.FIFOTYPE: "fifo"}
_OWN_ENTRIES = (TOC_NAME, PREFETCH_LANDMARK, NO_PREFETCH_LANDMARK)  # an earlier conversion's: written anew


@dataclass(frozen=True)
class EstargzLayer:
    """An eStargz blob written: its digest and size, the digest and size of the tar it unpacks to, its TOC's
    digest."""

    digest: str
    size: int
    diff_id: str
    uncompressed_size: int
    toc_digest: str

    def annotations(self) -> tuple[tuple[str, str], ...]:
        """The layer descriptor's annotations (sorted)."""
        return ((TOC_DIGEST, self.toc_digest), (UNCOMPRESSED_SIZE, str(self.uncompressed_size)))


@dataclass
class _TocEntry:
    """One TOCEntry; the fields in the reference's order (its JSON names in `_JSON_NAMES`), empty ones left out."""

    name: str
    type: str
    size: int = 0
    modtime: str = ""
    link_name: str = ""
    mode: int = 0
    uid: int = 0
    gid: int = 0
    user_name: str = ""
    group_name: str = ""
    offset: int = 0
    dev_major: int = 0
    dev_minor: int = 0
    xattrs: dict[str, str] = field(default_factory=dict)
    digest: str = ""
    chunk_offset: int = 0
    chunk_size: int = 0
    chunk_digest: str = ""

    def to_json(self) -> dict[str, Any]:
        return {_JSON_NAMES.get(f.name, f.name): getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) or f.name in ("name", "type")}


_JSON_NAMES = {"link_name": "linkName", "user_name": "userName", "group_name": "groupName", "dev_major": "devMajor",
               "dev_minor": "devMinor", "chunk_offset": "chunkOffset", "chunk_size": "chunkSize",
               "chunk_digest": "chunkDigest"}


class _Item(NamedTuple):
    """One tar entry as written: its header blocks, its TOC entry, and its payload (`inline`, or `size` bytes at
    `at` in the layer tar)."""

    header: bytes
    entry: _TocEntry
    size: int = 0
    at: int = 0
    inline: bytes = b""


def estargz_layer(plain: Path, dest: Path, prefetch: Sequence[str] = (),
                  pool: ThreadPoolExecutor = DEFLATERS) -> EstargzLayer:
    """Write the layer tar `plain` into `dest` as eStargz, the files of `prefetch` it holds first."""
    members = _members(plain)
    first, rest = _ordered(members, prefetch)
    toc: list[_TocEntry] = []
    diff, uncompressed = hashlib.sha256(), 0
    waiting: deque[tuple[list[tuple[bytes, _TocEntry | None]], Future[list[bytes]]]] = deque()
    with plain.open("rb") as src, dest.open("wb") as raw:
        sink = HashingWriter(raw)

        def write_oldest() -> None:
            nonlocal uncompressed
            batch, packed = waiting.popleft()
            for (data, starts), member in zip(batch, packed.result()):
                if starts is not None:
                    starts.offset = sink.size
                diff.update(data)
                uncompressed += len(data)
                sink.write(member)

        items = _items(src, first, rest)
        for batch in _batches(_plaintexts(src, items, toc)):
            waiting.append((batch, pool.submit(_gzip_members, [data for data, _ in batch])))
            while len(waiting) > 2 * THREADS:
                write_oldest()
        while waiting:
            write_oldest()
        toc_json = _toc_json(toc)
        toc_plain = _tar_header(TOC_NAME, len(toc_json)) + _padded(toc_json) + bytes(2 * _BLOCK)
        toc_offset = sink.size
        sink.write(gzip_member(toc_plain))
        sink.write(footer(toc_offset))
        diff.update(toc_plain)
        uncompressed += len(toc_plain)
    return EstargzLayer(f"sha256:{sink.sha.hexdigest()}", sink.size, f"sha256:{diff.hexdigest()}",
                        uncompressed, f"sha256:{hashlib.sha256(toc_json).hexdigest()}")


def footer(toc_offset: int) -> bytes:
    """The 51-byte footer: an empty gzip member (stored, final) whose extra field is `SG`, 22, `%016xSTARGZ`."""
    subfield = b"%016xSTARGZ" % toc_offset
    extra = b"SG" + struct.pack("<H", len(subfield)) + subfield
    head = b"\x1f\x8b\x08\x04\x00\x00\x00\x00\x00\xff" + struct.pack("<H", len(extra)) + extra
    return head + b"\x01\x00\x00\xff\xff" + struct.pack("<II", 0, 0)


def gzip_member(data: bytes, level: int = GZIP_LEVEL) -> bytes:
    """`data` as one gzip member: the gzip path's fixed header, raw deflate at `level`, CRC and size."""
    deflater = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS, zlib.DEF_MEM_LEVEL, zlib.Z_DEFAULT_STRATEGY)
    return (GZIP_HEADER + deflater.compress(data) + deflater.flush()
            + struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF))


def _gzip_members(plains: list[bytes]) -> list[bytes]:
    return [gzip_member(data) for data in plains]


def clean_name(name: str) -> str:
    """A tar or TOC entry's name as the reference compares them: relative to the root, no `./`, `..` or `//`."""
    return posixpath.normpath("/" + name).lstrip("/")


def _members(plain: Path) -> list[tarfile.TarInfo]:
    """The layer tar's entries (the last of a name only, as the reference keeps it), without an earlier
    conversion's TOC and landmarks."""
    try:
        with tarfile.open(plain, "r:") as tar:
            members = tar.getmembers()
            if tar.pax_headers:
                raise RegistryError(f"layer tar {plain.name} has global pax headers, which eStargz cannot keep")
    except tarfile.TarError as exc:
        raise RegistryError(f"layer tar {plain.name} cannot be read for eStargz: {exc}") from None
    last = {clean_name(m.name): m for m in members}
    for m in members:
        if m.type not in _TYPES:
            raise RegistryError(f"layer entry {m.name!r} is a tar entry of type {m.type!r}, which eStargz cannot "
                                "hold (regular files, folders, links, devices and fifos)")
    return [m for m in members if last[clean_name(m.name)] is m and clean_name(m.name) not in _OWN_ENTRIES]


def _ordered(members: list[tarfile.TarInfo], prefetch: Sequence[str]
             ) -> tuple[list[tarfile.TarInfo], list[tarfile.TarInfo]]:
    """(the entries to prefetch: each file of `prefetch` this layer holds as a regular file or a hard link, in that
    order, after its parent folders and its link's target; the others in the layer's order)."""
    index = {clean_name(m.name): m for m in members}
    first: dict[str, tarfile.TarInfo] = {}
    visiting: set[str] = set()

    def move(name: str) -> None:
        member = index.get(name)
        if member is None or name in first or name in visiting:
            return
        visiting.add(name)
        move(posixpath.dirname(name))
        if member.islnk():
            move(clean_name(member.linkname))
        first[name] = member

    for path in prefetch:
        name = clean_name(path)
        if name in index and (index[name].isreg() or index[name].islnk()):
            move(name)
    return list(first.values()), [m for m in members if clean_name(m.name) not in first]


def _items(src: IO[bytes], first: list[tarfile.TarInfo], rest: list[tarfile.TarInfo]) -> Iterator[_Item]:
    """The entries in the order written, the landmark between the prefetched and the others (or at the top)."""
    owners: dict[str, dict[int, str]] = {"user": {}, "group": {}}
    landmark = PREFETCH_LANDMARK if first else NO_PREFETCH_LANDMARK
    for member in first:
        yield _item(src, member, owners)
    yield _Item(_tar_header(landmark, len(_LANDMARK_CONTENT)), _TocEntry(landmark, "reg", len(_LANDMARK_CONTENT)),
                len(_LANDMARK_CONTENT), inline=_LANDMARK_CONTENT)
    for member in rest:
        yield _item(src, member, owners)


def _item(src: IO[bytes], m: tarfile.TarInfo, owners: dict[str, dict[int, str]]) -> _Item:
    """A layer tar entry: its header blocks as they are in the tar (pax and long-name headers included)."""
    src.seek(m.offset)
    header = src.read(m.offset_data - m.offset)
    kind = _TYPES[m.type]
    entry = _TocEntry(m.name + "/" if kind == "dir" else m.name, kind, mode=m.mode, uid=m.uid, gid=m.gid,
                      user_name=_if_changed(owners["user"], m.uid, m.uname),
                      group_name=_if_changed(owners["group"], m.gid, m.gname), modtime=_modtime(m.mtime),
                      xattrs={k[len(_XATTR):]: base64.b64encode(v.encode("utf-8", "surrogateescape")).decode()
                              for k, v in sorted(m.pax_headers.items()) if k.startswith(_XATTR)})
    if kind in ("symlink", "hardlink"):
        entry.link_name = m.linkname
    elif kind in ("char", "block"):
        entry.dev_major, entry.dev_minor = m.devmajor, m.devminor
    if kind != "reg":
        return _Item(header, entry)
    entry.size = m.size
    return _Item(header, entry, m.size, m.offset_data)


def _plaintexts(src: IO[bytes], items: Iterator[_Item], toc: list[_TocEntry]
                ) -> Iterator[tuple[bytes, _TocEntry | None]]:
    """The uncompressed eStargz without its TOC, member by member: (plaintext, the TOC entry whose payload starts
    it). A payload starts a member, each CHUNK of it another; its padding and the headers after it stay in the
    member of its last chunk. Entries are appended to `toc` as they are written."""
    current, starts = bytearray(), None
    for item in items:
        current += item.header
        toc.append(item.entry)
        digest = hashlib.sha256()
        if item.size:
            yield bytes(current), starts
            entry, done = item.entry, 0
            while done < item.size:
                data = item.inline[done:done + CHUNK] if item.inline else _read_at(src, item.at + done,
                                                                                  min(CHUNK, item.size - done))
                digest.update(data)
                entry.chunk_digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
                if done:
                    toc.append(entry)
                done += len(data)
                if done < item.size:
                    entry.chunk_size = len(data)
                    yield data, entry
                    entry = _TocEntry(item.entry.name, "chunk", chunk_offset=done)
                else:
                    current, starts = bytearray(data + bytes(-item.size % _BLOCK)), entry
        if item.entry.type == "reg":
            item.entry.digest = f"sha256:{digest.hexdigest()}"
    if current:
        yield bytes(current), starts


def _read_at(src: IO[bytes], offset: int, size: int) -> bytes:
    src.seek(offset)
    data = src.read(size)
    if len(data) != size:
        raise RegistryError(f"layer tar ends inside a file's payload at {offset + len(data)}")
    return data


def _batches(plaintexts: Iterator[tuple[bytes, _TocEntry | None]]
             ) -> Iterator[list[tuple[bytes, _TocEntry | None]]]:
    """The members in runs of about `_BATCH` plaintext bytes: one deflating task each."""
    batch: list[tuple[bytes, _TocEntry | None]] = []
    size = 0
    for item in plaintexts:
        batch.append(item)
        size += len(item[0])
        if size >= _BATCH:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _toc_json(toc: list[_TocEntry]) -> bytes:
    """The TOC in the reference's field order, compact (the reference indents it: a lazy node fetches the TOC before
    anything else, and a framework's layer has thousands of entries); a name that is not UTF-8 is refused."""
    text = json.dumps({"version": 1, "entries": [e.to_json() for e in toc]}, separators=(",", ":"),
                      ensure_ascii=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        bad = next(e.name for e in toc if not _utf8(e.name) or not _utf8(e.link_name))
        raise RegistryError(f"layer entry {bad!r} is not UTF-8: an eStargz TOC cannot name it") from None


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _tar_header(name: str, size: int) -> bytes:
    """A regular file's ustar header as the reference writes its TOC and landmarks: mode, owner and time 0."""
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime, info.uname, info.gname = size, 0, 0, "", ""
    return info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "strict")


def _padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % _BLOCK)


def _if_changed(last: dict[int, str], owner: int, name: str) -> str:
    """A user or group name only when it differs from the last one given for that ID (the reference's TOC)."""
    if not name or last.get(owner) == name:
        return ""
    last[owner] = name
    return name


def _modtime(mtime: float) -> str:
    """RFC 3339 UTC, rounded to the second; "" for time 0."""
    seconds = math.floor(mtime + 0.5)
    return "" if seconds == 0 else datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
