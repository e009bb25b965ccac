"""Reproducible layers on BuildKit 0.8 (Docker 20.10): the same inputs give the same layer digests.

That BuildKit has neither `SOURCE_DATE_EPOCH` nor `rewrite-timestamp` (0.11 and 0.13, moby/buildkit #2918), so the
Dockerfile does it, as moby/buildkit PR #3456 documents for older versions:
- every RUN step starts with `SEAL_BEGIN` (note its start; `SOURCE_DATE_EPOCH` so pip writes hash-based `.pyc`,
  bpo-34022; no `.pyc` written on import, whose header holds a time) and ends with `SEAL_END`: the logs and
  ldconfig's aux-cache it wrote are emptied, then every file and directory it changed gets `LAYER_EPOCH` as its
  time (`touch --no-dereference`);
- nothing is deleted from a lower layer (a whiteout carries its time, moby/buildkit #3168);
- BuildKit's mount points are created under /dev (a tmpfs), never in the layer (`MOUNT_ROOT`);
- BuildKit 0.8 creates a stub `/etc/hosts` for its bind mount when the base has none and removes it after the
  step, which leaves `/etc` in the layer with the removal's time: the base stage adds one from `BASE_FILES`
  (an ADD of a tar, whose directory times BuildKit applies, unlike COPY's) before any RUN.
The epoch is a constant, not the commit time: a layer's bytes then depend on that layer's inputs alone, so a
change in the lock leaves the layers below it as they were (a commit-time epoch would move every layer).
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

# 1980-01-01T00:00:00Z: the earliest time a zip (a wheel) can hold, as Debian's reproducible builds use it.
LAYER_EPOCH = 315532800
# Where BuildKit mounts secrets, the lock, uv and the wheel cache: in /dev, a tmpfs of the step, so their mount
# points never land in a layer (under /run they were left behind, and removing them later made whiteouts).
MOUNT_ROOT = "/dev/trainimg-build"
SECRETS_DIR = f"{MOUNT_ROOT}/secrets"
# Files a step may write into that hold times or run-specific state: emptied when the step changed them.
VOLATILE_FILES = ("/var/log/*", "/var/cache/ldconfig/aux-cache")
# Scratch folders: what a step leaves at their top (uv's lock files have random names) is removed by its seal. No
# lower layer of a trainimg image holds anything there, so this never removes a lower layer's file.
SCRATCH_DIRS = ("/tmp", "/var/tmp")
# Never touched: other filesystems and the files BuildKit bind-mounts into every step.
NOT_OURS = ("/proc", "/sys", "/dev", "/etc/hosts", "/etc/resolv.conf", "/etc/hostname")

SEAL_BEGIN = (f"export SOURCE_DATE_EPOCH={LAYER_EPOCH} PYTHONDONTWRITEBYTECODE=1 "
              "&& seal_t0=$(( $(date +%s) - 1 ))")


def _any_path(paths: tuple[str, ...]) -> str:
    return "\\( " + " -o ".join(f"-path '{p}'" for p in paths) + " \\)"


SEAL_END = (f"find {' '.join(SCRATCH_DIRS)} -mindepth 1 -maxdepth 1 -newermt \"@$seal_t0\" -exec rm -rf {{}} + "
            f"&& find / -xdev {_any_path(NOT_OURS)} -prune -o -type f -newermt \"@$seal_t0\" "
            f"{_any_path(VOLATILE_FILES)} -exec truncate -s 0 {{}} + "
            f"&& find / -xdev {_any_path(NOT_OURS)} -prune -o -newermt \"@$seal_t0\" -print0 "
            f"| xargs -0r touch --no-dereference --date=@{LAYER_EPOCH}")

# The files the base stage adds before any RUN (path in the repository, and the tar's members).
BASE_FILES = "builder/plan/basefiles.tar"
HOSTS = b"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"


def base_files_tar() -> bytes:
    """The tar `BASE_FILES` holds, byte for byte (a test checks the committed file against it)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        etc = tarfile.TarInfo("etc")
        etc.type, etc.mode, etc.mtime = tarfile.DIRTYPE, 0o755, LAYER_EPOCH
        tar.addfile(etc)
        hosts = tarfile.TarInfo("etc/hosts")
        hosts.size, hosts.mode, hosts.mtime = len(HOSTS), 0o644, LAYER_EPOCH
        tar.addfile(hosts, io.BytesIO(HOSTS))
    return buf.getvalue()


def fix_times(root: Path) -> None:
    """Every file and folder under `root` (a build context) gets `LAYER_EPOCH` as its time and a mode without
    the host's umask in it: what a step copies from the context is then the same on every machine."""
    for path in sorted(root.rglob("*"), reverse=True):
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)
            os.utime(path, (LAYER_EPOCH, LAYER_EPOCH))
