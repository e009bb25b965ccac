"""Amazon SageMaker: the ``CreateTrainingJob`` request (``aws sagemaker create-training-job --cli-input-json``,
boto3's ``create_training_job(**request)``) that runs a trainimg image on ``--replicas`` instances.

Why SageMaker's own API model decides: the request's grammar (the training job name, the role ARN, the S3 output
path) and which instance types exist are published in botocore's bundled SageMaker model, the one every AWS client
validates with. Reading them from there, not from a copy, keeps ``spec`` in step with the botocore it runs beside;
what the model cannot say (how many GPUs an instance type carries) is the table in ``data/sagemaker_instances.yaml``.

Each instance runs the image's launcher as its ``ContainerEntrypoint`` (the program after it; ``--args`` become
``ContainerArguments``, which SageMaker appends): SageMaker starts one container per instance and writes its
``resourceconfig.json``, which the launcher reads (`runtime.platforms.sagemaker`) to start one process per GPU.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

import yaml

from ..errors import UserInputError
from ..runtime.contract import SAGEMAKER
from .fields import count
from .flagdecl import Flag
from .gputable import section
from .jobplatform import ClusterJob, JobPlatform
from .nearest import did_you_mean
from .node import ENV, job_env
from .shape import SpecOptions

PLATFORM = SAGEMAKER
NAME_LIMIT = 63  # botocore's CreateTrainingJob TrainingJobName max (tests read it back from the model)
INSTANCE_TYPE = Flag("--instance-type", "The instances' type (its GPUs set the processes per instance).",
                     metavar="ml.TYPE", required=True, replaces=("--gpus", "--machine-type", "--vm-size"))
ROLE_ARN = Flag("--role-arn", "The IAM role the job runs as.", metavar="ARN", required=True)
OUTPUT_PATH = Flag("--output-path", "Where /opt/ml/model is uploaded.", metavar="s3://BUCKET/PREFIX",
                   required=True)
VOLUME_SIZE = Flag("--volume-size", "ML storage per instance, in GB (default 50).", kind=int, metavar="GB")
MAX_RUNTIME = Flag("--max-runtime", "Seconds before the job is stopped (default 86400).", kind=int, metavar="S")
#: The `spec` flags a SageMaker training job reads (`flagdecl`): any other platform's flag is refused here.
FLAGS = (INSTANCE_TYPE, ROLE_ARN, OUTPUT_PATH, VOLUME_SIZE, MAX_RUNTIME, ENV)
DEFAULT_VOLUME_GB = 50  # the instance's ML storage volume, where /opt/ml/input and checkpoints live
DEFAULT_MAX_RUNTIME_S = 86400  # SageMaker's own default StoppingCondition (one day)
INPUT_MODE = "File"
_INSTALL = "pip install 'trainimg[sagemaker]'"


@cache
def _request_shape() -> Any:
    """CreateTrainingJob's input shape in botocore's bundled SageMaker model."""
    try:
        import botocore.session
    except ImportError:
        raise UserInputError(f"--platform sagemaker reads SageMaker's API model from botocore, which is not "
                             f"installed: {_INSTALL}", where="--platform") from None
    model = botocore.session.get_session().get_service_model(SAGEMAKER)
    return model.operation_model("CreateTrainingJob").input_shape


def member(*path: str) -> Any:
    """The shape at `path` below the request (``"ResourceConfig", "InstanceType"``)."""
    shape = _request_shape()
    for name in path:
        shape = shape.members[name]
    return shape


def instance_types() -> tuple[str, ...]:
    """Every training instance type the API model's ``ResourceConfig.InstanceType`` enum names."""
    return tuple(member("ResourceConfig", "InstanceType").enum)


@cache
def gpu_table() -> dict[str, int]:
    """Instance type -> GPUs, from ``data/sagemaker_instances.yaml``; absent ones carry none."""
    text = resources.files("trainimg.jobs").joinpath("data/sagemaker_instances.yaml").read_text(encoding="utf-8")
    return dict(yaml.safe_load(text)["gpus"])


def gpus_per_instance(instance_type: str | None) -> int:
    """The GPUs each instance of `instance_type` carries (``--gpus`` is no SageMaker flag: the type says it)."""
    return gpu_table().get(check_instance_type(instance_type), 0)


def check_instance_type(instance_type: str | None) -> str:
    if not instance_type:
        raise UserInputError("a SageMaker training job needs --instance-type (e.g. ml.p4d.24xlarge)",
                             where="--instance-type")
    known = instance_types()
    if instance_type not in known:
        raise UserInputError(f"{instance_type!r} is not a SageMaker training instance type (botocore's "
                             f"ResourceConfig.InstanceType); {did_you_mean(instance_type, known, fallback=known)}",
                             where="--instance-type")
    return instance_type


def check_value(value: str, flag: str, *path: str) -> str:
    """`value` against the model's pattern and length limits for the member at `path` (botocore's own
    validator checks only minima), refused as one line naming `flag`."""
    return _within(value, flag, ".".join(path), member(*path).metadata)


def _within(value: str, flag: str, label: str, meta: dict[str, Any]) -> str:
    low, high = meta.get("min", 0), meta.get("max", len(value))
    if not low <= len(value) <= high:
        raise UserInputError(f"{value[:80]!r} is {len(value)} characters; SageMaker's {label} takes {low}..{high}",
                             where=flag)
    if "pattern" in meta and not re.fullmatch(meta["pattern"], value):
        raise UserInputError(f"{value[:80]!r} does not match SageMaker's {label} pattern {meta['pattern']}",
                             where=flag)
    return value


def training_job(*, name: str, image: str, instance_type: str, nodes: int, role_arn: str | None,
                 output_path: str | None, command: Sequence[str], args: Sequence[str], volume_gb: int | None,
                 max_runtime_s: int | None, env: Sequence[tuple[str, str]] = ()) -> str:
    """The CreateTrainingJob request as JSON; every value is checked against the API model first; `env` is its
    ``Environment``."""
    if role_arn is None:
        raise UserInputError("SageMaker runs a training job as an IAM role: give --role-arn "
                             "arn:aws:iam::ACCOUNT:role/NAME", where="--role-arn")
    if output_path is None:
        raise UserInputError("SageMaker uploads /opt/ml/model to S3: give --output-path s3://BUCKET/PREFIX",
                             where="--output-path")
    algorithm: dict[str, Any] = {
        "TrainingImage": check_value(image, "--image", "AlgorithmSpecification", "TrainingImage"),
        "TrainingInputMode": INPUT_MODE,
        "ContainerEntrypoint": _strings(command, "command", "ContainerEntrypoint"),
    }
    if args:
        algorithm["ContainerArguments"] = _strings(args, "--args", "ContainerArguments")
    request = {
        "TrainingJobName": check_value(name, "--display-name", "TrainingJobName"),
        "RoleArn": check_value(role_arn, "--role-arn", "RoleArn"),
        "AlgorithmSpecification": algorithm,
        "ResourceConfig": {
            "InstanceType": instance_type, "InstanceCount": nodes,
            "VolumeSizeInGB": count(DEFAULT_VOLUME_GB if volume_gb is None else volume_gb, "--volume-size",
                                    minimum=1)},
        "OutputDataConfig": {"S3OutputPath": check_value(output_path, "--output-path", "OutputDataConfig",
                                                         "S3OutputPath")},
        "StoppingCondition": {"MaxRuntimeInSeconds": count(DEFAULT_MAX_RUNTIME_S if max_runtime_s is None
                                                           else max_runtime_s, "--max-runtime", minimum=1)},
    }
    if env:
        shape = member("Environment")  # a map: at most `max` entries, keys and values within their own limits
        if len(env) > shape.metadata.get("max", len(env)):
            raise UserInputError(f"{len(env)} variables; SageMaker's Environment takes {shape.metadata['max']} at most",
                                 where="--env")
        request["Environment"] = {_within(name, "--env", "Environment key", shape.key.metadata):
                                  _within(value, "--env", "Environment value", shape.value.metadata)
                                  for name, value in env}
    return json.dumps(request, indent=2) + "\n"


def _strings(values: Sequence[str], flag: str, field: str) -> list[str]:
    """A ContainerEntrypoint or ContainerArguments list within the model's count and per-item limits."""
    shape = member("AlgorithmSpecification", field)
    if len(values) > shape.metadata.get("max", len(values)):
        raise UserInputError(f"{len(values)} words; SageMaker's {field} takes {shape.metadata['max']} at most",
                             where=flag)
    return [_within(value, flag, f"{field} item", shape.member.metadata) for value in values]


def gpu_of(instance_type: str) -> str | None:
    """The GPU behind an instance type (its family, ``ml.p4d``, in ``data/gpus.yaml``), None for a CPU type."""
    gpus: dict[str, str] = section(SAGEMAKER, dict[str, str])
    return gpus.get(instance_type.rpartition(".")[0])


def _request(opts: SpecOptions) -> tuple[str, str] | None:
    return (INSTANCE_TYPE.name, opts.flag(INSTANCE_TYPE)) if opts.flag(INSTANCE_TYPE) else None


def _check_names(opts: SpecOptions) -> None:
    if opts.flag(INSTANCE_TYPE):
        check_instance_type(opts.flag(INSTANCE_TYPE))


def _write(opts: SpecOptions, job: ClusterJob) -> str:
    return training_job(name=job.name, image=job.image, instance_type=str(opts.flag(INSTANCE_TYPE)), nodes=job.nodes,
                        role_arn=opts.flag(ROLE_ARN), output_path=opts.flag(OUTPUT_PATH), command=job.command,
                        args=opts.args, volume_gb=opts.flag(VOLUME_SIZE), max_runtime_s=opts.flag(MAX_RUNTIME),
                        env=job_env(opts.flag(ENV)))


#: What `trainimg spec` reads of SageMaker (`jobplatform`): the instance type says the GPUs, not ``--gpus``.
JOB = JobPlatform(name=PLATFORM, flags=FLAGS, name_limit=NAME_LIMIT, write=_write,
                  gpus_per_node=lambda opts, gpus: gpus_per_instance(opts.flag(INSTANCE_TYPE)),
                  gpus_flag=INSTANCE_TYPE.name, gpu_request=_request, gpu_of=gpu_of, check_names=_check_names)
