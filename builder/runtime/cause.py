"""Why a process failed, in one line: the first line of its output that names an error.

A failed rank's log ends in its launcher's wrapper, not in the error: torchrun ends with its ``ChildFailedError``
block (``=====`` separators, ``Root Cause (first observed failure)``, ``exitcode : 1``), JAX/XLA with the
coordination service losing its peers (``=== Source Location Trace: ===`` and ``grpc_util.h:89``). On the first
GPU run the all-reduce's reason was those last lines: ``chief-0 exited 1: ====...`` where rank 1 had printed
"CUDA error: invalid device ordinal", ``chief-0 exited 2: external/xla+/.../grpc_util.h:89`` where the second
JAX process had printed CUDA_ERROR_OUT_OF_MEMORY. `first_cause` reads through the wrappers (`WRAPPERS`) and
returns the first line, in output order, that one of `ERRORS` matches; only where none does, the last line that
is not a wrapper's.

Standard library only: the verdicts in the image and on the host use it.
"""

from __future__ import annotations

import re

# What names an error, most specific first (the order only decides `kind`; the line returned is the first in the
# output that any pattern matches). Each comes from a real message.
ERRORS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # PyTorch's C10_CUDA_CHECK: "torch.AcceleratorError: CUDA error: invalid device ordinal" (the device run);
    # the CUDA driver API's enum names, as XLA prints them: "CUDA_ERROR_OUT_OF_MEMORY: out of memory".
    ("cuda", re.compile(r"CUDA error: |\bCUDA_ERROR_[A-Z_]+\b|\bcuda(?:Error|Err)[A-Z]\w+")),
    # torch.OutOfMemoryError: "CUDA out of memory. Tried to allocate ..."; XLA/absl: "RESOURCE_EXHAUSTED: ...".
    ("oom", re.compile(r"\bout of memory\b|\bOutOfMemoryError\b|\bRESOURCE_EXHAUSTED\b", re.I)),
    # NCCL's result codes and torch's DistBackendError: "NCCL error in: ...", "ncclInvalidUsage", "NCCL WARN ...";
    # XLA: "NCCL operation ncclCommInitRankConfig(...) failed: invalid usage".
    ("nccl", re.compile(r"NCCL error|\bnccl(?:InvalidUsage|InvalidArgument|SystemError|InternalError|"
                        r"UnhandledCudaError|RemoteError)\b|NCCL WARN|NCCL operation .* failed")),
    # glog's ERROR and FATAL lines (XLA, TensorFlow, PyTorch's c10): "E1126 11:12:19.176951 1904 file.cc:12] ...".
    ("log", re.compile(r"^[EF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\] ")),
    # A Python exception's last line: "ModuleNotFoundError: No module named 'x'", "torch.AcceleratorError: ...".
    ("exception", re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)(?::|$)")),
    # trainimg's own one-line failures: the all-reduce worker's "allreduce (jax): setup error: ...", its
    # timeout, the launcher's and selftest's refusals.
    ("trainimg", re.compile(r"^allreduce \(\w+\): |^trainimg-launch: .*(?:refus|needs|not found|pass --)|"
                            r"^trainimg-runtime \w+: ")),
)

# Lines of the wrappers around a failure, never its cause.
WRAPPERS: tuple[re.Pattern[str], ...] = (
    # torchrun's summary (torch.distributed.elastic.multiprocessing.errors.ChildFailedError's text).
    re.compile(r"^[=-]{10,}$"),
    re.compile(r"ChildFailedError"),
    re.compile(r"^(?:Root Cause \(first observed failure\)|Failures):|^\[\d+\]:$|^<NO_OTHER_FAILURES>$"),
    re.compile(r"^(?:time|host|rank|exitcode|error_file|traceback)\s*: "),
    # torchrun's agent stopping the other ranks: "Sending process 1761 closing signal SIGTERM", "failed (exitcode:
    # 1) local_rank: 1 (pid: 1762) of binary: ..." (a glog E line that only repeats the exit code).
    re.compile(r"closing signal SIG|failed \(exitcode: -?\d+\) local_rank: "),
    # A traceback's frames; its cause is the exception line at its end.
    re.compile(r"^Traceback \(most recent call last\):$|^File \"|^\^+$"),
    # XLA's status trailer: "=== Source Location Trace: ===" then source lines "external/xla+/xla/util.h:303".
    re.compile(r"^=== Source Location Trace: ===$|^(?:external/)?[\w+./-]+\.(?:h|cc|cpp):\d+$"),
)

# A prefix a runner puts before each line of a process: selftest's "  [chief-0] ", PyTorch's "[rank1]: ".
_PREFIX = re.compile(r"^\s*(?:\[[\w.-]+\]:?\s?)+")


def _clean(line: str) -> str:
    return " ".join(_PREFIX.sub("", line).split())


def _is_wrapper(line: str) -> bool:
    return any(p.search(line) for p in WRAPPERS)


def classify(line: str) -> str | None:
    """The kind of error `line` names (the first `ERRORS` entry matching it), or None."""
    return next((kind for kind, pattern in ERRORS if pattern.search(line)), None)


def first_cause(text: str) -> str | None:
    """The first line of `text` naming an error (see the module doc), prefix removed and spaces collapsed;
    else the last line that is not a wrapper's; None for no output."""
    last = None
    for raw in text.splitlines():
        line = _clean(raw)
        if not line or line.startswith("{") or _is_wrapper(line):  # a rank's JSON result is judged apart
            continue
        if classify(line):
            return line
        last = line
    return last


def reason(text: str, limit: int = 300) -> str:
    """`first_cause` cut to `limit` characters, ``no output`` where there is none."""
    cause = first_cause(text) or "no output"
    return cause if len(cause) <= limit else cause[: limit - 3] + "..."
