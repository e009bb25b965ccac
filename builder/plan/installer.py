"""The installers a build can use for the lock (uv by default, pip with `--installer pip`), and what they say.

Both install `images/<variant>/requirements.lock` the same way: every wheel checked against the lock's hashes,
no resolver (`--require-hashes --no-deps`). uv comes from a pinned, hash-checked wheel into a stage of its own
that the install step mounts, so it never lands in the image. A wheel whose hash differs from the lock's makes
either installer print several lines; `hash_mismatch` turns them into the one line the build fails with.
"""

from __future__ import annotations

import re
from collections.abc import Sequence


from ..options import DEFAULT_INSTALLER, INSTALLERS
from ..runtime.contract import VENV
from .reproducible import MOUNT_ROOT, SECRETS_DIR

UV, PIP = INSTALLERS
__all__ = ["DEFAULT_INSTALLER", "INSTALLERS", "UV", "PIP", "SECRETS_DIR", "hash_mismatch"]
# uv's wheel per architecture (PyPI: uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl, and
# uv-0.13.9-py3-none-manylinux_2_28_aarch64.whl for arm64 images); the same version `trainimg lock` resolves with
# (pyproject.toml pins it), so lock and build agree on what a wheel is.
UV_VERSION = "0.13.9"
# The newest manylinux platform uv 0.13.9's `--python-platform` names (x86_64-manylinux_2_40, aarch64-manylinux_2_40:
# `uv pip compile --help`): a lock for an OS with a newer glibc (Debian 13: 2.41) is resolved for this one, which
# every wheel tagged for that glibc or older installs on (PEP 600).
UV_MANYLINUX_NEWEST = "2.40"
UV_SHA256_BY_ARCH = {"amd64": "d7f459fe4fd247d830351c75686d3996ace3c6f3f728eb0e85a30b7ada0cef19",
                     "arm64": "ecb6028d79dc96fbeafffe5c8af62a7099487ebc05a701e76714eebcffd06375"}
INSTALLER_STAGE = "installer"
# The stage that slices the lock into its layer groups, and where the slices are in it: each install step mounts its
# own group's slice, so a changed pin changes the cache key of its group's step (and those above), not of the steps
# below it (a mount of the whole lock made every group's step run again for any pin).
LOCKS_STAGE = "locks"
LOCKS_DIR = "/opt/trainimg-locks"
# BuildKit secret ids: the proxy CA bundle, and the index configuration (wheel folders, index URLs with any
# tokens) as pip reads it (pip.conf) and as uv reads it (uv.toml); they reach RUN steps only as secret mounts.
CA_SECRET = "ca_bundle"
PIP_CONF_SECRET = "pip_conf"
UV_CONF_SECRET = "uv_conf"
# Where the install steps mount what they need (the lock, uv, the wheel cache, the secrets): in /dev, so that
# BuildKit 0.8's mount points never land in a layer (plan/reproducible.py).
BUILD_MOUNTS = MOUNT_ROOT
UV_DIR = "/opt/trainimg-uv"
WHEEL_CACHE_ID = "trainimg-wheels"
# uv's cache, in the wheel cache mount: its own folder, so a copy going in can be renamed into place whole.
UV_CACHE = f"{BUILD_MOUNTS}/cache/uv"
# Where a cold uv install unpacks the wheels: on the layer's own file system, so uv hard-links them into the venv
# instead of copying (a BuildKit cache mount is another file system: from it, every file was written twice, once
# unpacked into the cache, once copied into the venv). Inside the venv's folder, which
# every install step changes anyway: a folder made and removed elsewhere (/tmp) would leave its parent, with the
# step's time sealed into it, in the layer, and a cold build's layer would differ from a warm one's.
UV_UNPACKED = f"{VENV}/.trainimg-uv-cache"

# uv:  "Hash mismatch for `six==1.16.0`" ... "Expected:" / "  sha256:..." ... "Computed:" / "  sha256:..."
_UV_PACKAGE = re.compile(r"Hash mismatch for `([^`]+)`")
# pip: "    six==1.16.0 from http://...:" / "        Expected sha256 abc..." / "             Got        def..."
_PIP_PACKAGE = re.compile(r"^\s*(\S+==\S+) from .*:$")
_PIP_EXPECTED = re.compile(r"Expected sha256 ([0-9a-f]{64})")
_PIP_GOT = re.compile(r"Got\s+([0-9a-f]{64})")
_SHA = re.compile(r"sha256:([0-9a-f]{64})")


def _uv_mismatch(lines: Sequence[str]) -> str | None:
    for i, line in enumerate(lines):
        m = _UV_PACKAGE.search(line)
        if not m:
            continue
        expected = found = None
        mode = ""
        for later in lines[i + 1:i + 40]:
            mode = "e" if "Expected:" in later else "c" if "Computed:" in later else mode
            sha = _SHA.search(later)
            if sha and mode == "e" and expected is None:
                expected = sha.group(1)
            elif sha and mode == "c" and found is None:
                found = sha.group(1)
        if expected and found:
            return _one_line(m.group(1), expected, found)
    return None


def _pip_mismatch(lines: Sequence[str]) -> str | None:
    for i, line in enumerate(lines):
        m = _PIP_PACKAGE.search(_strip_step(line))
        if not m:
            continue
        window = [_strip_step(x) for x in lines[i + 1:i + 4]]
        expected = next((e.group(1) for x in window if (e := _PIP_EXPECTED.search(x))), None)
        found = next((g.group(1) for x in window if (g := _PIP_GOT.search(x))), None)
        if expected and found:
            return _one_line(m.group(1), expected, found)
    return None


def _strip_step(line: str) -> str:
    """A BuildKit plain-log line without its ``#N 1.234 `` prefix."""
    return re.sub(r"^#\d+ \d+\.\d+ ", "", line)


def _one_line(package: str, expected: str, found: str) -> str:
    return (f"{package}: the wheel's hash does not match the lock: expected sha256:{expected}, found "
            f"sha256:{found} (a substituted or corrupted wheel on an index or in a wheel folder)")


def hash_mismatch(log: Sequence[str]) -> str | None:
    """One line naming the package, the locked hash and the hash of the wheel found, from a build's log."""
    return _uv_mismatch(log) or _pip_mismatch(log)
