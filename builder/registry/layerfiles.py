"""The files of an image's layers, and how two versions of a layer differ: what `verify` names.

A layer is a tar (plain in `docker save` output, gzip in a registry); its digest changes with any byte of any
header, so a differing layer is explained file by file: path, size, type and mode, owner, time, extended attributes
and content digest (a link's target, a device's numbers). Layers are read as streams (a GPU layer is gigabytes),
one member at a time. An eStargz layer's table of contents records the same fields for each of its files
(estargzread.py builds these entries from it), so a file of a TOC and a file of a tar compare alike.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import stat
import tarfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

# What a differing file is reported by, in this order.
FIELDS = ("size", "mode", "owner", "mtime", "xattrs", "content")
# Each tar entry type as an eStargz TOC names it (the TOC's `type`), and that kind's file type bits.
TAR_KINDS = {tarfile.REGTYPE: "reg", tarfile.AREGTYPE: "reg", tarfile.CONTTYPE: "reg", tarfile.DIRTYPE: "dir",
             tarfile.SYMTYPE: "symlink", tarfile.LNKTYPE: "hardlink", tarfile.CHRTYPE: "char",
             tarfile.BLKTYPE: "block", tarfile.FIFOTYPE: "fifo"}
KIND_BITS = {"reg": stat.S_IFREG, "hardlink": stat.S_IFREG, "dir": stat.S_IFDIR, "symlink": stat.S_IFLNK,
             "char": stat.S_IFCHR, "block": stat.S_IFBLK, "fifo": stat.S_IFIFO}
XATTR_PREFIX = "SCHILY.xattr."  # a pax record holding one extended attribute


@dataclass(frozen=True)
class Entry:
    """One member of a layer tar (or one file of an eStargz TOC)."""

    path: str
    size: int
    mode: str  # the type letter and permission bits, as `ls -l` shows them (`-rw-r--r--`)
    mtime: int
    content: str  # sha256 of a file's bytes; a link's target; a device's numbers; '' for a folder or fifo
    owner: str = ""  # `uid:gid`
    xattrs: str = ""  # `name=base64 value` of each extended attribute, sorted, comma-separated

    def fields(self) -> dict[str, object]:
        return {f: getattr(self, f) for f in FIELDS}


def entry(path: str, kind: str, size: int, mode: int, mtime: int, content: str, owner: tuple[int, int],
          xattrs: Mapping[str, str]) -> Entry:
    """An Entry from what a tar header and a TOC entry both say (`kind`: TAR_KINDS' names; `xattrs` base64)."""
    return Entry(path.removeprefix("./").rstrip("/") or ".", size if kind == "reg" else 0,
                 stat.filemode(mode | KIND_BITS.get(kind, stat.S_IFREG)), mtime, content, f"{owner[0]}:{owner[1]}",
                 ",".join(f"{k}={v}" for k, v in sorted(xattrs.items())))


def member_entry(member: tarfile.TarInfo, digest: str = "") -> Entry:
    """A tar member's Entry; `digest`, its content's sha256 (`sha256:...`) when it is a file."""
    kind = TAR_KINDS.get(member.type, "reg")
    if kind in ("symlink", "hardlink"):
        digest = f"-> {member.linkname}"
    elif kind in ("char", "block"):
        digest = f"device {member.devmajor},{member.devminor}"
    return entry(member.name, kind, member.size, member.mode, whole_seconds(member.mtime), digest,
                 (member.uid, member.gid), member_xattrs(member))


def member_xattrs(member: tarfile.TarInfo) -> dict[str, str]:
    """A tar member's extended attributes, each value base64 (as an eStargz TOC records them)."""
    return {k[len(XATTR_PREFIX):]: base64.b64encode(v.encode("utf-8", "surrogateescape")).decode()
            for k, v in sorted(member.pax_headers.items()) if k.startswith(XATTR_PREFIX)}


def whole_seconds(mtime: float) -> int:
    """A time rounded to the second, as an eStargz TOC records it (a pax header may hold a fraction)."""
    return math.floor(mtime + 0.5)


def entries(stream: IO[bytes], skip: frozenset[str] = frozenset()) -> dict[str, Entry]:
    """Every member of a layer tar read from `stream` (plain or gzip), by path without a leading `./`; the last of
    a path wins, as on disk. `skip`: paths that are not the layer's files (an eStargz's TOC and landmark)."""
    out: dict[str, Entry] = {}
    with tarfile.open(fileobj=stream, mode="r|*") as tar:
        for member in tar:
            digest = ""
            if member.isfile():
                fh = tar.extractfile(member)
                sha = hashlib.sha256()
                while fh is not None and (chunk := fh.read(1 << 20)):
                    sha.update(chunk)
                digest = f"sha256:{sha.hexdigest()}"
            found = member_entry(member, digest)
            if found.path not in skip:
                out[found.path] = found
    return out


def differences(ours: dict[str, Entry], theirs: dict[str, Entry]) -> list[str]:
    """One line per file that differs between two versions of a layer: `path: field a != b, ...`, or only in one."""
    lines = []
    for path in sorted(set(ours) | set(theirs)):
        a, b = ours.get(path), theirs.get(path)
        if a is None or b is None:
            lines.append(f"{path}: only in the {'registry' if a is None else 'rebuild'}'s layer")
            continue
        fa, fb = a.fields(), b.fields()
        changed = [f"{f} {_shown(fa[f])} != {_shown(fb[f])}" for f in FIELDS if fa[f] != fb[f]]
        if changed:
            lines.append(f"{path}: {', '.join(changed)}")
    return lines


def _shown(value: object) -> object:
    return "none" if value == "" else value


@contextmanager
def saved_layers(tar_path: Path) -> Iterator[tuple[list[str], tarfile.TarFile]]:
    """`docker save` output: its layer tars' member names in RootFS order, and the open outer tar."""
    with tarfile.open(tar_path) as outer:
        manifest_file = outer.extractfile("manifest.json")
        assert manifest_file is not None
        (image,) = json.load(manifest_file)
        yield list(image["Layers"]), outer


def saved_layer_entries(tar_path: Path, index: int) -> dict[str, Entry]:
    """The entries of the `index`-th layer of a `docker save` tar."""
    with saved_layers(tar_path) as (names, outer):
        fh = outer.extractfile(names[index])
        assert fh is not None
        return entries(fh)
