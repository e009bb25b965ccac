"""AI Platform Training's Job (``jobId`` + ``trainingInput``), and the ``trainingInput`` config that
``gcloud ai-platform jobs submit training JOB --config FILE`` reads.

The service was shut down on 2025-01-31; trainimg still writes its format because old images and code read its
environment (``CLUSTER_SPEC`` with ``master``, ``TF_CONFIG`` with ``master`` or ``chief``). The body follows
``ml.v1.json`` (``GoogleCloudMlV1__Job``/``TrainingInput``/``ReplicaConfig``), which tests/test_clients.py checks
every body against:

* Roles are named fields: ``master*``, ``worker*``, ``parameterServer*``, ``evaluator*`` (type, count, config).
* A command goes into each ``*Config.containerCommand`` and the args into each ``*Config.containerArgs``; never into
  ``trainingInput.args``, which the schema says is mutually exclusive with both.
* int64 fields (counts) are JSON strings, as the discovery document types them.
* ``useChiefInTfConfig`` is always written: the service defaults to ``false`` (``master`` in ``TF_CONFIG``, which
  TensorFlow 2 rejects); trainimg's launcher renames ``master`` to ``chief`` either way.
"""

from __future__ import annotations

from typing import Any

from ..errors import UserInputError
from ..runtime.contract import AIPLATFORM
from .fields import GOOGLE_CLOUD_FLAGS
from .flagdecl import Flag
from .jobplatform import JobPlatform
from .machines import check_machine_series, google_gpu_of, google_gpu_request
from .shape import JobShape

PLATFORM = AIPLATFORM
USE_CHIEF_IN_TF_CONFIG = Flag("--use-chief-in-tf-config", "Name the primary 'chief' (not 'master') in TF_CONFIG.",
                              kind=bool, default=False, negation="--no-use-chief-in-tf-config")
#: The `spec` flags an AI Platform job reads (`flagdecl`): any other platform's flag is refused here.
FLAGS = (*GOOGLE_CLOUD_FLAGS, USE_CHIEF_IN_TF_CONFIG)
SHUTDOWN_NOTE = ("AI Platform Training was shut down on 2025-01-31; this spec is for old tooling that still reads "
                 "its format (new jobs: --platform vertex)")
DEFAULT_REGION = "us-central1"
JOB_ID_LIMIT = 128  # AI Platform's jobId, counted in characters
_JOB_ID_CHARS = "letters, digits and underscores"


def training_input(job: JobShape) -> dict[str, Any]:
    """``TrainingInput`` for a custom-container job on Compute Engine machine types (scale tier CUSTOM)."""
    training: dict[str, Any] = {
        "scaleTier": "CUSTOM",
        "masterType": job.machine_type,
        "masterConfig": _config(job, gpu=True, nproc=job.nproc),
    }
    if job.replicas > 1:
        training.update(workerType=job.machine_type, workerCount=str(job.replicas - 1),
                        workerConfig=_config(job, gpu=True, nproc=job.nproc))
    if job.ps:
        training.update(parameterServerType=job.machine_type, parameterServerCount=str(job.ps),
                        parameterServerConfig=_config(job, gpu=False, nproc=1))
    if job.evaluators:
        training.update(evaluatorType=job.machine_type, evaluatorCount=str(job.evaluators),
                        evaluatorConfig=_config(job, gpu=True, nproc=job.nproc))
    training["region"] = job.region or DEFAULT_REGION
    training["useChiefInTfConfig"] = job.use_chief_in_tf_config
    return training


def ml_job(job: JobShape) -> dict[str, Any]:
    """The REST body for ``projects.jobs.create``: ``jobId`` is required there."""
    return {"jobId": job.name, "trainingInput": training_input(job)}


def gcloud_config(job: JobShape) -> dict[str, Any]:
    """What ``gcloud ai-platform jobs submit training JOB --config`` reads; the job id is its positional JOB."""
    return {"trainingInput": training_input(job)}


def _config(job: JobShape, *, gpu: bool, nproc: int) -> dict[str, Any]:
    cfg: dict[str, Any] = {"imageUri": job.image}
    accelerator = job.accelerator if gpu else job.ps_accelerator
    if accelerator:
        cfg["acceleratorConfig"] = {"count": str(accelerator[1]), "type": accelerator[0]}
    command = job.container_command(nproc)
    if command is not None:
        cfg["containerCommand"] = command
    if job.args:
        cfg["containerArgs"] = list(job.args)
    return cfg


def job_id(name: str) -> str:
    """trainimg's made-up name as a jobId: every character outside ASCII letters and digits becomes ``_``."""
    return "".join(ch if ch.isascii() and ch.isalnum() else "_" for ch in name)[:JOB_ID_LIMIT]


def check_job_id(given: str) -> None:
    """A jobId starts with a letter and holds only letters, digits and underscores."""
    if not (given[0].isascii() and given[0].isalpha()
            and all(ch.isascii() and (ch.isalnum() or ch == "_") for ch in given)):
        raise UserInputError(f"an AI Platform job id starts with a letter and holds only {_JOB_ID_CHARS} "
                             f"(at most {JOB_ID_LIMIT}), got {given!r}", where="--display-name")


#: What `trainimg spec` reads of AI Platform (`jobplatform`): every body comes with the shutdown note.
JOB = JobPlatform(name=PLATFORM, flags=FLAGS, body=lambda job, form: ml_job(job) if form == "rest"
                  else gcloud_config(job), notes=lambda opts, body: (SHUTDOWN_NOTE,),
                  gpu_request=google_gpu_request, gpu_of=google_gpu_of, check_names=check_machine_series,
                  made_name=job_id, check_name=check_job_id)
