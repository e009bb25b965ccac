"""`trainimg run`: run a user's training command locally the way a platform would.

`run_job` starts the replicas of one job as containers (`replicas.ReplicaRunner`) with exactly the env the chosen
platform injects (`runtime.topology`), each running ``trainimg-launch [--nproc-per-node N] -- CMD...`` so chief
and workers also get ``MASTER_ADDR``/``MASTER_PORT``/``WORLD_SIZE``/``RANK`` (ps and evaluators get only
``TF_CONFIG``/``TRAINIMG_ROLE`` from the launcher). CMD is the user's, or, without one, the image's own ENTRYPOINT
and CMD (`own_program`: what `docker run IMAGE` runs), so a team image whose ENTRYPOINT is its trainer runs as is:

* ``vertex``: workerpool0 one chief, workerpool1 ``replicas - 1`` workers, workerpool2 ``ps``, workerpool3
  ``evaluators``; ``CLUSTER_SPEC`` everywhere, ``TF_CONFIG`` only when the job has more than one replica.
* ``aiplatform``: master, ``replicas - 1`` workers, ``ps`` parameter servers; ``CLUSTER_SPEC`` and ``TF_CONFIG``.
* ``uai``: ``replicas`` nodes, a ps beside every node (same network namespace) unless ``ps`` says how many;
  ``TF_CONFIG`` only; one host folder shared by every replica at ``/data/output`` (UAI's shared UFS): the one
  given with ``--volume SRC:/data/output``, else a new folder under the state dir, reported as
  `JobResult.output_dir`.
* ``tfjob``: chief, workers, ``ps``, ``evaluators`` as ``<job>-<role>-<i>`` with ``TF_CONFIG`` naming their
  Services; ``pytorchjob``, ``jaxjob``, ``trainjob`` (torch runtime, or the JAX runtime for a JAX image),
  ``jobset``: ``replicas`` nodes, the env and DNS names their controllers give (`runtime.platforms`); no ps or
  evaluators. The command is the user's, under the launcher (a TrainJob's too: the launcher starts torchrun from
  its ``PET_*``).
* ``slurm``: ``replicas`` nodes of ``--nproc-per-node`` tasks, one container per task as ``srun`` starts them
  (`runtime.platforms.slurm`), the launcher keeping their ranks; no ps or evaluators.
* no platform (``None``/``"local"``): one container, no cluster variables (what ``tune`` uses by default).

The job ends when every chief/worker has exited or one has failed (the others are then stopped); ps and evaluator
containers, which never exit by themselves, are removed afterwards. Every container and network of the run is
removed on success, failure, timeout and Ctrl-C (the KeyboardInterrupt propagates once that is done).

`tune.tune` runs each of its trials as one such job (`run_replicas`, with a cancel event and the chief's extras).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from ..conformance import inimage
from ..engine.base import Engine, ImageInfo
from ..errors import UserInputError
from ..options import ENV_NAME, LOCAL, NO_TIMEOUT, JobOptions
from ..conformance.replicas import ReplicaJob, ReplicaResult, ReplicaRunner
from ..conformance.suite import gate_shm, refuse_too_many_processes
from ..runtime.contract import EXIT_OK, EXIT_TIMED_OUT, FRAMEWORK_LABEL
from ..runtime.expect import expectations
from ..runtime.topology import PS_PER_NODE, SHARED_OUTPUT, SIDE_ROLES, ReplicaSpec, process_start, refusal, \
    replica_specs
from ..state import state_dir


OnLog = Callable[[str, str], None]


# -- input parsing --------------------------------------------------------------------------------------------
def parse_env(items: Iterable[str]) -> dict[str, str]:
    """``--env K=V`` values -> {K: V}; K must be a shell variable name, V may be empty; a later K wins."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise UserInputError(f"{item!r}: write NAME=VALUE", where="--env")
        if not ENV_NAME.fullmatch(name):
            raise UserInputError(f"{name!r} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)", where="--env")
        if "\0" in value:
            raise UserInputError(f"{name}: the value contains a NUL byte", where="--env")
        out[name] = value
    return out


def parse_volumes(items: Iterable[str]) -> dict[str, str]:
    """``--volume SRC:DST`` values -> {absolute host path: container path}; SRC must exist, DST be absolute."""
    out: dict[str, str] = {}
    targets: set[str] = set()
    for item in items:
        parts = item.split(":")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise UserInputError(f"{item!r}: write SRC:DST (a host path and an absolute container path)",
                                 where="--volume")
        src, dst = parts
        host = Path(src).expanduser()
        if not host.exists():
            raise UserInputError(f"{src!r} does not exist on this machine", where="--volume")
        if not dst.startswith("/"):
            raise UserInputError(f"{dst!r}: the container path must be absolute", where="--volume")
        target = str(PurePosixPath(dst))
        if target == "/":
            raise UserInputError(f"{item!r}: cannot mount over the container's /", where="--volume")
        if target in targets:
            raise UserInputError(f"{target} is mounted twice", where="--volume")
        key = str(host.resolve())
        if key in out:
            raise UserInputError(f"{src} is mounted twice ({out[key]}, {target}): mount it once", where="--volume")
        out[key] = target
        targets.add(target)
    return out


# -- results --------------------------------------------------------------------------------------------------
@dataclass
class JobResult:
    """One job: `exit_code` is 0 when every chief/worker exited 0, else the first failing one's (spec order),
    124 when the job hit its timeout; `replicas` are in spec order (chief, workers, ps, evaluators)."""

    run_id: str
    platform: str
    image: str
    exit_code: int
    replicas: list[ReplicaResult]
    seconds: float
    timed_out: bool = False
    output_dir: Path | None = None  # the host folder mounted at the platform's SHARED_OUTPUT in every replica

    @property
    def failed_replica(self) -> ReplicaResult | None:
        return next((r for r in self.replicas if r.role in ("chief", "worker") and r.exit_code not in (None, 0)),
                    None)

    def status(self, r: ReplicaResult) -> str:
        if r.exit_code is not None:
            return f"exited {r.exit_code}"
        if r.timed_out:
            return "timed out"
        if r.role in ("ps", "evaluator"):
            return "stopped when the job ended"
        return "stopped (another replica failed)"

    def summary(self) -> str:
        """A few lines for the terminal: each replica's outcome, the verdict, the shared output folder."""
        width = max((len(r.name) for r in self.replicas), default=0)
        lines = [f"  {r.name:<{width}}  {self.status(r)}" for r in self.replicas]
        if self.exit_code == 0:
            verdict = f"{self.platform} job succeeded in {self.seconds:.1f}s"
        elif self.timed_out:
            verdict = f"{self.platform} job timed out after {self.seconds:.1f}s"
        else:
            failed = self.failed_replica
            verdict = f"{self.platform} job failed: {failed.name if failed else 'a replica'} exited {self.exit_code}"
        lines.append(verdict)
        if self.output_dir is not None:
            lines.append(f"{SHARED_OUTPUT[self.platform]} of every replica is {self.output_dir}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "platform": self.platform, "image": self.image, "exit_code": self.exit_code,
            "timed_out": self.timed_out, "seconds": round(self.seconds, 3),
            "output_dir": str(self.output_dir) if self.output_dir else None,
            "replicas": [{"name": r.name, "role": r.role, "index": r.index, "exit_code": r.exit_code,
                          "timed_out": r.timed_out, "status": self.status(r)} for r in self.replicas],
        }


# -- running --------------------------------------------------------------------------------------------------
class Cancelled(Exception):
    """Raised inside a trial's thread when the tune was interrupted before its replicas all started."""


class JobRunner(ReplicaRunner):
    """A ReplicaRunner that refuses to start replicas once `cancel` is set (an interrupted tune)."""

    def __init__(self, engine: Engine, on_log: OnLog | None, cancel: threading.Event | None = None) -> None:
        super().__init__(engine, on_log)
        self.cancel = cancel

    def _start(self, job: ReplicaJob, spec: ReplicaSpec, network: str, labels: Mapping[str, str]) -> str:
        if self.cancel is not None and self.cancel.is_set():
            raise Cancelled()
        return super()._start(job, spec, network, labels)


def check_shape(opts: JobOptions) -> str:
    """What JobOptions cannot check alone: the platform's own layout rules. Returns the platform or `local`."""
    platform = opts.where
    if platform == LOCAL:
        if opts.replicas != 1 or opts.ps or opts.evaluators:
            raise UserInputError("without --platform a job is one container: pick a platform for replicas, ps "
                                 "or evaluators", where="--platform")
        return platform
    for role, count, flag in (("ps", opts.ps, "--ps"), ("evaluator", opts.evaluators, "--evaluators")):
        if count and role not in SIDE_ROLES.get(platform, ()):
            raise UserInputError(f"{platform} has no {role} replicas", where=flag)
    if platform in PS_PER_NODE and opts.ps is not None and opts.ps > opts.replicas:
        raise UserInputError(f"{platform} runs at most one ps per node: {opts.ps} ps for {opts.replicas} node(s)",
                             where="--ps")
    return platform


def framework_of(engine: Engine, image_id: str, platform: str) -> str:
    """The image's framework (its label; PyTorch, a TrainJob's default runtime, without one), refused where the
    platform cannot run it (TensorFlow without TF_CONFIG)."""
    info = engine.image(image_id)
    framework = (info.labels.get(FRAMEWORK_LABEL) if info else None) or "pytorch"
    refused = refusal(platform, framework) if platform != LOCAL else None
    if refused:
        raise UserInputError(refused, where="--platform")
    return framework


def _specs(platform: str, opts: JobOptions, framework: str, runner: ReplicaRunner) -> list[ReplicaSpec]:
    if platform == LOCAL:
        return [ReplicaSpec(name="chief-0", role="chief", index=0, node=None, env={}, host=runner.host("chief", 0))]
    try:
        return replica_specs(platform, opts.replicas, ps=opts.ps, evaluators=opts.evaluators, job=runner.job,
                             hosts=runner.host, trial=opts.trial, nproc_per_node=opts.nproc_per_node,
                             framework=framework)
    except ValueError as exc:
        raise UserInputError(str(exc), where="--replicas") from None


def image_of(engine: Engine, image: str, verb: str) -> ImageInfo:
    info = engine.image(image)
    if info is None:
        raise UserInputError(f"no image {image!r} on this engine: build it (`trainimg build`) or pull it", where=verb)
    return info


def own_program(info: ImageInfo, image: str) -> tuple[str, ...]:
    """What `docker run IMAGE` runs: the image's ENTRYPOINT, then its CMD (a Dockerfile's ENTRYPOINT clears the CMD
    it inherited, and the engine's config says so). An image with neither has no program to run."""
    program = (*info.entrypoint, *info.cmd)
    if not program:
        raise UserInputError(f"{image} sets no ENTRYPOINT or CMD: give the program after `--`, e.g. -- python "
                             "train.py", where="command")
    return program


def serialized(on_log: OnLog | None, prefix: str = "") -> OnLog | None:
    """on_log called from one thread at a time (each replica's logs are followed in a thread of its own)."""
    if on_log is None:
        return None
    lock = threading.Lock()

    def log(name: str, line: str) -> None:
        with lock:
            on_log(prefix + name, line)

    return log


def run_job(engine: Engine, image: str, opts: JobOptions, *, on_log: OnLog | None = None,
            state: Path | None = None) -> JobResult:
    """Run one job as `opts.platform` would (see the module doc).
    Raises UserInputError for bad input, EngineError when the engine refuses a container; a failing command is
    not an error but a non-zero `JobResult.exit_code`."""
    platform = check_shape(opts)
    info = image_of(engine, image, "run")
    if not opts.command:  # the image's own program, under the launcher and the platform's env as any CMD
        opts = replace(opts, command=own_program(info, image))
    return run_replicas(engine, info.id, image, opts, platform=platform, on_log=serialized(on_log), state=state)


def run_replicas(engine: Engine, image_id: str, image: str, opts: JobOptions, *, platform: str,
         on_log: OnLog | None, state: Path | None, chief_env: Mapping[str, str] | None = None,
         chief_volumes: Mapping[str, str] | None = None, cancel: threading.Event | None = None,
         started: Callable[[JobRunner], None] | None = None) -> JobResult:
    """run_job without the input checks; tune adds the chief's hypertune env/folder and a cancel event."""
    runner = JobRunner(engine, on_log, cancel=cancel)
    if started:
        started(runner)
    framework = framework_of(engine, image_id, platform)
    info = engine.image(image_id)
    refuse_too_many_processes(engine, bool(info and expectations(info.labels).get("cuda")), opts.nproc_per_node)
    specs = _specs(platform, opts, framework, runner)
    extra = {"CLOUD_ML_TRIAL_ID": opts.trial} if opts.trial is not None else {}
    specs = [replace(s, env={**extra, **(chief_env if chief_env and s.role == "chief" else {}), **s.env})
             for s in specs]
    volumes = {**inimage.volumes(), **opts.volumes}
    output_dir = None
    shared = SHARED_OUTPUT.get(platform)
    if shared is not None:
        given = [src for src, dst in opts.volumes.items() if dst == shared]
        if given:
            output_dir = Path(given[0])
        else:
            output_dir = (state or state_dir(os.environ)) / "runs" / runner.run_id / "output"
            output_dir.mkdir(parents=True)
            volumes[str(output_dir)] = shared
    # --nproc-per-node only where the platform neither started the processes (Slurm) nor says how many (PET_*).
    started_as = process_start(platform, framework, opts.nproc_per_node)
    nproc = ["--nproc-per-node", str(started_as.nproc)] if started_as.nproc else []
    launch = inimage.command("launch", *nproc, "--", *opts.command)
    # Each container gets the /dev/shm the platform gives the job trainimg spec writes, as the gate's replicas do.
    job = ReplicaJob(image=image_id, specs=specs, command=lambda _spec: list(launch), env=dict(opts.env),
                     volumes=volumes, shm_size=gate_shm(platform, started_as.per_node, None),
                     entrypoint=[],
                     spec_volumes=(lambda s: chief_volumes if s.role == "chief" else {}) if chief_volumes else None)
    start = time.monotonic()
    results = runner.run(job, NO_TIMEOUT if opts.timeout is None else opts.timeout)  # removes all it made, Ctrl-C too
    seconds = time.monotonic() - start
    waited = [r for r in results if r.role in job.waits_for] or results
    failures = [r.exit_code for r in waited if r.exit_code is not None and r.exit_code != 0]
    timed_out = not failures and any(r.timed_out for r in waited)
    exit_code = failures[0] if failures else (EXIT_TIMED_OUT if timed_out else EXIT_OK)
    return JobResult(run_id=runner.run_id, platform=platform, image=image, exit_code=exit_code,
                     replicas=results, seconds=seconds, timed_out=timed_out, output_dir=output_dir)
