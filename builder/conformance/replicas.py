"""Run a job's replicas as containers on a fresh docker network, the way a training platform would.

Shared by `trainimg test` (the conformance all-reduce) and `trainimg run` (a user's own command): each replica
gets exactly the env its platform injects (`runtime.topology`), peers resolve each other by name on the
network, a UAI parameter server shares its node's network namespace (same host, another port). Every container
and network carries labels naming the run and the process that owns it, and is removed on success, failure,
timeout and Ctrl-C; a run killed outright (SIGKILL) is reaped by the next run, which finds its owner dead.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import docker
import docker.errors
import docker.types

from ..engine.docker import DockerEngine
from ..errors import EngineError
from ..runtime.contract import MANAGED_LABEL, OWNER_LABEL, RUN_LABEL
from ..runtime.topology import ReplicaSpec

VANISHED = 255  # exit code recorded for a replica whose container was removed by someone else


@dataclass(frozen=True)
class ReplicaResult:
    name: str
    role: str
    index: int
    exit_code: int | None  # None: still running when the run ended (ps, evaluator, or a timeout)
    logs: str
    timed_out: bool = False


@dataclass
class ReplicaJob:
    """What to start: the image, the specs, and per replica the command; `waits_for` are the roles whose exit
    ends the job (chief and workers); the others (ps, evaluators) are stopped once those are done."""

    image: str
    specs: Sequence[ReplicaSpec]
    command: Callable[[ReplicaSpec], list[str]]
    env: Mapping[str, str] = field(default_factory=dict)
    volumes: Mapping[str, str] = field(default_factory=dict)  # host path -> container path
    entrypoint: list[str] | None = None
    waits_for: tuple[str, ...] = ("chief", "worker")
    device_requests: Callable[[ReplicaSpec], list[docker.types.DeviceRequest]] | None = None
    spec_volumes: Callable[[ReplicaSpec], Mapping[str, str]] | None = None  # extra mounts for some replicas


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _owner_alive(owner: str) -> bool:
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another machine's run: not ours to judge
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_leftovers(client: docker.DockerClient) -> int:
    """Remove containers and networks of runs whose owner process is gone; returns how many were removed."""
    removed = 0
    for c in client.containers.list(all=True, filters={"label": RUN_LABEL}):
        if not _owner_alive(c.labels.get(OWNER_LABEL, "")):
            try:
                c.remove(force=True)
                removed += 1
            except docker.errors.NotFound:
                pass
    for n in client.networks.list(filters={"label": RUN_LABEL}):
        if not _owner_alive(n.attrs.get("Labels", {}).get(OWNER_LABEL, "")):
            try:
                n.remove()
                removed += 1
            except (docker.errors.NotFound, docker.errors.APIError):
                pass
    return removed


@contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """Hold Ctrl-C while the engine creates a container, so the container is recorded (and removed) before
    KeyboardInterrupt unwinds; without this, one created while the signal lands escapes the cleanup."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if pending:
            raise KeyboardInterrupt


def purge(client: docker.DockerClient, run_id: str) -> None:
    """Force-remove every container and network that carries this run's label."""
    for c in client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={run_id}"}):
        try:
            c.remove(force=True)
        except docker.errors.APIError:
            pass
    for n in client.networks.list(filters={"label": f"{RUN_LABEL}={run_id}"}):
        try:
            n.remove()
        except docker.errors.APIError:
            pass


class ReplicaRunner:
    def __init__(self, engine: DockerEngine, on_log: Callable[[str, str], None] | None = None) -> None:
        self.engine = engine
        self.on_log = on_log
        self.run_id = uuid.uuid4().hex[:10]

    def host(self, role: str, index: int) -> str:
        """The hostname peers use for a replica: the container's name on the run's network."""
        return f"ti-{self.run_id}-{role}-{index}"

    def run(self, job: ReplicaJob, timeout: float) -> list[ReplicaResult]:
        client = self.engine.client
        reap_leftovers(client)
        labels = {RUN_LABEL: self.run_id, OWNER_LABEL: _owner(), MANAGED_LABEL: "replica"}
        network = client.networks.create(f"ti-{self.run_id}", driver="bridge", labels=labels)
        containers: dict[str, docker.models.containers.Container] = {}
        try:
            self._node_holders(job, network.name, labels)
            for spec in job.specs:
                containers[spec.name] = self._start(job, spec, network.name, labels, containers)
                if self.on_log:
                    threading.Thread(target=self._follow, args=(spec.name, containers[spec.name]),
                                     daemon=True).start()
            return self._wait(job, containers, timeout)
        finally:
            # By label, not by what was recorded: a container the engine created while Ctrl-C arrived is
            # removed too.
            purge(client, self.run_id)

    def _node_host(self, job: ReplicaJob, node: int) -> str:
        main = next(s for s in job.specs if s.node == node and s.role != "ps")
        return self.host(main.role, main.index)

    def _node_holders(self, job: ReplicaJob, network: str, labels: Mapping[str, str]) -> list:
        """UAI runs a ps beside the master or worker of each node: same host, another port. Each node gets a
        small holder container that owns the node's hostname and network namespace (like a pod's pause
        container), so both replicas join it and neither depends on the other still running."""
        holders = []
        for node in sorted({s.node for s in job.specs if s.node is not None}):
            host = self._node_host(job, node)
            try:
                holders.append(self.engine.client.containers.run(
                    job.image, ["sleep", "infinity"], name=host, hostname=host, network=network, detach=True,
                    entrypoint=[], labels=dict(labels)))
            except docker.errors.APIError as exc:
                raise EngineError(f"cannot start node {node} of the job: {exc.explanation or exc}") from None
        return holders

    def _start(self, job: ReplicaJob, spec: ReplicaSpec, network: str, labels: Mapping[str, str],
               started: Mapping[str, docker.models.containers.Container]):
        name = self.host(spec.role, spec.index)
        kwargs: dict = {}
        if spec.node is not None:
            node_host = self._node_host(job, spec.node)
            kwargs["network_mode"] = f"container:{node_host}"
            name = f"{node_host}--{spec.role}-{spec.index}"
        else:
            kwargs["network"] = network
            kwargs["hostname"] = name
        if job.device_requests:
            kwargs["device_requests"] = job.device_requests(spec)
        volumes = {**job.volumes, **(job.spec_volumes(spec) if job.spec_volumes else {})}
        try:
            with _interrupts_deferred():
                return self.engine.client.containers.run(
                    job.image, job.command(spec), name=name, detach=True, labels=dict(labels),
                    environment={**job.env, **spec.env}, entrypoint=job.entrypoint,
                    volumes={src: {"bind": dst, "mode": "rw"} for src, dst in volumes.items()},
                    **kwargs,
                )
        except docker.errors.ImageNotFound:
            raise EngineError(f"image {job.image} is not on this engine: build or pull it first") from None
        except docker.errors.APIError as exc:
            raise EngineError(f"cannot start replica {spec.name}: {exc.explanation or exc}") from None

    def _follow(self, name: str, container) -> None:
        buf = b""
        try:
            for chunk in container.logs(stream=True, follow=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    self.on_log(name, line.decode("utf-8", "replace"))  # type: ignore[misc]
        except docker.errors.APIError:
            pass

    def _wait(self, job: ReplicaJob, containers: Mapping[str, object], timeout: float) -> list[ReplicaResult]:
        deadline = time.monotonic() + timeout
        waited = [s for s in job.specs if s.role in job.waits_for] or list(job.specs)
        codes: dict[str, int] = {}
        while time.monotonic() < deadline and len(codes) < len(waited):
            for s in waited:
                if s.name in codes:
                    continue
                c = containers[s.name]
                try:
                    c.reload()
                except docker.errors.NotFound:
                    codes[s.name] = VANISHED  # removed behind our back: a failure, never a pass
                    continue
                if c.status in ("exited", "dead"):
                    codes[s.name] = int(c.attrs["State"]["ExitCode"])
            if any(code != 0 for code in codes.values()):
                break  # one failed replica fails the job: don't wait out the others
            time.sleep(0.3)
        results = []
        for s in job.specs:
            try:
                logs = containers[s.name].logs(stdout=True, stderr=True).decode("utf-8", "replace")
            except docker.errors.NotFound:
                logs = "trainimg: the replica's container disappeared before its logs were read"
            code = codes.get(s.name)
            timed_out = s in waited and code is None and not any(v != 0 for v in codes.values())
            results.append(ReplicaResult(s.name, s.role, s.index, code, logs, timed_out))
        return results
