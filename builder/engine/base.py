"""The engine interface: the one door between trainimg and whatever runs containers.

repo2docker's ContainerEngine is the model: a narrow abstract class with typed values in and out and one error
(`EngineError`). `DockerEngine` (engine/docker.py) is the real implementation; tests also drive the conformance
replicas through a small in-memory engine. Nothing above this package sees an SDK object, an SDK exception or the
docker CLI, so no caller can make the engine's racy calls (list-then-inspect) by accident.
"""

from __future__ import annotations

import io
import tarfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import EngineError


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
    # Names the engine gives the image as it stores it: a name held from the first moment, so no other
    # process's cleanup can take the image before its builder reads it (build/litter.py).
    tags: tuple[str, ...] = ()
    no_cache: bool = False  # every step run anew (`verify`): BuildKit's layer cache unused
    # The platform built for (``linux/arm64``), None: the engine's own. Another architecture's RUN steps run under
    # the emulator the host registered (binfmt_misc), or natively on a builder of that architecture.
    platform: str | None = None


@dataclass(frozen=True)
class BuildResult:
    image_id: str
    steps: int
    cached: int
    seconds: float
    log: tuple[str, ...]
    unread_caches: tuple[str, ...] = ()  # `REF: why` for each --cache-from BuildKit could not read


@dataclass(frozen=True)
class ImageInfo:
    """What trainimg reads about a local image."""

    id: str
    labels: Mapping[str, str]
    size: int = 0
    repo_digests: tuple[str, ...] = ()
    layers: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()  # the `repo:tag` names it has now (none: dangling)
    architecture: str = ""  # the image config's `architecture` (amd64, arm64); "" where the engine did not say
    env: tuple[tuple[str, str], ...] = ()  # the environment its config sets (ENV), in the config's order
    entrypoint: tuple[str, ...] = ()  # its config's ENTRYPOINT and CMD: what `docker run IMAGE` runs, in that order
    cmd: tuple[str, ...] = ()


@dataclass(frozen=True)
class GpuRequest:
    """GPUs for one container: the devices with these indexes, or every GPU when `indexes` is None."""

    indexes: tuple[int, ...] | None = None


@dataclass(frozen=True)
class ContainerSpec:
    """One detached container. `network` names a network to join with `hostname`; `share_network_of` names a
    container whose network namespace it joins instead (a pod's pause container); neither means no network.
    `aliases` are further names its peers on `network` resolve it by, dots allowed (a pod's
    ``<host>.<subdomain>``, a Service's ``<host>.<namespace>.svc``): a replayed platform's own DNS names."""

    image: str
    command: tuple[str, ...]
    name: str | None = None
    hostname: str | None = None
    network: str | None = None
    aliases: tuple[str, ...] = ()
    share_network_of: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    mounts: Mapping[str, str] = field(default_factory=dict)  # host path -> container path, read-write
    ro_mounts: Mapping[str, str] = field(default_factory=dict)  # host path -> container path, read-only
    ports: Mapping[int, tuple[str, int]] = field(default_factory=dict)  # container port -> (host address, port)
    entrypoint: tuple[str, ...] | None = ()  # () clears the image's ENTRYPOINT; None keeps it
    gpus: GpuRequest | None = None
    shm_size: int | None = None  # bytes of /dev/shm (docker run --shm-size); None: the engine's default
    # Joins the engine's default network, which reaches the outside (an OS mirror), instead of none: the one
    # check that must look beyond the machine (conformance/osfixes.py) asks for it.
    outbound: bool = False


@dataclass(frozen=True)
class ContainerState:
    """A container as the engine reports it now; `exit_code` is set once it has stopped."""

    running: bool
    exit_code: int | None


@dataclass(frozen=True)
class CommandResult:
    """What a command run to completion in an image said."""

    exit_code: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class Listed:
    """A container or network from a listing: its id, name and labels as the listing gave them (no inspect)."""

    id: str
    name: str
    labels: Mapping[str, str]


class EngineLost(EngineError):
    """The engine stopped answering in the middle of a stream (a push): the operation may be tried again."""


class ChunkReader(io.RawIOBase):
    """An engine's stream of chunks (`save_stream`) as a readable file, for tarfile's stream mode (`r|`)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks, self._rest = iter(chunks), b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._rest:
            self._rest = next(self._chunks, b"")
            if not self._rest:
                return 0
        n = min(len(buffer), len(self._rest))
        buffer[:n], self._rest = self._rest[:n], self._rest[n:]
        return n


class Engine(ABC):
    """Build, inspect, run and push. Every failure the engine reports is raised as `EngineError`; absences that
    callers expect (no such image, a container removed by someone else) are values, not exceptions."""

    # -- images --------------------------------------------------------------------------------------------
    @abstractmethod
    def build(self, req: BuildRequest, on_line: Callable[[str], None] | None = None) -> BuildResult:
        """Build `req.target`; the image is not tagged (the caller tags only what fully succeeded)."""

    @abstractmethod
    def image(self, ref: str) -> ImageInfo | None:
        """The image named `ref` (tag or id), or None when the engine has none."""

    def save(self, ref: str, dest: Path) -> None:
        """Write image `ref` as `docker save` does (its layer tars uncompressed) to `dest`: `verify` reads the
        files of its layers."""
        with dest.open("wb") as fh:
            fh.writelines(self.save_stream(ref))

    def save_stream(self, ref: str) -> Iterable[bytes]:
        """Image `ref` as `docker save` writes it, in chunks as the engine sends them: a client push reads it once,
        without a copy of the whole image on disk. Not abstract: an engine without it cannot verify or push through
        the client, and says so."""
        raise EngineError(f"this engine cannot save {ref}")

    def image_config(self, ref: str) -> bytes:
        """The exact bytes of image `ref`'s config (its ID is their sha256): what no inspect shows, the history and
        BuildKit's inline cache among them. Read from the `docker save` stream, the one way every engine has (its
        layers stream past, unwritten; the engine stages the whole export first); an engine that can read its
        image store more cheaply overrides this."""
        info = self.image(ref)
        if info is None:
            raise EngineError(f"image {ref} is not on this engine")
        name = f"{info.id.split(':')[-1]}.json"
        with tarfile.open(fileobj=io.BufferedReader(ChunkReader(self.save_stream(ref))), mode="r|") as saved:
            for member in saved:
                found = saved.extractfile(member) if member.name == name else None
                if found is not None:
                    return found.read()
        raise EngineError(f"the engine's save of {ref} holds no image config {name}")

    def store_config(self, config: bytes, tag: str) -> str:
        """Store the image whose config is `config`, named `tag`, over layers the engine already holds (its
        `rootfs.diff_ids`: no layer is written, so every layer stays the one built); returns its ID. Not abstract:
        an engine without it says so."""
        raise EngineError(f"this engine cannot store an image config as {tag}")

    @abstractmethod
    def tag(self, image_id: str, ref: str) -> None:
        """Point `ref` (``repo[:tag]``) at `image_id`, moving it if it exists."""

    @abstractmethod
    def labelled_images(self, label: str) -> list[ImageInfo]:
        """Images carrying `label` (``key`` or ``key=value``), tagged or not."""

    @abstractmethod
    def remove_image(self, ref: str) -> bool:
        """`docker rmi` without force: a tag is taken off (the image goes with its last name); an id deletes an
        untagged image. A container using it or an image built on it keeps it (False); gone already is False."""

    @abstractmethod
    def run_command(self, spec: ContainerSpec, timeout: float = 300.0) -> CommandResult:
        """Run `spec` to completion and remove its container, whatever happens (a timeout is EngineError)."""

    def read_file(self, image: str, path: str) -> str:
        """A file's text from inside an image, through a throwaway container without network."""
        out = self.run_command(ContainerSpec(image=image, command=("cat", path)))
        if out.exit_code != 0:
            raise EngineError(f"{path} is not readable in {image}: {out.stderr.strip()[:300] or out.exit_code}")
        return out.stdout

    # -- containers and networks ---------------------------------------------------------------------------
    @abstractmethod
    def start(self, spec: ContainerSpec) -> str:
        """Create and start a detached container; returns its id."""

    @abstractmethod
    def state(self, container: str) -> ContainerState | None:
        """The container's state, or None when it no longer exists."""

    @abstractmethod
    def logs(self, container: str) -> str | None:
        """Everything it printed (stdout and stderr), or None when it no longer exists."""

    @abstractmethod
    def follow(self, container: str) -> Iterator[str]:
        """Its output lines as they come, until it stops or vanishes."""

    @abstractmethod
    def remove(self, container: str) -> None:
        """Force-remove a container; one already gone is not an error."""

    @abstractmethod
    def create_network(self, name: str, labels: Mapping[str, str]) -> None:
        """A fresh bridge network whose containers resolve each other by name."""

    @abstractmethod
    def remove_network(self, name: str) -> None:
        """Remove a network; one already gone (or still in use by a container being removed) is not an error."""

    @abstractmethod
    def containers(self, label: str) -> list[Listed]:
        """Containers carrying `label` (``key`` or ``key=value``), running or not, from one listing call: it
        never inspects them one by one, so containers removed meanwhile cannot make it fail."""

    @abstractmethod
    def networks(self, label: str) -> list[Listed]:
        """Networks carrying `label`, from one listing call (same guarantee as `containers`)."""

    @abstractmethod
    def gpu_runtime(self) -> bool:
        """Whether the engine can give containers GPUs (it has the NVIDIA runtime)."""

    # -- registries ----------------------------------------------------------------------------------------
    @abstractmethod
    def push(self, repository: str, tag: str, auth: Mapping[str, str] | None) -> Iterable[dict[str, Any]]:
        """Push ``repository:tag``; yields the engine's progress events (``status``, ``error``, ``aux``)."""

    @abstractmethod
    def plain_http(self, host: str) -> bool:
        """Whether the engine talks plain http to registry `host` (its insecure-registries, or loopback)."""

    @abstractmethod
    def login(self, host: str, username: str, password: str) -> None:
        """Log the engine's client in (its config.json), as `docker login` does."""
