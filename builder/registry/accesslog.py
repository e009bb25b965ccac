"""What crossed the wire, from the registry's own access log: the blobs fetched (and their bytes) and the uploads.

CI's claims ("nothing changed costs no layer pull", "a moving tag is a manifest copy: no layer moves") are about
traffic, and the one witness that cannot be fooled by a client's own counting is the registry. The CNCF
distribution registry (Debian's docker-registry, which `LocalRegistry(access_log=True)` runs) writes one Apache
combined-format line per request:

    127.0.0.1 - - [24/Nov/2026:09:29:17 +0000] "GET /v2/team/app/blobs/sha256:<hex> HTTP/1.1" 200 7962 "" "ua"

A layer is fetched by `GET /v2/<repository>/blobs/<digest>`; a blob is uploaded through
`/v2/<repository>/blobs/uploads/` (POST to start, PATCH with the bytes, PUT to finish).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from .registryapi import RegistryAPI

ACCESS_LINE_RE = re.compile(
    r'"(?P<method>[A-Z]+) (?P<path>/v2/\S*) HTTP/[0-9.]+" (?P<status>[0-9]{3}) (?P<size>[0-9]+|-)')
_BLOB_PATH_RE = re.compile(r"\A/v2/(?P<repository>.+)/blobs/(?P<digest>sha256:[0-9a-f]{64})\Z")
_UPLOAD_MARK = "/blobs/uploads/"


@dataclass(frozen=True)
class Request:
    """One request the registry logged: method, path (query string dropped), HTTP status, response bytes."""

    method: str
    path: str
    status: int
    size: int

    @property
    def blob(self) -> tuple[str, str] | None:
        """(repository, digest) when this request names one blob (not an upload), else None."""
        m = _BLOB_PATH_RE.match(self.path)
        return (m.group("repository"), m.group("digest")) if m else None

    @property
    def is_upload(self) -> bool:
        return _UPLOAD_MARK in self.path


def log_offset(log_path: Path) -> int:
    """Where the log ends now: pass it to `requests_since` to see only what follows."""
    return log_path.stat().st_size if log_path.exists() else 0


def requests_since(log_path: Path, offset: int) -> list[Request]:
    """Every request logged after byte `offset` of `log_path` (the registry's other log lines are skipped)."""
    with open(log_path, "rb") as fh:
        fh.seek(offset)
        text = fh.read().decode("utf-8", "replace")
    found = []
    for m in ACCESS_LINE_RE.finditer(text):
        size = m.group("size")
        found.append(Request(m.group("method"), m.group("path").split("?", 1)[0], int(m.group("status")),
                             0 if size == "-" else int(size)))
    return found


def fetched_blobs(logged: list[Request]) -> list[tuple[str, int]]:
    """(digest, bytes sent) of every blob GET the registry answered with content (200 or 206)."""
    return [(r.blob[1], r.size) for r in logged
            if r.method == "GET" and r.status in (200, 206) and r.blob is not None]


def uploads(logged: list[Request]) -> list[Request]:
    """Every request of a blob upload (POST, PATCH, PUT under /blobs/uploads/), whatever its status."""
    return [r for r in logged if r.is_upload]


def layer_digests(api: RegistryAPI, repository: str, reference: str) -> set[str]:
    """The layer digests of `repository:reference`'s image manifest (not its config): what a pull downloads."""
    got = api.manifest_json(repository, reference)
    if got is None:
        return set()
    return {layer["digest"] for layer in json.loads(got[0]).get("layers", [])}
