"""``allreduce --benchmark-bytes N``: the timed all-reduce of N bytes over one process per rank (NCCL over the
visible GPUs, or gloo on CPU), with figures that cannot lie; and the command and parser the host runs it with.

The figures are nccl-tests' (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md):
``algbw = size / time`` of one all-reduce, and ``busbw = algbw * 2 (n - 1) / n`` for all-reduce, the bandwidth
each rank's links carried, comparable across rank counts. Two guards, both from the first GPU run (one H100):

* one rank communicates nothing: NCCL returns at once, and "1 GiB in 19 us, algbw 55,967 GB/s" was the time of
  a no-op. With one rank the result says so (``communicated: false`` and the reason) and has no bandwidth figure;
* with N ranks the same run also times a device-to-device copy of the same bytes on rank 0's device
  (``copy_gbps``: 1,504 GB/s for 1 GiB on that H100), the figure a busbw should be read against: a busbw above
  it is not a link's.

Standard library at import time; torch is imported inside the functions that use it.
"""

from __future__ import annotations

import datetime
import json
import socket
import time
from typing import Any, Protocol

from .allreduce_result import SetupError, expected_sum

#: The definitions every N-rank result carries, so a figure is never quoted without what it means.
DEFINITIONS = {
    "algbw_gbps": "size_bytes / time of one all-reduce (nccl-tests doc/PERFORMANCE.md)",
    "busbw_gbps": "algbw * 2 * (nranks - 1) / nranks, nccl-tests' bus bandwidth for all-reduce "
                  "(doc/PERFORMANCE.md)",
    "copy_gbps": "size_bytes / time of one copy of the same bytes on rank 0's device (not communication)",
}
ONE_RANK = ("one rank: an all-reduce over a single process moves no bytes between processes, so its time is that "
            "of a no-op and no bandwidth follows from it; run with 2 or more ranks (GPUs)")


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


def _timed(torch: Any, device: Any, iters: int, step: Any) -> float:
    """Seconds `iters` calls of `step` took, waiting for the device before and after."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(iters):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def copy_seconds(torch: Any, device: Any, size_bytes: int, iters: int, warmup: int = 3) -> float:
    """Seconds per device-to-device copy of `size_bytes` on `device` (what the device run's d2d.txt measured)."""
    src = torch.empty(size_bytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    for _ in range(warmup):
        dst.copy_(src)
    return _timed(torch, device, iters, lambda: dst.copy_(src)) / max(iters, 1)


def _bench_worker(local_rank: int, nranks: int, port: int, size_bytes: int, iters: int, warmup: int,
                  backend: str, queue: _Queue) -> None:
    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415

    device = torch.device(f"cuda:{local_rank}") if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=local_rank, world_size=nranks,
                            timeout=datetime.timedelta(seconds=300))
    tensor = torch.full((max(1, size_bytes // 4),), float(local_rank + 1), dtype=torch.float32, device=device)
    dist.all_reduce(tensor)
    ok = bool(torch.all(tensor == float(expected_sum(nranks))).item())
    for _ in range(warmup):
        dist.all_reduce(tensor)
    dist.barrier()
    elapsed = torch.tensor([_timed(torch, device, iters, lambda: dist.all_reduce(tensor))], device=device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    oks = torch.tensor([1.0 if ok else 0.0], device=device)
    dist.all_reduce(oks)
    if local_rank == 0:
        report: dict[str, object] = {"ok": float(oks.item()) == nranks, "elapsed": float(elapsed.item()),
                                     "backend": backend, "copy_s": copy_seconds(torch, device, size_bytes, iters)}
        if device.type == "cuda":
            report.update(device=torch.cuda.get_device_name(device),
                          nccl=".".join(map(str, torch.cuda.nccl.version())))
        else:
            report.update(device="cpu")
        queue.put(report)
    dist.destroy_process_group()


def benchmark_result(size_bytes: int, iters: int, nranks: int, elapsed: float, copy_s: float | None = None,
                     **extra: object) -> dict[str, object]:
    """nccl-tests' figures from a timed loop (see the module doc); with one rank, no bandwidth but the reason."""
    per_op = elapsed / max(iters, 1)
    result: dict[str, object] = {"size_bytes": size_bytes, "iters": iters, "nranks": nranks}
    if nranks < 2:
        result.update(communicated=False, reason=ONE_RANK)
    else:
        algbw = size_bytes / per_op / 1e9 if per_op > 0 else 0.0
        result.update(communicated=True, time_us=round(per_op * 1e6, 2), algbw_gbps=round(algbw, 3),
                      busbw_gbps=round(busbw(algbw, nranks), 3), definitions=DEFINITIONS)
    if copy_s:
        result.update(copy_time_us=round(copy_s * 1e6, 2), copy_gbps=round(size_bytes / copy_s / 1e9, 3))
    result.update(extra)
    return result


def allreduce_benchmark(size_bytes: int, iters: int = 20, warmup: int = 5, nranks: int | None = None,
                        backend: str = "nccl") -> dict[str, object]:
    """Timed all-reduce over `nranks` processes (NCCL: default every visible GPU, one each; gloo: on CPU,
    default 1), like nccl-tests' all_reduce_perf. Returns `benchmark_result`'s dict plus ``ok`` (every rank's
    first sum was right), ``backend`` and ``device`` (and ``nccl``). Raises `SetupError` for NCCL without a GPU
    or with more ranks than GPUs."""
    import torch  # noqa: PLC0415
    import torch.multiprocessing as mp  # noqa: PLC0415

    if backend == "nccl":
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpus < 1:
            raise SetupError("the NCCL benchmark needs at least one CUDA device; torch sees none")
        nranks = nranks or gpus
        if nranks > gpus:
            raise SetupError(f"--nranks {nranks}: torch sees {gpus} GPU(s) and NCCL needs one GPU per rank")
    nranks = nranks or 1
    queue = mp.get_context("spawn").SimpleQueue()
    mp.start_processes(_bench_worker, args=(nranks, _free_port(), size_bytes, iters, warmup, backend, queue),
                       nprocs=nranks, join=True, start_method="spawn")
    report = queue.get()
    return benchmark_result(size_bytes, iters, nranks, report.pop("elapsed"), report.pop("copy_s"), **report)


def summary_lines(result: dict[str, object]) -> list[str]:
    """What a person reads on stderr beside the JSON line: the figures with their definitions."""
    size = f"{result['size_bytes']} bytes over {result['nranks']} rank(s) ({result.get('backend')})"
    lines = [f"all-reduce of {size}: " + (str(result["reason"]) if not result.get("communicated") else
             f"{result['time_us']} us, algbw {result['algbw_gbps']} GB/s, busbw {result['busbw_gbps']} GB/s")]
    if result.get("communicated"):
        lines += [f"  {name} = {text}" for name, text in DEFINITIONS.items()]
    if "copy_gbps" in result:
        lines.append(f"device copy of the same bytes on {result.get('device')}: {result['copy_time_us']} us, "
                     f"{result['copy_gbps']} GB/s (compare busbw with this, not with a link's rating)")
    return lines


def benchmark_command(size_bytes: int, iters: int, python: str = "python3",
                      module: str = "trainimg_runtime") -> list[str]:
    """The command the host runs in a GPU container for `allreduce_benchmark` (prints one JSON line)."""
    return [python, "-m", module, "allreduce", "--framework", "pytorch", "--backend", "nccl",
            "--benchmark-bytes", str(int(size_bytes)), "--iters", str(int(iters))]


def parse_benchmark_output(text: str) -> dict[str, object]:
    """The last benchmark JSON line (``size_bytes`` and ``nranks``) of a run's stdout; ValueError if none."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and "size_bytes" in record and "nranks" in record:
                return record
    raise ValueError("no benchmark JSON line (with size_bytes and nranks) in the output")
