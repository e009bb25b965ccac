"""The BuildKit build, through the docker CLI: the command, its plain log, and one line saying why a build failed.

Its own module because the docker SDK cannot do BuildKit (docker-py #2230) and secret mounts need it, so a build is
a subprocess of the CLI (``DOCKER_BUILDKIT=1``) whose log is read back; `docker.DockerEngine.build` hands builds
here, still behind the one `base.Engine` interface. No docker SDK import: only `docker` talks to the daemon.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ..errors import EngineError, UserInputError
from ..plan.installer import hash_mismatch
from .base import BuildRequest, BuildResult

# A build step as BuildKit's plain log names it; FROM only resolves an image, and `[auth]` (credentials shared
# for a registry cache import) is no step either.
_STEP_RE = re.compile(r"^#(\d+) \[(?!internal\]|auth\])([^\]]*)\] (?!FROM )(.*)$")
_CACHED_RE = re.compile(r"^#(\d+) CACHED$")
_CACHE_IMPORT_RE = re.compile(r"^#(\d+) importing cache manifest from (\S+)$")
_STEP_ERROR_RE = re.compile(r"^#(\d+) ERROR: (.*)$")
_COMPONENT_RE = re.compile(r"^#\d+ \d+\.\d+ .*?(trainimg: component (\S+) could not be installed.*)$")  # output only


# Build arg that makes BuildKit write its cache metadata into the image config, so the pushed image serves as
# `--cache-from` for the next build on another (empty) engine.
INLINE_CACHE_ARG = "BUILDKIT_INLINE_CACHE"


def find_cli() -> str:
    """A docker client that does BuildKit builds with secrets: TRAINIMG_DOCKER_CLI, else one that has buildx,
    else a pre-23 client whose built-in BuildKit path works with DOCKER_BUILDKIT=1 (Debian's docker.io)."""
    explicit = os.environ.get("TRAINIMG_DOCKER_CLI")
    if explicit:
        if not shutil.which(explicit):
            raise UserInputError(f"TRAINIMG_DOCKER_CLI={explicit} is not an executable", where="TRAINIMG_DOCKER_CLI")
        return explicit
    candidates = [c for c in (shutil.which("docker"), "/usr/bin/docker") if c and os.access(c, os.X_OK)]
    for cli in dict.fromkeys(candidates):
        if subprocess.run([cli, "buildx", "version"], capture_output=True, check=False).returncode == 0:
            return cli
        out = subprocess.run([cli, "version", "--format", "{{.Client.Version}}"], capture_output=True, text=True,
                             check=False)
        major = out.stdout.strip().split(".")[0]
        if major.isdigit() and int(major) < 23:
            return cli
    raise EngineError("no docker client that can run BuildKit builds: install docker-buildx, or Debian's docker.io "
                      "and set TRAINIMG_DOCKER_CLI=/usr/bin/docker")


class BuildKitCli:
    """Builds through the docker client at `cli` (`find_cli`)."""

    def __init__(self, cli: str) -> None:
        self.cli = cli

    def build(self, req: BuildRequest, on_line: Callable[[str], None] | None = None) -> BuildResult:
        """Build `req` with BuildKit; a failure is one EngineError line naming the stage and its cause."""
        with tempfile.TemporaryDirectory(prefix="trainimg-build-") as tmp:
            iidfile = Path(tmp) / "iid"
            start = time.monotonic()
            cmd = build_command(self.cli, req, iidfile)
            code, log = self._run_build(cmd, on_line)
            if code != 0 and lost_session(log):
                # BuildKit shares identical steps between concurrent builds (other users' included); when the
                # client session a shared step reads from goes away, the build fails with a transport error
                # instead of its own. Failures are not cached: once more re-runs the step and shows its verdict.
                if on_line:
                    on_line(f"trainimg: BuildKit lost a session ({lost_session(log)}); building once more")
                code, log = self._run_build(cmd, on_line)
            seconds = time.monotonic() - start
            if code != 0 or not iidfile.exists():
                raise EngineError(_failure(log, req.target), where=f"build {req.dockerfile.name}")
            steps = {m.group(1) for line in log if (m := _STEP_RE.match(line))}
            cached = {m.group(1) for line in log if (m := _CACHED_RE.match(line))} & steps
            return BuildResult(iidfile.read_text().strip(), len(steps), len(cached), seconds, tuple(log),
                               unread_caches(log))

    @staticmethod
    def _run_build(cmd: list[str], on_line: Callable[[str], None] | None) -> tuple[int, list[str]]:
        """Run the CLI build in its own process group (Ctrl-C stops the whole build) and collect its log."""
        env = {**os.environ, "DOCKER_BUILDKIT": "1"}
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
            return proc.wait(), log
        except BaseException:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait()
            raise


def unread_caches(log: Sequence[str]) -> tuple[str, ...]:
    """``REF: why`` for each `--cache-from` image BuildKit could not read. BuildKit builds on without it and says
    so only in its log (a registry the engine has no login for answers 401), so a runner meant to reuse a
    release's layers would rebuild them with nothing said."""
    imports = {m.group(1): m.group(2) for line in log if (m := _CACHE_IMPORT_RE.match(line))}
    return tuple(f"{imports[m.group(1)]}: {m.group(2)}" for line in log
                 if (m := _STEP_ERROR_RE.match(line)) and m.group(1) in imports)


def build_command(cli: str, req: BuildRequest, iidfile: Path) -> list[str]:
    cmd = [cli, "build", "--progress", "plain", "-f", str(req.dockerfile), "--target", req.target,
           "--iidfile", str(iidfile), *(["--no-cache"] if req.no_cache else [])]
    if req.network_host:
        cmd += ["--network", "host"]
    if req.platform:
        cmd += ["--platform", req.platform]
    for key, value in sorted({**req.build_args, INLINE_CACHE_ARG: "1"}.items()):
        cmd += ["--build-arg", f"{key}={value}"]
    for key, value in sorted(req.labels.items()):
        cmd += ["--label", f"{key}={value}"]
    for ref in req.cache_from:
        cmd += ["--cache-from", ref]
    for tag in req.tags:
        cmd += ["--tag", tag]
    for sid, path in sorted(req.secrets.items()):
        cmd += ["--secret", f"id={sid},src={path}"]
    cmd.append(str(req.context))
    return cmd


_TRANSPORT_RE = re.compile(r"rpc error: code = (?:Internal|Unavailable|Canceled) desc = (.*(?:EOF|transport is closing"
                           r"|connection reset|context canceled).*)$")


def lost_session(log: list[str]) -> str:
    """The transport error a failed build ended with when BuildKit hid the build's own error behind it; "" when
    the log ends with a step's real failure (an executor error) or nothing of the kind."""
    tail = [line for line in log[-15:] if line.strip()]
    if any("executor failed running" in line or "did not complete successfully" in line for line in tail):
        return ""
    found = next((m for line in reversed(tail) if (m := _TRANSPORT_RE.search(line))), None)
    return found.group(0)[:200] if found else ""


def _failure(log: list[str], target: str) -> str:
    """One line saying why a build failed, from BuildKit's plain log."""
    lost = lost_session(log)
    if lost:
        return (f"stage {target} failed: BuildKit lost its client session twice ({lost}), so the build's own "
                "error is unknown: run the build again")
    for line in reversed(log):
        m = _COMPONENT_RE.match(line)
        if m:
            return m.group(1)
    if mismatch := hash_mismatch(log):  # one line naming the package and both hashes
        return mismatch
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
