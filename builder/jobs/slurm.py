"""The sbatch script for a training job on Slurm: ``srun`` starts every task, one process each, in the image.

Slurm starts the processes itself (``nodes × tasks_per_node`` tasks) and tells each its place with ``SLURM_*``;
the image's ``trainimg-launch`` keeps those process-level ranks (`runtime.platforms.slurm`), so the script starts no
torchrun and sets no rank. The batch script itself runs once, on the first node, outside any step: it only calls
``srun``. How a task enters the image depends on the site's container runtime:

* ``pyxis``: NVIDIA's enroot/pyxis SPANK plugin, the usual GPU Slurm setup: ``srun --container-image=IMAGE CMD``.
  enroot spells a registry host with ``#`` (``registry.example.com#team/image:tag``), so the reference is rewritten.
* ``apptainer``: ``srun apptainer exec [--nv] docker://IMAGE CMD``; apptainer passes the task's environment in.
* ``docker``: each task runs ``docker run --rm --network host --ipc host`` with every ``SLURM_*`` variable of its
  task passed in by name (``--env NAME``: the values never pass through a file or a second round of quoting),
  ``--gpus`` with the step's GPUs when the job asks for GPUs, and a container name made of the job name, job id,
  step id and task rank, so a container whose client was killed can still be found. ``--ipc host``: NCCL's and
  PyTorch's shared-memory transports between the containers of one node need one IPC namespace (and more than
  Docker's 64 MB ``/dev/shm``).

Every task gets ``--kill-on-bad-exit=1``: one failed rank ends the step instead of leaving the others waiting in the
all-reduce until the time limit. Pure: no engine, no Slurm; tests submit the scripts to a real one.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from ..errors import UserInputError
from ..recipe.grammar import is_reference
from ..runtime.contract import SLURM
from .flagdecl import GPUS, Flag
from .jobplatform import ClusterJob, JobPlatform
from .node import ENV, job_env
from .shape import SpecOptions

PLATFORM = SLURM
PYXIS = "pyxis"
APPTAINER = "apptainer"
DOCKER = "docker"
CONTAINER_RUNTIMES = (PYXIS, APPTAINER, DOCKER)
CONTAINER_RUNTIME = Flag("--container-runtime", f"How srun runs the image (default {CONTAINER_RUNTIMES[0]}).",
                         choices=CONTAINER_RUNTIMES)
PARTITION = Flag("--partition", "The partition (or a comma-separated list).", metavar="NAME")
#: The `spec` flags a Slurm script reads (`flagdecl`): any other platform's flag is refused here.
FLAGS = (GPUS, CONTAINER_RUNTIME, PARTITION, ENV)

# sbatch reads #SBATCH lines with its own tokenizer, not a shell: values are kept to characters that need no quoting.
# A job name also names the docker containers, so it follows docker's name rule.
NAME_LIMIT = 128
_NAME_RE = re.compile(rf"\A[A-Za-z0-9][A-Za-z0-9_.-]{{0,{NAME_LIMIT - 1}}}\Z")
_PARTITION_RE = re.compile(r"\A[A-Za-z0-9_.-]+(?:,[A-Za-z0-9_.-]+)*\Z")  # one partition or a list, as sbatch takes
# sbatch --time: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, or UNLIMITED/INFINITE
_TIME_RE = re.compile(r"\A(?:[0-9]+(?::[0-9]+){0,2}|[0-9]+-[0-9]+(?::[0-9]+){0,2}|UNLIMITED|INFINITE)\Z")


def sbatch_script(*, name: str, image: str, nodes: int, tasks_per_node: int, gpus_per_node: int,
                  command: list[str], container_runtime: str, partition: str | None = None,
                  time_limit: str | None = None, env: Sequence[tuple[str, str]] = ()) -> str:
    """The batch script: ``#SBATCH`` options, ``set -euo pipefail``, the job's `env` exported (srun hands the
    batch environment to every task, and pyxis and apptainer into the container; the docker runtime passes each
    by name), and one ``srun`` that starts every task.

    `command` is the whole in-container command (``trainimg-launch ... -- CMD...``); each word is quoted with shlex.
    Raises UserInputError for a value Slurm or the runtime would refuse, before anything is queued.
    """
    _check(name, image, nodes, tasks_per_node, gpus_per_node, command, container_runtime, partition, time_limit)
    options = [f"--job-name={name}", f"--nodes={nodes}", f"--ntasks-per-node={tasks_per_node}"]
    if gpus_per_node:
        options.append(f"--gpus-per-node={gpus_per_node}")
    if partition is not None:
        options.append(f"--partition={partition}")
    if time_limit is not None:
        options.append(f"--time={time_limit}")
    lines = ["#!/bin/bash", *(f"#SBATCH {option}" for option in options),
             f"# {nodes * tasks_per_node} task(s), one process each, started by srun in {image} ({container_runtime}).",
             "set -euo pipefail", *(f"export {key}={shlex.quote(value)}" for key, value in env), ""]
    names = [key for key, _ in env]
    return "\n".join([*lines, _srun(name, image, gpus_per_node, command, container_runtime, names)]) + "\n"


def enroot_image(image: str) -> str:
    """The reference as pyxis/enroot read it: ``[REGISTRY#]IMAGE[:TAG]``.

    The first path component is a registry host when docker would read it as one: it has a dot or a port, or it is
    ``localhost``; otherwise the reference is Docker Hub's and stays as it is."""
    first, slash, rest = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return f"{first}#{rest}"
    return image


def _srun(name: str, image: str, gpus_per_node: int, command: list[str], runtime: str,
          env_names: Sequence[str]) -> str:
    srun = "srun --kill-on-bad-exit=1"
    if runtime == PYXIS:
        return f"{srun} {shlex.quote('--container-image=' + enroot_image(image))} {shlex.join(command)}"
    if runtime == APPTAINER:
        nv = " --nv" if gpus_per_node else ""
        return f"{srun} apptainer exec{nv} {shlex.quote('docker://' + image)} {shlex.join(command)}"
    task = shlex.quote(_docker_task(name, gpus_per_node, env_names))
    return f"{srun} bash -c {task} docker-task {shlex.join([image, *command])}"


def _docker_task(name: str, gpus_per_node: int, env_names: Sequence[str]) -> str:
    """The script each task runs under the docker runtime, with the image and command as its arguments: it reads
    its own task's SLURM_* names at run time (and the job's own `env_names`), and the command is quoted once, in
    the srun line."""
    lines = ["set -euo pipefail",
             "env_args=()",
             'for v in $(compgen -e SLURM_); do env_args+=(--env "$v"); done']
    lines += [f"env_args+=(--env {key})" for key in env_names]
    run = ["exec docker run --rm --network host --ipc host",
           f'--name "{name}-$SLURM_JOB_ID.$SLURM_STEP_ID.$SLURM_PROCID"', '"${env_args[@]}"']
    if gpus_per_node:
        # The step's GPUs (Slurm's ids, nvidia's device indices) when the site's gres sets them, else all of them.
        lines += ['gpus="${SLURM_STEP_GPUS:-${SLURM_JOB_GPUS:-}}"',
                  'if [ -n "$gpus" ]; then gpus="\\"device=$gpus\\""; else gpus=all; fi']
        run.append('--gpus "$gpus"')
    run.append('"$@"')
    return "\n".join([*lines, " ".join(run)])


def _check(name: str, image: str, nodes: int, tasks_per_node: int, gpus_per_node: int, command: list[str],
           runtime: str, partition: str | None, time_limit: str | None) -> None:
    problems = []
    if not _NAME_RE.match(name):
        problems.append(f"job name {name!r} must be letters, digits, '_', '.' or '-' (at most 128, starting with a "
                        "letter or digit)")
    if not is_reference(image):
        problems.append(f"image {image!r} is not an image reference")
    for what, value, least in (("nodes", nodes, 1), ("tasks per node", tasks_per_node, 1),
                               ("GPUs per node", gpus_per_node, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            problems.append(f"{what} must be a whole number >= {least}, got {value!r}")
    if not command or not command[0] or not all(isinstance(word, str) for word in command):
        problems.append(f"the command must be a program and its arguments, got {command!r}")
    if runtime not in CONTAINER_RUNTIMES:
        problems.append(f"container runtime {runtime!r} is not one of {', '.join(CONTAINER_RUNTIMES)}")
    if partition is not None and not _PARTITION_RE.match(partition):
        problems.append(f"partition {partition!r} must be letters, digits, '_', '.' or '-' (a list: commas)")
    if time_limit is not None and not _TIME_RE.match(time_limit):
        problems.append(f"time limit {time_limit!r} is not one of sbatch's forms (M, H:M:S, D-H:M:S, UNLIMITED...)")
    if problems:
        raise UserInputError("slurm job: " + "; ".join(problems))


def _write(opts: SpecOptions, job: ClusterJob) -> str:
    """One task per GPU (one on a CPU node), started by srun in the container runtime asked for."""
    return sbatch_script(name=job.name, image=job.image, nodes=job.nodes, tasks_per_node=job.gpus or 1,
                         gpus_per_node=job.gpus, command=list(job.command),
                         container_runtime=opts.flag(CONTAINER_RUNTIME) or CONTAINER_RUNTIMES[0],
                         partition=opts.flag(PARTITION), env=job_env(opts.flag(ENV)))


#: What `trainimg spec` reads of Slurm (`jobplatform`).
JOB = JobPlatform(name=PLATFORM, flags=FLAGS, name_limit=NAME_LIMIT, write=_write)
