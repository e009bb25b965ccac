"""Local wheels and build secrets for pip inside BuildKit builds.

Wheelhouses (a folder of wheels, or a PEP 503 index folder holding ``simple/``) are served read-only over
loopback HTTP for the length of one build run, and the build runs on the host network, so pip in the build
reaches them at 127.0.0.1 and nothing is copied into any layer. The generated pip.conf (index URLs, tokens, the
proxy CA path) reaches RUN steps only as a BuildKit secret mount: it is neither in a layer nor in the cache key,
so a new port or a rotated token never invalidates the cache.
"""

from __future__ import annotations

import http.server
import json
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from ..errors import UserInputError
from ..plan.installer import SECRETS_DIR
from ..plan.stages import CA_SECRET



@dataclass(frozen=True)
class Wheelhouse:
    path: Path

    @property
    def is_index(self) -> bool:
        return (self.path / "simple").is_dir()


def default_wheelhouses(env: Mapping[str, str]) -> tuple[Path, ...]:
    """PIP_FIND_LINKS folders that exist: the wheels this machine's pip already uses."""
    out = []
    for item in env.get("PIP_FIND_LINKS", "").split():
        path = Path(item.removeprefix("file://"))
        if path.is_dir():
            out.append(path)
    return tuple(out)


def default_ca_bundle(env: Mapping[str, str]) -> Path | None:
    """The CA bundle this machine's TLS clients use: SSL_CERT_FILE, else PIP_CERT."""
    for key in ("SSL_CERT_FILE", "PIP_CERT"):
        value = env.get(key)
        if value and Path(value).is_file():
            return Path(value)
    return None


def check_dirs(paths: tuple[Path, ...], flag: str = "--wheelhouse") -> tuple[Wheelhouse, ...]:
    for p in paths:
        if not p.is_dir():
            raise UserInputError(f"{p} is not a folder of wheels or a PEP 503 index folder", where=flag)
    return tuple(Wheelhouse(p.resolve()) for p in paths)


class _Handler(http.server.SimpleHTTPRequestHandler):
    roots: tuple[Path, ...] = ()

    def translate_path(self, path: str) -> str:
        # /w<i>/rest -> roots[i]/rest, confined to that root.
        parts = unquote(path.split("?", 1)[0]).lstrip("/").split("/", 1)
        head = parts[0]
        if not head.startswith("w") or not head[1:].isdigit() or int(head[1:]) >= len(self.roots):
            return "/nonexistent"
        root = self.roots[int(head[1:])]
        target = (root / (parts[1] if len(parts) > 1 else "")).resolve()
        return str(target) if target == root or root in target.parents else "/nonexistent"

    def log_message(self, format: str, *args: object) -> None:  # quiet: builds print their own progress
        pass


@contextmanager
def serve(wheelhouses: tuple[Wheelhouse, ...]) -> Iterator[list[str]]:
    """Serve the wheelhouses on 127.0.0.1 and yield the pip.conf lines that point pip at them."""
    if not wheelhouses:
        yield []
        return
    handler = type("WheelhouseHandler", (_Handler,), {"roots": tuple(w.path for w in wheelhouses)})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, name="trainimg-wheelhouse", daemon=True)
    thread.start()
    try:
        links = [f"http://127.0.0.1:{port}/w{i}/" for i, w in enumerate(wheelhouses) if not w.is_index]
        indexes = [f"http://127.0.0.1:{port}/w{i}/simple/" for i, w in enumerate(wheelhouses) if w.is_index]
        lines = []
        if links:
            lines.append("find-links = " + " ".join(links))
        if indexes:
            lines.append("extra-index-url = " + " ".join(indexes))
        yield lines
    finally:
        server.shutdown()
        server.server_close()


def pip_conf(wheelhouse_lines: list[str], ca_bundle: Path | None, env: Mapping[str, str]) -> str:
    """The pip.conf secret: wheelhouses, the host's index URLs (they may carry tokens) and the CA path."""
    lines = ["[global]"]
    if env.get("PIP_INDEX_URL"):
        lines.append(f"index-url = {env['PIP_INDEX_URL']}")
    extra = " ".join(x for x in (env.get("PIP_EXTRA_INDEX_URL", ""),) if x)
    own = [line for line in wheelhouse_lines if line.startswith("extra-index-url")]
    if extra or own:
        urls = " ".join([extra] + [line.split("=", 1)[1].strip() for line in own]).strip()
        lines.append(f"extra-index-url = {urls}")
    lines += [line for line in wheelhouse_lines if not line.startswith("extra-index-url")]
    if ca_bundle:
        lines.append(f"cert = {SECRETS_DIR}/{CA_SECRET}")
    lines.append("timeout = 60")
    # pip retries a failed index lookup 5 times with backoff, ~8 s per package when an index's host does not
    # resolve (offline machines, mirrors standing in for download.pytorch.org): one retry, unless the host says.
    retries = env.get("PIP_RETRIES", "1")
    lines.append(f"retries = {retries if retries.isdigit() else 1}")
    return "\n".join(lines) + "\n"


def reachable(url: str, timeout: float = 10.0) -> bool:
    """Whether an index answers at all (any HTTP status counts; DNS or connection failures do not). pip skips an
    index that does not answer; uv stops, so uv is given only the ones that do."""
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, OSError, ValueError):
        return False
    return True


def uv_conf(wheelhouse_lines: list[str], env: Mapping[str, str]) -> str:
    """The uv.toml secret: the same wheelhouses and index URLs as `pip_conf`, as uv reads them. Every index is
    searched for the locked version (pip's behaviour; uv's default stops at the first index naming a package)."""
    conf = pip_conf(wheelhouse_lines, None, env)
    values = dict(line.split(" = ", 1) for line in conf.splitlines()[1:] if " = " in line)
    lines = ["[pip]", 'index-strategy = "unsafe-best-match"']
    if values.get("index-url"):
        lines.append(f"index-url = {json.dumps(values['index-url'])}")
    extra = [u for u in values.get("extra-index-url", "").split() if u.startswith("http://127.0.0.1:") or reachable(u)]
    if extra:
        lines.append(f"extra-index-url = {json.dumps(extra)}")
    if values.get("find-links"):
        lines.append(f"find-links = {json.dumps(values['find-links'].split())}")
    return "\n".join(lines) + "\n"


def write_secret(directory: Path, name: str, text: str) -> Path:
    """A secret file readable by its owner only, in a folder the caller removes after the build."""
    path = directory / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    return path
