"""An eStargz layer in a registry read back through its TOC: is it a given layer tar, reordered, with its own entries?

An eStargz push (estargz.py) names in the image config the digest of the tar its blob unpacks to, not the engine's:
the layer's entries in the TOC's order (the prefetched first), the landmark among them, the TOC last. So a rebuilt
layer is compared with a pushed eStargz one without fetching the blob: the footer and the TOC's gzip member are
read by range requests (as a lazy node reads them), the TOC's JSON is checked against the descriptor's
`containerd.io/snapshot/stargz/toc.digest`, and the rebuilt tar is hashed as the eStargz tar of it in that order
would be (each entry's header and payload byte for byte, the landmark as the writer writes it, the TOC's member as
the registry holds it). That digest equal to the config's diff ID is what a whole pull unpacks and checks; the TOC's
files equal to the rebuild's (size, type and mode, owner, time, xattrs, content digest, link target, and every
chunk's digest) is what a lazy node shows and checks chunk by chunk. Only the TOC, the landmarks and the order are
left out. A TOC's offsets are not compared: a wrong one fails the lazy node's chunk check, loudly.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import tarfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any

from ..errors import RegistryError
from .estargz import (FOOTER_SIZE, LANDMARK_CONTENT, NO_PREFETCH_LANDMARK, OWN_ENTRIES, PREFETCH_LANDMARK, TOC_NAME,
                      clean_name, own_entry_header, padded)
from .layerfiles import Entry, entry, member_entry

_FOOTER = re.compile(rb"\x1f\x8b\x08\x04.{8}SG\x16\x00([0-9a-f]{16})STARGZ.{13}", re.S)  # estargz.footer
_MAX_TOC = 256 << 20  # compressed bytes of a TOC's member: a GPU framework layer's is a few MB
_PIECE = 1 << 20


@dataclass(frozen=True)
class Toc:
    """A pushed eStargz layer's table of contents: its entries (the JSON's `entries`), and its gzip member's
    plaintext (the TOC's tar entry and the tar's end: the last bytes of the tar the blob unpacks to)."""

    entries: list[dict[str, Any]]
    tail: bytes

    def files(self) -> dict[str, Entry]:
        """The layer's files as the TOC records them (not its landmark), by path."""
        return {found.path: found for found in (_toc_entry(e) for e in self.entries if e.get("type") != "chunk")
                if found.path not in OWN_ENTRIES}


@dataclass
class Reordered:
    """A layer tar read in a TOC's order: `diff_id`, the digest of the eStargz tar of it in that order with that
    TOC ("" when the two do not name the same files); `files`, its entries; `chunks`, one line per chunk whose
    recorded digest is not that of the layer's bytes there."""

    diff_id: str
    files: dict[str, Entry] = field(default_factory=dict)
    chunks: list[str] = field(default_factory=list)


def read_toc(read: Callable[[int, int], bytes], size: int, toc_digest: str, where: str) -> Toc:
    """The TOC of an eStargz blob of `size` bytes, `read(start, end)` giving its bytes from `start` up to `end` (the
    registry's range requests), checked against `toc_digest`; RegistryError saying what is wrong with `where` (the
    blob) when it cannot be read or is not that TOC."""
    if size <= FOOTER_SIZE:
        raise RegistryError(f"{where} is {size} bytes, too short for its footer")
    found = _FOOTER.fullmatch(read(size - FOOTER_SIZE, size))
    offset = int(found.group(1), 16) if found else -1
    if not 0 <= offset < size - FOOTER_SIZE or size - FOOTER_SIZE - offset > _MAX_TOC:
        raise RegistryError(f"{where} ends in no eStargz footer pointing at a TOC")
    member = read(offset, size - FOOTER_SIZE)
    try:
        tail = gzip.decompress(member)
        with tarfile.open(fileobj=io.BytesIO(tail), mode="r:") as tar:
            first = tar.next()
            fh = tar.extractfile(first) if first is not None and first.name == TOC_NAME else None
            text = fh.read() if fh is not None else b""
    except (OSError, EOFError, zlib.error, tarfile.TarError) as exc:
        raise RegistryError(f"{where}: its TOC's gzip member cannot be read ({exc})") from None
    if f"sha256:{hashlib.sha256(text).hexdigest()}" != toc_digest:
        raise RegistryError(f"{where}: its TOC is not the one its descriptor's toc.digest names ({toc_digest})")
    try:
        entries = json.loads(text)["entries"]
    except (ValueError, KeyError, TypeError):
        raise RegistryError(f"{where}: its TOC is not eStargz's JSON") from None
    return Toc(list(entries), tail)


def reordered(layer: IO[bytes], toc: Toc) -> Reordered:
    """Hash the layer tar `layer` (seekable) as its eStargz tar in `toc`'s order would be, reading each entry once.
    Entries the layer holds twice count once (the last, as the writer keeps it); its own TOC or landmark is none."""
    try:
        with tarfile.open(fileobj=layer, mode="r:") as tar:
            members = tar.getmembers()
    except tarfile.TarError as exc:
        raise RegistryError(f"the rebuild's layer tar cannot be read: {exc}") from None
    left = {clean_name(m.name): m for m in members}
    for own in OWN_ENTRIES:
        left.pop(own, None)
    out, diff = Reordered(""), hashlib.sha256()
    complete = True
    for name, chunks in _in_order(toc.entries):
        if name in (PREFETCH_LANDMARK, NO_PREFETCH_LANDMARK):
            diff.update(own_entry_header(name, len(LANDMARK_CONTENT)) + padded(LANDMARK_CONTENT))
            continue
        member = left.pop(name, None)
        if member is None:
            complete = False
            continue
        layer.seek(member.offset)
        diff.update(layer.read(member.offset_data - member.offset))
        _add(out, layer, member, chunks, diff.update)
        if member.isfile():
            diff.update(bytes(-member.size % 512))
    for member in left.values():  # files the TOC does not name: no order makes the eStargz tar
        complete = False
        _add(out, layer, member, [], lambda data: None)
    diff.update(toc.tail)
    out.diff_id = f"sha256:{diff.hexdigest()}" if complete else ""
    return out


def _in_order(entries: list[dict[str, Any]]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """(clean name, its entry and chunk entries) of each TOC entry, in the TOC's order."""
    current: list[dict[str, Any]] = []
    for e in entries:
        if e.get("type") == "chunk" and current:
            current.append(e)
            continue
        if current:
            yield clean_name(str(current[0].get("name", ""))), current
        current = [e]
    if current:
        yield clean_name(str(current[0].get("name", ""))), current


def _add(out: Reordered, layer: IO[bytes], member: tarfile.TarInfo, chunks: list[dict[str, Any]],
         feed: Callable[[bytes], object]) -> None:
    """`member`'s Entry into `out`, its payload hashed (and given to `feed`), each of `chunks`' recorded digests
    checked against the layer's bytes from that chunk's offset to the next one's."""
    if not member.isfile():
        found = member_entry(member)
        out.files[found.path] = found
        return
    recorded = {int(c.get("chunkOffset") or 0): str(c["chunkDigest"]) for c in chunks if c.get("chunkDigest")}
    bounds = sorted({at for at in recorded if 0 < at < member.size} | {0, member.size})
    whole, wrong = hashlib.sha256(), []
    layer.seek(member.offset_data)
    for start, end in zip(bounds, bounds[1:]):
        piece = hashlib.sha256() if len(bounds) > 2 else whole  # a file of one chunk is hashed once
        for at in range(start, end, _PIECE):
            data = layer.read(min(_PIECE, end - at))
            whole.update(data)
            if piece is not whole:
                piece.update(data)
            feed(data)
        got = f"sha256:{piece.hexdigest()}"
        if recorded.get(start, got) != got:
            wrong.append(f"{clean_name(member.name)}: chunk at {start}: TOC {recorded[start]} != layer {got}")
    found = member_entry(member, f"sha256:{whole.hexdigest()}")
    out.files[found.path] = found
    if chunks and chunks[0].get("digest") == found.content:  # else its content differs, which that line says
        out.chunks += wrong


def _toc_entry(e: dict[str, Any]) -> Entry:
    """A TOC entry as an Entry (the fields a tar member gives, layerfiles.member_entry)."""
    kind = str(e.get("type", ""))
    content = str(e.get("digest") or "") if kind == "reg" else ""
    if kind in ("symlink", "hardlink"):
        content = f"-> {e.get('linkName', '')}"
    elif kind in ("char", "block"):
        content = f"device {int(e.get('devMajor') or 0)},{int(e.get('devMinor') or 0)}"
    modtime = str(e.get("modtime") or "")
    mtime = int(datetime.fromisoformat(modtime).timestamp()) if modtime else 0
    return entry(str(e.get("name", "")), kind, int(e.get("size") or 0), int(e.get("mode") or 0), mtime, content,
                 (int(e.get("uid") or 0), int(e.get("gid") or 0)), dict(e.get("xattrs") or {}))
