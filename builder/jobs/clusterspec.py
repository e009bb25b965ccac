"""Cluster job specs: the same `SpecOptions` -> a Kubernetes manifest (TrainJob, PyTorchJob, TFJob, JobSet), a
Slurm sbatch script or an Azure ML command job (`azureml`), checked before anything queues for GPUs.

Why beside `spec` and not inside it: these platforms have nodes and GPUs per node, no machine types, pools or
regions, and their output is a file a person hands to ``kubectl apply -f`` or ``sbatch``, not an API body. The image
checks are the cloud platforms' own (`clusterimage`: pullable by a cluster, no GPUs for a CPU build), and so is the
program (`spec.program`): the user's command behind the launcher, or the in-image conformance check.

The launcher's ``--nproc-per-node`` is written only where the platform does not say it itself (a JobSet, a TFJob's
TF_CONFIG): Slurm starts one task per process, a TrainJob and a PyTorchJob hand torchrun's ``PET_NPROC_PER_NODE``,
and TensorFlow runs one process per node anyway.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import UserInputError
from ..runtime.contract import AZUREML, SAGEMAKER, SLURM
from ..runtime.platforms import STARTS
from ..runtime.topology import refusal
from . import azureml, jobset, pytorchjob, sagemaker, slurm, tfjob, trainjob
from .clusterimage import check_gpu_image, check_pullable
from .fields import count
from .gpucheck import check_gpus
from .k8s_shape import K8sJob
from .kubernetes import dump_yaml
from .shape import LAUNCHER, SpecOptions
from .spec import program
from .specflags import check_options

# platform -> the manifest writer; slurm writes a script instead (`_sbatch`).
K8S_WRITERS: dict[str, Callable[[K8sJob], list[dict[str, Any]]]] = {
    trainjob.PLATFORM: trainjob.manifests,
    pytorchjob.PLATFORM: pytorchjob.manifests,
    tfjob.PLATFORM: tfjob.manifests,
    jobset.PLATFORM: jobset.manifests,
}
CLUSTER_PLATFORMS = (*K8S_WRITERS, SLURM, AZUREML, SAGEMAKER)
# The platform hands its own process count on (Azure ML and Slurm start every process themselves).
_SAYS_NPROC = tuple(name for name, said in STARTS.items() if said is not None)
# platform -> the longest job name it takes where trainimg makes one up (each platform module's fact).
NAME_LIMITS = {trainjob.PLATFORM: trainjob.NAME_LIMIT, pytorchjob.PLATFORM: pytorchjob.NAME_LIMIT,
               tfjob.PLATFORM: tfjob.NAME_LIMIT, jobset.PLATFORM: jobset.NAME_LIMIT, SLURM: slurm.NAME_LIMIT,
               AZUREML: azureml.NAME_LIMIT, SAGEMAKER: sagemaker.NAME_LIMIT}
HASH_CHARS = 6  # of the image reference's sha256, in a made-up job name: what tells two variants' jobs apart


def cluster_spec(opts: SpecOptions) -> str:
    """The manifest (multi-document YAML) or sbatch script for `opts.platform`. Every refusal is one
    `UserInputError` line."""
    check_options(opts)
    check_pullable(opts.image)
    framework = opts.facts.framework if opts.facts is not None and opts.facts.framework != "none" else None
    why = refusal(opts.platform, framework or "")
    if why is not None:
        raise UserInputError(f"{opts.image} is a {framework} image; {why}", where="--image")
    check_gpus(opts)
    nodes = count(opts.replicas, "--replicas", minimum=1)
    gpus = count(opts.gpus, "--gpus", minimum=0)
    if opts.platform == AZUREML:
        gpus = azureml.processes_per_node(opts.vm_size, gpus)
    if opts.platform == SAGEMAKER:
        gpus = sagemaker.gpus_per_instance(opts.instance_type)
    check_gpu_image(opts.image, opts.facts, gpus, where="--instance-type" if opts.platform == SAGEMAKER else "--gpus")
    opts = program(opts)
    if opts.command is None:
        raise UserInputError("a cluster job runs a program: give it after `--` (e.g. -- python train.py), or "
                             "--conformance", where="command")
    command = _launcher(opts.platform, framework, gpus or 1, opts.command)
    name = _name(opts)
    if opts.platform == AZUREML:
        return azureml.command_job(name=name, image=opts.image, compute=azureml.check_compute(opts.compute),
                                   nodes=nodes, nproc=gpus or 1, command=command,
                                   distribution=azureml.distribution_of(opts.distribution, framework))
    if opts.platform == SAGEMAKER:
        return sagemaker.training_job(name=name, image=opts.image, instance_type=str(opts.instance_type), nodes=nodes,
                                      role_arn=opts.role_arn, output_path=opts.output_path, command=command,
                                      args=opts.args, volume_gb=opts.volume_size, max_runtime_s=opts.max_runtime)
    if opts.platform == SLURM:
        return slurm.sbatch_script(name=name, image=opts.image, nodes=nodes, tasks_per_node=gpus or 1,
                                   gpus_per_node=gpus, command=command,
                                   container_runtime=opts.container_runtime or slurm.CONTAINER_RUNTIMES[0],
                                   partition=opts.partition)
    job = K8sJob(name=name, image=opts.image, nodes=nodes, gpus_per_node=gpus, command=command,
                 framework=framework or "pytorch", namespace=opts.namespace)
    return dump_yaml(K8S_WRITERS[opts.platform](job))


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
