"""The all-reduce itself, once per framework: PyTorch (gloo/NCCL), TensorFlow (MultiWorkerMirroredStrategy), JAX.

Each ``run_*`` reads its rank from what the launcher set (``RANK``/``WORLD_SIZE``/``MASTER_*``, ``TF_CONFIG``,
``JAX_*``), contributes a vector of ``rank + 1``, prints the one result line (`allreduce_result`) and returns the
exit code. A TensorFlow ``ps`` task serves (``tf.distribute.Server(...).join()``) after printing a ``"role": "ps"``
line; an ``evaluator`` prints a skipped line and exits 0.

Standard library at import time; the framework is imported inside the function that uses it.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from .contract import EXIT_OK
from .allreduce_result import (EXIT_WRONG, VECTOR_LEN, SetupError, Watchdog, emit, env_int, expected_sum,
                               looks_like_timeout, record, setup_error, summarise, tf_rank, tf_task, timeout_error)


def run_pytorch(backend: str, timeout: float) -> int:
    try:
        rank = env_int("RANK")
        world = env_int("WORLD_SIZE")
        for name in ("MASTER_ADDR", "MASTER_PORT"):
            if not os.environ.get(name):
                raise SetupError(f"{name} is not set")
    except SetupError as err:
        return setup_error("pytorch", err)
    watchdog = Watchdog(timeout, "pytorch", backend, rank, world).start()
    import datetime  # noqa: PLC0415

    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415

    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    watchdog.backend = backend
    if backend == "nccl":
        if not torch.cuda.is_available():
            return setup_error("pytorch", SetupError("backend nccl asked for but torch sees no CUDA device"))
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
        if looks_like_timeout(err):
            return timeout_error("pytorch", backend, rank, world, err)
        return setup_error("pytorch", err)
    try:
        tensor = torch.full((VECTOR_LEN,), float(rank + 1), dtype=torch.float32, device=device)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        values = tensor.cpu().tolist()
        seconds = time.monotonic() - start
    except Exception as err:  # noqa: BLE001
        if looks_like_timeout(err):
            return timeout_error("pytorch", backend, rank, world, err)
        return setup_error("pytorch", err)
    got, ok = summarise(values, expected_sum(world))
    watchdog.cancel()
    emit(record("pytorch", backend, rank, world, got, ok, seconds, str(device),
                  torch=torch.__version__))
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - the verdict is already printed
        pass
    return EXIT_OK if ok else EXIT_WRONG



def run_tensorflow(backend: str, timeout: float) -> int:
    try:
        cluster, role, index = tf_task()
        rank, world = tf_rank(cluster, role, index)
        if world < 1 and role in ("chief", "worker"):
            raise SetupError("TF_CONFIG has no chief or worker")
    except SetupError as err:
        return setup_error("tensorflow", err)
    if role == "evaluator":
        emit(record("tensorflow", "none", None, world, None, None, 0.0, "none", role="evaluator",
                    status="skipped", reason="evaluator: not part of the all-reduce group"))
        return EXIT_OK
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if role == "ps":
        return _tensorflow_ps(cluster, index)
    watchdog = Watchdog(timeout, "tensorflow", backend, rank, world).start()
    start = time.monotonic()
    import tensorflow as tf  # noqa: PLC0415

    try:
        strategy = _tf_strategy(tf, cluster, role, index, backend, timeout)
        replicas = strategy.num_replicas_in_sync
        gpus = tf.config.list_logical_devices("GPU")
        device = f"gpu:{len(gpus)}" if gpus else "cpu"
        used_backend = "nccl" if backend == "nccl" or (backend == "auto" and gpus) else "ring"
        watchdog.backend = used_backend
        got, ok, seconds, all_ok = _tf_reduce(tf, strategy, start)
    except Exception as err:  # noqa: BLE001
        if looks_like_timeout(err):
            return timeout_error("tensorflow", backend, rank, world, err)
        return setup_error("tensorflow", err)
    watchdog.cancel()
    emit(record("tensorflow", used_backend, rank, replicas, got, ok, seconds, device, role=role,
                workers=world, all_ok=all_ok, tensorflow=tf.__version__))
    time.sleep(1.0)  # let peers finish pulling the verdict's last chunk from this task
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(EXIT_OK if ok else EXIT_WRONG)  # TF's collective executor threads can hang a normal exit


def _tf_strategy(tf: Any, cluster: Mapping[str, list[str]], role: str, index: int, backend: str,
                 timeout: float) -> Any:
    """A MultiWorkerMirroredStrategy over the chief and workers only, with the asked collective implementation."""
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
    return tf.distribute.MultiWorkerMirroredStrategy(
        cluster_resolver=resolver,
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=implementation, timeout_seconds=timeout + 30))


def _tf_reduce(tf: Any, strategy: Any, start: float) -> tuple[object, bool, float, bool]:
    """The all-reduce of replica id + 1, then one of the verdicts: (got, ok, seconds, every replica's ok)."""

    @tf.function
    def step(value_fn: Callable[[], Any]) -> Any:
        return strategy.run(value_fn)

    def contribute() -> Any:
        ctx = tf.distribute.get_replica_context()
        value = tf.fill([VECTOR_LEN], tf.cast(ctx.replica_id_in_sync_group + 1, tf.float32))
        return ctx.all_reduce(tf.distribute.ReduceOp.SUM, value)

    outputs = strategy.experimental_local_results(step(contribute))
    values = [float(v) for out in outputs for v in out.numpy().ravel()]
    seconds = time.monotonic() - start
    replicas = strategy.num_replicas_in_sync
    got, ok = summarise(values, expected_sum(replicas))

    # A second all-reduce of the verdicts: nobody exits while a peer may still pull its part of the first.
    def verdict() -> Any:
        ctx = tf.distribute.get_replica_context()
        return ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.constant(1.0 if ok else 0.0))

    agree = sum(float(v.numpy()) for v in strategy.experimental_local_results(step(verdict)))
    return got, ok, seconds, agree >= replicas * len(outputs) - 0.5


def _tensorflow_ps(cluster: dict[str, list[str]], index: int) -> int:
    if not cluster.get("ps") or index >= len(cluster["ps"]):
        return setup_error("tensorflow", SetupError(f"TF_CONFIG has no ps task {index}"))
    import tensorflow as tf  # noqa: PLC0415

    try:
        server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name="ps", task_index=index,
                                      protocol="grpc", start=True)
    except Exception as err:  # noqa: BLE001
        return setup_error("tensorflow", err)
    emit(record("tensorflow", "grpc", None, None, None, None, 0.0, "cpu", role="ps", status="serving",
                  target=server.target, task_index=index))
    server.join()
    return EXIT_OK



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
        world = env_int("JAX_NUM_PROCESSES")
        rank = env_int("JAX_PROCESS_ID")
    except SetupError as err:
        return setup_error("jax", err)
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
        if looks_like_timeout(err):
            return timeout_error("jax", backend, rank, world, err)
        return setup_error("jax", err)
    got, ok = summarise(total.tolist(), expected_sum(world))
    ok = ok and crossed
    watchdog.cancel()
    emit(record("jax", backend, rank, world, got, ok, seconds, device, crossed_processes=crossed,
                  jax=jax.__version__))
    try:
        jax.distributed.shutdown()
    except Exception:  # noqa: BLE001
        pass
    return EXIT_OK if ok else EXIT_WRONG
