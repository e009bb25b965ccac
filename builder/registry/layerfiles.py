"""The files of an image's layers, and how two versions of a layer differ: what `verify` names.

A layer is a tar (plain in `docker save` output, gzip in a registry); its digest changes with any byte of any
header, so a differing layer is explained file by file: path, size, mode, time and content digest. Layers are read
as streams (a GPU layer is gigabytes), one member at a time.
"""

from __future__ import annotations

import hashlib
import json
import stat
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

# What a differing file is reported by, in this order.
FIELDS = ("size", "mode", "mtime", "content")


@dataclass(frozen=True)
class Entry:
    """One member of a layer tar."""

    path: str
    size: int
    mode: str  # the type letter and permission bits, as `ls -l` shows them (`-rw-r--r--`)
    mtime: int
    content: str  # sha256 of a file's bytes; a link's target; '' for a folder or device

    def fields(self) -> dict[str, object]:
        return {"size": self.size, "mode": self.mode, "mtime": self.mtime, "content": self.content}


def entries(stream: IO[bytes]) -> dict[str, Entry]:
    """Every member of a layer tar read from `stream` (plain or gzip), by path without a leading `./`."""
    out: dict[str, Entry] = {}
    with tarfile.open(fileobj=stream, mode="r|*") as tar:
        for member in tar:
            path = member.name.removeprefix("./").rstrip("/") or "."
            content = ""
            if member.isfile():
                fh = tar.extractfile(member)
                digest = hashlib.sha256()
                while fh is not None and (chunk := fh.read(1 << 20)):
                    digest.update(chunk)
                content = f"sha256:{digest.hexdigest()}"
            elif member.issym() or member.islnk():
                content = f"-> {member.linkname}"
            out[path] = Entry(path, member.size, stat.filemode(member.mode | _type_bits(member)), int(member.mtime),
                              content)
    return out


def _type_bits(member: tarfile.TarInfo) -> int:
    if member.isdir():
        return stat.S_IFDIR
    if member.issym():
        return stat.S_IFLNK
    if member.ischr():
        return stat.S_IFCHR
    return stat.S_IFREG


def differences(ours: dict[str, Entry], theirs: dict[str, Entry]) -> list[str]:
    """One line per file that differs between two versions of a layer: `path: field a != b, ...`, or only in one."""
    lines = []
    for path in sorted(set(ours) | set(theirs)):
        a, b = ours.get(path), theirs.get(path)
        if a is None or b is None:
            lines.append(f"{path}: only in the {'registry' if a is None else 'rebuild'}'s layer")
            continue
        fa, fb = a.fields(), b.fields()
        changed = [f"{f} {fa[f]} != {fb[f]}" for f in FIELDS if fa[f] != fb[f]]
        if changed:
            lines.append(f"{path}: {', '.join(changed)}")
    return lines


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
