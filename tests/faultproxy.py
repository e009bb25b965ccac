"""A fault-injecting HTTP/1.1 proxy on 127.0.0.1 for registry tests.

It sits between the Docker engine (or `requests`) and a real registry and, for requests whose `"METHOD /path"`
matches a regex, can answer an HTTP error instead of forwarding, cut the connection after N bytes of the request
body (a blob upload dying mid-way), or hold the request for S seconds without answering and then hang up (noting whether the client hung up first).
Each fault fires a bounded number of times; everything else is forwarded byte for byte.

It parses only request framing (Content-Length or chunked bodies), which is all it needs: clients send the next
request on a connection only after the previous answer, so responses are copied through blindly. The registry
builds its upload `Location` URLs from the Host header, so follow-up requests come back through the proxy.

The proxy is bounded in time: it shuts itself down after `lifetime` seconds even if a test forgets to stop it.
"""

from __future__ import annotations

import json
import re
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

_CHUNK = 65536


@dataclass
class Fault:
    """One scheduled fault: `kind` is "error", "drop" or "stall"; it fires for the first `times` matches."""

    kind: str
    match: re.Pattern[str]
    times: int
    status: int = 503
    after_bytes: int = 0
    seconds: float = 0.0
    fired: int = 0


@dataclass
class FaultProxy:
    """Threaded TCP proxy 127.0.0.1:`port` -> `upstream`; use as a context manager or call start()/stop()."""

    upstream: tuple[str, int]
    lifetime: float = 300.0
    port: int = 0
    events: list[str] = field(default_factory=list)
    _faults: list[Fault] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopped: threading.Event = field(default_factory=threading.Event)
    _sockets: set[socket.socket] = field(default_factory=set)
    _threads: list[threading.Thread] = field(default_factory=list)
    _listener: socket.socket | None = None

    # -- scheduling -------------------------------------------------------------------------------------------

    def fail(self, pattern: str, status: int = 503, times: int = 1) -> None:
        """Answer HTTP `status` (and close) to the first `times` requests matching `pattern`."""
        self._add(Fault("error", re.compile(pattern), times, status=status))

    def drop(self, pattern: str, after_bytes: int, times: int = 1) -> None:
        """Cut the connection once `after_bytes` of a matching request's body went upstream."""
        self._add(Fault("drop", re.compile(pattern), times, after_bytes=after_bytes))

    def stall(self, pattern: str, seconds: float, times: int = 1) -> None:
        """Hold matching requests `seconds` without an answer, then hang up."""
        self._add(Fault("stall", re.compile(pattern), times, seconds=seconds))

    def fired(self, kind: str) -> int:
        """How many times faults of `kind` actually hit a request."""
        with self._lock:
            return sum(f.fired for f in self._faults if f.kind == kind)

    def stall_outcomes(self, wait: float = 60.0) -> list[str]:
        """How each stall that fired ended ("ended by the client" or "waited out"), once every one has (a client
        that gave up may close its connection a moment after its call returned); `wait` bounds that moment."""
        deadline = time.monotonic() + wait
        while True:
            with self._lock:
                outcomes = [e.split(" ", 1)[1].rsplit(" ", 2)[0] for e in self.events
                            if e.startswith(("stall ended", "stall waited"))]
            if len(outcomes) >= self.fired("stall") or time.monotonic() > deadline:
                return outcomes
            time.sleep(0.05)

    def _add(self, fault: Fault) -> None:
        with self._lock:
            self._faults.append(fault)

    def _take(self, request_line: str, kind: str | None = None) -> Fault | None:
        """The first armed fault matching `request_line`; error/stall are consumed here, drop when it fires."""
        with self._lock:
            for fault in self._faults:
                if fault.fired < fault.times and fault.match.search(request_line) and kind in (None, fault.kind):
                    if fault.kind != "drop":
                        fault.fired += 1
                    return fault
        return None

    # -- lifecycle --------------------------------------------------------------------------------------------

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        listener.settimeout(0.2)
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._spawn(self._accept_loop)
        timer = threading.Timer(self.lifetime, self.stop)
        timer.daemon = True
        timer.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            _close(sock)
        if self._listener is not None:
            _close(self._listener)
        current = threading.current_thread()
        for thread in list(self._threads):
            if thread is not current:
                thread.join(timeout=2)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.add(sock)

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            self._track(client)
            self._spawn(self._serve, client)

    # -- one connection ---------------------------------------------------------------------------------------

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            _close(client)
            return
        upstream.settimeout(None)
        self._track(upstream)
        self._spawn(self._pump, upstream, client)
        reader = _Reader(client)
        try:
            if reader.starts_with_tls():  # the engine tries https first; let the registry refuse it itself
                upstream.sendall(reader.buffer)
                self._pump(client, upstream)
                return
            while not self._stopped.is_set():
                head = reader.read_head()
                if head is None:
                    break
                if not self._forward_request(head, reader, client, upstream):
                    break
        except OSError:
            pass
        finally:
            _close(client)
            _close(upstream)

    def _forward_request(self, head: bytes, reader: _Reader, client: socket.socket, upstream: socket.socket) -> bool:
        """Forward (or sabotage) one request; False when the connection must end."""
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        method, path = (request_line.split(" ") + ["", ""])[:2]
        line = f"{method} {path}"
        headers = _headers(head)
        fault = self._take(line)
        if fault is not None and fault.kind == "error":
            self._note(f"error {fault.status} {line}")
            for _ in _body(reader, headers):
                pass
            body = json.dumps({"errors": [{"code": "UNAVAILABLE", "message": "injected by faultproxy"}]}).encode()
            client.sendall(f"HTTP/1.1 {fault.status} Injected\r\nContent-Type: application/json\r\n"
                           f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
            return False
        if fault is not None and fault.kind == "stall":
            self._note(f"stall {fault.seconds:g}s {line}")
            self._note(f"stall {'ended by the client' if _hung_up(client, fault.seconds) else 'waited out'} {line}")
            return False
        upstream.sendall(head)
        sent = 0
        for piece in _body(reader, headers):
            upstream.sendall(piece)
            sent += len(piece)
            drop = self._take(line, "drop")
            if drop is not None and sent >= drop.after_bytes:
                with self._lock:
                    drop.fired += 1
                self._note(f"drop after {sent} bytes {line}")
                return False
        return True

    def _note(self, event: str) -> None:
        with self._lock:
            self.events.append(event)

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        """Copy the registry's answers back to the client until either side hangs up."""
        try:
            while True:
                data = source.recv(_CHUNK)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            _close(sink)
            _close(source)


def _hung_up(client: socket.socket, seconds: float) -> bool:
    """Hold `client` without an answer for up to `seconds` (what it still sends is read and dropped); True when it
    hung up first (its own timeout ended the wait), False when the whole stall was waited out."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            ready, _, _ = select.select([client], [], [], left)
        except (OSError, ValueError):  # the proxy stopped under the stall (its sockets closed)
            return False
        if not ready:
            return False
        try:
            if not client.recv(_CHUNK):
                return True
        except OSError:  # reset by the client
            return True
    return False


class _Reader:
    """Buffered reads from a socket: request heads, exact byte counts and CRLF lines."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def _fill(self) -> bool:
        data = self.sock.recv(_CHUNK)
        self.buffer += data
        return bool(data)

    def starts_with_tls(self) -> bool:
        """Whether the connection opens with a TLS handshake record rather than an HTTP request."""
        return (bool(self.buffer) or self._fill()) and self.buffer[:1] == b"\x16"

    def read_head(self) -> bytes | None:
        while b"\r\n\r\n" not in self.buffer:
            if not self._fill():
                return None
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        return head + b"\r\n\r\n"

    def read_line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            if not self._fill():
                raise ConnectionError("client hung up mid-line")
        line, _, self.buffer = self.buffer.partition(b"\r\n")
        return line + b"\r\n"

    def read_some(self, limit: int) -> bytes:
        if not self.buffer and not self._fill():
            raise ConnectionError("client hung up mid-body")
        piece, self.buffer = self.buffer[:limit], self.buffer[limit:]
        return piece


def _headers(head: bytes) -> dict[str, str]:
    lines = head.decode("latin-1").split("\r\n")[1:]
    return {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines if ":" in line)}


def _body(reader: _Reader, headers: dict[str, str]) -> Iterator[bytes]:
    """Yield the raw bytes of a request body, framing included, as they arrive."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            size_line = reader.read_line()
            yield size_line
            size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers, then the empty line
                    trailer = reader.read_line()
                    yield trailer
                    if trailer == b"\r\n":
                        return
            remaining = size + 2  # data and its CRLF
            while remaining:
                piece = reader.read_some(min(remaining, _CHUNK))
                remaining -= len(piece)
                yield piece
    remaining = int(headers.get("content-length", "0") or 0)
    while remaining:
        piece = reader.read_some(min(remaining, _CHUNK))
        remaining -= len(piece)
        yield piece


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
