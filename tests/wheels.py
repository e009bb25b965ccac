"""Real, minimal pure-Python wheels the tests write: what pip and uv install and what dist-info then records."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

WHEEL_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip member can carry


def write_wheel(folder: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    """A ``py3-none-any`` wheel of distribution `name` at `version` holding `files` (path -> bytes), with its
    METADATA, WHEEL and a RECORD of every file's sha256, in `folder` (created).

    The same arguments give the same bytes (each member dated 1980-01-01, as reproducible wheel builders do): a lock
    records the wheel's hash, so a wheel written anew by each run would change the lock and with it every build
    step below the install, for nothing."""
    dist = f"{name.replace('-', '_')}-{version}"
    info = f"{dist}.dist-info"
    files = {**files,
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: trainimg-tests\nRoot-Is-Purelib: true\n"
                              b"Tag: py3-none-any\n"}
    record = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
              f"{len(data)}" for path, data in files.items()]
    files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for member, data in files.items():
            member_info = zipfile.ZipInfo(member, date_time=WHEEL_TIME)
            member_info.external_attr = 0o100644 << 16  # a regular file, rw-r--r--
            zf.writestr(member_info, data, compress_type=zipfile.ZIP_DEFLATED)
    return path
