"""`spec` knows which machines are arm64 (issue 46), generated from the tables: every machine carrying a GPU on
every platform with machine names (Vertex AI's and AI Platform's machine types, SageMaker's instance types, Azure's
VM sizes) x every variant of recipes/ goes through the spec checks in-process. A machine whose GPU is a Grace
superchip (jobs/data/gpus.yaml `grace`: GH200, GB200, GB300) is arm64, every other amd64; an image not built for
the machine's architecture is refused in one line naming the GPU, the architectures the image holds and a variant
that runs there, and an arm64-only image is refused on an x86 machine the same way. Fast: no Docker, no network.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
import yaml

from trainimg.cli.app import main
from trainimg.errors import UserInputError
from trainimg.jobs import sagemaker
from trainimg.jobs.clusterspec import cluster_spec
from trainimg.jobs.gpucheck import check_gpus, with_alternatives
from trainimg.jobs.images import facts_from_labels, facts_from_variant
from trainimg.jobs.machines import machines
from trainimg.jobs.shape import ImageFacts, SpecOptions
from trainimg.publish.lockfile import LockEntry
from trainimg.recipe.gpuarch import archs_of, runs_on
from trainimg.recipe.loading import load_recipes
from trainimg.runtime.contract import FRAMEWORK_LABEL, VARIANT_LABEL
from shipped import pick, shipped

# The shipped GPU PyTorch variant built for arm64 too, and one of the same CUDA line built for amd64 only
# (tests/shipped.py: chosen by their facts).
ARM_GPU = pick("pytorch", gpu=True, arch="arm64", buildable=False)
AMD_ONLY = next(v.name for v in shipped().variants if v.framework == "pytorch" and v.cuda == ARM_GPU.cuda
                and v.arch == ("amd64",))

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "builder" / "jobs" / "data"
RAW = yaml.safe_load((DATA / "gpus.yaml").read_text(encoding="utf-8"))
AZURE = yaml.safe_load((DATA / "azure_vm_sizes.yaml").read_text(encoding="utf-8"))["sizes"]
IMAGE = "europe-docker.pkg.dev/acme/ml/x:1"
ROLE = "arn:aws:iam::123456789012:role/service-role/SageMakerTrainer"


@cache
def variants() -> dict:
    return {v.name: v for v in load_recipes(ROOT / "recipes").variants}


def arch_of_gpu(gpu: str) -> str:
    return "arm64" if gpu in RAW["grace"] else "amd64"


def capability(gpu: str) -> tuple[int, int]:
    major, minor = RAW["gpus"][gpu].split(".")
    return int(major), int(minor)


def machines_with_gpus() -> list[tuple[str, str, str, dict]]:
    """(platform, machine, its GPU, the SpecOptions fields that name it) for every machine of every table that
    carries a GPU."""
    found = []
    for machine in machines().values():
        for accel, count in machine.carries:
            gpu = RAW["google"].get(accel)
            if gpu:
                found += [(p, machine.name, gpu, {"machine_type": machine.name, "accelerator": f"{accel}:{count}"})
                          for p in ("vertex", "aiplatform") if machine.runs_on(p)]
    for instance in sagemaker.gpu_table():
        found.append(("sagemaker", instance, RAW["sagemaker"][instance.rpartition(".")[0]],
                      {"platform_flags": {"instance_type": instance, "role_arn": ROLE,
                                          "output_path": "s3://acme/jobs"}}))
    found += [("azureml", size, gpu, {"platform_flags": {"vm_size": size, "compute": "gpu-cluster"}})
              for size, (gpu, _) in AZURE.items()]
    return found


def spec_refusal(platform: str, fields: dict, facts: ImageFacts) -> str | None:
    """The refusal line of `spec` (the GPU checks, where the machine is named and its GPU checked), or None."""
    opts = SpecOptions(platform=platform, image=IMAGE, replicas=2, facts=facts, command=("python", "t.py"),
                       **fields)
    try:
        check_gpus(opts) if platform in ("vertex", "aiplatform") else cluster_spec(opts)
    except UserInputError as err:
        assert "\n" not in str(err), err
        return str(err)
    return None


def facts(name: str) -> ImageFacts:
    found = with_alternatives((IMAGE, facts_from_variant(variants()[name])), variants())[1]
    assert found is not None
    return found


def fitting(variant: str, arch: str, gpu: str) -> list[str]:
    """The GPU variants of `variant`'s framework built for `arch` whose CUDA build runs on `gpu` (or is unknown)."""
    v = variants()[variant]
    out = []
    for name, other in sorted(variants().items()):
        archs = archs_of(other.framework, other.version, other.cuda)
        if (name != variant and other.framework == v.framework and other.gpu and arch in other.arch
                and (archs is None or runs_on(archs, capability(gpu)))):
            out.append(name)
    return out


MACHINES = machines_with_gpus()
FLAGS = {"vertex": "--accelerator", "aiplatform": "--accelerator", "sagemaker": "--instance-type",
         "azureml": "--vm-size"}  # the flag that names the job's GPU on each platform


@pytest.mark.parametrize("platform, machine, gpu, fields", MACHINES, ids=[f"{p}-{m}" for p, m, _, _ in MACHINES])
def test_every_variant_on_the_machine_is_refused_exactly_when_not_built_for_its_architecture(platform, machine,
                                                                                              gpu, fields):
    arch = arch_of_gpu(gpu)
    for name, v in sorted(variants().items()):
        said = spec_refusal(platform, fields, facts(name))
        if arch in v.arch:
            assert said is None or " only; " not in said, (machine, name, said)
            continue
        assert said is not None, (machine, name)
        flag, head = FLAGS[platform], (fields["accelerator"].split(":")[0] if "accelerator" in fields else machine)
        assert said.startswith(f"{flag}: {head} is {gpu}, "), said
        assert f"{name} holds {', '.join(v.arch)} only; " in said, said
        fits = fitting(name, arch, gpu)
        assert said.endswith(f"{' or '.join(fits[:2])} runs on it" if fits
                             else f"no variant here has an {arch} image"), said


def test_the_tables_name_the_platforms_arm64_machines():
    """Vertex A4X, SageMaker P6e-GB200, Azure ND GB200 v6: each in its table, each arm64 by its GPU."""
    arm = {(p, m) for p, m, gpu, _ in MACHINES if arch_of_gpu(gpu) == "arm64"}
    assert {("vertex", "a4x-highgpu-4g"), ("sagemaker", "ml.p6e-gb200.36xlarge"),
            ("azureml", "Standard_ND128isr_NDR_GB200_v6")} <= arm
    assert RAW["gpus"]["GH200"] == "9.0" and RAW["gpus"]["GB200"] == "10.0"


@pytest.mark.parametrize("platform, machine, gpu, fields", MACHINES, ids=[f"{p}-{m}" for p, m, _, _ in MACHINES])
def test_an_arm64_only_image_runs_only_on_arm64_machines(platform, machine, gpu, fields):
    """A local image's own architecture (its config) is the facts: an arm64 build on an x86 machine is refused,
    and on an arm64 machine it is not refused for its architecture."""
    found = facts_from_labels({FRAMEWORK_LABEL: "pytorch", VARIANT_LABEL: "team-arm"}, "arm64")
    assert found is not None and found.platforms == ("arm64",)
    said = spec_refusal(platform, fields, found)
    if arch_of_gpu(gpu) == "arm64":
        assert said is None or " only; " not in said, said
    else:
        assert said is not None and "team-arm holds arm64 only; " in said and "amd64 (x86-64) machines" in said, said


def test_what_the_lockfile_says_was_released_decides_over_the_recipe():
    """A variant whose arm64 image was never released (its lockfile entries: amd64's only) is refused on GB200."""
    v = variants()[ARM_GPU.name]
    entry = LockEntry(variant=v.name, recipe=v.source, tag=v.tag, image_id="sha256:" + "1" * 64, base_image="b",
                      base_digest="sha256:" + "2" * 64)
    released = facts_from_variant(v, [entry])
    assert released.platforms == ("amd64",) and facts_from_variant(v).platforms == ("amd64", "arm64")
    gb200 = next(f for p, m, _, f in MACHINES if p == "sagemaker" and "gb200" in m)
    said = spec_refusal("sagemaker", gb200, released)
    assert said is not None and f"{v.name} holds amd64 only" in said


def test_the_cli_says_it_in_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["spec", "--platform", "vertex", "--image", AMD_ONLY, "--registry",
                 "europe-docker.pkg.dev/acme/ml", "--replicas", "2", "--machine-type", "a4x-highgpu-4g",
                 "--accelerator", "NVIDIA_GB200:4", "--", "python", "x.py"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "") and err.count("\n") == 1, err
    assert err == ("--accelerator: NVIDIA_GB200 is GB200, a Grace superchip: its machines are arm64; "
                   f"{AMD_ONLY} holds amd64 only; {ARM_GPU.name} runs on it\n")
    code = main(["spec", "--platform", "vertex", "--image", ARM_GPU.name, "--registry",
                 "europe-docker.pkg.dev/acme/ml", "--replicas", "2", "--machine-type", "a4x-highgpu-4g",
                 "--accelerator", "NVIDIA_GB200:4", "--", "python", "x.py"])
    assert code == 0, capsys.readouterr().err
