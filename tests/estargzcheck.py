"""eStargz blobs read by stargz-snapshotter's own code: `estargz-verify` (tests/estargzcheck/main.go), a small Go
program on Debian's copy of the snapshotter's `estargz` package (golang-github-containerd-stargz-snapshotter-dev,
which .ci/setup-host installs with golang-go), built on demand in GOPATH mode once per machine and source version.

It opens a blob with `estargz.Open` (footer, TOC), checks the TOC against the descriptor's TOC digest
(`VerifyTOC`), reads every chunk of every file from its own gzip member and checks its chunkDigest, and says where
the landmark is (the snapshotter prefetches the blob before it) and where named files' first chunks are.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).parent / "estargzcheck" / "main.go"
GOCODE = "/usr/share/gocode"  # Debian's Go library sources (GOPATH layout)


def verifier(go: str) -> str:
    """The built program's path (`go`: the Go compiler); built when this source version has no binary yet."""
    version = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / f"trainimg-estargz-verify-{version}"
    binary = folder / "estargz-verify"
    folder.mkdir(exist_ok=True)
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.exists():
            gopath = folder / "gopath"
            package = gopath / "src" / "estargzcheck"
            package.mkdir(parents=True, exist_ok=True)
            shutil.copy(SOURCE, package / "main.go")
            env = {**os.environ, "GO111MODULE": "off", "GOPATH": f"{gopath}:{GOCODE}", "GOFLAGS": "",
                   "GOCACHE": str(folder / "cache")}
            built = subprocess.run([go, "build", "-o", str(binary) + ".part", "."], cwd=package, env=env,
                                   capture_output=True, text=True, timeout=600)
            if built.returncode != 0:
                raise AssertionError(f"estargz-verify did not build against {GOCODE}: {built.stderr[-2000:]}")
            os.replace(str(binary) + ".part", binary)
    return str(binary)


def verify(go: str, blob: Path, toc_digest: str, *names: str) -> dict[str, Any]:
    """The program's report on `blob` (it exits 1 naming the first thing that does not verify: an AssertionError)."""
    run = subprocess.run([verifier(go), str(blob), toc_digest, *names], capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        raise AssertionError(f"estargz-verify refused {blob.name}: {run.stderr.strip()}")
    return json.loads(run.stdout)


def gunzip(blob: Path) -> bytes:
    """The tar an eStargz `blob` unpacks to, as any gunzip reads it: every gzip member in turn.

    Not `gzip.decompress(blob.read_bytes())`: on Python 3.11 it copies the rest of the blob after each member, and a
    base layer's blob holds thousands of members (one per file and chunk), which took minutes of one core.
    """
    with gzip.open(blob) as stream:
        return stream.read()


def tar_digest(blob: Path) -> tuple[str, int]:
    """(the sha256 diff ID, the size) of the tar `blob` unpacks to, read in a stream."""
    digest, size = hashlib.sha256(), 0
    with gzip.open(blob) as stream:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return f"sha256:{digest.hexdigest()}", size
