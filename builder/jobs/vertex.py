"""Vertex AI's CustomJob: the REST body (``displayName`` + ``jobSpec``) and the ``CustomJobSpec`` that
``gcloud ai custom-jobs create --config FILE`` reads (top-level ``workerPoolSpecs``; the name is a flag there).

Vertex reads a job's cluster from the *position* of each entry in ``workerPoolSpecs`` (seed 003): [0] the primary,
[1] workers, [2] parameter servers or the Reduction Server, [3] evaluators; an unused pool that sits before a used
one must be ``{}``, and pools after the last used one are left out. Both forms parse strictly as
``google.cloud.aiplatform_v1`` messages (tests/test_clients.py).
"""

from __future__ import annotations

from typing import Any

from ..runtime.contract import VERTEX
from .fields import GOOGLE_CLOUD_FLAGS
from .flagdecl import Flag
from .jobplatform import JobPlatform
from .machines import check_machine_series, google_gpu_of, google_gpu_request
from .node import ENV, env_list
from .reducers import DEFAULT_REDUCER_MACHINE, REDUCTION_SERVER_IMAGE, reduction_server_image
from .shape import JobShape, SpecOptions

PLATFORM = VERTEX
REDUCTION_SERVERS = Flag("--reduction-servers", "Reduction Server replicas in worker pool 2 (a count, or auto to "
                         "size the pool from the workers' GPUs).", metavar="R|auto")
# Said on stderr when --region reaches no part of the body: the job's region is where it is created, not a field.
REGION_NOTE = ("--region is checked but written nowhere without a Reduction Server (whose image it picks): create "
               "the job with gcloud's --region or in the API URL's location")
#: The `spec` flags a Vertex job reads (`flagdecl`): any other platform's flag is refused here.
FLAGS = (*GOOGLE_CLOUD_FLAGS, REDUCTION_SERVERS, ENV)
_REDUCER_IMAGE_TAIL = REDUCTION_SERVER_IMAGE.split("/", 1)[1]  # the same in every multi-region
BOOT_DISK = {"bootDiskType": "pd-ssd", "bootDiskSizeGb": 100}


def custom_job_spec(job: JobShape) -> dict[str, Any]:
    """The ``CustomJobSpec``: the four pools in Vertex's order."""
    pools: list[dict[str, Any]] = [_pool(job, _machine(job, gpu=True), 1, job.nproc), {}, {}, {}]
    if job.replicas > 1:
        pools[1] = _pool(job, _machine(job, gpu=True), job.replicas - 1, job.nproc)
    if job.ps:
        pools[2] = _pool(job, _machine(job, gpu=False), job.ps, 1)
    elif job.reducers:
        # Reducers run Google's image with its own entrypoint, on CPU machines: no command, args or accelerator.
        pools[2] = {
            "machineSpec": {"machineType": DEFAULT_REDUCER_MACHINE},
            "replicaCount": job.reducers,
            "containerSpec": {"imageUri": reduction_server_image(job.region)},
        }
    if job.evaluators:
        pools[3] = _pool(job, _machine(job, gpu=True), job.evaluators, job.nproc)
    while not pools[-1]:
        pools.pop()
    return {"workerPoolSpecs": pools}


def custom_job(job: JobShape) -> dict[str, Any]:
    """The REST body for ``projects.locations.customJobs.create``."""
    return {"displayName": job.name, "jobSpec": custom_job_spec(job)}


def reducer_pool(body: dict[str, Any]) -> bool:
    """Whether a CustomJob body (either form) has a Reduction Server pool: the one place --region is written."""
    pools = body.get("jobSpec", body).get("workerPoolSpecs", [])
    return len(pools) > 2 and pools[2].get("containerSpec", {}).get("imageUri", "").endswith(_REDUCER_IMAGE_TAIL)


def _pool(job: JobShape, machine: dict[str, Any], count: int, nproc: int) -> dict[str, Any]:
    container: dict[str, Any] = {"imageUri": job.image}
    command = job.container_command(nproc)
    if command is not None:
        container["command"] = command
    container["args"] = list(job.args)
    if job.env:
        container["env"] = env_list(job.env)
    return {"machineSpec": machine, "replicaCount": count, "diskSpec": dict(BOOT_DISK), "containerSpec": container}


def _machine(job: JobShape, *, gpu: bool) -> dict[str, Any]:
    """A pool's machine spec: the job's accelerator on GPU pools, a parameter server's (`JobShape.ps_accelerator`)
    on the others."""
    spec: dict[str, Any] = {"machineType": job.machine_type}
    accelerator = job.accelerator if gpu else job.ps_accelerator
    if accelerator:
        spec["acceleratorType"] = accelerator[0]
        spec["acceleratorCount"] = accelerator[1]
    return spec


def _notes(opts: SpecOptions, body: dict[str, Any]) -> tuple[str, ...]:
    return (REGION_NOTE,) if opts.region is not None and not reducer_pool(body) else ()


#: What `trainimg spec` reads of Vertex (`jobplatform`): ``rest`` is the CustomJob, ``gcloud`` its spec.
JOB = JobPlatform(name=PLATFORM, flags=FLAGS, body=lambda job, form: custom_job(job) if form == "rest"
                  else custom_job_spec(job), notes=_notes, gpu_request=google_gpu_request, gpu_of=google_gpu_of,
                  check_names=check_machine_series)
