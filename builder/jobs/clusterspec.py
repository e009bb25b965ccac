"""Cluster job specs: the same `SpecOptions` -> the file a cluster platform takes (Kubernetes manifests, an sbatch
script, a command job, a training job request), checked before anything queues for GPUs.

Why beside `spec` and not inside it: these platforms have nodes and GPUs per node, no machine types, pools or
regions, and their output is a file a person hands to ``kubectl apply -f``, ``sbatch`` or the platform's CLI, not a
cloud API body. The image checks are the cloud platforms' own (`clusterimage`: pullable by a cluster, no GPUs for a
CPU build), and so is the program (`spec.program`): the user's command behind the launcher, or the in-image
conformance check. What differs per platform (the processes per node, the name limit, the writer) is its module's
`jobplatform.JobPlatform`; this module names no platform.

The launcher's ``--nproc-per-node`` is written only where the platform does not say it itself (the runtime
platform modules' ``STARTS``): a platform that starts every process, or hands torchrun its ``PET_NPROC_PER_NODE``,
gets none, and TensorFlow runs one process per node anyway.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from ..errors import UserInputError
from ..runtime.platforms import STARTS
from ..runtime.shm import local_ranks
from ..runtime.topology import refusal
from .clusterimage import check_gpu_image, check_pullable
from .fields import count
from .flagdecl import GPUS
from .gpucheck import check_gpus
from .jobplatform import ClusterJob
from .node import shm_note
from .platforms import PLATFORMS, job_platform
from .shape import LAUNCHER, SpecOptions
from .spec import program
from .specflags import check_options

# platform -> its Kubernetes manifests (what its writer dumps as YAML), for the platforms that write them.
K8S_WRITERS = {platform.name: platform.manifests for platform in PLATFORMS if platform.manifests is not None}
CLUSTER_PLATFORMS = tuple(platform.name for platform in PLATFORMS if platform.write is not None)
# The platforms that hand their own process count on (or start every process themselves).
_SAYS_NPROC = tuple(name for name, said in STARTS.items() if said is not None)
# platform -> the longest job name it takes where trainimg makes one up (each platform module's fact).
NAME_LIMITS = {platform.name: platform.name_limit for platform in PLATFORMS
               if platform.write is not None and platform.name_limit is not None}
HASH_CHARS = 6  # of the image reference's sha256, in a made-up job name: what tells two variants' jobs apart


def cluster_spec(opts: SpecOptions) -> str:
    """The manifest (multi-document YAML) or sbatch script for `opts.platform`. Every refusal is one
    `UserInputError` line."""
    return cluster_job(opts)[0]


def cluster_job(opts: SpecOptions) -> tuple[str, tuple[str, ...]]:
    """`cluster_spec`'s text, and the lines for stderr about what the job cannot say of its nodes (`node`): a
    /dev/shm the platform gives no way to set."""
    check_options(opts)
    check_pullable(opts.image)
    framework = opts.facts.framework if opts.facts is not None and opts.facts.framework != "none" else None
    why = refusal(opts.platform, framework or "")
    if why is not None:
        raise UserInputError(f"{opts.image} is a {framework} image; {why}", where="--image")
    check_gpus(opts)
    platform = job_platform(opts.platform)
    nodes = count(opts.replicas, "--replicas", minimum=1)
    gpus = platform.gpus_per_node(opts, count(opts.flag(GPUS), GPUS.name, minimum=0))
    check_gpu_image(opts.image, opts.facts, gpus, where=platform.gpus_flag)
    opts = program(opts)
    if opts.command is None:
        raise UserInputError("a cluster job runs a program: give it after `--` (e.g. -- python train.py), or "
                             "--conformance", where="command")
    if platform.write is None:
        raise UserInputError(f"{platform.name} takes a cloud job body, not a cluster job", where="--platform")
    job = ClusterJob(name=_name(opts), image=opts.image, nodes=nodes, gpus=gpus, framework=framework,
                     command=_launcher(opts.platform, framework, gpus or 1, opts.command))
    note = shm_note(opts.platform, local_ranks(1, gpus))
    return platform.write(opts, job), (note,) if note else ()


def _launcher(platform: str, framework: str | None, nproc: int, program: Sequence[str]) -> list[str]:
    """The container command: the program behind trainimg's launcher, which reads the platform's world."""
    head = [LAUNCHER]
    if nproc > 1 and platform not in _SAYS_NPROC and framework != "tensorflow":
        head += ["--nproc-per-node", str(nproc)]
    if framework is not None:
        head += ["--framework", framework]
    return [*head, "--", *program]


def _name(opts: SpecOptions) -> str:
    """The job's name: `--display-name`, else `job_name` within the platform's `NAME_LIMITS`."""
    if opts.display_name is not None:
        return opts.display_name
    variant = opts.facts.name if opts.facts is not None else None
    return job_name(variant, opts.image, opts.conformance, NAME_LIMITS[opts.platform])


def job_name(variant: str | None, image: str, conformance: bool, limit: int) -> str:
    """``trainimg-<variant>-<hash>-job`` as a DNS label of at most `limit` characters (every platform's grammar
    takes it): the variant with its dots dropped (``pytorch-2141-cu126-py312``), cut to fit, then the first
    `HASH_CHARS` hex digits of the image reference's sha256, so two variants (or registries) never share a name
    however much of the variant had to be cut: a second ``kubectl apply`` would replace the first job."""
    stem = "trainimg-" + re.sub(r"[^a-z0-9-]+", "-", (variant or "").lower().replace(".", "")).strip("-")
    tail = "-" + hashlib.sha256(image.encode()).hexdigest()[:HASH_CHARS] + ("-conformance" if conformance else "-job")
    return stem.strip("-")[: limit - len(tail)].rstrip("-") + tail
