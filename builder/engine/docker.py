"""The one interface to the container engine, the way repo2docker hides Docker behind a narrow class.

Builds shell out to the docker CLI with BuildKit, because the docker SDK cannot do BuildKit (docker-py #2230)
and secret mounts need it; everything else (inspect, tag, run, push) goes through the SDK. Nothing else in
trainimg runs `docker` or talks to the daemon directly.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

import docker
import docker.errors
import docker.types
import requests

from ..errors import EngineError, UserInputError
from ..plan.installer import hash_mismatch
from .base import (
    BuildRequest,
    BuildResult,
    CommandResult,
    ContainerSpec,
    ContainerState,
    Engine,
    EngineLost,
    GpuRequest,
    ImageInfo,
    Listed,
)

# A build step as BuildKit's plain log names it; FROM only resolves an image, and `[auth]` (credentials shared
# for a registry cache import) is no step either.
_STEP_RE = re.compile(r"^#(\d+) \[(?!internal\]|auth\])([^\]]*)\] (?!FROM )(.*)$")
_CACHED_RE = re.compile(r"^#(\d+) CACHED$")
_COMPONENT_RE = re.compile(r"^#\d+ \d+\.\d+ .*?(trainimg: component (\S+) could not be installed.*)$")  # output only


# Build arg that makes BuildKit write its cache metadata into the image config, so the pushed image serves as
# `--cache-from` for the next build on another (empty) engine.
INLINE_CACHE_ARG = "BUILDKIT_INLINE_CACHE"


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
        if subprocess.run([cli, "buildx", "version"], capture_output=True, check=False).returncode == 0:
            return cli
        out = subprocess.run([cli, "version", "--format", "{{.Client.Version}}"], capture_output=True, text=True,
                             check=False)
        major = out.stdout.strip().split(".")[0]
        if major.isdigit() and int(major) < 23:
            return cli
    raise EngineError("no docker client that can run BuildKit builds: install docker-buildx, or Debian's docker.io "
                      "and set TRAINIMG_DOCKER_CLI=/usr/bin/docker")


@contextmanager
def _refusals(what: str) -> Iterator[None]:
    """Every SDK or transport failure inside becomes one EngineError line naming what was being done."""
    try:
        yield
    except docker.errors.DockerException as exc:
        raise EngineError(f"{what}: {_short(exc)}") from None
    except requests.RequestException as exc:
        raise EngineError(f"{what}: the engine stopped answering ({type(exc).__name__})") from None


_T = TypeVar("_T")


def _unless_gone(what: str, call: Callable[[], _T]) -> _T | None:
    """`call()`, or None when the image or container it asks about is gone (someone removed it: not a failure);
    any other refusal is `_refusals`'s one line."""
    with _refusals(what):
        try:
            return call()
        except docker.errors.NotFound:
            return None


class DockerEngine(Engine):
    """Docker through its CLI (BuildKit builds, login) and SDK (everything else)."""

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
        _ = self.client  # fail early, with the engine message, when no daemon answers
        with tempfile.TemporaryDirectory(prefix="trainimg-build-") as tmp:
            iidfile = Path(tmp) / "iid"
            start = time.monotonic()
            cmd = _build_command(self.cli, req, iidfile)
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
            return BuildResult(iidfile.read_text().strip(), len(steps), len(cached), seconds, tuple(log))

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

    def image(self, ref: str) -> ImageInfo | None:
        attrs = _unless_gone(f"cannot inspect {ref}", lambda: self.client.api.inspect_image(ref))
        if attrs is None:
            return None
        return ImageInfo(
            id=attrs["Id"], labels=dict((attrs.get("Config") or {}).get("Labels") or {}),
            size=int(attrs.get("Size") or 0), repo_digests=tuple(attrs.get("RepoDigests") or ()),
            layers=tuple((attrs.get("RootFS") or {}).get("Layers") or ()),
            tags=tuple(t for t in attrs.get("RepoTags") or () if t != "<none>:<none>"))

    def save(self, ref: str, dest: Path) -> None:
        with _refusals(f"cannot save {ref}"), dest.open("wb") as fh:
            fh.writelines(self.client.images.get(ref).save(named=False))

    def labelled_images(self, label: str) -> list[ImageInfo]:
        with _refusals("cannot list images"):
            found = self.client.api.images(filters={"label": label})
        return [ImageInfo(id=i["Id"], labels=dict(i.get("Labels") or {}), size=int(i.get("Size") or 0),
                          repo_digests=tuple(i.get("RepoDigests") or ()),
                          tags=tuple(t for t in i.get("RepoTags") or () if t != "<none>:<none>")) for i in found]

    def remove_image(self, ref: str) -> bool:
        try:
            self.client.api.remove_image(ref, force=False)
        except docker.errors.NotFound:
            return False
        except docker.errors.APIError as exc:
            if exc.status_code == 409:  # in use by a container, or the parent of another image: kept
                return False
            raise EngineError(f"cannot remove image {ref[:40]}: {_short(exc)}") from None
        return True

    def tag(self, image_id: str, ref: str) -> None:
        repo, _, tag = ref.rpartition(":")
        if not repo or "/" in tag:
            repo, tag = ref, "latest"
        with _refusals(f"cannot tag {image_id[:19]} as {ref}"):
            self.client.api.tag(image_id, repo, tag, force=True)

    def run_command(self, spec: ContainerSpec, timeout: float = 300.0) -> CommandResult:
        cid = self.start(spec)
        try:
            with _refusals(f"the command in {spec.image[:40]} did not finish within {timeout:g} s"):
                code = int(self.client.api.wait(cid, timeout=timeout)["StatusCode"])
            with _refusals(f"cannot read the output of the command in {spec.image[:40]}"):
                out = self.client.api.logs(cid, stdout=True, stderr=False)
                err = self.client.api.logs(cid, stdout=False, stderr=True)
        finally:
            self.remove(cid)
        return CommandResult(code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))

    def start(self, spec: ContainerSpec) -> str:
        kwargs: dict[str, Any] = {}
        if spec.share_network_of:
            kwargs["network_mode"] = f"container:{spec.share_network_of}"
        elif spec.network:
            kwargs["network"] = spec.network
            if spec.aliases:
                kwargs["networking_config"] = {
                    spec.network: self.client.api.create_endpoint_config(aliases=list(spec.aliases))}
        else:
            kwargs["network_mode"] = "none"
        if spec.gpus is not None:
            kwargs["device_requests"] = device_requests(spec.gpus)
        if spec.ports:
            kwargs["ports"] = {f"{inside}/tcp": host for inside, host in spec.ports.items()}
        volumes = {src: {"bind": dst, "mode": "rw"} for src, dst in spec.mounts.items()}
        volumes.update({src: {"bind": dst, "mode": "ro"} for src, dst in spec.ro_mounts.items()})
        what = f"cannot start {spec.name or 'a container'} from {spec.image[:40]}"
        try:
            container = self.client.containers.run(
                spec.image, list(spec.command) or None, name=spec.name, hostname=spec.hostname, detach=True,
                labels=dict(spec.labels), environment=dict(spec.env), volumes=volumes,
                entrypoint=None if spec.entrypoint is None else list(spec.entrypoint), **kwargs)
        except docker.errors.ImageNotFound:
            raise EngineError(f"image {spec.image} is not on this engine: build or pull it first") from None
        except (docker.errors.DockerException, requests.RequestException) as exc:
            raise EngineError(f"{what}: {_short(exc)}") from None
        return str(container.id)

    def state(self, container: str) -> ContainerState | None:
        attrs = _unless_gone(f"cannot inspect container {container[:12]}",
                             lambda: self.client.api.inspect_container(container))
        if attrs is None:
            return None
        st = attrs.get("State") or {}
        running = st.get("Status") not in ("exited", "dead")
        return ContainerState(running, None if running else int(st.get("ExitCode", 0)))

    def logs(self, container: str) -> str | None:
        raw = _unless_gone(f"cannot read the logs of {container[:12]}",
                           lambda: self.client.api.logs(container, stdout=True, stderr=True))
        return None if raw is None else raw.decode("utf-8", "replace")

    def follow(self, container: str) -> Iterator[str]:
        buf = b""
        try:
            for chunk in self.client.api.logs(container, stream=True, follow=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    yield line.decode("utf-8", "replace")
        except (docker.errors.DockerException, requests.RequestException):
            return  # the container went away: its output ends here

    def remove(self, container: str) -> None:
        try:
            self.client.api.remove_container(container, force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: removal already in progress (someone else is removing it)
                raise EngineError(f"cannot remove container {container[:12]}: {_short(exc)}") from None

    def create_network(self, name: str, labels: Mapping[str, str]) -> None:
        with _refusals(f"cannot create network {name}"):
            self.client.api.create_network(name, driver="bridge", labels=dict(labels))

    def remove_network(self, name: str) -> None:
        try:
            self.client.api.remove_network(name)
        except docker.errors.APIError:
            pass  # gone already, or a container still being removed holds it: the next run's reaper takes it

    def containers(self, label: str) -> list[Listed]:
        with _refusals("cannot list containers"):
            found = self.client.api.containers(all=True, filters={"label": label})
        return [Listed(c["Id"], (c.get("Names") or ["/"])[0].lstrip("/"), dict(c.get("Labels") or {}))
                for c in found]

    def networks(self, label: str) -> list[Listed]:
        with _refusals("cannot list networks"):
            found = self.client.api.networks(filters={"label": label})
        return [Listed(n["Id"], n.get("Name", ""), dict(n.get("Labels") or {})) for n in found]

    def gpu_runtime(self) -> bool:
        with _refusals("cannot read the engine's settings"):
            return "nvidia" in (self.client.info().get("Runtimes") or {})

    def push(self, repository: str, tag: str, auth: Mapping[str, str] | None) -> Iterable[dict[str, Any]]:
        """The SDK's push stream; a connection lost mid-stream is EngineLost (the push may be retried)."""
        try:
            yield from self.client.api.push(repository, tag=tag, stream=True, decode=True,
                                            auth_config=dict(auth) if auth else None)
        except requests.RequestException as exc:
            raise EngineLost(f"the engine stopped reporting on the push of {repository}:{tag}: "
                             f"{type(exc).__name__}") from None
        except docker.errors.DockerException as exc:
            raise EngineError(f"the engine refused to push {repository}:{tag}: {_short(exc)}") from None

    def plain_http(self, host: str) -> bool:
        try:
            registry_config = self.client.info().get("RegistryConfig") or {}
        except (docker.errors.DockerException, requests.RequestException):
            return False
        index = (registry_config.get("IndexConfigs") or {}).get(host)
        if index is not None:
            return not index.get("Secure", True)
        try:
            address = ipaddress.ip_address(host.rsplit(":", 1)[0])
        except ValueError:
            return False
        return any(address in ipaddress.ip_network(cidr) for cidr in registry_config.get("InsecureRegistryCIDRs")
                   or [])

    def login(self, host: str, username: str, password: str) -> None:
        """`docker login` with the password on stdin, so later pushes find it in the CLI's config.json."""
        out = subprocess.run([self.cli, "login", host, "-u", username, "--password-stdin"], input=password,
                             text=True, capture_output=True, check=False)
        if out.returncode != 0:
            raise EngineError(f"docker login {host} failed: {(out.stderr.strip().splitlines() or ['?'])[-1]}")


def device_requests(gpus: GpuRequest) -> list[docker.types.DeviceRequest]:
    """`--gpus all` or `--gpus device=<i>,...` as the engine API spells it."""
    if gpus.indexes is None:
        return [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
    return [docker.types.DeviceRequest(device_ids=[str(i) for i in gpus.indexes], capabilities=[["gpu"]])]


def _build_command(cli: str, req: BuildRequest, iidfile: Path) -> list[str]:
    cmd = [cli, "build", "--progress", "plain", "-f", str(req.dockerfile), "--target", req.target,
           "--iidfile", str(iidfile), *(["--no-cache"] if req.no_cache else [])]
    if req.network_host:
        cmd += ["--network", "host"]
    for key, value in sorted({**req.build_args, INLINE_CACHE_ARG: "1"}.items()):
        cmd += ["--build-arg", f"{key}={value}"]
    cmd += [a for key, value in sorted(req.labels.items()) for a in ("--label", f"{key}={value}")]
    cmd += [a for ref in req.cache_from for a in ("--cache-from", ref)]
    cmd += [a for tag in req.tags for a in ("--tag", tag)]
    cmd += [a for sid, path in sorted(req.secrets.items()) for a in ("--secret", f"id={sid},src={path}")]
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


def _short(exc: BaseException) -> str:
    text = str(getattr(exc, "explanation", None) or exc)
    return text.splitlines()[0][:300] if text else type(exc).__name__
