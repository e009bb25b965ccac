"""A local package index that answers as the real one did: recorded PEP 691 pages and recorded byte ranges of
wheels (tests/data/upstream/, gzipped, written once by tests/record_pypi.py from pypi.org), and real wheel files of this
machine for any range (the torch wheel whose libtorch_cuda.so states its GPU architectures).

It is an HTTP server on 127.0.0.1 in a thread, so trainimg's client reads it exactly as it reads PyPI: content
negotiation (`Accept: application/vnd.pypi.simple.v1+json`), file URLs relative to the page, `Range` requests
answered 206 with `Content-Range`. A range that was not recorded is answered 416 naming it: a test that reads
more than the recording holds fails, it never reads something made up.
"""

from __future__ import annotations

import gzip
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

RECORDED = Path(__file__).parent / "data" / "upstream"
JSON_TYPE = "application/vnd.pypi.simple.v1+json"
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def ranges_dir(recorded: Path, filename: str) -> Path:
    return recorded / "ranges" / filename


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = unquote(self.path.split("?", 1)[0])
        if path.startswith("/simple/"):
            self._page(path[len("/simple/"):].strip("/"))
        elif path.startswith("/files/"):
            self._file(path[len("/files/"):])
        elif path.startswith("/raw/"):
            self._raw(path[len("/raw/"):])
        else:
            self._send(404, b"not here", "text/plain")

    def _send(self, status: int, body: bytes, kind: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _page(self, project: str) -> None:
        page = self.server.recorded / "pages" / f"{project}.json.gz"
        if not page.is_file():
            self._send(404, f"no project {project} recorded".encode(), "text/plain")
            return
        data = json.loads(gzip.decompress(page.read_bytes()))
        for entry in data["files"]:
            entry["url"] = f"../../files/{entry['filename']}"  # relative, as PEP 691 allows
        self._send(200, json.dumps(data).encode(), JSON_TYPE)

    def _file(self, filename: str) -> None:
        match = _RANGE.match(self.headers.get("Range", ""))
        if match is None:
            self._send(400, b"this index answers ranges only", "text/plain")
            return
        real = self.server.wheels / filename if self.server.wheels else None
        if real is not None and real.is_file():
            size = real.stat().st_size
            start, end = _bounds(match, size)
            with real.open("rb") as fh:
                fh.seek(start)
                body = fh.read(end - start + 1)
        else:
            folder = ranges_dir(self.server.recorded, filename)
            if not (folder / "size").is_file():
                self._send(404, f"no ranges of {filename} recorded".encode(), "text/plain")
                return
            size = int((folder / "size").read_text())
            start, end = _bounds(match, size)
            part = folder / f"{start}-{end}.gz"
            if not part.is_file():
                self._send(416, f"range {start}-{end} of {filename} was not recorded".encode(), "text/plain")
                return
            body = gzip.decompress(part.read_bytes())
        self._send(206, body, "application/octet-stream", {"Content-Range": f"bytes {start}-{end}/{size}"})

    def _raw(self, rel: str) -> None:
        target = self.server.recorded / "raw" / rel
        if not target.is_file():
            self._send(404, f"{rel} not recorded".encode(), "text/plain")
            return
        self._send(200, target.read_bytes(), "application/octet-stream")


def _bounds(match: re.Match[str], size: int) -> tuple[int, int]:
    first, last = match.group(1), match.group(2)
    if not first:
        return max(0, size - int(last)), size - 1
    return int(first), min(size - 1, int(last)) if last else size - 1


class _Server(ThreadingHTTPServer):
    recorded: Path
    wheels: Path | None


class LocalIndex:
    """`with LocalIndex() as index: index.url` is ``http://127.0.0.1:PORT/simple/``; `raw_url` serves the other
    recorded files (a Debian security Packages index) under ``/raw/``."""

    def __init__(self, recorded: Path = RECORDED, wheels: Path | None = None) -> None:
        self.server = _Server(("127.0.0.1", 0), _Handler)
        self.server.recorded, self.server.wheels = recorded, wheels
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def url(self) -> str:
        return f"{self.base}/simple/"

    def raw_url(self, rel: str) -> str:
        return f"{self.base}/raw/{rel}"

    def __enter__(self) -> LocalIndex:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
