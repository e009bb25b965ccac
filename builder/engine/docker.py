"""The one interface to the container engine, the way repo2docker hides Docker behind a narrow class.

Builds shell out to the docker CLI with BuildKit (`buildkit`), because the docker SDK cannot do BuildKit
(docker-py #2230) and secret mounts need it; everything else (inspect, tag, run, push) goes through the SDK here.
Nothing else in trainimg runs `docker` or talks to the daemon directly.
"""

from __future__ import annotations

import hashlib
import io
import ipaddress
import json
import subprocess
import tarfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from functools import cached_property
from typing import Any, TypeVar

import docker
import docker.errors
import docker.types
import requests

from ..errors import EngineError
from .buildkit import BuildKitCli, find_cli
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
DEFAULT_NETWORK = "bridge"  # Docker's own network, NATed to the outside: an outbound container joins it
CONFIG_MOUNT = "/trainimg-image-config"  # where `image_config`'s container has the image store's config file


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
        return find_cli()

    def build(self, req: BuildRequest, on_line: Callable[[str], None] | None = None) -> BuildResult:
        _ = self.client  # fail early, with the engine message, when no daemon answers
        return BuildKitCli(self.cli).build(req, on_line)

    def image(self, ref: str) -> ImageInfo | None:
        attrs = _unless_gone(f"cannot inspect {ref}", lambda: self.client.api.inspect_image(ref))
        if attrs is None:
            return None
        config = attrs.get("Config") or {}
        return ImageInfo(
            id=attrs["Id"], labels=dict(config.get("Labels") or {}),
            size=int(attrs.get("Size") or 0), repo_digests=tuple(attrs.get("RepoDigests") or ()),
            layers=tuple((attrs.get("RootFS") or {}).get("Layers") or ()),
            tags=tuple(t for t in attrs.get("RepoTags") or () if t != "<none>:<none>"),
            architecture=str(attrs.get("Architecture") or ""),
            env=tuple((name, value) for name, _, value in (item.partition("=") for item in config.get("Env") or ())),
            entrypoint=tuple(config.get("Entrypoint") or ()), cmd=tuple(config.get("Cmd") or ()))

    def save_stream(self, ref: str) -> Iterator[bytes]:
        with _refusals(f"cannot save {ref}"):
            yield from self.client.images.get(ref).save(named=False)

    def read_file(self, image: str, path: str) -> str:
        """The file copied out of a container of the image that is created and never started (`_copied_out`: no
        process, no network namespace: about half of a `cat` run's time); a path that is not a regular file there
        (a link, missing) goes through `cat` as the engine-neutral way reads it, which also says why it failed."""
        found = self._copied_out(image, path)
        return found.decode("utf-8") if found is not None else super().read_file(image, path)

    def image_config(self, ref: str) -> bytes:
        """The config's bytes from the engine's image store when they can be read there, else from `docker save`
        (Engine.image_config). The store keeps it in `<DockerRootDir>/image/<driver>/imagedb/content/sha256/<hex>`,
        on the engine's host (not necessarily this one), readable by root only: it is copied out of a container of
        the image with that one file bind-mounted read-only (`_copied_out`). What was read must hash to the image
        ID; where it cannot be read so (another image store, user namespaces) the save is read instead."""
        info = self.image(ref)
        if info is None:
            return super().image_config(ref)
        digest = info.id.split(":")[-1]
        try:
            facts = self.client.info()
            source = f"{facts['DockerRootDir']}/image/{facts['Driver']}/imagedb/content/sha256/{digest}"
        except (docker.errors.DockerException, requests.RequestException, KeyError):
            return super().image_config(ref)
        stored = self._copied_out(info.id, CONFIG_MOUNT, docker.types.Mount(CONFIG_MOUNT, source, type="bind",
                                                                            read_only=True))
        if stored is not None and hashlib.sha256(stored).hexdigest() == digest:
            return stored
        return super().image_config(ref)

    def _copied_out(self, image: str, path: str, mount: docker.types.Mount | None = None) -> bytes | None:
        """Regular file `path` of a container of `image` that is created, never started, and removed after, as
        `docker cp` reads it (the engine mounts a stopped container's filesystem and its mounts for the copy);
        None when it is not a regular file there or the engine refused. A bind mount is a `Mount`, not a volume
        string, so a missing source fails instead of being created on the engine's host."""
        try:
            container = self.client.api.create_container(
                image, ["true"], entrypoint=[], network_disabled=True,
                host_config=self.client.api.create_host_config(network_mode="none",
                                                               mounts=[mount] if mount else None))
        except (docker.errors.DockerException, requests.RequestException):
            return None
        try:
            chunks, _ = self.client.api.get_archive(container["Id"], path)
            with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as copied:
                member = copied.next()
                found = copied.extractfile(member) if member is not None and member.isreg() else None
                return found.read() if found is not None else None
        except (docker.errors.DockerException, requests.RequestException, tarfile.TarError):
            return None
        finally:
            self.remove(container["Id"])

    def store_config(self, config: bytes, tag: str) -> str:
        """`docker load` of an archive holding `config` and a manifest.json, no layer: dockerd's load takes each
        layer it already holds from its layer store and reads the archive only for one it lacks (moby
        image/tarexport/load.go), so the layers stay the built ones. The engine's ID for `tag` is then checked to
        be the config's digest."""
        digest = hashlib.sha256(config).hexdigest()
        layers = len(json.loads(config).get("rootfs", {}).get("diff_ids") or ())
        manifest = [{"Config": f"{digest}.json", "RepoTags": [tag], "Layers": [f"{i}/layer.tar" for i in range(layers)]}]
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as out:
            for name, data in ((f"{digest}.json", config), ("manifest.json", json.dumps(manifest).encode())):
                entry = tarfile.TarInfo(name)
                entry.size = len(data)
                out.addfile(entry, io.BytesIO(data))
        with _refusals(f"cannot store image {tag}"):
            said = [event for event in self.client.api.load_image(archive.getvalue(), quiet=True)]
        errors = [str(e.get("error") or e.get("errorDetail")) for e in said if e.get("error") or e.get("errorDetail")]
        if errors:
            raise EngineError(f"cannot store image {tag}: {errors[-1][:300]} (the engine must hold every layer of the "
                              "config already: nothing but the config is loaded)")
        stored = self.image(tag)
        if stored is None or stored.id != f"sha256:{digest}":
            raise EngineError(f"the engine stored {tag} as {stored.id if stored else 'nothing'}, not as the config's "
                              f"digest sha256:{digest}")
        return stored.id

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
        elif spec.outbound:
            kwargs["network"] = DEFAULT_NETWORK
        else:
            kwargs["network_mode"] = "none"
        if spec.gpus is not None:
            kwargs["device_requests"] = device_requests(spec.gpus)
        if spec.shm_size is not None:
            kwargs["shm_size"] = spec.shm_size
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


def _short(exc: BaseException) -> str:
    text = str(getattr(exc, "explanation", None) or exc)
    return text.splitlines()[0][:300] if text else type(exc).__name__
