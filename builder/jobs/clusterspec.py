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

import re
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import UserInputError
from ..runtime.contract import AZUREML, SAGEMAKER, SLURM
from ..runtime.platforms import STARTS
from . import azureml, jobset, pytorchjob, sagemaker, slurm, tfjob, trainjob
from .clusterimage import check_gpu_image, check_pullable
from .fields import count
from .gpucheck import check_gpus
from .k8s_shape import K8sJob
from .kubernetes import MAX_LABEL, dump_yaml
from .shape import LAUNCHER, SpecOptions
from .spec import program

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
# Flags of the cloud platforms, and those of one cluster family only: given elsewhere they are refused by name.
_CLOUD_ONLY = ("machine_type", "accelerator", "region", "reduction_servers", "use_chief_in_tf_config")
_K8S_ONLY = ("namespace",)
_SLURM_ONLY = ("container_runtime", "partition")
_AZUREML_ONLY = ("compute", "vm_size", "distribution")
_SAGEMAKER_ONLY = ("instance_type", "role_arn", "output_path", "volume_size", "max_runtime")
_FLAG = {"machine_type": "--machine-type", "accelerator": "--accelerator", "region": "--region",
         "reduction_servers": "--reduction-servers", "use_chief_in_tf_config": "--use-chief-in-tf-config",
         "namespace": "--namespace", "container_runtime": "--container-runtime", "partition": "--partition",
         "ps": "--ps", "evaluators": "--evaluators", "compute": "--compute", "vm_size": "--vm-size",
         "distribution": "--distribution", "instance_type": "--instance-type", "role_arn": "--role-arn",
         "output_path": "--output-path", "volume_size": "--volume-size", "max_runtime": "--max-runtime"}


def cluster_spec(opts: SpecOptions) -> str:
    """The manifest (multi-document YAML) or sbatch script for `opts.platform`. Every refusal is one
    `UserInputError` line."""
    _refuse_foreign_flags(opts)
    check_pullable(opts.image)
    check_gpus(opts)
    nodes = count(opts.replicas, "--replicas", minimum=1)
    gpus = count(opts.gpus, "--gpus", minimum=0)
    if opts.platform == AZUREML:
        gpus = azureml.processes_per_node(opts.vm_size, gpus)
    if opts.platform == SAGEMAKER:
        gpus = sagemaker.gpus_per_instance(opts.instance_type, gpus)
    check_gpu_image(opts.image, opts.facts, gpus, where="--instance-type" if opts.platform == SAGEMAKER else "--gpus")
    opts = program(opts)
    if opts.command is None:
        raise UserInputError("a cluster job runs a program: give it after `--` (e.g. -- python train.py), or "
                             "--conformance", where="command")
    framework = opts.facts.framework if opts.facts is not None and opts.facts.framework != "none" else None
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


def _refuse_foreign_flags(opts: SpecOptions) -> None:
    """A flag another platform family takes is a mistake to name, not to drop silently."""
    if opts.accelerator is not None:
        raise UserInputError(f"{opts.platform} counts GPUs per node: use --gpus N", where="--accelerator")
    foreign = [*_CLOUD_ONLY, *(_SLURM_ONLY if opts.platform != SLURM else _K8S_ONLY), "ps", "evaluators",
               *(_AZUREML_ONLY if opts.platform != AZUREML else _K8S_ONLY),
               *(_SAGEMAKER_ONLY if opts.platform != SAGEMAKER else _K8S_ONLY)]
    for field in foreign:
        if getattr(opts, field):
            raise UserInputError(f"not a {opts.platform} setting", where=_FLAG[field])


def _name(opts: SpecOptions) -> str:
    """The job's name: `--display-name`, else ``trainimg-<variant>-job`` made a DNS label (Kubernetes' names and
    every pod hostname derive from it; the writers check the derived ones)."""
    if opts.display_name is not None:
        return opts.display_name
    stem = f"trainimg-{opts.facts.name}" if opts.facts is not None and opts.facts.name else "trainimg"
    suffix = "-conformance" if opts.conformance else "-job"
    stem = re.sub(r"[^a-z0-9-]+", "-", stem.lower()).strip("-")
    return stem[: MAX_LABEL // 2 - len(suffix)].rstrip("-") + suffix
