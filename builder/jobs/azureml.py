"""Azure Machine Learning command jobs: the YAML ``az ml job create --file`` (and azure-ai-ml's ``load_job``) reads.

One job of ``instance_count`` nodes on a compute cluster named by ``--compute``, its image as the environment, the
program behind trainimg's launcher as the command, and the ``distribution`` that says who starts the processes
(`runtime.platforms.azureml` reads what each one gives them):

* ``pytorch`` (PyTorch and JAX images: Azure ML has no JAX distribution, and the launcher turns the ``env://`` world
  into JAX's coordinator): Azure ML starts ``process_count_per_instance`` processes a node (``--gpus``, 1 without);
* ``tensorflow`` (TensorFlow images): one process per worker, ``worker_count`` the nodes;
* ``mpi`` (``--distribution mpi``, for an image with Open MPI's ``mpirun``): mpirun starts them.

The launcher gets no ``--nproc-per-node``: Azure ML (or mpirun) starts every process, and TensorFlow runs one a node.
``--vm-size`` is the compute cluster's VM size, for the GPU check only (a job names its cluster, not the size): the
GPUs of each size are data (``data/azure_vm_sizes.yaml``, with its source), one process per GPU.
Schema: ``https://azuremlschemas.azureedge.net/latest/commandJob.schema.json`` (azure-ai-ml ``CommandJobSchema``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict

from ..errors import UserInputError
from ..runtime.contract import AZUREML, MPI
from ..runtime.shm import docker_size, size_for
from .flagdecl import GPUS, Flag
from .gputable import section
from .jobplatform import ClusterJob, JobPlatform
from .kubernetes import MAX_LABEL, dump_yaml
from .nearest import did_you_mean
from .node import ENV, job_env
from .shape import SpecOptions

PLATFORM = AZUREML
SCHEMA = "https://azuremlschemas.azureedge.net/latest/commandJob.schema.json"
DISTRIBUTIONS = ("pytorch", "tensorflow", MPI)  # Azure ML's distribution types
COMPUTE = Flag("--compute", "The compute cluster.", metavar="NAME", required=True)
VM_SIZE = Flag("--vm-size", "The cluster's VM size (Standard_ND96isr_H100_v5), to check --gpus against.",
               metavar="SIZE", replaces=("--machine-type", "--instance-type"))
DISTRIBUTION = Flag("--distribution", "Who starts the processes (default: pytorch; tensorflow for TensorFlow "
                    "images).", choices=DISTRIBUTIONS)
# azure-ai-ml's BaseJobSchema sets display_name no limit: a made-up one is kept to a DNS label, as on Kubernetes.
NAME_LIMIT = MAX_LABEL
#: The `spec` flags an Azure ML command job reads (`flagdecl`): any other platform's flag is refused here.
FLAGS = (GPUS, COMPUTE, VM_SIZE, DISTRIBUTION, ENV)
#: The distribution each framework's image runs under unless ``--distribution`` says otherwise.
FRAMEWORK_DISTRIBUTION = {"pytorch": "pytorch", "jax": "pytorch", "tensorflow": "tensorflow"}
# Azure ML's compute names: 2 to 16 letters, digits and hyphens, a letter first (AmlCompute's naming rule).
_COMPUTE = re.compile(r"[A-Za-z][A-Za-z0-9-]{1,15}")
_VM_SIZE = re.compile(r"Standard_[A-Za-z0-9_]{1,60}")
# Azure ML expands ``${{inputs.x}}`` (and ``${{outputs...}}``) in a command: the program's own text must not.
_EXPRESSION = "${{"
ENVIRONMENT = {"PYTHONUNBUFFERED": "1"}  # each process's output reaches the job's log as it is written


class VmSizes(BaseModel):
    """``data/azure_vm_sizes.yaml``: size -> (GPU type, GPUs per VM), with the page it came from."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    source: str
    sizes: dict[str, tuple[str, int]]


@cache
def vm_sizes() -> dict[str, tuple[str, int]]:
    """The GPU sizes, keyed by the lower-cased size name (Azure matches sizes without regard to case)."""
    text = resources.files(__package__).joinpath("data/azure_vm_sizes.yaml").read_text(encoding="utf-8")
    table = VmSizes.model_validate(yaml.safe_load(text))
    return {name.lower(): gpus for name, gpus in table.sizes.items()}


def processes_per_node(vm_size: str | None, gpus: int) -> int:
    """Processes per node: ``--gpus``, or the VM size's GPUs when only the size is given; refused where the size
    carries another number of GPUs (one process per GPU) or none."""
    if vm_size is None:
        return gpus
    if not _VM_SIZE.fullmatch(vm_size):
        raise UserInputError(f"{vm_size!r} is not an Azure VM size (Standard_...)", where="--vm-size")
    carried = vm_sizes().get(vm_size.lower())
    if carried is None:
        if gpus:
            raise UserInputError(f"{vm_size} carries no GPU; use a GPU size (Standard_NC*, Standard_ND*) or drop "
                                 "--gpus", where="--gpus")
        return 0
    kind, count = carried
    if gpus and gpus != count:
        raise UserInputError(f"{vm_size} carries {count} {kind} GPU(s): Azure ML starts one process per GPU, so "
                             f"give --gpus {count} (or leave it out)", where="--gpus")
    return count


def check_compute(compute: str | None) -> str:
    if compute is None:
        raise UserInputError("an Azure ML job runs on a compute cluster: name it (--compute gpu-cluster)",
                             where="--compute")
    name = compute.removeprefix("azureml:")
    if not _COMPUTE.fullmatch(name):
        raise UserInputError(f"{compute!r} is no Azure ML compute name (2 to 16 letters, digits or '-', a letter "
                             "first)", where="--compute")
    return name


def distribution_of(asked: str | None, framework: str | None) -> str:
    """The job's distribution: ``--distribution``, else the framework's; TensorFlow only reads TF_CONFIG."""
    chosen = asked or FRAMEWORK_DISTRIBUTION.get(framework or "pytorch", "pytorch")
    if chosen not in DISTRIBUTIONS:
        raise UserInputError(f"{chosen!r} is not one of {', '.join(DISTRIBUTIONS)}", where="--distribution")
    if framework == "tensorflow" and chosen != "tensorflow":
        raise UserInputError(f"a TensorFlow image reads TF_CONFIG, which only the tensorflow distribution gives; "
                             f"{chosen} would train alone on every node", where="--distribution")
    if framework not in (None, "tensorflow") and chosen == "tensorflow":
        raise UserInputError(f"the tensorflow distribution starts one {framework} process per node and gives it "
                             "only TF_CONFIG; use pytorch", where="--distribution")
    return chosen


def command_job(*, name: str, image: str, compute: str, nodes: int, nproc: int, distribution: str,
                command: Sequence[str], env: Sequence[tuple[str, str]] = ()) -> str:
    """The command job's YAML: `nproc` local ranks a node (one per GPU) get ``resources.shm_size`` from two on
    (`runtime.shm.size_for`), `env` joins ``environment_variables``."""
    for word in command:
        if _EXPRESSION in word:
            raise UserInputError(f"{word!r}: Azure ML would expand '${{{{...}}}}' in a command itself", where="command")
    shape: dict[str, Any] = {"type": distribution}
    if distribution == "tensorflow":
        shape["worker_count"] = nodes
    else:
        shape["process_count_per_instance"] = nproc
    resources: dict[str, Any] = {"instance_count": nodes}
    if size_for(nproc):
        resources["shm_size"] = docker_size(size_for(nproc))
    job = {"$schema": SCHEMA, "type": "command", "display_name": name, "command": shlex.join(command),
           "environment": {"image": image}, "compute": f"azureml:{compute}", "resources": resources,
           "distribution": shape, "environment_variables": {**ENVIRONMENT, **dict(env)}}
    return dump_yaml([job])


def gpu_of(vm_size: str) -> str | None:
    """The GPU a VM size carries (`vm_sizes`), None for a size without one."""
    carried = vm_sizes().get(vm_size.lower())
    return carried[0] if carried else None


def check_vm_size(opts: SpecOptions) -> None:
    """An Azure N-series (GPU) size must be in the VM size table; other series carry no GPU and pass."""
    prefix: str = section("azureml_gpu_prefix", str)
    vm_size = opts.flag(VM_SIZE)
    if not vm_size or not vm_size.lower().startswith(prefix.lower()) or gpu_of(vm_size) is not None:
        return
    text = resources.files(__package__).joinpath("data/azure_vm_sizes.yaml").read_text(encoding="utf-8")
    sizes = list(yaml.safe_load(text)["sizes"])
    raise UserInputError(f"{vm_size} is no Azure GPU VM size trainimg knows (jobs/data/azure_vm_sizes.yaml); "
                         f"{did_you_mean(vm_size, sizes, fallback=sizes)}", where="--vm-size")


def _write(opts: SpecOptions, job: ClusterJob) -> str:
    return command_job(name=job.name, image=job.image, compute=check_compute(opts.flag(COMPUTE)), nodes=job.nodes,
                       nproc=job.gpus or 1, command=job.command, env=job_env(opts.flag(ENV)),
                       distribution=distribution_of(opts.flag(DISTRIBUTION), job.framework))


#: What `trainimg spec` reads of Azure ML (`jobplatform`): the VM size, when given, says the processes per node.
JOB = JobPlatform(name=PLATFORM, flags=FLAGS, name_limit=NAME_LIMIT, write=_write,
                  gpus_per_node=lambda opts, gpus: processes_per_node(opts.flag(VM_SIZE), gpus),
                  gpu_request=lambda opts: (VM_SIZE.name, opts.flag(VM_SIZE)) if opts.flag(VM_SIZE) else None,
                  gpu_of=gpu_of, check_names=check_vm_size)
