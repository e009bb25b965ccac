"""`trainimg run` and `trainimg tune`: run a user's training command locally the way a platform would, and tune it.

`run_job` starts the replicas of one job as containers (`replicas.ReplicaRunner`) with exactly the env the chosen
platform injects (`runtime.topology`), each running ``trainimg-launch [--nproc-per-node N] -- CMD...`` so chief
and workers also get ``MASTER_ADDR``/``MASTER_PORT``/``WORLD_SIZE``/``RANK`` (ps and evaluators get only
``TF_CONFIG``/``TRAINIMG_ROLE`` from the launcher):

* ``vertex``: workerpool0 one chief, workerpool1 ``replicas - 1`` workers, workerpool2 ``ps``, workerpool3
  ``evaluators``; ``CLUSTER_SPEC`` everywhere, ``TF_CONFIG`` only when the job has more than one replica.
* ``aiplatform``: master, ``replicas - 1`` workers, ``ps`` parameter servers; ``CLUSTER_SPEC`` and ``TF_CONFIG``.
* ``uai``: ``replicas`` nodes, a ps beside every node (same network namespace) unless ``ps`` says how many;
  ``TF_CONFIG`` only; one host folder shared by every replica at ``/data/output`` (UAI's shared UFS): the one
  given with ``--volume SRC:/data/output``, else a new folder under the state dir, reported as
  `JobResult.output_dir`.
* no platform (``None``/``"local"``): one container, no cluster variables (what ``tune`` uses by default).

The job ends when every chief/worker has exited or one has failed (the others are then stopped); ps and evaluator
containers, which never exit by themselves, are removed afterwards. Every container and network of the run is
removed on success, failure, timeout and Ctrl-C (the KeyboardInterrupt propagates once that is done).

`tune` runs one trial per combination of ``--param`` values (cartesian product, trial ids ``"1"``, ``"2"``, ...
in product order, as the services number them), appends ``--NAME=value`` to the command as the services pass
hyperparameters, sets ``CLOUD_ML_TRIAL_ID`` and the platform's ``task.trial``, mounts a per-trial host folder at
``/tmp/hypertune`` in the chief with ``CLOUD_ML_HP_METRIC_FILE=/tmp/hypertune/output.metrics``, and reads back
what ``cloudml-hypertune`` wrote there (JSON lines ``{"<tag>": "<value>", "trial": ..., "global_step": ...,
"timestamp": ..., "checkpoint_path": ...}``): a trial's value is the last one reported under the metric tag.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

import docker.errors

from ..conformance import inimage
from ..engine.docker import DockerEngine
from ..errors import EngineError, UserInputError
from ..options import ENV_NAME, LOCAL, NO_TIMEOUT, JobOptions, TuneOptions
from ..conformance.replicas import ReplicaJob, ReplicaResult, ReplicaRunner, purge
from ..runtime.contract import UAI
from ..runtime.topology import ReplicaSpec, replica_specs
from ..state import state_dir

UAI_OUTPUT = "/data/output"
HYPERTUNE_DIR = "/tmp/hypertune"
METRIC_FILE = f"{HYPERTUNE_DIR}/output.metrics"
# Keys cloudml-hypertune writes beside the metric tag on every line.
_HYPERTUNE_FIELDS = frozenset({"timestamp", "trial", "global_step", "checkpoint_path"})
_PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")

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


def parse_params(items: Iterable[str]) -> dict[str, list[str]]:
    """``--param NAME=V1,V2,...`` values -> {NAME: [V1, V2, ...]} in the order given."""
    out: dict[str, list[str]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        if not sep:
            raise UserInputError(f"{item!r}: write NAME=V1,V2,...", where="--param")
        check_param(name, values.split(","))
        if name in out:
            raise UserInputError(f"{name} is given twice: list all its values in one --param", where="--param")
        out[name] = values.split(",")
    if not out:
        raise UserInputError("give at least one --param NAME=V1,V2,...", where="--param")
    return out


def check_param(name: str, values: Sequence[str]) -> None:
    if not _PARAM_NAME.fullmatch(name):
        raise UserInputError(f"{name!r} is not a parameter name ([A-Za-z_][A-Za-z0-9_-]*)", where="--param")
    if not values or any(not v for v in values):
        raise UserInputError(f"{name}: every value must be non-empty (V1,V2,...)", where="--param")
    for v in values:
        if "," in v or "\0" in v or "\n" in v:
            raise UserInputError(f"{name}: value {v!r} may not contain a comma or a newline", where="--param")
    if len(set(values)) != len(values):
        raise UserInputError(f"{name}: a value is listed twice", where="--param")


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
    output_dir: Path | None = None  # UAI: the host folder mounted at /data/output in every replica

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
        """A few lines for the terminal: each replica's outcome, the verdict, UAI's output folder."""
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
            lines.append(f"{UAI_OUTPUT} of every replica is {self.output_dir}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "platform": self.platform, "image": self.image, "exit_code": self.exit_code,
            "timed_out": self.timed_out, "seconds": round(self.seconds, 3),
            "output_dir": str(self.output_dir) if self.output_dir else None,
            "replicas": [{"name": r.name, "role": r.role, "index": r.index, "exit_code": r.exit_code,
                          "timed_out": r.timed_out, "status": self.status(r)} for r in self.replicas],
        }


@dataclass
class Trial:
    id: str
    params: dict[str, str]
    status: str = "pending"  # succeeded, failed (command exited non-zero / timed out), no-metric, error, cancelled
    exit_code: int | None = None
    value: float | None = None
    reason: str = ""
    metrics: list[dict[str, Any]] = field(default_factory=list)  # the metric file's lines, as written
    seconds: float = 0.0
    job: JobResult | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "params": self.params, "status": self.status, "exit_code": self.exit_code,
                "value": self.value, "reason": self.reason, "metrics": self.metrics,
                "seconds": round(self.seconds, 3), "run_id": self.job.run_id if self.job else None}


@dataclass
class TuneResult:
    metric: str | None
    goal: str
    platform: str
    trials: list[Trial]
    best: Trial | None
    problem: str = ""  # why there is no best trial, when there is none

    @property
    def exit_code(self) -> int:
        """0 when a best trial was found (failed trials are reported, as the services do), else 1."""
        return 0 if self.best is not None else 1

    def table(self) -> str:
        names = list(self.trials[0].params) if self.trials else []
        metric = self.metric or "metric"
        header = ["trial", *names, metric, "status", "exit", "seconds"]
        rows = []
        for t in self.trials:
            mark = " *" if self.best is t else ""
            value = "" if t.value is None else f"{t.value:g}"
            exit_ = "" if t.exit_code is None else str(t.exit_code)
            status = t.status + (f": {t.reason}" if t.reason and t.status != "succeeded" else "")
            rows.append([t.id + mark, *(t.params[n] for n in names), value, status, exit_, f"{t.seconds:.1f}"])
        widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
        lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in [header, *rows]]
        if self.best is not None:
            params = ", ".join(f"{k}={v}" for k, v in self.best.params.items())
            lines.append(f"best: trial {self.best.id} ({params}): {metric} = {self.best.value:g} ({self.goal})")
        else:
            lines.append(f"no best trial: {self.problem}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "goal": self.goal, "platform": self.platform,
                "best": self.best.id if self.best else None,
                "best_params": self.best.params if self.best else None,
                "best_value": self.best.value if self.best else None,
                "problem": self.problem, "trials": [t.to_json() for t in self.trials]}


# -- running --------------------------------------------------------------------------------------------------
class _Cancelled(Exception):
    """Raised inside a trial's thread when the tune was interrupted before its replicas all started."""


class _JobRunner(ReplicaRunner):
    """A ReplicaRunner that refuses to start replicas once `cancel` is set (an interrupted tune)."""

    def __init__(self, engine: DockerEngine, on_log: OnLog | None, cancel: threading.Event | None = None) -> None:
        super().__init__(engine, on_log)
        self.cancel = cancel

    def _start(self, job, spec, network, labels, started):  # type: ignore[override]
        if self.cancel is not None and self.cancel.is_set():
            raise _Cancelled()
        return super()._start(job, spec, network, labels, started)


def _check_shape(opts: JobOptions) -> str:
    """What JobOptions cannot check alone: the platform's own layout rules. Returns the platform or `local`."""
    platform = opts.where
    if platform == LOCAL:
        if opts.replicas != 1 or opts.ps or opts.evaluators:
            raise UserInputError("without --platform a job is one container: pick a platform for replicas, ps "
                                 "or evaluators", where="--platform")
    elif platform == UAI:
        if opts.evaluators:
            raise UserInputError("UAI Train has no evaluator replicas", where="--evaluators")
        if opts.ps is not None and opts.ps > opts.replicas:
            raise UserInputError(f"UAI runs at most one ps per node: {opts.ps} ps for {opts.replicas} node(s)",
                                 where="--ps")
    return platform


def _specs(platform: str, replicas: int, ps: int | None, evaluators: int, trial: str | None,
           runner: ReplicaRunner) -> list[ReplicaSpec]:
    if platform == LOCAL:
        return [ReplicaSpec(name="chief-0", role="chief", index=0, node=None, env={})]
    try:
        return replica_specs(platform, replicas, ps=ps, evaluators=evaluators, hosts=runner.host, trial=trial)
    except ValueError as exc:
        raise UserInputError(str(exc), where="--replicas") from None


def _image_id(engine: DockerEngine, image: str, verb: str) -> str:
    info = engine.image(image)
    if info is None:
        raise UserInputError(f"no image {image!r} on this engine: build it (`trainimg build`) or pull it", where=verb)
    return info["Id"]


def _serialized(on_log: OnLog | None, prefix: str = "") -> OnLog | None:
    """on_log called from one thread at a time (each replica's logs are followed in a thread of its own)."""
    if on_log is None:
        return None
    lock = threading.Lock()

    def log(name: str, line: str) -> None:
        with lock:
            on_log(prefix + name, line)

    return log


def run_job(engine: DockerEngine, image: str, opts: JobOptions, *, on_log: OnLog | None = None,
            state: Path | None = None) -> JobResult:
    """Run one job as `opts.platform` would (see the module doc).
    Raises UserInputError for bad input, EngineError when the engine refuses a container; a failing command is
    not an error but a non-zero `JobResult.exit_code`."""
    platform = _check_shape(opts)
    image_id = _image_id(engine, image, "run")
    return _run(engine, image_id, image, opts, platform=platform, on_log=_serialized(on_log), state=state)


def _run(engine: DockerEngine, image_id: str, image: str, opts: JobOptions, *, platform: str,
         on_log: OnLog | None, state: Path | None, chief_env: Mapping[str, str] | None = None,
         chief_volumes: Mapping[str, str] | None = None, cancel: threading.Event | None = None,
         started: Callable[[_JobRunner], None] | None = None) -> JobResult:
    """run_job without the input checks; tune adds the chief's hypertune env/folder and a cancel event."""
    runner = _JobRunner(engine, on_log, cancel=cancel)
    if started:
        started(runner)
    specs = _specs(platform, opts.replicas, opts.ps, opts.evaluators, opts.trial, runner)
    extra = {"CLOUD_ML_TRIAL_ID": opts.trial} if opts.trial is not None else {}
    specs = [replace(s, env={**extra, **(chief_env if chief_env and s.role == "chief" else {}), **s.env})
             for s in specs]
    volumes = {**inimage.volumes(), **opts.volumes}
    output_dir = None
    if platform == UAI:
        given = [src for src, dst in opts.volumes.items() if dst == UAI_OUTPUT]
        if given:
            output_dir = Path(given[0])
        else:
            output_dir = (state or state_dir(os.environ)) / "runs" / runner.run_id / "output"
            output_dir.mkdir(parents=True)
            volumes[str(output_dir)] = UAI_OUTPUT
    nproc = ["--nproc-per-node", str(opts.nproc_per_node)] if opts.nproc_per_node > 1 else []
    launch = inimage.command("launch", *nproc, "--", *opts.command)
    job = ReplicaJob(image=image_id, specs=specs, command=lambda _spec: list(launch), env=dict(opts.env),
                     volumes=volumes,
                     entrypoint=[],
                     spec_volumes=(lambda s: chief_volumes if s.role == "chief" else {}) if chief_volumes else None)
    start = time.monotonic()
    results = runner.run(job, NO_TIMEOUT if opts.timeout is None else opts.timeout)  # removes all it made, Ctrl-C too
    seconds = time.monotonic() - start
    waited = [r for r in results if r.role in job.waits_for] or results
    failed = next((r for r in waited if r.exit_code not in (None, 0)), None)
    timed_out = failed is None and any(r.timed_out for r in waited)
    exit_code = failed.exit_code if failed else (124 if timed_out else 0)
    return JobResult(run_id=runner.run_id, platform=platform, image=image, exit_code=int(exit_code),
                     replicas=results, seconds=seconds, timed_out=timed_out, output_dir=output_dir)


# -- tuning ---------------------------------------------------------------------------------------------------
def trials_for(params: Mapping[str, Sequence[str]]) -> list[Trial]:
    """One trial per combination, numbered from "1" in cartesian-product order (the first parameter varies
    slowest)."""
    names = list(params)
    return [Trial(id=str(i), params=dict(zip(names, combo)))
            for i, combo in enumerate(itertools.product(*(params[n] for n in names)), start=1)]


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The JSON lines cloudml-hypertune wrote (malformed lines skipped); [] when there is no file."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, IsADirectoryError):
        return []
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


def metric_tags(records: Iterable[Mapping[str, Any]]) -> list[str]:
    tags: list[str] = []
    for r in records:
        for k in r:
            if k not in _HYPERTUNE_FIELDS and k not in tags:
                tags.append(k)
    return tags


def last_value(records: Sequence[Mapping[str, Any]], tag: str) -> float | None:
    for r in reversed(records):
        if tag in r:
            try:
                value = float(r[tag])
            except (TypeError, ValueError):
                return None
            return value if math.isfinite(value) else None
    return None


def tune(engine: DockerEngine, image: str, opts: TuneOptions, *, on_log: OnLog | None = None,
         on_trial: Callable[[Trial], None] | None = None, state: Path | None = None) -> TuneResult:
    """Grid-search `opts.params` (see the module doc). Trials run in threads, at most `opts.parallel` at once;
    without a platform each trial is one container, with one it is a distributed job (`run_job`). `on_log(name,
    line)` gets names like ``trial-2/worker-0``; `on_trial(trial)` is called as each trial ends. On Ctrl-C every
    trial's containers are removed, then KeyboardInterrupt propagates."""
    for name, values in opts.params.items():
        check_param(name, list(values))
    metric = opts.metric
    if metric is not None and (not metric or metric in _HYPERTUNE_FIELDS or "\n" in metric):
        raise UserInputError(f"{metric!r} cannot be a metric tag", where="--metric")
    platform = _check_shape(opts.job)
    if HYPERTUNE_DIR in opts.job.volumes.values():
        raise UserInputError(f"{HYPERTUNE_DIR} is where tune collects each trial's metrics: mount elsewhere",
                             where="--volume")
    image_id = _image_id(engine, image, "tune")
    trials = trials_for(opts.params)
    base = (state or state_dir(os.environ)) / "tune" / uuid.uuid4().hex[:10]
    base.mkdir(parents=True)
    log = _serialized(on_log)
    cancel = threading.Event()
    active: dict[str, _JobRunner] = {}
    lock = threading.Lock()

    def run_trial(t: Trial) -> Trial:
        folder = base / f"trial-{t.id}"
        folder.mkdir()
        started = time.monotonic()
        prefix = f"trial-{t.id}" if platform == LOCAL else f"trial-{t.id}/"

        def register(runner: _JobRunner) -> None:
            with lock:
                active[t.id] = runner

        trial_log = None
        if log is not None:
            trial_log = (lambda _n, line: log(prefix, line)) if platform == LOCAL else \
                (lambda n, line: log(prefix + n, line))
        try:
            if cancel.is_set():
                raise _Cancelled()
            job = replace(opts.job, trial=t.id,
                          command=(*opts.job.command, *(f"--{k}={v}" for k, v in t.params.items())))
            t.job = _run(engine, image_id, image, job, platform=platform, on_log=trial_log,
                         state=state, chief_env={"CLOUD_ML_HP_METRIC_FILE": METRIC_FILE},
                         chief_volumes={str(folder): HYPERTUNE_DIR}, cancel=cancel, started=register)
            t.exit_code = t.job.exit_code
            t.metrics = read_metrics(folder / "output.metrics")
            if cancel.is_set():
                t.status, t.reason = "cancelled", "interrupted"
            elif t.job.exit_code != 0:
                failed = t.job.failed_replica
                t.status = "failed"
                t.reason = "timed out" if t.job.timed_out else \
                    f"{failed.name if failed else 'command'} exited {t.job.exit_code}"
            else:
                t.status = "succeeded"
        except _Cancelled:
            t.status, t.reason = "cancelled", "interrupted before it started"
        except (docker.errors.DockerException, EngineError) as exc:
            t.status = "cancelled" if cancel.is_set() else "error"
            t.reason = "interrupted" if cancel.is_set() else str(exc)[:300]
        finally:
            with lock:
                active.pop(t.id, None)
            t.seconds = time.monotonic() - started
            shutil.rmtree(folder, ignore_errors=True)
        if on_trial is not None and not cancel.is_set():
            on_trial(t)
        return t

    pool = ThreadPoolExecutor(max_workers=min(opts.parallel, len(trials)), thread_name_prefix="trainimg-trial")
    futures: list[Future[Trial]] = []
    try:
        futures = [pool.submit(run_trial, t) for t in trials]
        pending = set(futures)
        while pending:
            _done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
        for f in futures:
            f.result()  # a bug in run_trial surfaces here rather than as a silently missing trial
    except BaseException:
        cancel.set()
        for f in futures:
            f.cancel()
        # Remove every running trial's containers until the threads have all returned: a trial that was starting
        # a container while we purged is caught by the next round.
        while any(not f.done() for f in futures):
            with lock:
                runners = list(active.values())
            for runner in runners:
                try:
                    purge(engine.client, runner.run_id)
                except (docker.errors.DockerException, EngineError):
                    pass
            time.sleep(0.3)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(base, ignore_errors=True)
    return judge(trials, metric, opts.goal, platform)


def judge(trials: list[Trial], metric: str | None, goal: str, platform: str = LOCAL) -> TuneResult:
    """Each trial's value (the last reported under `metric`, by default the only tag any trial reported) and the
    best trial by `goal` among those that succeeded with a value; ties go to the lower trial id."""
    problem = ""
    if metric is None:
        tags = metric_tags(r for t in trials if t.status == "succeeded" for r in t.metrics)
        if len(tags) == 1:
            metric = tags[0]
        elif len(tags) > 1:
            problem = f"the trials report several metrics ({', '.join(tags)}): choose one with --metric"
    for t in trials:
        t.value = last_value(t.metrics, metric) if metric is not None else None
        if t.status == "no-metric":  # judged before (judge may run again with another metric)
            t.status, t.reason = "succeeded", ""
        if t.status == "succeeded" and t.value is None and metric is not None:
            t.status = "no-metric"
            reported = metric_tags(t.metrics)
            t.reason = (f"reported {', '.join(reported)}, not {metric}" if reported else
                        "reported no metric (cloudml-hypertune report_hyperparameter_tuning_metric)")
    candidates = [t for t in trials if t.status == "succeeded" and t.value is not None]
    best = None
    if candidates:
        key = (lambda t: (-t.value, int(t.id))) if goal == "max" else (lambda t: (t.value, int(t.id)))
        best = min(candidates, key=key)
    elif not problem:
        if not any(t.status in ("succeeded", "no-metric") for t in trials):
            problem = "every trial failed"
        else:
            problem = "no trial reported a metric" if metric is None else f"no trial reported {metric}"
    return TuneResult(metric=metric, goal=goal, platform=platform, trials=trials, best=best, problem=problem)
