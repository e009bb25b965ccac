"""`trainimg tune`: grid-search a user's training command locally, the way the platforms' tuning services run it.

It runs one trial per combination of ``--param`` values (cartesian product, trial ids ``"1"``, ``"2"``, ...
in product order, as the services number them), appends ``--NAME=value`` to the command as the services pass
hyperparameters, sets ``CLOUD_ML_TRIAL_ID`` and the platform's ``task.trial``, mounts a per-trial host folder at
``/tmp/hypertune`` in the chief with ``CLOUD_ML_HP_METRIC_FILE=/tmp/hypertune/output.metrics``, and reads back
what ``cloudml-hypertune`` wrote there (JSON lines ``{"<tag>": "<value>", "trial": ..., "global_step": ...,
"timestamp": ..., "checkpoint_path": ...}``): a trial's value is the last one reported under the metric tag.

Each trial is a job run as `run.run_replicas` runs one; trials run in threads, at most `TuneOptions.parallel` at
once, and on Ctrl-C every trial's containers are removed before KeyboardInterrupt propagates.
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
from pathlib import Path
from typing import Any

from ..conformance.replicas import purge
from ..engine.base import Engine
from ..errors import EngineError, UserInputError
from ..options import LOCAL, TuneOptions
from ..state import state_dir
from .run import Cancelled, JobResult, JobRunner, OnLog, check_shape, image_of, run_replicas, serialized

HYPERTUNE_DIR = "/tmp/hypertune"
METRIC_FILE = f"{HYPERTUNE_DIR}/output.metrics"
# Keys cloudml-hypertune writes beside the metric tag on every line.
_HYPERTUNE_FIELDS = frozenset({"timestamp", "trial", "global_step", "checkpoint_path"})
_PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


# -- input parsing --------------------------------------------------------------------------------------------
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


def tune(engine: Engine, image: str, opts: TuneOptions, *, on_log: OnLog | None = None,
         on_trial: Callable[[Trial], None] | None = None, state: Path | None = None) -> TuneResult:
    """Grid-search `opts.params` (see the module doc). Trials run in threads, at most `opts.parallel` at once;
    without a platform each trial is one container, with one it is a distributed job (`run_job`). `on_log(name,
    line)` gets names like ``trial-2/worker-0``; `on_trial(trial)` is called as each trial ends. On Ctrl-C every
    trial's containers are removed, then KeyboardInterrupt propagates."""
    metric, platform = _check(opts)
    image_id = image_of(engine, image, "tune").id
    trials = trials_for(opts.params)
    base = (state or state_dir(os.environ)) / "tune" / uuid.uuid4().hex[:10]
    base.mkdir(parents=True)
    runs = _Trials(engine, image_id, image, opts, platform, base, serialized(on_log), state, on_trial)
    pool = ThreadPoolExecutor(max_workers=min(opts.parallel, len(trials)), thread_name_prefix="trainimg-trial")
    futures: list[Future[Trial]] = []
    try:
        futures = [pool.submit(runs.run, t) for t in trials]
        pending = set(futures)
        while pending:
            _done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
        for f in futures:
            f.result()  # a bug in a trial's thread surfaces here rather than as a silently missing trial
    except BaseException:
        runs.cancel.set()
        for f in futures:
            f.cancel()
        # Remove every running trial's containers until the threads have all returned: a trial that was starting
        # a container while we purged is caught by the next round.
        while any(not f.done() for f in futures):
            runs.purge_active()
            time.sleep(0.3)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(base, ignore_errors=True)
    return judge(trials, metric, opts.goal, platform)


def _check(opts: TuneOptions) -> tuple[str | None, str]:
    """What TuneOptions cannot check alone; returns the metric tag (None: the one the trials report) and platform."""
    for name, values in opts.params.items():
        check_param(name, list(values))
    metric = opts.metric
    if metric is not None and (not metric or metric in _HYPERTUNE_FIELDS or "\n" in metric):
        raise UserInputError(f"{metric!r} cannot be a metric tag", where="--metric")
    platform = check_shape(opts.job)
    if HYPERTUNE_DIR in opts.job.volumes.values():
        raise UserInputError(f"{HYPERTUNE_DIR} is where tune collects each trial's metrics: mount elsewhere",
                             where="--volume")
    return metric, platform


@dataclass
class _Trials:
    """What every trial of one tune shares, the job runners now active (to purge on Ctrl-C), and the cancel flag."""

    engine: Engine
    image_id: str
    image: str
    opts: TuneOptions
    platform: str
    base: Path
    log: OnLog | None
    state: Path | None
    on_trial: Callable[[Trial], None] | None
    cancel: threading.Event = field(default_factory=threading.Event)
    _active: dict[str, JobRunner] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, t: Trial) -> Trial:
        """One trial, in a pool thread: its job, its metrics, its status; never raises for the trial's failure."""
        folder = self.base / f"trial-{t.id}"
        folder.mkdir()
        started = time.monotonic()
        try:
            if self.cancel.is_set():
                raise Cancelled()
            self._run_job(t, folder)
        except Cancelled:
            t.status, t.reason = "cancelled", "interrupted before it started"
        except EngineError as exc:
            t.status = "cancelled" if self.cancel.is_set() else "error"
            t.reason = "interrupted" if self.cancel.is_set() else str(exc)[:300]
        finally:
            with self._lock:
                self._active.pop(t.id, None)
            t.seconds = time.monotonic() - started
            shutil.rmtree(folder, ignore_errors=True)
        if self.on_trial is not None and not self.cancel.is_set():
            self.on_trial(t)
        return t

    def _run_job(self, t: Trial, folder: Path) -> None:
        def register(runner: JobRunner) -> None:
            with self._lock:
                self._active[t.id] = runner

        job = replace(self.opts.job, trial=t.id,
                      command=(*self.opts.job.command, *(f"--{k}={v}" for k, v in t.params.items())))
        t.job = run_replicas(self.engine, self.image_id, self.image, job, platform=self.platform,
                             on_log=self._trial_log(t), state=self.state,
                             chief_env={"CLOUD_ML_HP_METRIC_FILE": METRIC_FILE},
                             chief_volumes={str(folder): HYPERTUNE_DIR}, cancel=self.cancel, started=register)
        t.exit_code = t.job.exit_code
        t.metrics = read_metrics(folder / "output.metrics")
        if self.cancel.is_set():
            t.status, t.reason = "cancelled", "interrupted"
        elif t.job.exit_code != 0:
            failed = t.job.failed_replica
            t.status = "failed"
            t.reason = "timed out" if t.job.timed_out else \
                f"{failed.name if failed else 'command'} exited {t.job.exit_code}"
        else:
            t.status = "succeeded"

    def _trial_log(self, t: Trial) -> OnLog | None:
        """Replica lines named ``trial-N`` (one container) or ``trial-N/worker-0`` (a distributed trial)."""
        log = self.log
        if log is None:
            return None
        if self.platform == LOCAL:
            return lambda _name, line: log(f"trial-{t.id}", line)
        return lambda name, line: log(f"trial-{t.id}/{name}", line)

    def purge_active(self) -> None:
        with self._lock:
            runners = list(self._active.values())
        for runner in runners:
            try:
                purge(self.engine, runner.run_id)
            except EngineError:
                pass


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
