"""`trainimg spec --platform sagemaker` as a user runs it: every CreateTrainingJob request of a generated flag matrix
passes botocore's own validation against its bundled SageMaker model (``ParamValidator``, the check boto3 runs
before it sends anything) and, where ``ParamValidator`` looks no further, the model's own patterns, enums and
maxima; the launcher command gets each instance type's GPUs; and every refusal is one line, exit 2.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import botocore.session
import pytest
from botocore.validate import ParamValidator

from trainimg.cli.app import main
from test_gpu_arch import cpu_fits, gpu_arch_runs
from trainimg.jobs import sagemaker
from shipped import pick

REGISTRY = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/ml"
ROLE = "arn:aws:iam::123456789012:role/service-role/SageMakerTrainer"
OUTPUT = "s3://acme-ml/jobs"
# The shipped variants, by their facts (tests/shipped.py): the CPU PyTorch one, each framework's GPU one.
CPU = pick("pytorch", gpu=False).name
GPU = {fw: pick(fw, gpu=True).name for fw in ("pytorch", "jax", "tensorflow")}
SHAPE = botocore.session.get_session().get_service_model("sagemaker").operation_model("CreateTrainingJob").input_shape
CPU_TYPES = ("ml.m5.xlarge", "ml.c5.18xlarge", "ml.r7i.48xlarge", "ml.t3.medium", "ml.trn1.32xlarge")


def model_errors(value: Any, shape: Any, path: str = "") -> list[str]:
    """What ParamValidator leaves to the service: string patterns, enums and maxima, list and map sizes, ranges."""
    meta, errors = shape.metadata, []
    if shape.type_name == "structure":
        for key, item in value.items():
            errors += model_errors(item, shape.members[key], f"{path}.{key}")
    elif shape.type_name == "list":
        errors += [f"{path}: {len(value)} items" for _ in [0] if not meta.get("min", 0) <= len(value) <=
                   meta.get("max", len(value))]
        for i, item in enumerate(value):
            errors += model_errors(item, shape.member, f"{path}[{i}]")
    elif shape.type_name == "map":
        errors += [f"{path}: {len(value)} entries" for _ in [0] if len(value) > meta.get("max", len(value))]
        for key, item in value.items():
            errors += model_errors(key, shape.key, f"{path}.key") + model_errors(item, shape.value, f"{path}[{key}]")
    elif shape.type_name == "string":
        if shape.enum and value not in shape.enum:
            errors.append(f"{path}: {value!r} not in the enum")
        if not meta.get("min", 0) <= len(value) <= meta.get("max", len(value)):
            errors.append(f"{path}: length {len(value)}")
        if "pattern" in meta and not re.fullmatch(meta["pattern"], value):
            errors.append(f"{path}: {value!r} !~ {meta['pattern']}")
    elif shape.type_name in ("integer", "long") and not meta.get("min", value) <= value <= meta.get("max", value):
        errors.append(f"{path}: {value} out of range")
    return errors


def validate(request: dict[str, Any]) -> list[str]:
    report = ParamValidator().validate(request, SHAPE)
    return ([report.generate_report()] if report.has_errors() else []) + model_errors(request, SHAPE)


def spec(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["spec", "--platform", "sagemaker", *args])
    out, err = capsys.readouterr()
    return code, out, err


def needed(instance_type: str = "ml.p4d.24xlarge") -> list[str]:
    return ["--instance-type", instance_type, "--role-arn", ROLE, "--output-path", OUTPUT]


def test_every_gpu_instance_type_of_the_model_is_in_the_table() -> None:
    """A GPU family botocore's model gains (ml.g*, ml.p*) must get its GPU count here before spec takes it."""
    gpu_families = [t for t in sagemaker.instance_types() if re.match(r"ml\.(g|p)[0-9]", t)]
    assert sorted(set(gpu_families) - set(sagemaker.gpu_table())) == []
    assert sorted(set(sagemaker.gpu_table()) - set(sagemaker.instance_types())) == []


def test_every_generated_request_passes_botocores_validation(capsys: pytest.CaptureFixture[str]) -> None:
    types = sorted(sagemaker.gpu_table()) + list(CPU_TYPES)
    checked = 0
    for instance_type, framework, nodes, conformance in itertools.product(types, sorted(GPU), (1, 2, 4),
                                                                          (False, True)):
        if not gpu_arch_runs("sagemaker", instance_type, GPU[framework]):
            continue  # a GPU the build has no kernels for: tests/test_gpu_arch.py checks that it is refused
        if not cpu_fits("sagemaker", instance_type, GPU[framework]):
            continue  # an arm64 machine, an amd64-only image: tests/test_arch_spec.py checks that it is refused
        program = ["--conformance"] if conformance else ["--args", "--epochs", "--args", "3", "--", "python",
                                                          "train.py"]
        code, out, err = spec(capsys, "--image", GPU[framework], "--registry", REGISTRY, "--replicas", str(nodes),
                              *needed(instance_type), *program)
        assert code == 0, (instance_type, framework, err)
        request = json.loads(out)
        assert validate(request) == [], (instance_type, framework, validate(request))
        entry = request["AlgorithmSpecification"]["ContainerEntrypoint"]
        gpus = sagemaker.gpu_table().get(instance_type, 0)
        says = ["--nproc-per-node", str(gpus)] if gpus > 1 and framework != "tensorflow" else []
        assert entry[:len(says) + 3] == ["trainimg-launch", *says, "--framework", framework], entry
        assert request["ResourceConfig"] == {"InstanceType": instance_type, "InstanceCount": nodes,
                                             "VolumeSizeInGB": sagemaker.DEFAULT_VOLUME_GB}
        assert request["AlgorithmSpecification"]["TrainingImage"].startswith(f"{REGISTRY}/trainimg/{framework}:")
        assert request["AlgorithmSpecification"].get("ContainerArguments") == (None if conformance else ["--epochs", "3"])
        checked += 1
    print(f"\nsagemaker: {checked} CreateTrainingJob requests, 0 rejected by botocore's ParamValidator or the "
          f"model's patterns/enums/maxima ({len(types)} instance types)")
    assert checked >= 600


def test_a_request_with_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = spec(capsys, "--image", GPU["pytorch"], "--registry", REGISTRY, "--replicas", "16",
                          *needed("ml.p5.48xlarge"), "--volume-size", "500", "--max-runtime", "432000",
                          "--display-name", "llama-ft-0042", "--", "python", "train.py")
    assert code == 0, err
    request = json.loads(out)
    assert validate(request) == []
    assert request["TrainingJobName"] == "llama-ft-0042" and request["RoleArn"] == ROLE
    assert request["ResourceConfig"] == {"InstanceType": "ml.p5.48xlarge", "InstanceCount": 16,
                                         "VolumeSizeInGB": 500}
    assert request["StoppingCondition"] == {"MaxRuntimeInSeconds": 432000}
    assert request["OutputDataConfig"] == {"S3OutputPath": OUTPUT}
    assert request["AlgorithmSpecification"]["ContainerEntrypoint"] == [
        "trainimg-launch", "--nproc-per-node", "8", "--framework", "pytorch", "--", "python", "train.py"]


@pytest.mark.parametrize(("where", "text", "args"), [
    ("--role-arn", "RoleArn pattern", ["--instance-type", "ml.p4d.24xlarge", "--role-arn", "arn:aws:iam::12:role/x",
                                       "--output-path", OUTPUT]),
    ("--role-arn", "RoleArn pattern", ["--instance-type", "ml.p4d.24xlarge", "--role-arn", "arn:aws:iam::role/SageMakerRole",
                                       "--output-path", OUTPUT]),
    ("--role-arn", "give --role-arn", ["--instance-type", "ml.p4d.24xlarge", "--output-path", OUTPUT]),
    ("--output-path", "S3OutputPath pattern", [*needed()[:4], "--output-path", "/tmp/out"]),
    ("--output-path", "give --output-path", needed()[:4]),
    ("--instance-type", "not a SageMaker training instance type", needed("ml.p9.48xlarge")),
    ("--instance-type", "not a SageMaker training instance type", needed("p4d.24xlarge")),
    ("--instance-type", "needs --instance-type", needed()[2:]),
    ("--display-name", "TrainingJobName pattern", [*needed(), "--display-name", "llama_ft"]),
    ("--display-name", "TrainingJobName takes 1..63", [*needed(), "--display-name", "a" * 64]),
    ("--gpus", "(sagemaker takes --instance-type ml.TYPE)", [*needed(), "--gpus", "8"]),
    ("--compute", "not a sagemaker flag", [*needed(), "--compute", "gpu-cluster"]),
    ("--machine-type", "not a sagemaker flag", [*needed(), "--machine-type", "n1-standard-8"]),
    ("--volume-size", "at least 1", [*needed(), "--volume-size", "0"]),
    ("--max-runtime", "at least 1", [*needed(), "--max-runtime", "0"]),
])
def test_refusals_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], where: str, text: str,
                                          args: list[str]) -> None:
    code, out, err = spec(capsys, "--image", GPU["pytorch"], "--registry", REGISTRY, "--replicas", "2", *args,
                          "--", "python", "t.py")
    assert (code, out) == (2, ""), err
    assert err.count("\n") == 1 and err.startswith(f"{where}: ") and text in err, err


def test_cpu_build_on_gpu_instances_and_unpullable_images_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = spec(capsys, "--image", CPU, "--registry", REGISTRY, "--replicas", "2", *needed(),
                          "--", "python", "t.py")
    assert (code, out) == (2, "") and err.startswith("--instance-type: ") and "CPU build" in err, err
    code, _, err = spec(capsys, "--image", CPU, "--registry", REGISTRY, "--replicas", "2", *needed("ml.c5.xlarge"),
                        "--", "python", "t.py")
    assert code == 0, err
    code, out, err = spec(capsys, "--image", GPU["pytorch"], "--registry", "localhost:5000", "--replicas", "2",
                          *needed(), "--", "python", "t.py")
    assert (code, out) == (2, "") and "loopback" in err and err.count("\n") == 1, err


def test_other_platforms_refuse_sagemaker_flags(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["spec", "--platform", "jobset", "--image", GPU["pytorch"], "--registry", REGISTRY, "--replicas",
                 "2", "--role-arn", ROLE, "--", "python", "t.py"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "") and err.startswith("--role-arn: not a jobset flag; it is for sagemaker"), err
