"""The one interface to the container engine, the way repo2docker hides Docker behind a narrow class.

Builds shell out to the docker CLI with BuildKit, because the docker SDK cannot do BuildKit (docker-py #2230)
and secret mounts need it; everything else (inspect, tag, run, push) goes through the SDK. Nothing else in
trainimg runs `docker` or talks to the daemon directly.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import docker
import docker.errors

from ..errors import EngineError, UserInputError


# A build step as BuildKit's plain log names it; FROM only resolves an image, and `[auth]` (credentials shared
# for a registry cache import) is no step either.
_STEP_RE = re.compile(r"^#(\d+) \[(?!internal\]|auth\])([^\]]*)\] (?!FROM )(.*)$")
_CACHED_RE = re.compile(r"^#(\d+) CACHED$")
_COMPONENT_RE = re.compile(r"trainimg: component (\S+) could not be installed.*$")


@dataclass(frozen=True)
class BuildRequest:
    """Everything one BuildKit build needs. Secrets are files passed by id; they never enter a layer."""

    dockerfile: Path
    context: Path
    target: str
    build_args: Mapping[str, str] = field(default_factory=dict)
    secrets: Mapping[str, Path] = field(default_factory=dict)
    network_host: bool = False
    # Image labels: BuildKit writes them into the final config only, outside every step's cache key.
    labels: Mapping[str, str] = field(default_factory=dict)
    # Registry images whose inline cache metadata this build may reuse (ephemeral CI runners start empty).
    cache_from: tuple[str, ...] = ()


# Build arg that makes BuildKit write its cache metadata into the image config, so the pushed image serves as
# `--cache-from` for the next build on another (empty) engine.
INLINE_CACHE_ARG = "BUILDKIT_INLINE_CACHE"


@dataclass(frozen=True)
class BuildResult:
    image_id: str
    steps: int
    cached: int
    seconds: float
    log: tuple[str, ...]


def _find_cli() -> str:
    """A docker client that does BuildKit builds with secrets: TRAINIMG_DOCKER_CLI, else one that has buildx,
    else a pre-23 client whose built-in BuildKit path works with DOCKER_BUILDKIT=1 (Debian's docker.io)."""
    explicit = os.environ.get("TRAINIMG_DOCKER_CLI")
    if explicit:
        if not shutil.which(explicit):
            raise UserInputError(f"TRAINIMG_DOCKER_CLI={explicit} is not an executable", where="TRAINIMG_DOCKER_CLI")
        return explicit
    candidates = [c for c in (shutil.which("docker"), "/usr/bin/docker") if c and os.access(c, os.X_OK)]
    for cli in dict.fromkeys(candidates):
        if subprocess.run([cli, "buildx", "version"], capture_output=True).returncode == 0:
            return cli
        out = subprocess.run([cli, "version", "--format", "{{.Client.Version}}"], capture_output=True, text=True)
        major = out.stdout.strip().split(".")[0]
        if major.isdigit() and int(major) < 23:
            return cli
    raise EngineError("no docker client that can run BuildKit builds: install docker-buildx, or Debian's docker.io "
                      "and set TRAINIMG_DOCKER_CLI=/usr/bin/docker")


class DockerEngine:
    """Docker through its CLI (BuildKit builds) and SDK (everything else)."""

    def __init__(self, client: docker.DockerClient | None = None) -> None:
        self._client = client

    @cached_property
    def client(self) -> docker.DockerClient:
        if self._client is not None:
            return self._client
        try:
            client = docker.from_env(timeout=600)
            client.ping()
        except docker.errors.DockerException as exc:
            raise EngineError("cannot reach the Docker engine: start it (`sudo systemctl start docker`, or "
                              f"`dockerd`), or set DOCKER_HOST ({_short(exc)})") from None
        return client

    @cached_property
    def cli(self) -> str:
        return _find_cli()

    def build(self, req: BuildRequest, on_line: Callable[[str], None] | None = None) -> BuildResult:
        """Run one BuildKit build. The image is not tagged: the caller tags only what fully succeeded, so an
        interrupted or failed build never leaves a tag pointing at a half-made image."""
        self.client  # fail early, with the engine message, when no daemon answers
        with tempfile.TemporaryDirectory(prefix="trainimg-build-") as tmp:
            iidfile = Path(tmp) / "iid"
            cmd = [self.cli, "build", "--progress", "plain", "-f", str(req.dockerfile), "--target", req.target,
                   "--iidfile", str(iidfile)]
            if req.network_host:
                cmd += ["--network", "host"]
            for key, value in sorted({**req.build_args, INLINE_CACHE_ARG: "1"}.items()):
                cmd += ["--build-arg", f"{key}={value}"]
            for key, value in sorted(req.labels.items()):
                cmd += ["--label", f"{key}={value}"]
            for ref in req.cache_from:
                cmd += ["--cache-from", ref]
            for sid, path in sorted(req.secrets.items()):
                cmd += ["--secret", f"id={sid},src={path}"]
            cmd.append(str(req.context))
            env = {**os.environ, "DOCKER_BUILDKIT": "1"}
            start = time.monotonic()
            log: list[str] = []
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                    start_new_session=True)
            try:
                assert proc.stdout is not None
                for raw in proc.stdout:
                    line = raw.rstrip("\n")
                    log.append(line)
                    if on_line:
                        on_line(line)
                code = proc.wait()
            except BaseException:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait()
                raise
            seconds = time.monotonic() - start
            if code != 0 or not iidfile.exists():
                raise EngineError(_failure(log, req.target), where=f"build {req.dockerfile.name}")
            steps = {m.group(1) for line in log if (m := _STEP_RE.match(line))}
            cached = {m.group(1) for line in log if (m := _CACHED_RE.match(line))} & steps
            return BuildResult(iidfile.read_text().strip(), len(steps), len(cached), seconds, tuple(log))

    def image(self, ref: str) -> dict[str, Any] | None:
        """The image's inspect data, or None when the engine has no such image."""
        try:
            return self.client.api.inspect_image(ref)
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.APIError as exc:
            raise EngineError(f"cannot inspect {ref}: {_short(exc)}") from None

    def tag(self, image_id: str, ref: str) -> None:
        repo, _, tag = ref.rpartition(":")
        if not repo or "/" in tag:
            repo, tag = ref, "latest"
        self.client.api.tag(image_id, repo, tag, force=True)

    def read_file(self, image: str, path: str) -> str:
        """A file's text from inside an image, through a throwaway container without network."""
        try:
            out = self.client.containers.run(image, ["cat", path], entrypoint=[], remove=True, network_mode="none",
                                             stdout=True, stderr=False)
        except docker.errors.ContainerError as exc:
            raise EngineError(f"{path} is not readable in {image}: {_short(exc)}") from None
        return out.decode("utf-8")


def _failure(log: list[str], target: str) -> str:
    """One line saying why a build failed, from BuildKit's plain log."""
    for line in reversed(log):
        m = _COMPONENT_RE.search(line)
        if m:
            return m.group(0)
    failed = next((m for line in reversed(log) if (m := _STEP_RE.match(line))), None)
    where = f" at `{failed.group(3)[:100]}`" if failed else ""
    # The step's own last output line (``#N 1.234 message``) says more than BuildKit's "executor failed".
    said = ""
    if failed:
        prefix = f"#{failed.group(1)} "
        output = [ln[len(prefix):].split(" ", 1)[-1] for ln in log
                  if ln.startswith(prefix) and ln[len(prefix):len(prefix) + 1].isdigit()]
        said = output[-1].strip() if output else ""
    err = said or next((ln.split("ERROR", 1)[-1].strip(" :") for ln in reversed(log) if "ERROR" in ln), "")
    return f"stage {target} failed{where}: {err[:300] or 'see the build log above'}"


def _short(exc: BaseException) -> str:
    text = str(getattr(exc, "explanation", None) or exc)
    return text.splitlines()[0][:300] if text else type(exc).__name__
