"""The NCCL bandwidth path for machines with GPUs: one process per visible GPU through ``torch.multiprocessing``,
reporting algbw and busbw the way nccl-tests does; and the command and parser the host runs it with.

Standard library at import time; torch is imported inside the functions that use it.
"""

from __future__ import annotations

import datetime
import json
import socket
import time
from typing import Protocol

from .allreduce_result import SetupError, expected_sum


class _Queue(Protocol):
    def put(self, obj: object) -> None: ...


def busbw(algbw: float, nranks: int) -> float:
    """nccl-tests' bus bandwidth for all-reduce: ``algbw * 2 * (n - 1) / n`` (0 for a single rank)."""
    if nranks < 1:
        raise ValueError(f"nranks must be >= 1, got {nranks}")
    return algbw * 2.0 * (nranks - 1) / nranks


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _bench_worker(local_rank: int, nranks: int, port: int, size_bytes: int, iters: int, warmup: int,
                  queue: _Queue) -> None:  # pragma: no cover - needs GPUs
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


def benchmark_result(size_bytes: int, iters: int, nranks: int, elapsed: float, **extra: object) -> dict[str, object]:
    """nccl-tests' figures from a timed loop: time per op, algbw = bytes / time, busbw = algbw * 2(n-1)/n (GB/s)."""
    per_op = elapsed / max(iters, 1)
    algbw = size_bytes / per_op / 1e9 if per_op > 0 else 0.0
    result: dict[str, object] = {"size_bytes": size_bytes, "iters": iters, "nranks": nranks, "time_us": round(per_op * 1e6, 2),
              "algbw_gbps": round(algbw, 3), "busbw_gbps": round(busbw(algbw, nranks), 3)}
    result.update(extra)
    return result


def gpu_allreduce_benchmark(size_bytes: int = 256 * 1024 * 1024, iters: int = 20, warmup: int = 5,
                            nranks: int | None = None) -> dict[str, object]:
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


def parse_benchmark_output(text: str) -> dict[str, object]:
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
