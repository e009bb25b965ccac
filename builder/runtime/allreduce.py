"""``python -m trainimg_runtime allreduce --framework pytorch|tensorflow|jax``: one real cross-process all-reduce.

Run once per rank under the launcher (``trainimg-launch``), which sets ``MASTER_ADDR``/``MASTER_PORT``/
``WORLD_SIZE``/``RANK`` (PyTorch), ``TF_CONFIG`` (TensorFlow 2 form: chief/worker/ps) and ``JAX_COORDINATOR_ADDRESS``
/``JAX_NUM_PROCESSES``/``JAX_PROCESS_ID`` (JAX), plus ``TRAINIMG_ROLE``. Every rank contributes a 1024-element float32
vector filled with ``rank + 1``; after the all-reduce every element must equal ``world * (world + 1) / 2`` exactly.
Each rank prints ONE JSON line on stdout and exits 0 (right), 1 (wrong), 2 (setup error) or 3 (a peer never came):
see `allreduce_result`. The frameworks' runs are in `allreduce_frameworks`; ``--benchmark-bytes`` takes the timed
path of `allreduce_bench` (NCCL over the visible GPUs, or ``--backend gloo`` on CPU; ``--nranks``): one rank gets no
bandwidth figure but the reason, N ranks nccl-tests' algbw/busbw beside a device copy of the same bytes.

This module is the verb and its supervisor: the framework runs in a child process that this one supervises
(`supervise`): a rank stuck in a framework's C++ wait that holds the GIL cannot time itself out, so the parent
kills it at ``--timeout`` and reports exit 3.

Standard library only; the framework is imported inside the function that uses it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from types import FrameType

from .allreduce_bench import allreduce_benchmark, summary_lines
from .allreduce_frameworks import run_jax, run_pytorch, run_tensorflow
from .contract import EXIT_OK
from .frameworks import NAMES
from .allreduce_result import (DEFAULT_TIMEOUT, EXIT_SETUP, EXIT_TIMEOUT, EXIT_WRONG, SetupError, Watchdog,
                               emit, env_int, protect_stdout, record, setup_error, tf_rank, tf_task, timeout_message)

#: Seconds a child that already printed its verdict may take to exit before it is killed (TF teardown can hang).
EXIT_GRACE = 10.0


def _package_root() -> str:
    """The sys.path entry this package is imported from (``/opt/trainimg`` for ``trainimg_runtime``)."""
    root = os.path.dirname(os.path.abspath(__file__))
    for _ in (__package__ or "x").split("."):
        root = os.path.dirname(root)
    return root


def child_command(argv: Sequence[str]) -> list[str]:
    """The worker child's command line: this same verb, marked as supervised."""
    return [sys.executable, "-m", __package__ or "trainimg_runtime", "allreduce", *argv, "--supervised-child"]


def supervise(argv: Sequence[str], framework: str, backend: str, timeout: float) -> int:
    """Run the all-reduce in a child process and end it at `timeout`: exit 3 with a message if no verdict came.

    Only a separate process can bound the wait reliably: a framework blocked in C++ holding the GIL stops every
    Python thread and signal handler of its own process. The child's stdout is relayed (its one JSON line); its
    stderr is shared. If the child printed its verdict but then hangs in teardown, it is killed after `EXIT_GRACE`
    seconds and the verdict stands.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_package_root(), env.get("PYTHONPATH", "")) if p)
    started = time.monotonic()
    try:
        child = subprocess.Popen(child_command(argv), stdout=subprocess.PIPE, env=env, text=True)
    except OSError as err:
        return setup_error(framework, err)
    lines: list[str] = []
    verdict_at: list[float] = []
    reader = threading.Thread(target=_relay, args=(child, lines, verdict_at), daemon=True)
    reader.start()
    _forward_signals(child)
    timed_out = _wait(child, verdict_at, started, timeout)
    child.wait()
    reader.join(timeout=5)
    if timed_out:
        rank, world = _rank_hint(framework)
        emit(record(framework, backend, rank, world, None, False, time.monotonic() - started, "unknown",
                    error="timeout"))
        print(timeout_message(timeout, rank, world, framework), file=sys.stderr, flush=True)
        return EXIT_TIMEOUT
    return _verdict(framework, lines, child.returncode)


def _relay(child: subprocess.Popen[str], lines: list[str], verdict_at: list[float]) -> None:
    """Collect the child's stdout lines; note when the first JSON line (its verdict) came."""
    assert child.stdout is not None  # opened with stdout=PIPE
    for line in child.stdout:
        lines.append(line)
        if line.lstrip().startswith("{") and not verdict_at:
            verdict_at.append(time.monotonic())


def _forward_signals(child: subprocess.Popen[str]) -> None:
    """The launcher stopping this rank stops its child too."""

    def forward(signum: int, _frame: FrameType | None) -> None:
        child.kill()
        os._exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            signal.signal(signum, forward)
        except ValueError:  # not the main thread
            pass


def _wait(child: subprocess.Popen[str], verdict_at: list[float], started: float, timeout: float) -> bool:
    """Poll the child until it exits, its verdict's grace ran out, or `timeout` passed with no verdict (True)."""
    while child.poll() is None:
        now = time.monotonic()
        if verdict_at and now - verdict_at[0] > EXIT_GRACE:
            child.kill()
            return False
        if timeout and timeout > 0 and now - started > timeout and not verdict_at:
            child.kill()
            return True
        time.sleep(0.05)
    return False


def _verdict(framework: str, lines: list[str], rc: int) -> int:
    """Relay the child's last JSON line and turn its exit status into ours."""
    verdicts = []
    for line in lines:
        try:
            parsed = json.loads(line)
        except ValueError:
            continue
        if isinstance(parsed, dict):
            verdicts.append(parsed)
    if verdicts:
        emit(verdicts[-1])
        if rc in (EXIT_OK, EXIT_WRONG, EXIT_SETUP, EXIT_TIMEOUT):
            return rc
        ok = verdicts[-1].get("ok")
        return EXIT_OK if ok or (ok is None and rc == 0) else EXIT_WRONG  # killed in teardown: the verdict stands
    if rc < 0:
        print(f"allreduce ({framework}): the worker died from signal {-rc} before a verdict", file=sys.stderr,
              flush=True)
        return EXIT_SETUP
    return rc if rc != 0 else EXIT_SETUP


def _rank_hint(framework: str) -> tuple[int | None, int | None]:
    """This rank's (rank, world) from the environment, for the timeout line; None where unknown."""
    try:
        if framework == "pytorch":
            return env_int("RANK"), env_int("WORLD_SIZE")
        if framework == "jax":
            return env_int("JAX_PROCESS_ID"), env_int("JAX_NUM_PROCESSES")
        cluster, role, index = tf_task()
        return tf_rank(cluster, role, index)
    except SetupError:
        return None, None


def _needs_supervisor(framework: str) -> bool:
    """Everything but a TF ps (serves forever) or evaluator (does nothing) and a malformed TF_CONFIG runs supervised."""
    if framework != "tensorflow":
        return True
    try:
        _, role, _ = tf_task()
    except SetupError:
        return False  # reported by run_tensorflow in this process
    return role in ("chief", "worker")


def _benchmark(args: argparse.Namespace) -> int:
    """``--benchmark-bytes``: one JSON line on stdout, the figures and their definitions on stderr."""
    if args.benchmark_bytes < 1 or (args.nranks is not None and args.nranks < 1) or args.iters < 1:
        return setup_error("pytorch", SetupError("--benchmark-bytes, --nranks and --iters must be >= 1"))
    try:
        backend = args.backend
        if backend == "auto":
            import torch  # noqa: PLC0415

            backend = "nccl" if torch.cuda.is_available() else "gloo"
        result = allreduce_benchmark(args.benchmark_bytes, args.iters, nranks=args.nranks, backend=backend)
    except Exception as err:  # noqa: BLE001
        return setup_error("pytorch", err)
    emit(result)
    for line in summary_lines(result):
        print(line, file=sys.stderr, flush=True)
    return EXIT_OK if result.get("ok") else EXIT_WRONG


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainimg_runtime allreduce",
                                     description="One cross-process all-reduce of rank+1; prints one JSON line.")
    parser.add_argument("--framework", required=True, choices=NAMES)
    parser.add_argument("--backend", default="auto", choices=("auto", "gloo", "nccl"))
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds to wait for peers")
    parser.add_argument("--benchmark-bytes", type=int, default=None,
                        help="instead: time the all-reduce of this many bytes (pytorch; nccl: one rank per visible "
                             "GPU, gloo: on CPU)")
    parser.add_argument("--nranks", type=int, default=None,
                        help="--benchmark-bytes: processes (default: the visible GPUs for nccl, 1 for gloo)")
    parser.add_argument("--iters", type=int, default=20, help="--benchmark-bytes: timed iterations")
    parser.add_argument("--supervised-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    Watchdog.supervised = args.supervised_child
    if not args.supervised_child and args.benchmark_bytes is None and _needs_supervisor(args.framework):
        return supervise(list(argv), args.framework, args.backend, args.timeout)
    protect_stdout()
    if args.benchmark_bytes is not None:
        if args.framework != "pytorch":
            return setup_error(args.framework, SetupError("--benchmark-bytes needs --framework pytorch"))
        return _benchmark(args)
    runner = {"pytorch": run_pytorch, "tensorflow": run_tensorflow, "jax": run_jax}[args.framework]
    try:
        return runner(args.backend, args.timeout)
    except SetupError as err:
        return setup_error(args.framework, err)
    except ImportError as err:
        return setup_error(args.framework, err)
