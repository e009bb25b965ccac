"""Run a job's replicas as containers on a fresh docker network, the way a training platform would.

Shared by `trainimg test` (the conformance all-reduce) and `trainimg run` (a user's own command): each replica
gets exactly the env its platform injects (`runtime.topology`), peers resolve each other on the network by the
names the platform gives (container names and network aliases), and replicas that share a node (a UAI parameter
server beside its master or worker, Slurm's tasks) share its network namespace and hostname. Every container
and network carries labels naming the run and the process that owns it, and is removed on success, failure,
timeout and Ctrl-C; a run killed outright (SIGKILL) is reaped by the next run, which finds its owner dead.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from ..engine.base import ContainerSpec, Engine, GpuRequest
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
    gpus: Callable[[ReplicaSpec], GpuRequest] | None = None
    spec_volumes: Callable[[ReplicaSpec], Mapping[str, str]] | None = None  # extra mounts for some replicas
    shm_size: int | None = None  # bytes of /dev/shm per container (None: the engine's default)


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


CHECK_RUN_PREFIX = "check-"  # the run label of a check's one-off container, not of a job's replicas


def reapable(check: str) -> dict[str, str]:
    """Labels for a one-off container of a check (the probe, the OS fixes): a run killed outright (SIGKILL) leaves it
    behind as it leaves its replicas, and the next run's `reap_leftovers` removes it."""
    return {RUN_LABEL: f"{CHECK_RUN_PREFIX}{check}-{uuid.uuid4().hex[:12]}", OWNER_LABEL: _owner()}


def _owner_alive(owner: str) -> bool:
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another machine's run: not ours to judge
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, OverflowError):  # OverflowError: no process can have that id
        return False
    except PermissionError:
        return True
    return True


def reap_leftovers(engine: Engine) -> int:
    """Remove containers and networks of runs whose owner process is gone; returns how many were removed.

    Concurrent runs add and remove their own containers meanwhile: the listings read labels from one answer
    (no inspect per container) and removal ignores what vanished, so another run's cleanup cannot fail this."""
    removed = 0
    for c in engine.containers(RUN_LABEL):
        if not _owner_alive(c.labels.get(OWNER_LABEL, "")):
            engine.remove(c.id)
            removed += 1
    for n in engine.networks(RUN_LABEL):
        if not _owner_alive(n.labels.get(OWNER_LABEL, "")):
            engine.remove_network(n.id)
            removed += 1
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


def purge(engine: Engine, run_id: str) -> None:
    """Force-remove every container and network that carries this run's label."""
    for c in engine.containers(f"{RUN_LABEL}={run_id}"):
        engine.remove(c.id)
    for n in engine.networks(f"{RUN_LABEL}={run_id}"):
        engine.remove_network(n.id)


class ReplicaRunner:
    poll = 0.3  # seconds between looks at the replicas' states

    def __init__(self, engine: Engine, on_log: Callable[[str, str], None] | None = None) -> None:
        self.engine = engine
        self.on_log = on_log
        self.run_id = uuid.uuid4().hex[:10]
        self._files_dir: str | None = None  # during `run`: where the replicas' platform files are written

    @property
    def job(self) -> str:
        """The run's job name, unique to it: the platforms derive their hostnames from it (`topology`), so
        concurrent runs never share a name; the run's network has it too."""
        return f"ti-{self.run_id}"

    def host(self, role: str, index: int) -> str:
        """The hostname peers use for a cloud platform's replica: the container's name on the run's network."""
        return f"{self.job}-{role}-{index}"

    def run(self, job: ReplicaJob, timeout: float) -> list[ReplicaResult]:
        reap_leftovers(self.engine)
        labels = {RUN_LABEL: self.run_id, OWNER_LABEL: _owner(), MANAGED_LABEL: "replica"}
        network = self.job
        containers: dict[str, str] = {}
        self._files_dir = tempfile.mkdtemp(prefix=f"{self.job}-files-")
        try:
            self.engine.create_network(network, labels)
            self._node_holders(job, network, labels)
            for spec in job.specs:
                containers[spec.name] = self._start(job, spec, network, labels)
                if self.on_log:
                    threading.Thread(target=self._follow, args=(spec.name, containers[spec.name]),
                                     daemon=True).start()
            return self._wait(job, containers, timeout)
        finally:
            # By label, not by what was recorded: a container the engine created while Ctrl-C arrived is
            # removed too.
            purge(self.engine, self.run_id)
            shutil.rmtree(self._files_dir, ignore_errors=True)

    def _node_holders(self, job: ReplicaJob, network: str, labels: Mapping[str, str]) -> None:
        """Replicas that share a node (UAI's ps beside the node's master or worker, the tasks Slurm starts on one
        node) share its host and network namespace. Each node gets a small holder container that owns the node's
        hostname, DNS names and network namespace (like a pod's pause container), so its replicas join it and none
        depends on another still running."""
        nodes = {s.node: s for s in job.specs if s.node is not None}
        for node, spec in sorted(nodes.items()):
            try:
                with _interrupts_deferred():
                    self.engine.start(ContainerSpec(image=job.image, command=("sleep", "infinity"), name=spec.host,
                                                    hostname=spec.host, network=network, aliases=spec.aliases,
                                                    labels=labels))
            except EngineError as exc:
                raise EngineError(f"cannot start node {node} of the job: {exc.message}") from None

    def _start(self, job: ReplicaJob, spec: ReplicaSpec, network: str, labels: Mapping[str, str]) -> str:
        """A replica under its platform's hostname and DNS names, or inside its node's holder."""
        shared = spec.host if spec.node is not None else None
        name = f"{spec.host}--{spec.name}" if shared else spec.host
        volumes = {**job.volumes, **(job.spec_volumes(spec) if job.spec_volumes else {})}
        container = ContainerSpec(
            image=job.image, command=tuple(job.command(spec)), name=name, hostname=None if shared else name,
            network=None if shared else network, aliases=() if shared else spec.aliases, share_network_of=shared,
            env={**job.env, **spec.env}, labels=labels, mounts=volumes, ro_mounts=self._platform_files(spec),
            entrypoint=None if job.entrypoint is None else tuple(job.entrypoint),
            gpus=job.gpus(spec) if job.gpus else None, shm_size=job.shm_size)
        try:
            with _interrupts_deferred():
                return self.engine.start(container)
        except EngineError as exc:
            raise EngineError(f"cannot start replica {spec.name}: {exc.message}") from None

    def _platform_files(self, spec: ReplicaSpec) -> dict[str, str]:
        """The files the platform writes into this replica (`ReplicaSpec.files`), each written on the host under
        the run's folder and mounted read-only where the platform puts it: host path -> container path."""
        mounts = {}
        for number, (path, text) in enumerate(sorted(spec.files.items())):
            assert self._files_dir is not None, "files are written while a run is going on"
            host_path = os.path.join(self._files_dir, f"{spec.name}-{number}-{os.path.basename(path)}")
            with open(host_path, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.chmod(host_path, 0o644)
            mounts[host_path] = path
        return mounts

    def _follow(self, name: str, container: str) -> None:
        for line in self.engine.follow(container):
            self.on_log(name, line)  # type: ignore[misc]

    def _wait(self, job: ReplicaJob, containers: Mapping[str, str], timeout: float) -> list[ReplicaResult]:
        deadline = time.monotonic() + timeout
        waited = [s for s in job.specs if s.role in job.waits_for] or list(job.specs)
        codes: dict[str, int] = {}
        while time.monotonic() < deadline and len(codes) < len(waited):
            for s in waited:
                if s.name in codes:
                    continue
                state = self.engine.state(containers[s.name])
                if state is None:
                    codes[s.name] = VANISHED  # removed behind our back: a failure, never a pass
                elif state.exit_code is not None:
                    codes[s.name] = state.exit_code
            if any(code != 0 for code in codes.values()):
                break  # one failed replica fails the job: don't wait out the others
            time.sleep(self.poll)
        results = []
        for s in job.specs:
            logs = self.engine.logs(containers[s.name])
            if logs is None:
                logs = "trainimg: the replica's container disappeared before its logs were read"
            code = codes.get(s.name)
            timed_out = s in waited and code is None and not any(v != 0 for v in codes.values())
            results.append(ReplicaResult(s.name, s.role, s.index, code, logs, timed_out))
        return results
