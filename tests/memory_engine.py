"""An in-memory `Engine`: containers are scripted outcomes, so replica scheduling, timeouts, cleanup and verdicts
can be tested without Docker (the real-engine tests stay; this covers the cases Docker cannot stage on demand:
a container vanishing mid-run, an engine refusing the third start, Ctrl-C at a chosen moment).

A container's outcome comes from `script(spec)`: exit code, logs, how long it runs, whether it hangs, whether
someone else removes it meanwhile. Time is real (outcomes are meant to take milliseconds).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from trainimg.engine.base import (
    BuildRequest,
    BuildResult,
    CommandResult,
    ContainerSpec,
    ContainerState,
    Engine,
    ImageInfo,
    Listed,
)
from trainimg.errors import EngineError


@dataclass(frozen=True)
class Outcome:
    """What a container does: print `logs`, run `seconds`, exit `exit_code`; `hang` never exits; `vanish` is
    removed by someone else after `seconds` instead of exiting."""

    exit_code: int = 0
    logs: str = ""
    seconds: float = 0.0
    hang: bool = False
    vanish: bool = False


@dataclass
class _Box:
    id: str
    spec: ContainerSpec
    outcome: Outcome
    started: float


@dataclass
class MemoryEngine(Engine):
    """`script(spec)` decides each container's outcome; `refuse(spec)` returning text makes start() fail with it;
    `on_state()` runs before every state() call (a test raises KeyboardInterrupt from it to stage a Ctrl-C)."""

    script: Callable[[ContainerSpec], Outcome] = lambda spec: Outcome()
    images: dict[str, ImageInfo] = field(default_factory=dict)
    refuse: Callable[[ContainerSpec], str | None] = lambda spec: None
    on_state: Callable[[], None] | None = None
    boxes: dict[str, _Box] = field(default_factory=dict)
    nets: dict[str, Mapping[str, str]] = field(default_factory=dict)
    started: list[ContainerSpec] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    # -- images ------------------------------------------------------------------------------------------------
    def build(self, req: BuildRequest, on_line: Callable[[str], None] | None = None) -> BuildResult:
        raise EngineError("the memory engine does not build")

    def image(self, ref: str) -> ImageInfo | None:
        return self.images.get(ref) or next((i for i in self.images.values() if i.id == ref), None)

    def tag(self, image_id: str, ref: str) -> None:
        info = self.image(image_id)
        if info is None:
            raise EngineError(f"no image {image_id}")
        self.images[ref] = info

    def labelled_images(self, label: str) -> list[ImageInfo]:
        key, eq, value = label.partition("=")
        found = {i.id: i for i in self.images.values() if key in i.labels and (not eq or i.labels[key] == value)}
        return list(found.values())

    def remove_image(self, ref: str) -> bool:
        names = [name for name, info in self.images.items() if ref in (name, info.id)]
        for name in names:
            del self.images[name]
        return bool(names)

    def run_command(self, spec: ContainerSpec, timeout: float = 300.0) -> CommandResult:
        outcome = self.script(spec)
        if outcome.hang or outcome.seconds > timeout:
            raise EngineError(f"the command did not finish within {timeout:g} s")
        time.sleep(outcome.seconds)
        self.started.append(spec)
        return CommandResult(outcome.exit_code, outcome.logs, "")

    # -- containers ----------------------------------------------------------------------------------------------
    def start(self, spec: ContainerSpec) -> str:
        if spec.network and spec.network not in self.nets:
            raise EngineError(f"network {spec.network} not found")
        with self._lock:
            if spec.name and any(b.spec.name == spec.name for b in self.boxes.values()):
                raise EngineError(f"the container name {spec.name} is already in use")
            cid = f"c{next(self._ids):04d}"
            refused = self.refuse(spec)
            self.boxes[cid] = _Box(cid, spec, self.script(spec), time.monotonic())  # created, as Docker does
            self.started.append(spec)
        if refused:
            raise EngineError(refused)
        return cid

    def _finished(self, box: _Box) -> bool:
        return not box.outcome.hang and time.monotonic() - box.started >= box.outcome.seconds

    def _gone(self, cid: str) -> _Box | None:
        """The box, after removing it if its outcome is to vanish and its time has come."""
        box = self.boxes.get(cid)
        if box is not None and box.outcome.vanish and self._finished(box):
            self.boxes.pop(cid, None)
            return None
        return box

    def state(self, container: str) -> ContainerState | None:
        if self.on_state is not None:
            self.on_state()
        box = self._gone(container)
        if box is None:
            return None
        if not self._finished(box):
            return ContainerState(True, None)
        return ContainerState(False, box.outcome.exit_code)

    def logs(self, container: str) -> str | None:
        box = self._gone(container)
        return None if box is None else box.outcome.logs

    def follow(self, container: str) -> Iterator[str]:
        box = self._gone(container)
        if box is not None:
            yield from box.outcome.logs.splitlines()

    def remove(self, container: str) -> None:
        with self._lock:
            if self.boxes.pop(container, None) is not None:
                self.removed.append(container)

    def create_network(self, name: str, labels: Mapping[str, str]) -> None:
        if name in self.nets:
            raise EngineError(f"network with name {name} already exists")
        self.nets[name] = dict(labels)

    def remove_network(self, name: str) -> None:
        self.nets.pop(name, None)

    def containers(self, label: str) -> list[Listed]:
        with self._lock:
            boxes = list(self.boxes.values())
        return [Listed(b.id, b.spec.name or b.id, dict(b.spec.labels)) for b in boxes
                if _matches(b.spec.labels, label)]

    def networks(self, label: str) -> list[Listed]:
        return [Listed(name, name, dict(labels)) for name, labels in list(self.nets.items())
                if _matches(labels, label)]

    def gpu_runtime(self) -> bool:
        return False

    # -- registries ----------------------------------------------------------------------------------------------
    def push(self, repository: str, tag: str, auth: Mapping[str, str] | None) -> Iterable[dict[str, Any]]:
        raise EngineError("the memory engine does not push")

    def plain_http(self, host: str) -> bool:
        return False

    def login(self, host: str, username: str, password: str) -> None:
        raise EngineError("the memory engine does not log in")

    # -- for tests -----------------------------------------------------------------------------------------------
    def leftovers(self) -> list[str]:
        """Everything still there: containers by name, then networks."""
        return [b.spec.name or b.id for b in self.boxes.values()] + list(self.nets)


def _matches(labels: Mapping[str, str], label: str) -> bool:
    key, sep, value = label.partition("=")
    return key in labels and (not sep or labels[key] == value)
