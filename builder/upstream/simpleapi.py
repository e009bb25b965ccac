"""A Python package index read through its JSON simple API (PEP 691), the one way trainimg learns what is released.

Why JSON and not the HTML form (PEP 503): the JSON answer carries, per file, its upload time (API 1.1), its
Requires-Python, whether it is yanked and whether the index serves its metadata separately (PEP 658/714), so
release dates and wheel tags come from one request per project, no HTML scraping. An index that answers only HTML
is refused naming itself. Every failure to read names the index and the project (`IndexUnreadable`, exit 1):
"nothing new" is never said because nothing answered.

All HTTP goes through `Http` (one session, the CA bundle of the environment, a timeout), so the recorder of the
tests' answers (tests/record_pypi.py) and the byte-range reader of wheels (`wheelzip`) share it.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin

import requests
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from ..errors import CheckFailed
from ..options import PYPI_SIMPLE

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
TIMEOUT = 60.0


class IndexUnreadable(CheckFailed):
    """An index (or a file it lists) could not be read: exit 1, naming it, so a schedule never reads silence as
    "nothing new"."""


@dataclass
class Http:
    """One requests session for an index and its files; counts the bytes it fetched (the report says them)."""

    session: requests.Session = field(default_factory=requests.Session)
    fetched: int = 0

    def json_page(self, url: str) -> tuple[dict[str, Any], str]:
        """A PEP 691 page and the URL it came from (relative file URLs resolve against it)."""
        resp = self._get(url, {"Accept": JSON_TYPE})
        if resp.status_code == 404:
            raise IndexUnreadable(f"{url} answered 404: the index has no such project")
        self._ok(resp, url)
        kind = resp.headers.get("Content-Type", "").split(";")[0].strip()
        if kind != JSON_TYPE:
            raise IndexUnreadable(f"{url} answered {kind or 'no content type'}, not the JSON simple API (PEP 691) "
                                  "trainimg reads; give an index that speaks it (--index-url)")
        self.fetched += len(resp.content)
        try:
            data = resp.json()
        except ValueError:
            raise IndexUnreadable(f"{url} answered something that is not JSON") from None
        if not isinstance(data, dict) or not isinstance(data.get("files"), list):
            raise IndexUnreadable(f"{url} answered JSON without a `files` list (PEP 691)")
        return data, resp.url

    def get(self, url: str) -> bytes:
        """A whole small file (PEP 658 metadata, a Packages index)."""
        resp = self._get(url, {})
        self._ok(resp, url)
        self.fetched += len(resp.content)
        return resp.content

    def range(self, url: str, start: int | None, end: int | None) -> tuple[bytes, int]:
        """Bytes ``start..end`` (inclusive; `start` None: the last `end` bytes) and the file's total size."""
        spec = f"bytes=-{end}" if start is None else f"bytes={start}-{'' if end is None else end}"
        resp = self._get(url, {"Range": spec})
        self._ok(resp, url)
        if resp.status_code != 206:
            raise IndexUnreadable(f"{url} ignored a range request (HTTP {resp.status_code}): trainimg reads wheels "
                                  "by ranges and never downloads a whole wheel to learn a requirement")
        total = resp.headers.get("Content-Range", "").rpartition("/")[2]
        if not total.isdigit():
            raise IndexUnreadable(f"{url} answered a range without its total size (Content-Range)")
        self.fetched += len(resp.content)
        return resp.content, int(total)

    def _get(self, url: str, headers: dict[str, str]) -> requests.Response:
        try:
            return self.session.get(url, headers=headers, timeout=TIMEOUT)
        except requests.RequestException as exc:
            raise IndexUnreadable(f"{url} could not be read ({type(exc).__name__})") from None

    @staticmethod
    def _ok(resp: requests.Response, url: str) -> None:
        if resp.status_code not in (200, 206):
            raise IndexUnreadable(f"{url} answered HTTP {resp.status_code}")


@dataclass(frozen=True)
class IndexFile:
    """One file of a project as the index lists it."""

    filename: str
    url: str
    version: Version
    sha256: str | None
    requires_python: str | None
    uploaded: datetime.datetime | None
    size: int | None
    metadata_sha256: str | None  # PEP 658/714: the index serves `url + ".metadata"` (its hash, when given)
    has_metadata: bool
    yanked: bool

    @property
    def is_wheel(self) -> bool:
        return self.filename.endswith(".whl")

    def tags(self) -> frozenset[Any]:
        """The wheel's tags (``cp312-cp312-manylinux_2_27_x86_64``...); none for an sdist."""
        return parse_wheel_filename(self.filename)[3] if self.is_wheel else frozenset()


@dataclass(frozen=True)
class Project:
    """A project's page: its files and where the page was read (the `source` of every fact taken from it)."""

    name: str
    url: str
    files: tuple[IndexFile, ...]

    def versions(self) -> list[Version]:
        """Every version with a file that is not yanked, oldest first."""
        return sorted({f.version for f in self.files if not f.yanked})

    def stable(self) -> list[Version]:
        """Final releases only (no a/b/rc, no .dev), oldest first: what a recipe may move to."""
        return [v for v in self.versions() if not v.is_prerelease]

    def newest(self, stable: bool = True) -> Version | None:
        found = self.stable() if stable else self.versions()
        return found[-1] if found else None

    def files_of(self, version: Version | str) -> list[IndexFile]:
        want = Version(str(version))
        return [f for f in self.files if f.version == want and not f.yanked]

    def released(self, version: Version | str) -> datetime.date | None:
        """The day the version's first file was uploaded (PEP 691 API 1.1 `upload-time`), None when the index
        does not say."""
        times = [f.uploaded for f in self.files_of(version) if f.uploaded is not None]
        return min(times).date() if times else None


def _version_of(filename: str) -> Version | None:
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        return parse_sdist_filename(filename)[1]
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None  # an egg, an exe, a misnamed file: not something trainimg installs


def _uploaded(text: Any) -> datetime.datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _metadata(entry: dict[str, Any]) -> tuple[bool, str | None]:
    """Whether the index serves the file's metadata (PEP 714 `core-metadata`, PEP 658's older spelling), and its
    sha256 when given."""
    value = entry.get("core-metadata", entry.get("dist-info-metadata", False))
    if isinstance(value, dict):
        return True, value.get("sha256")
    return bool(value), None


def parse_project(name: str, data: dict[str, Any], page_url: str) -> Project:
    """The files of a PEP 691 page; relative URLs resolved against the page."""
    files = []
    for entry in data["files"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("filename"), str):
            continue
        version = _version_of(entry["filename"])
        if version is None:
            continue
        has_meta, meta_hash = _metadata(entry)
        hashes = entry["hashes"] if isinstance(entry.get("hashes"), dict) else {}
        size = entry.get("size")
        files.append(IndexFile(
            filename=entry["filename"], url=urljoin(page_url, str(entry.get("url", ""))), version=version,
            sha256=hashes.get("sha256"), requires_python=entry.get("requires-python") or None,
            uploaded=_uploaded(entry.get("upload-time")), size=size if isinstance(size, int) else None,
            metadata_sha256=meta_hash, has_metadata=has_meta, yanked=bool(entry.get("yanked", False)),
        ))
    return Project(name=str(canonicalize_name(name)), url=page_url, files=tuple(files))


@dataclass
class SimpleIndex:
    """An index read through PEP 691; each project's page is fetched once per run."""

    url: str = PYPI_SIMPLE
    http: Http = field(default_factory=Http)
    _pages: dict[str, Project] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.url.endswith("/"):
            self.url += "/"

    def project(self, name: str) -> Project:
        key = str(canonicalize_name(name))
        if key not in self._pages:
            data, page = self.http.json_page(urljoin(self.url, f"{key}/"))
            self._pages[key] = parse_project(key, data, page)
        return self._pages[key]

    def page_url(self, name: str) -> str:
        """Where a project's page is: the `source` of a fact read from it."""
        return urljoin(self.url, f"{canonicalize_name(name)}/")

