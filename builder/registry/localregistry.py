"""A registry on 127.0.0.1 for `make demo` and local work, so pushing needs no account anywhere.

It runs Debian's `docker-registry` binary (the CNCF distribution registry) as a detached process with htpasswd
auth, its data, config, log, pid and password under one state directory; data outlives stop/start. When that binary
is missing it runs the `registry:2` image instead, if the engine already has it (nothing is pulled).
Loopback registries are plain-http-allowed by the engine by default, so no TLS is needed.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import requests

from ..engine.base import ContainerSpec, Engine, Listed
from ..errors import EngineError, RegistryError, UserInputError
from ..runtime.contract import REGISTRY_LABEL as _CONTAINER_LABEL

REGISTRY_BINARY = "/usr/bin/docker-registry"
REGISTRY_IMAGE = "registry:2"


def write_htpasswd(path: Path, username: str, password: str) -> None:
    """Write a one-user bcrypt htpasswd file (the only hash the registry accepts), mode 0600.

    The password goes to `htpasswd` on stdin, never on its command line, where `ps` would show it.
    """
    tool = shutil.which("htpasswd")
    if tool is None:
        raise RegistryError("htpasswd is not installed: apt-get install apache2-utils")
    proc = subprocess.run([tool, "-niB", username], input=password, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not proc.stdout.startswith(f"{username}:"):
        raise RegistryError(f"htpasswd failed for user {username}: {proc.stderr.strip() or 'no output'}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(proc.stdout.strip() + "\n")
    os.chmod(path, 0o644)  # the registry:2 container runs as another user and must read it; it holds a hash only


@dataclass(frozen=True)
class RegistryInfo:
    """How to reach a running local registry; `host` goes straight into `--registry`."""

    host: str
    username: str
    password: str
    htpasswd: Path

    def __repr__(self) -> str:  # keep the password out of logs and tracebacks
        return f"RegistryInfo(host={self.host!r}, username={self.username!r}, htpasswd={str(self.htpasswd)!r})"


@dataclass(frozen=True)
class RegistryStatus:
    """Whether the local registry runs, where, and what runs it ("binary", "container" or None)."""

    running: bool
    host: str
    backend: str | None
    pid: int | None
    data_dir: Path


class LocalRegistry:
    """A registry bound to 127.0.0.1:`port` whose whole state lives in `state_dir`."""

    def __init__(self, state_dir: Path, port: int = 5000, username: str = "trainimg",
                 engine: Engine | None = None, access_log: bool = False) -> None:
        if not 1 <= port <= 65535:
            raise UserInputError(f"--port {port}: must be from 1 to 65535")
        self.state_dir = Path(state_dir)
        self.port = port
        self.username = username
        self.host = f"localhost:{port}"
        self.data_dir = self.state_dir / "data"
        self.config_path = self.state_dir / "config.yml"
        self.htpasswd_path = self.state_dir / "htpasswd"
        self.password_path = self.state_dir / "password"
        self.pid_path = self.state_dir / "registry.pid"
        self.log_path = self.state_dir / "registry.log"
        self.container_name = f"trainimg-registry-{port}"
        self._engine = engine
        self.access_log = access_log  # one line per request in log_path (the CI bench counts layer GETs in it)

    @property
    def engine(self) -> Engine:
        """The engine for the fallback container; Docker unless one was given (created only when needed)."""
        if self._engine is None:
            from ..engine.docker import DockerEngine

            self._engine = DockerEngine()
        return self._engine

    # -- state ------------------------------------------------------------------------------------------------

    def _password(self) -> str:
        """The password, generated once and kept 0600 so restarts and `docker login` keep working."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.password_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return self.password_path.read_text().strip()
        password = secrets.token_urlsafe(24)
        with os.fdopen(fd, "w") as handle:
            handle.write(password + "\n")
        return password

    def _info(self) -> RegistryInfo:
        return RegistryInfo(self.host, self.username, self._password(), self.htpasswd_path)

    def _pid(self) -> int | None:
        """The pid from the pid file if that process is still our registry; a stale file is removed."""
        try:
            pid = int(self.pid_path.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (FileNotFoundError, ValueError, ProcessLookupError):
            self.pid_path.unlink(missing_ok=True)
            return None
        if b"docker-registry" not in cmdline or str(self.config_path).encode() not in cmdline:
            self.pid_path.unlink(missing_ok=True)
            return None
        return pid

    def _containers(self) -> list[Listed]:
        """Our fallback container(s), running or not; none when the engine is unreachable (status() must still
        answer without one)."""
        try:
            found = self.engine.containers(_CONTAINER_LABEL)
        except EngineError:
            return []
        return [c for c in found if c.name == self.container_name]

    def _container(self) -> Listed | None:
        """Our fallback container, when the engine is reachable and has it running."""
        for c in self._containers():
            state = self.engine.state(c.id)
            if state is not None and state.running:
                return c
        return None

    def status(self) -> RegistryStatus:
        """Whether our registry runs, looked up from the pid file or the fallback container."""
        pid = self._pid()
        if pid is not None:
            return RegistryStatus(True, self.host, "binary", pid, self.data_dir)
        if self._container() is not None:
            return RegistryStatus(True, self.host, "container", None, self.data_dir)
        return RegistryStatus(False, self.host, None, None, self.data_dir)

    # -- start / stop -----------------------------------------------------------------------------------------

    def start(self, timeout: float = 20.0) -> RegistryInfo:
        """Start the registry unless it runs already, and return once `GET /v2/` answers; idempotent."""
        if self.status().running:
            self._wait_ready(timeout, None)
            return self._info()
        if not self._port_free():
            raise RegistryError(f"port {self.port} on 127.0.0.1 is taken by another program: stop it or choose "
                                "another port for the local registry")
        info = self._info()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        write_htpasswd(self.htpasswd_path, self.username, info.password)
        if os.access(REGISTRY_BINARY, os.X_OK):
            process = self._start_binary()
        else:
            self._start_container()
            process = None
        self._wait_ready(timeout, process)
        return info

    def _port_free(self) -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            return sock.connect_ex(("127.0.0.1", self.port)) != 0

    def _start_binary(self) -> subprocess.Popen[bytes]:
        self.config_path.write_text(
            "version: 0.1\n"
            f"log:\n  level: info\n  accesslog:\n    disabled: {'false' if self.access_log else 'true'}\n"
            "storage:\n"
            f"  filesystem:\n    rootdirectory: {self.data_dir}\n"
            "  delete:\n    enabled: true\n"
            "http:\n"
            f"  addr: 127.0.0.1:{self.port}\n"
            f"  secret: {secrets.token_hex(16)}\n"
            "  headers:\n    X-Content-Type-Options: [nosniff]\n"
            "auth:\n"
            f"  htpasswd:\n    realm: trainimg\n    path: {self.htpasswd_path}\n"
        )
        with open(self.log_path, "ab") as log_file:
            process = subprocess.Popen(
                [REGISTRY_BINARY, "serve", str(self.config_path)],
                stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                start_new_session=True, close_fds=True,
            )
        self.pid_path.write_text(f"{process.pid}\n")
        return process

    def _start_container(self) -> None:
        try:
            if self.engine.image(REGISTRY_IMAGE) is None:
                raise RegistryError(f"no registry to run: install Debian's docker-registry package (apt-get install "
                                    f"docker-registry) or load the {REGISTRY_IMAGE} image")
        except EngineError as exc:
            raise RegistryError(f"{REGISTRY_BINARY} is missing and the engine is unreachable: {exc}") from None
        for stale in self._containers():
            self.engine.remove(stale.id)
        self.engine.start(ContainerSpec(
            image=REGISTRY_IMAGE, command=(), entrypoint=None, name=self.container_name,
            network="bridge", labels={_CONTAINER_LABEL: "1"}, ports={5000: ("127.0.0.1", self.port)},
            mounts={str(self.data_dir.resolve()): "/var/lib/registry"},
            ro_mounts={str(self.htpasswd_path.resolve()): "/auth/htpasswd"},
            env={"REGISTRY_AUTH": "htpasswd", "REGISTRY_AUTH_HTPASSWD_REALM": "trainimg",
                 "REGISTRY_AUTH_HTPASSWD_PATH": "/auth/htpasswd", "REGISTRY_STORAGE_DELETE_ENABLED": "true"}))

    def _wait_ready(self, timeout: float, process: subprocess.Popen[bytes] | None) -> None:
        """Poll `GET /v2/` until it answers 401 or 200; a registry that exits early reports its last log line."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                self.pid_path.unlink(missing_ok=True)
                raise RegistryError(f"the local registry exited at start (code {process.returncode}): "
                                    f"{self._last_log_line()} (log: {self.log_path})")
            try:
                if requests.get(f"http://127.0.0.1:{self.port}/v2/", timeout=2).status_code in (200, 401):
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise RegistryError(f"the local registry on 127.0.0.1:{self.port} did not answer within {timeout:g} s "
                            f"(log: {self.log_path})")

    def _last_log_line(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except FileNotFoundError:
            return "no log"
        return lines[-1] if lines else "empty log"

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the registry (its whole process group, or the container); the data directory stays."""
        pid = self._pid()
        if pid is not None:
            try:
                os.killpg(pid, signal.SIGTERM)  # start_new_session made the registry its group's leader
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline and Path(f"/proc/{pid}").exists() and not _is_zombie(pid):
                    time.sleep(0.1)
                if Path(f"/proc/{pid}").exists() and not _is_zombie(pid):
                    os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.pid_path.unlink(missing_ok=True)
        for container in self._containers():
            self.engine.remove(container.id)


def _is_zombie(pid: int) -> bool:
    """A child we started but have not reaped still has /proc/PID; its state is Z."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, IndexError):
        return True
