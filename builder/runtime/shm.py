"""Shared memory (``/dev/shm``): what a node gives a container, what the processes of one node need, the sizes.

Why: NCCL keeps its intra-node buffers in shared memory segments under ``/dev/shm`` (between processes, and even
between the threads of one process), and PyTorch's DataLoader workers hand their batches over through it. Docker and
containerd give a container 64 MiB of it unless told otherwise; NCCL then fails to initialise (``failed to extend
/dev/shm/nccl-...``) or a worker dies of SIGBUS, on the node, after the job queued for its GPUs. NCCL's
troubleshooting guide gives the floor for a container (`NCCL_ADVICE`, `NCCL_SOURCE`): ``--shm-size=1g --ulimit
memlock=-1``.

Each platform module says, in its ``SHM`` (a `NodeShm`), what its containers get by default and how a job sets it
(``trainimg spec`` writes it there); `size_for` is the size trainimg asks for, `needed` the floor the probe's
``shm`` check holds a node to. Standard library only: it runs in images and on the host alike.
"""

from __future__ import annotations

import os
import re
import resource
from dataclasses import dataclass

PATH = "/dev/shm"
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
CONTAINER_DEFAULT = 64 * MIB  # Docker's and containerd's /dev/shm unless the container is told otherwise
NCCL_FLOOR = GIB  # NCCL's advice for a container: --shm-size=1g
NCCL_ADVICE = "--shm-size=1g --ulimit memlock=-1"
NCCL_SOURCE = ("https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting/runtime_and_mpi_issues.html"
               "#shared-memory")
#: What trainimg asks a node for, per local rank (a process, or a GPU of a process that drives several): NCCL's
#: container floor once per rank, so eight GPUs of one node get 8 GiB. trainimg's rule, stated; NCCL gives one number.
PER_LOCAL_RANK = GIB
# Docker's --shm-size grammar, which Azure ML's shm_size shares: a number and an optional unit b, k, m or g.
_SIZE = re.compile(r"\A([1-9][0-9]{0,15})([bkmg]?)\Z", re.I)
_UNITS = {"": 1, "b": 1, "k": KIB, "m": MIB, "g": GIB}


@dataclass(frozen=True)
class NodeShm:
    """One platform's row of the shared-memory table.

    `default`: the bytes of ``/dev/shm`` a container gets unless its job says otherwise, None where that is not one
    number (the node's own tmpfs) or the platform documents none; `default_said` says it in words. `setting`: where a
    job sets it (``trainimg spec`` writes it there), None where a job cannot. `source`: where both facts come from.
    """

    default: int | None
    default_said: str
    setting: str | None
    source: str


#: The Kubernetes platforms' row: a pod's containers get the runtime's 64 MiB; a memory-backed emptyDir over
#: /dev/shm sets it (NVIDIA/nccl#525 is a Kubeflow job fixed that way).
POD = NodeShm(default=CONTAINER_DEFAULT, default_said="64 MiB, the container runtime's (containerd, Docker)",
              setting="an emptyDir of medium: Memory mounted at /dev/shm in the pod template, its sizeLimit the "
                      "size",
              source="https://kubernetes.io/docs/concepts/storage/volumes/#emptydir (medium: Memory is a tmpfs, "
                     "sizeLimit its size); https://github.com/NVIDIA/nccl/issues/525")
#: The row of platforms whose ranks run on the node itself, or in containers that share the node's /dev/shm.
NODE_OWN = ("the node's own /dev/shm: a tmpfs, by default half of the node's memory (tmpfs(5)); a site may mount "
            "it smaller")


def local_ranks(processes: int, gpus: int) -> int:
    """The NCCL ranks of one node: a process per GPU, or one process driving every GPU of the node (TensorFlow's
    MultiWorkerMirroredStrategy), or the processes of a CPU node."""
    return max(processes, gpus, 1)


def needed(ranks: int) -> int:
    """The floor `ranks` local ranks need: NCCL's container floor from two on, nothing for one."""
    return NCCL_FLOOR if ranks > 1 else 0


def size_for(ranks: int) -> int:
    """What trainimg asks a node for: `PER_LOCAL_RANK` per local rank from two on, 0 (ask nothing) for one."""
    return PER_LOCAL_RANK * ranks if ranks > 1 else 0


def parse_size(text: str) -> int:
    """Bytes of a size as ``docker run --shm-size`` writes it (``64m``, ``1g``, ``1073741824``); ValueError else."""
    match = _SIZE.match(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a size: a number and b, k, m or g (64m, 1g)")
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def docker_size(size: int) -> str:
    """`size` in Docker's (and Azure ML's shm_size) grammar, in the largest unit that divides it: ``8g``, ``64m``."""
    for unit in ("g", "m", "k"):
        if size % _UNITS[unit] == 0:
            return f"{size // _UNITS[unit]}{unit}"
    return f"{size}b"


def show(size: int | None) -> str:
    """A size as people read it: ``64 MiB``, ``8 GiB``, ``unlimited`` for None."""
    if size is None:
        return "unlimited"
    for unit, name in ((GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")):
        if size >= unit:
            value = size / unit
            return f"{value:g} {name}" if value == int(value) else f"{value:.1f} {name}"
    return f"{size} bytes"


def measure(path: str = PATH) -> int:
    """The size of the tmpfs at `path`, in bytes (statvfs); OSError where there is none to measure."""
    stats = os.statvfs(path)
    return stats.f_blocks * stats.f_frsize


def memlock_limit() -> int | None:
    """This process's soft limit on locked memory (``ulimit -l``) in bytes, None for unlimited."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return None if soft == resource.RLIM_INFINITY else soft
