"""A recorder in front of the Docker engine: a unix socket that passes every byte through, both ways, unchanged, and
writes down the request line (`METHOD /path`) of each API request a client sends.

Point a client at it with `DOCKER_HOST=unix://<socket>` (the docker CLI and the SDK both honour it) to learn what a
command asked the engine for: the ephemeral-runner tests use it to show that a release with nothing to do reads no
image from the engine. It never parses or rewrites the stream it forwards (a build's upgraded session, an attach,
a chunked upload all pass as bytes); it only looks for request lines at the start of a line in what the client
sends, carrying a partial line over between reads.
"""

from __future__ import annotations

import re
import socket
import threading
from pathlib import Path
from urllib.parse import unquote

ENGINE_SOCKET = "/var/run/docker.sock"
_REQUEST_LINE = re.compile(rb"^(GET|HEAD|POST|PUT|DELETE) (/\S*) HTTP/1\.[01]\r?$")
_CHUNK = 65536


class EngineRecorder:
    """Listens on `folder`/engine.sock and forwards to `upstream` until `stop()`; `requests` are the request
    lines seen, in order, with the path's escapes decoded (`GET /v1.41/images/repo/name:tag/json`)."""

    def __init__(self, folder: Path, upstream: str = ENGINE_SOCKET) -> None:
        self.path = folder / "engine.sock"
        self.upstream = upstream
        self.requests: list[str] = []
        self._lock = threading.Lock()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.path))
        self._listener.listen(64)
        self._open: set[socket.socket] = set()
        self._stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def docker_host(self) -> str:
        return f"unix://{self.path}"

    def since(self, mark: int) -> list[str]:
        """The request lines recorded after the first `mark` (`mark = len(recorder.requests)` before a command)."""
        with self._lock:
            return self.requests[mark:]

    def stop(self) -> None:
        self._stopped.set()
        self._listener.close()
        with self._lock:
            for s in list(self._open):
                s.close()
        self.path.unlink(missing_ok=True)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            engine = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            engine.connect(self.upstream)
            with self._lock:
                self._open |= {client, engine}
            threading.Thread(target=self._pipe, args=(client, engine, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(engine, client, False), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, from_client: bool) -> None:
        pending = b""
        try:
            while data := source.recv(_CHUNK):
                sink.sendall(data)
                if from_client:
                    pending = self._scan(pending + data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _scan(self, data: bytes) -> bytes:
        """Record the request lines among the complete lines of `data`; returns the unfinished last line (kept
        short: a body's long line is no request line)."""
        *lines, rest = data.split(b"\n")
        for line in lines:
            m = _REQUEST_LINE.match(line)
            if m:
                with self._lock:
                    self.requests.append(f"{m.group(1).decode()} {unquote(m.group(2).decode())}")
        return rest[-4096:]
