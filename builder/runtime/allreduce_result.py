"""The all-reduce worker's one result line, its exit codes and its timeouts, shared by every framework.

Each rank prints ONE JSON line on stdout::

    {"framework", "backend", "rank", "world_size", "expected", "got", "ok", "seconds", "device"}

Exit codes: 0 the sum is right, 1 it is wrong, 2 setup error (one line on stderr), 3 a peer never came (timeout).
Kept apart from the frameworks (`allreduce_frameworks`) and the supervisor (`allreduce`) because both print the
same line: whichever prints first wins, once.

Standard library only.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TextIO

from . import reads
from .platforms.tfconfig import parse_tf_config
from .world import ClusterError
from .contract import EXIT_ALLREDUCE_TIMEOUT, EXIT_FAILED, EXIT_USAGE

VECTOR_LEN = 1024
DEFAULT_TIMEOUT = 300.0

EXIT_WRONG, EXIT_SETUP, EXIT_TIMEOUT = EXIT_FAILED, EXIT_USAGE, EXIT_ALLREDUCE_TIMEOUT


class SetupError(RuntimeError):
    """The process group could not be formed for a reason other than a missing peer."""


def expected_sum(world_size: int) -> int:
    """Sum of ``rank + 1`` over all ranks: 1 + 2 + ... + world = world * (world + 1) / 2."""
    if world_size < 0:
        raise ValueError(f"world_size must be >= 0, got {world_size}")
    return world_size * (world_size + 1) // 2


_emit_lock = threading.Lock()
_emitted = False
_result_stream: TextIO | None = None  # the real stdout once `protect_stdout` has pointed fd 1 at stderr


def protect_stdout() -> None:
    """Keep stdout for the one JSON line: fd 1 (and sys.stdout) go to stderr, the line goes to a saved copy.

    Frameworks' C++ code prints to fd 1 (gloo's "[Gloo] Rank 0 is connected to 2 peer ranks" for one).
    """
    global _result_stream
    if _result_stream is not None:
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    _result_stream = os.fdopen(saved, "w", buffering=1, encoding="utf-8")
    sys.stdout = sys.stderr


def emit(record: Mapping[str, object]) -> bool:
    """Print the one JSON line (first caller wins: the watchdog and the main thread may race)."""
    global _emitted
    with _emit_lock:
        if _emitted:
            return False
        _emitted = True
        stream = _result_stream or sys.stdout
        stream.write(json.dumps(record, sort_keys=True) + "\n")
        stream.flush()
        reads.flush()  # the gate's record of what the start read, before a rank may leave by os._exit
        return True


def record(framework: str, backend: str, rank: int | None, world: int | None, got: object, ok: bool | None,
           seconds: float, device: str, **extra: object) -> dict[str, object]:
    line: dict[str, object] = {
        "framework": framework,
        "backend": backend,
        "rank": rank,
        "world_size": world,
        "expected": expected_sum(world) if world else None,
        "got": got,
        "ok": ok,
        "seconds": round(seconds, 4),
        "device": device,
    }
    line.update(extra)
    return line


def summarise(values: Sequence[float], expected: int) -> tuple[object, bool]:
    """All elements equal `expected`? Returns (what to report as ``got``, ok)."""
    distinct = sorted(set(float(v) for v in values))
    ok = len(values) > 0 and distinct == [float(expected)]
    if len(distinct) == 1:
        value = distinct[0]
        return (int(value) if value.is_integer() else value), ok
    return distinct[:8], ok


class Watchdog:
    """Ends the process with exit 3 and a message if the all-reduce has not finished in `timeout` seconds.

    Used when a ``run_*`` function is called directly. A thread rather than ``signal.alarm``: a rank blocked in a
    framework's C++ wait never returns to the interpreter to run a Python signal handler. Some waits keep the GIL
    (TensorFlow's multi-worker start-up does), which is why `allreduce.main` runs the framework in a supervised
    child process instead (`allreduce.supervise`); there `supervised` is true and the parent owns the timeout.
    """

    #: True in the worker child `allreduce.main` starts: the supervising parent owns the timeout.
    supervised = False

    def __init__(self, timeout: float, framework: str, backend_hint: str, rank: int | None, world: int | None):
        self.timeout, self.framework, self.backend, self.rank, self.world = timeout, framework, backend_hint, rank, world
        self._timer = threading.Timer(timeout, self._fire)
        self._timer.daemon = True
        self.started = time.monotonic()

    def start(self) -> Watchdog:
        if self.timeout and self.timeout > 0 and not Watchdog.supervised:
            self._timer.start()
        return self

    def cancel(self) -> None:
        self._timer.cancel()

    def _fire(self) -> None:
        try:
            emit(record(self.framework, self.backend, self.rank, self.world, None, False,
                        time.monotonic() - self.started, "unknown", error="timeout"))
            print(timeout_message(self.timeout, self.rank, self.world, self.framework), file=sys.stderr, flush=True)
        finally:
            os._exit(EXIT_TIMEOUT)


def timeout_message(timeout: float, rank: int | None, world: int | None, framework: str) -> str:
    return (f"allreduce: timed out after {timeout:g} s waiting for peers (rank {rank} of {world}, {framework}); "
            f"is every rank started and reachable?")


def env_int(name: str, env: Mapping[str, str] | None = None) -> int:
    environ = os.environ if env is None else env
    value = environ.get(name)
    if value is None or value == "":
        raise SetupError(f"{name} is not set")
    try:
        return int(value)
    except ValueError:
        raise SetupError(f"{name}={value!r} is not an integer") from None


def looks_like_timeout(err: BaseException) -> bool:
    text = f"{type(err).__name__} {err}".lower()
    return any(s in text for s in ("timed out", "timeout", "deadline exceeded", "deadline_exceeded"))


def tf_task(env: Mapping[str, str] | None = None) -> tuple[dict[str, list[str]], str, int]:
    """(cluster, role, index) of ``TF_CONFIG`` as the launcher wrote it, read by the one cluster parser
    (`platforms.tfconfig.parse_tf_config`: ``master`` read as ``chief``). Its own task is what TensorFlow acts on, so it is
    the role here too: a workers-only TF_CONFIG (Slurm, JobSet) has no chief even where TRAINIMG_ROLE names
    node 0 the chief."""
    environ = os.environ if env is None else env
    text = environ.get("TF_CONFIG", "")
    if not text.strip():
        raise SetupError("TF_CONFIG is not set")
    try:
        # Read as TF_CONFIG whatever else describes this container (SageMaker's resourceconfig.json is a file
        # detection would find beside it): the launcher's TF_CONFIG is the world TensorFlow acts on.
        info = parse_tf_config(text)
    except ClusterError as err:
        raise SetupError(str(err)) from None
    tf_config = info.tf_config or {}
    cluster = {role: list(hosts) for role, hosts in tf_config.get("cluster", {}).items()}
    return cluster, info.role, info.index


def tf_rank(cluster: Mapping[str, Sequence[str]], role: str, index: int) -> tuple[int | None, int]:
    """(rank, world) of the all-reduce group: chief 0, workers after it; ps/evaluator have no rank."""
    chiefs = cluster.get("chief", [])
    world = len(chiefs) + len(cluster.get("worker", []))
    if role == "chief":
        return index, world
    if role == "worker":
        return len(chiefs) + index, world
    return None, world

def setup_error(framework: str, err: BaseException) -> int:
    message = " ".join(str(err).split()) or type(err).__name__
    print(f"allreduce ({framework}): setup error: {message[:500]}", file=sys.stderr, flush=True)
    return EXIT_SETUP


def timeout_error(framework: str, backend: str, rank: int | None, world: int | None, err: BaseException) -> int:
    message = " ".join(str(err).split())[:300]
    emit(record(framework, backend, rank, world, None, False, 0.0, "unknown", error="timeout"))
    print(f"allreduce ({framework}): timed out waiting for peers: {message}", file=sys.stderr, flush=True)
    return EXIT_TIMEOUT
