"""``python -m trainimg_runtime allreduce --framework pytorch|tensorflow|jax``: one real cross-process all-reduce.

Run once per rank under the launcher (``trainimg-launch``), which sets ``MASTER_ADDR``/``MASTER_PORT``/
``WORLD_SIZE``/``RANK`` (PyTorch), ``TF_CONFIG`` (TensorFlow 2 form: chief/worker/ps) and ``JAX_COORDINATOR_ADDRESS``
/``JAX_NUM_PROCESSES``/``JAX_PROCESS_ID`` (JAX), plus ``TRAINIMG_ROLE``. Every rank contributes a 1024-element float32
vector filled with ``rank + 1``; after the all-reduce every element must equal ``world * (world + 1) / 2`` exactly.

Each rank prints ONE JSON line on stdout::

    {"framework", "backend", "rank", "world_size", "expected", "got", "ok", "seconds", "device"}

Exit codes: 0 the sum is right, 1 it is wrong, 2 setup error (one line on stderr), 3 a peer never came (timeout).
The framework runs in a child process that this one supervises (`supervise`): a rank stuck in a framework's C++
wait that holds the GIL cannot time itself out, so the parent kills it at ``--timeout`` and reports exit 3.
A TensorFlow ``ps`` task serves (``tf.distribute.Server(...).join()``) after printing a ``"role": "ps"`` line; an
``evaluator`` prints a skipped line and exits 0.

`gpu_allreduce_benchmark` is the NCCL bandwidth path for machines with GPUs (one process per visible GPU through
``torch.multiprocessing``), reporting algbw and busbw the way nccl-tests does.

Standard library at import time; the framework is imported inside the function that uses it.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Sequence

VECTOR_LEN = 1024
DEFAULT_TIMEOUT = 300.0

EXIT_OK, EXIT_WRONG, EXIT_SETUP, EXIT_TIMEOUT = 0, 1, 2, 3


class SetupError(RuntimeError):
    """The process group could not be formed for a reason other than a missing peer."""


class PeerTimeout(RuntimeError):
    """A peer never arrived (the framework's own timeout fired before our watchdog)."""


def expected_sum(world_size: int) -> int:
    """Sum of ``rank + 1`` over all ranks: 1 + 2 + ... + world = world * (world + 1) / 2."""
    if world_size < 0:
        raise ValueError(f"world_size must be >= 0, got {world_size}")
    return world_size * (world_size + 1) // 2


def busbw(algbw: float, nranks: int) -> float:
    """nccl-tests' bus bandwidth for all-reduce: ``algbw * 2 * (n - 1) / n`` (0 for a single rank)."""
    if nranks < 1:
        raise ValueError(f"nranks must be >= 1, got {nranks}")
    return algbw * 2.0 * (nranks - 1) / nranks


# ------------------------------------------------------------------------------------------------------ reporting

_emit_lock = threading.Lock()
_emitted = False
_result_stream = None  # the real stdout once `_protect_stdout` has pointed fd 1 at stderr


def _protect_stdout() -> None:
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


def _emit(record: dict) -> bool:
    """Print the one JSON line (first caller wins: the watchdog and the main thread may race)."""
    global _emitted
    with _emit_lock:
        if _emitted:
            return False
        _emitted = True
        stream = _result_stream or sys.stdout
        stream.write(json.dumps(record, sort_keys=True) + "\n")
        stream.flush()
        return True


def _record(framework: str, backend: str, rank: int | None, world: int | None, got: object, ok: bool | None,
            seconds: float, device: str, **extra: object) -> dict:
    record = {
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
    record.update(extra)
    return record


def _summarise(values: Sequence[float], expected: int) -> tuple[object, bool]:
    """All elements equal `expected`? Returns (what to report as ``got``, ok)."""
    distinct = sorted(set(float(v) for v in values))
    ok = len(values) > 0 and distinct == [float(expected)]
    if len(distinct) == 1:
        value = distinct[0]
        return (int(value) if value.is_integer() else value), ok
    return distinct[:8], ok


#: True in the worker child `main` starts: the supervising parent owns the timeout.
_SUPERVISED = False


class Watchdog:
    """Ends the process with exit 3 and a message if the all-reduce has not finished in `timeout` seconds.

    Used when a ``run_*`` function is called directly. A thread rather than ``signal.alarm``: a rank blocked in a
    framework's C++ wait never returns to the interpreter to run a Python signal handler. Some waits keep the GIL
    (TensorFlow's multi-worker start-up does), which is why `main` runs the framework in a supervised child
    process instead (`supervise`).
    """

    def __init__(self, timeout: float, framework: str, backend_hint: str, rank: int | None, world: int | None):
        self.timeout, self.framework, self.backend, self.rank, self.world = timeout, framework, backend_hint, rank, world
        self._timer = threading.Timer(timeout, self._fire)
        self._timer.daemon = True
        self.started = time.monotonic()

    def start(self) -> Watchdog:
        if self.timeout and self.timeout > 0 and not _SUPERVISED:
            self._timer.start()
        return self

    def cancel(self) -> None:
        self._timer.cancel()

    def _fire(self) -> None:
        message = (f"allreduce: timed out after {self.timeout:g} s waiting for peers (rank {self.rank} of "
                   f"{self.world}, {self.framework}); is every rank started and reachable?")
        try:
            _emit(_record(self.framework, self.backend, self.rank, self.world, None, False,
                          time.monotonic() - self.started, "unknown", error="timeout"))
            print(message, file=sys.stderr, flush=True)
        finally:
            os._exit(EXIT_TIMEOUT)


def _env_int(name: str, env: dict | None = None) -> int:
    env = os.environ if env is None else env
    value = env.get(name)
    if value is None or value == "":
        raise SetupError(f"{name} is not set")
    try:
        return int(value)
    except ValueError:
        raise SetupError(f"{name}={value!r} is not an integer") from None


def _looks_like_timeout(err: BaseException) -> bool:
    text = f"{type(err).__name__} {err}".lower()
    return any(s in text for s in ("timed out", "timeout", "deadline exceeded", "deadline_exceeded"))


# ------------------------------------------------------------------------------------------------------- pytorch


def run_pytorch(backend: str, timeout: float) -> int:
    try:
        rank = _env_int("RANK")
        world = _env_int("WORLD_SIZE")
        for name in ("MASTER_ADDR", "MASTER_PORT"):
            if not os.environ.get(name):
                raise SetupError(f"{name} is not set")
    except SetupError as err:
        return _setup_error("pytorch", err)
    watchdog = Watchdog(timeout, "pytorch", backend, rank, world).start()
    import datetime  # noqa: PLC0415

    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415

    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    watchdog.backend = backend
    if backend == "nccl":
        if not torch.cuda.is_available():
            return _setup_error("pytorch", SetupError("backend nccl asked for but torch sees no CUDA device"))
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device(f"cuda:{local_rank}")
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    start = time.monotonic()
    try:
        # The framework's own timeout is longer than the watchdog's, so a missing peer is reported as exit 3.
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout + 30))
    except Exception as err:  # noqa: BLE001
        if _looks_like_timeout(err):
            return _timeout_error("pytorch", backend, rank, world, err)
        return _setup_error("pytorch", err)
    try:
        tensor = torch.full((VECTOR_LEN,), float(rank + 1), dtype=torch.float32, device=device)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        values = tensor.cpu().tolist()
        seconds = time.monotonic() - start
    except Exception as err:  # noqa: BLE001
        if _looks_like_timeout(err):
            return _timeout_error("pytorch", backend, rank, world, err)
        return _setup_error("pytorch", err)
    got, ok = _summarise(values, expected_sum(world))
    watchdog.cancel()
    _emit(_record("pytorch", backend, rank, world, got, ok, seconds, str(device),
                  torch=torch.__version__))
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - the verdict is already printed
        pass
    return EXIT_OK if ok else EXIT_WRONG


# ---------------------------------------------------------------------------------------------------- tensorflow


def tf_task(env: dict | None = None) -> tuple[dict, str, int]:
    """(cluster, role, index) from ``TF_CONFIG`` (``master`` read as ``chief``), role overridden by TRAINIMG_ROLE."""
    env = os.environ if env is None else env
    text = env.get("TF_CONFIG", "")
    if not text.strip():
        raise SetupError("TF_CONFIG is not set")
    try:
        spec = json.loads(text)
    except ValueError as err:
        raise SetupError(f"TF_CONFIG is not valid JSON ({err})") from None
    cluster = {("chief" if k == "master" else k): list(v) for k, v in (spec.get("cluster") or {}).items()}
    task = spec.get("task") or {}
    role = task.get("type") or ""
    role = "chief" if role == "master" else role
    role = env.get("TRAINIMG_ROLE") or role
    if role not in ("chief", "worker", "ps", "evaluator"):
        raise SetupError(f"TF_CONFIG task type {role!r} is not chief, worker, ps or evaluator")
    try:
        index = int(task.get("index", 0))
    except (TypeError, ValueError):
        raise SetupError(f"TF_CONFIG task index {task.get('index')!r} is not an integer") from None
    return cluster, role, index


def tf_rank(cluster: dict, role: str, index: int) -> tuple[int | None, int]:
    """(rank, world) of the all-reduce group: chief 0, workers after it; ps/evaluator have no rank."""
    chiefs = cluster.get("chief", [])
    world = len(chiefs) + len(cluster.get("worker", []))
    if role == "chief":
        return index, world
    if role == "worker":
        return len(chiefs) + index, world
    return None, world


def run_tensorflow(backend: str, timeout: float) -> int:
    try:
        cluster, role, index = tf_task()
        rank, world = tf_rank(cluster, role, index)
        if world < 1 and role in ("chief", "worker"):
            raise SetupError("TF_CONFIG has no chief or worker")
    except SetupError as err:
        return _setup_error("tensorflow", err)
    if role == "evaluator":
        _emit(_record("tensorflow", "none", None, world, None, None, 0.0, "none", role="evaluator",
                      status="skipped", reason="evaluator: not part of the all-reduce group"))
        return EXIT_OK
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if role == "ps":
        return _tensorflow_ps(cluster, index)
    watchdog = Watchdog(timeout, "tensorflow", backend, rank, world).start()
    start = time.monotonic()
    import tensorflow as tf  # noqa: PLC0415

    try:
        implementation = {
            "auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
            "gloo": tf.distribute.experimental.CommunicationImplementation.RING,
            "ring": tf.distribute.experimental.CommunicationImplementation.RING,
            "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
        }[backend]
        # Only the all-reduce group: a ps entry in the resolver's cluster would make every worker wait on it.
        group = {k: v for k, v in cluster.items() if k in ("chief", "worker") and v}
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec(group), task_type=role, task_id=index, rpc_layer="grpc")
        strategy = tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=resolver,
            communication_options=tf.distribute.experimental.CommunicationOptions(
                implementation=implementation, timeout_seconds=timeout + 30))
        replicas = strategy.num_replicas_in_sync
        gpus = tf.config.list_logical_devices("GPU")
        device = f"gpu:{len(gpus)}" if gpus else "cpu"
        used_backend = "nccl" if backend == "nccl" or (backend == "auto" and gpus) else "ring"
        watchdog.backend = used_backend

        @tf.function
        def step(value_fn):
            return strategy.run(value_fn)

        def contribute():
            ctx = tf.distribute.get_replica_context()
            value = tf.fill([VECTOR_LEN], tf.cast(ctx.replica_id_in_sync_group + 1, tf.float32))
            return ctx.all_reduce(tf.distribute.ReduceOp.SUM, value)

        outputs = strategy.experimental_local_results(step(contribute))
        values = [float(v) for out in outputs for v in out.numpy().ravel()]
        seconds = time.monotonic() - start
        got, ok = _summarise(values, expected_sum(replicas))

        # A second all-reduce of the verdicts: nobody exits while a peer may still pull its part of the first.
        def verdict():
            ctx = tf.distribute.get_replica_context()
            return ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.constant(1.0 if ok else 0.0))

        agree = sum(float(v.numpy()) for v in strategy.experimental_local_results(step(verdict)))
    except Exception as err:  # noqa: BLE001
        if _looks_like_timeout(err):
            return _timeout_error("tensorflow", backend, rank, world, err)
        return _setup_error("tensorflow", err)
    watchdog.cancel()
    _emit(_record("tensorflow", used_backend, rank, replicas, got, ok, seconds, device, role=role,
                  workers=world, all_ok=agree >= replicas * len(outputs) - 0.5, tensorflow=tf.__version__))
    time.sleep(1.0)  # let peers finish pulling the verdict's last chunk from this task
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(EXIT_OK if ok else EXIT_WRONG)  # TF's collective executor threads can hang a normal exit


def _tensorflow_ps(cluster: dict, index: int) -> int:
    if not cluster.get("ps") or index >= len(cluster["ps"]):
        return _setup_error("tensorflow", SetupError(f"TF_CONFIG has no ps task {index}"))
    import tensorflow as tf  # noqa: PLC0415

    try:
        server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name="ps", task_index=index,
                                      protocol="grpc", start=True)
    except Exception as err:  # noqa: BLE001
        return _setup_error("tensorflow", err)
    _emit(_record("tensorflow", "grpc", None, None, None, None, 0.0, "cpu", role="ps", status="serving",
                  target=server.target, task_index=index))
    server.join()
    return EXIT_OK


# ------------------------------------------------------------------------------------------------------------- jax


def _jax_gpu_plugin() -> bool:
    import importlib.util  # noqa: PLC0415

    for mod in ("jax_cuda13_plugin", "jax_cuda12_plugin", "jax_plugins.xla_cuda13", "jax_plugins.xla_cuda12"):
        try:
            if importlib.util.find_spec(mod) is not None:
                return True
        except (ImportError, ValueError):
            continue
    return False


def run_jax(backend: str, timeout: float) -> int:
    try:
        coordinator = os.environ.get("JAX_COORDINATOR_ADDRESS") or ""
        if not coordinator:
            raise SetupError("JAX_COORDINATOR_ADDRESS is not set")
        world = _env_int("JAX_NUM_PROCESSES")
        rank = _env_int("JAX_PROCESS_ID")
    except SetupError as err:
        return _setup_error("jax", err)
    if backend == "auto":
        has_gpu = _jax_gpu_plugin() and (os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvidiactl"))
        backend = "nccl" if has_gpu and os.environ.get("JAX_PLATFORMS", "") in ("", "cuda", "gpu") else "gloo"
    watchdog = Watchdog(timeout, "jax", backend, rank, world).start()
    start = time.monotonic()
    import jax  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415 - a dependency of jax

    try:
        if backend == "gloo":
            jax.config.update("jax_platforms", "cpu")
            # Without gloo, CPU "collectives" across processes are not implemented (or silently local).
            if "jax_cpu_collectives_implementation" in getattr(jax.config, "values", {}):
                jax.config.update("jax_cpu_collectives_implementation", "gloo")
            else:
                raise SetupError(f"jax {jax.__version__} has no jax_cpu_collectives_implementation option")
        init_kwargs = {"coordinator_address": coordinator, "num_processes": world, "process_id": rank}
        import inspect  # noqa: PLC0415

        if "initialization_timeout" in inspect.signature(jax.distributed.initialize).parameters:
            init_kwargs["initialization_timeout"] = int(timeout + 30)
        jax.distributed.initialize(**init_kwargs)
        if jax.process_count() != world:
            raise SetupError(f"jax sees {jax.process_count()} processes, JAX_NUM_PROCESSES says {world}")
        from jax.experimental import multihost_utils  # noqa: PLC0415

        local = np.full((VECTOR_LEN,), float(rank + 1), dtype=np.float32)
        gathered = np.asarray(multihost_utils.process_allgather(local))  # (processes, VECTOR_LEN)
        total = gathered.sum(axis=0)
        seconds = time.monotonic() - start
        # Proof the collective crossed processes: row i holds process i's contribution, i + 1.
        rows = [sorted(set(gathered[i].tolist())) for i in range(gathered.shape[0])]
        crossed = gathered.shape[0] == world and all(rows[i] == [float(i + 1)] for i in range(world))
        device = jax.local_devices()[0].platform
    except Exception as err:  # noqa: BLE001
        if _looks_like_timeout(err):
            return _timeout_error("jax", backend, rank, world, err)
        return _setup_error("jax", err)
    got, ok = _summarise(total.tolist(), expected_sum(world))
    ok = ok and crossed
    watchdog.cancel()
    _emit(_record("jax", backend, rank, world, got, ok, seconds, device, crossed_processes=crossed,
                  jax=jax.__version__))
    try:
        jax.distributed.shutdown()
    except Exception:  # noqa: BLE001
        pass
    return EXIT_OK if ok else EXIT_WRONG


# ----------------------------------------------------------------------------------------------- GPU benchmark


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bench_worker(local_rank: int, nranks: int, port: int, size_bytes: int, iters: int, warmup: int,
                  queue: object) -> None:  # pragma: no cover - needs GPUs
    import datetime  # noqa: PLC0415

    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415

    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=local_rank, world_size=nranks,
                            timeout=datetime.timedelta(seconds=300))
    count = max(1, size_bytes // 4)
    tensor = torch.full((count,), float(local_rank + 1), dtype=torch.float32, device=f"cuda:{local_rank}")
    dist.all_reduce(tensor)
    torch.cuda.synchronize()
    ok = bool(torch.all(tensor == float(expected_sum(nranks))).item())
    for _ in range(warmup):
        dist.all_reduce(tensor)
    torch.cuda.synchronize()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    times = [torch.tensor([elapsed], device=f"cuda:{local_rank}")]
    dist.all_reduce(times[0], op=dist.ReduceOp.MAX)
    if local_rank == 0:
        queue.put({"ok": ok, "elapsed": float(times[0].item()), "device": torch.cuda.get_device_name(0),
                   "nccl": ".".join(map(str, torch.cuda.nccl.version()))})
    dist.destroy_process_group()


def benchmark_result(size_bytes: int, iters: int, nranks: int, elapsed: float, **extra: object) -> dict:
    """nccl-tests' figures from a timed loop: time per op, algbw = bytes / time, busbw = algbw * 2(n-1)/n (GB/s)."""
    per_op = elapsed / max(iters, 1)
    algbw = size_bytes / per_op / 1e9 if per_op > 0 else 0.0
    result = {"size_bytes": size_bytes, "iters": iters, "nranks": nranks, "time_us": round(per_op * 1e6, 2),
              "algbw_gbps": round(algbw, 3), "busbw_gbps": round(busbw(algbw, nranks), 3)}
    result.update(extra)
    return result


def gpu_allreduce_benchmark(size_bytes: int = 256 * 1024 * 1024, iters: int = 20, warmup: int = 5,
                            nranks: int | None = None) -> dict:
    """Timed NCCL all-reduce over all visible GPUs (one process each), like nccl-tests' all_reduce_perf.

    Returns `benchmark_result`'s dict plus ``ok`` (the first reduction's sum was right), ``device`` and ``nccl``.
    Raises `SetupError` where there is no GPU.
    """
    import torch  # noqa: PLC0415
    import torch.multiprocessing as mp  # noqa: PLC0415

    if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        raise SetupError("gpu_allreduce_benchmark needs at least one CUDA device; torch sees none")
    nranks = nranks or torch.cuda.device_count()
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(_bench_worker, args=(nranks, _free_port(), size_bytes, iters, warmup, queue),
                       nprocs=nranks, join=True, start_method="spawn")
    report = queue.get()
    return benchmark_result(size_bytes, iters, nranks, report.pop("elapsed"), **report)


def benchmark_command(size_bytes: int, iters: int, python: str = "python3",
                      module: str = "trainimg_runtime") -> list[str]:
    """The command the host runs in a GPU container for `gpu_allreduce_benchmark` (prints one JSON line)."""
    return [python, "-m", module, "allreduce", "--framework", "pytorch", "--backend", "nccl",
            "--benchmark-bytes", str(int(size_bytes)), "--iters", str(int(iters))]


def parse_benchmark_output(text: str) -> dict:
    """The last JSON line carrying ``busbw_gbps`` in a benchmark run's stdout; ValueError if there is none."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and "busbw_gbps" in record:
                return record
    raise ValueError("no benchmark JSON line (with busbw_gbps) in the output")


def parse_nccl_tests(text: str) -> list[dict]:
    """Rows of nccl-tests' ``all_reduce_perf`` table: size, count, out-of-place time/algbw/busbw, #wrong."""
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 9 or line.lstrip().startswith("#"):
            continue
        try:
            size, count = int(parts[0]), int(parts[1])
            time_us, algbw, bus = float(parts[5]), float(parts[6]), float(parts[7])
            wrong = parts[8]
        except ValueError:
            continue
        rows.append({"size_bytes": size, "count": count, "time_us": time_us, "algbw_gbps": algbw,
                     "busbw_gbps": bus, "wrong": None if wrong in ("N/A", "-") else int(wrong)})
    return rows


# ---------------------------------------------------------------------------------------------------- supervisor

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
    import signal  # noqa: PLC0415
    import subprocess  # noqa: PLC0415

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_package_root(), env.get("PYTHONPATH", "")) if p)
    started = time.monotonic()
    try:
        child = subprocess.Popen(child_command(argv), stdout=subprocess.PIPE, env=env, text=True)
    except OSError as err:
        return _setup_error(framework, err)
    lines: list[str] = []
    verdict_at: list[float] = []

    def read() -> None:
        for line in child.stdout:
            lines.append(line)
            if line.lstrip().startswith("{") and not verdict_at:
                verdict_at.append(time.monotonic())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def forward(signum, _frame):  # the launcher stopping this rank stops its child too
        child.kill()
        os._exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            signal.signal(signum, forward)
        except ValueError:  # not the main thread
            pass
    timed_out = False
    while child.poll() is None:
        now = time.monotonic()
        if verdict_at and now - verdict_at[0] > EXIT_GRACE:
            child.kill()
            break
        if timeout and timeout > 0 and now - started > timeout and not verdict_at:
            child.kill()
            timed_out = True
            break
        time.sleep(0.05)
    child.wait()
    reader.join(timeout=5)
    verdicts = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            verdicts.append(record)
    if timed_out:
        rank, world = _rank_hint(framework)
        _emit(_record(framework, backend, rank, world, None, False, time.monotonic() - started, "unknown",
                      error="timeout"))
        print(f"allreduce: timed out after {timeout:g} s waiting for peers (rank {rank} of {world}, {framework}); "
              f"is every rank started and reachable?", file=sys.stderr, flush=True)
        return EXIT_TIMEOUT
    if verdicts:
        _emit(verdicts[-1])
        rc = child.returncode
        if rc in (EXIT_OK, EXIT_WRONG, EXIT_SETUP, EXIT_TIMEOUT):
            return rc
        ok = verdicts[-1].get("ok")
        return EXIT_OK if ok or (ok is None and rc == 0) else EXIT_WRONG  # killed in teardown: the verdict stands
    rc = child.returncode
    if rc < 0:
        print(f"allreduce ({framework}): the worker died from signal {-rc} before a verdict", file=sys.stderr,
              flush=True)
        return EXIT_SETUP
    return rc if rc != 0 else EXIT_SETUP


def _rank_hint(framework: str) -> tuple[int | None, int | None]:
    """This rank's (rank, world) from the environment, for the timeout line; None where unknown."""
    try:
        if framework == "pytorch":
            return _env_int("RANK"), _env_int("WORLD_SIZE")
        if framework == "jax":
            return _env_int("JAX_PROCESS_ID"), _env_int("JAX_NUM_PROCESSES")
        cluster, role, index = tf_task()
        return tf_rank(cluster, role, index)
    except SetupError:
        return None, None


# ---------------------------------------------------------------------------------------------------------- main


def _setup_error(framework: str, err: BaseException) -> int:
    message = " ".join(str(err).split()) or type(err).__name__
    print(f"allreduce ({framework}): setup error: {message[:500]}", file=sys.stderr, flush=True)
    return EXIT_SETUP


def _timeout_error(framework: str, backend: str, rank: int | None, world: int | None, err: BaseException) -> int:
    message = " ".join(str(err).split())[:300]
    _emit(_record(framework, backend, rank, world, None, False, 0.0, "unknown", error="timeout"))
    print(f"allreduce ({framework}): timed out waiting for peers: {message}", file=sys.stderr, flush=True)
    return EXIT_TIMEOUT


def _needs_supervisor(framework: str) -> bool:
    """Everything but a TF ps (serves forever) or evaluator (does nothing) and a malformed TF_CONFIG runs supervised."""
    if framework != "tensorflow":
        return True
    try:
        _, role, _ = tf_task()
    except SetupError:
        return False  # reported by run_tensorflow in this process
    return role in ("chief", "worker")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainimg_runtime allreduce",
                                     description="One cross-process all-reduce of rank+1; prints one JSON line.")
    parser.add_argument("--framework", required=True, choices=("pytorch", "tensorflow", "jax"))
    parser.add_argument("--backend", default="auto", choices=("auto", "gloo", "nccl"))
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds to wait for peers")
    parser.add_argument("--benchmark-bytes", type=int, default=None,
                        help="instead: time NCCL all-reduce of this many bytes over all visible GPUs (pytorch)")
    parser.add_argument("--iters", type=int, default=20, help="--benchmark-bytes: timed iterations")
    parser.add_argument("--supervised-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    global _SUPERVISED
    _SUPERVISED = args.supervised_child
    if not args.supervised_child and args.benchmark_bytes is None and _needs_supervisor(args.framework):
        return supervise(list(argv), args.framework, args.backend, args.timeout)
    _protect_stdout()
    if args.benchmark_bytes is not None:
        if args.framework != "pytorch":
            return _setup_error(args.framework, SetupError("--benchmark-bytes needs --framework pytorch"))
        try:
            result = gpu_allreduce_benchmark(args.benchmark_bytes, args.iters)
        except Exception as err:  # noqa: BLE001
            return _setup_error("pytorch", err)
        _emit(result)
        return EXIT_OK if result.get("ok") else EXIT_WRONG
    runner = {"pytorch": run_pytorch, "tensorflow": run_tensorflow, "jax": run_jax}[args.framework]
    try:
        return runner(args.backend, args.timeout)
    except SetupError as err:
        return _setup_error(args.framework, err)
    except ImportError as err:
        return _setup_error(args.framework, err)
