"""Where the gate's containers write what their processes read (runtime/reads.py), and the one order made of it.

A gate run gets a folder per part: the all-reduce's replicas, the GPU all-reduce's, the probe's. Each is mounted
read-write at READS_MOUNT in that part's containers, with READS_ENV naming it, so every runtime process there leaves
a file of the image's files it read. After the run the files are merged into the prefetch order the conformance
record keeps (records.py) and an eStargz push writes first (registry/estargz.py): the all-reduce's processes first
(the training start: the framework import, the process group, the all-reduce), then the GPU all-reduce's, then the
probe's checks', each part's processes in start order, every path where it was first seen. The folders go with the
run. A part whose containers wrote nothing (an image whose baked runtime predates the recording) adds nothing.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from types import TracebackType

from ..runtime.reads import READS_ENV, merge

READS_MOUNT = "/run/trainimg-reads"  # the folder's path in the containers
PARTS = ("allreduce", "nccl", "probe")  # the order's parts, first first


class StartReads:
    """`with StartReads() as reads:` the run's folders (`mount`, `env`), then `order()`; removed after."""

    env = {READS_ENV: READS_MOUNT}

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="trainimg-reads-"))

    def __enter__(self) -> StartReads:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def mount(self, part: str) -> dict[str, str]:
        """{host folder: READS_MOUNT} for the containers of `part` (one of PARTS); writable by any user there."""
        folder = self.root / part
        folder.mkdir(exist_ok=True)
        folder.chmod(0o777)
        return {str(folder): READS_MOUNT}

    def order(self) -> list[str]:
        """The files the run's processes read, merged part by part (PARTS' order)."""
        out: dict[str, None] = {}
        for part in PARTS:
            for path in merge(_records(self.root / part)):
                out.setdefault(path)
        return list(out)


def _records(folder: Path) -> list[dict]:
    """The processes' files in `folder` (one being written, or malformed, is left out)."""
    records = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            data = json.loads(path.read_text(encoding="utf-8", errors="surrogateescape"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            records.append(data)
    return records
