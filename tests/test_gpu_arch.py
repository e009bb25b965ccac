"""GPUs against the image's CUDA architectures, and unknown machine names, generated from the tables.

Every GPU variant of recipes/ x every accelerator name of every platform (Vertex's and AI Platform's enums,
botocore's SageMaker instance types, the Azure VM size table) goes through `spec` in-process: it must be accepted
exactly when the GPU's compute capability (jobs/data/gpus.yaml, read raw) is one the variant's build runs on by the
one rule (recipe.gpuarch.runs_on, checked here against NVIDIA's own examples), and every refusal is one line naming
both capabilities. The tables must cover the platforms' real name lists (google-cloud-aiplatform's enum,
ml.v1.json, botocore's model), and a mistyped name on each table is refused with the name it meant.
Fast: no Docker, no network.
"""

from __future__ import annotations

import zipfile
from functools import cache
from pathlib import Path

import mlschema
import pytest
import yaml
from google.cloud import aiplatform_v1
from trainimg.cli.app import main
from trainimg.errors import UserInputError
from trainimg.jobs import sagemaker
from trainimg.jobs.clusterspec import cluster_spec
from trainimg.jobs.fields import accelerator_types
from trainimg.engine.base import ImageInfo
from trainimg.jobs.images import facts_from_variant, resolve_image
from trainimg.jobs.gpucheck import archs_from_labels, check_gpus, with_alternatives
from trainimg.jobs.machines import machines
from trainimg.jobs.shape import ImageFacts, SpecOptions
from trainimg.jobs.spec import job_spec
from trainimg.recipe.gpuarch import archs_of, describe, runs_on
from trainimg.recipe.loading import load_recipes
from trainimg.runtime.contract import CUDA_ARCHS_LABEL
from trainimg.runtime.manifest import torch_archs
from shipped import pick, shipped

ROOT = Path(__file__).resolve().parents[1]
# The shipped GPU PyTorch variants, by their facts (tests/shipped.py): a CUDA 13 one, and the CUDA 12 one that runs
# where CUDA 13 dropped the GPU.
CU13 = pick("pytorch", gpu=True)
CU12 = next(v for v in shipped().variants if v.framework == "pytorch" and (v.cuda or "").startswith("12."))
DATA = ROOT / "builder" / "jobs" / "data"
RAW = yaml.safe_load((DATA / "gpus.yaml").read_text(encoding="utf-8"))
AZURE = yaml.safe_load((DATA / "azure_vm_sizes.yaml").read_text(encoding="utf-8"))["sizes"]
IMAGE = "europe-docker.pkg.dev/acme/ml/x:1"
ROLE = "arn:aws:iam::123456789012:role/service-role/SageMakerTrainer"
AZURE_CPU = ("Standard_D16s_v5", "Standard_E8s_v3", "Standard_F72s_v2")


@cache
def variants() -> dict:
    return {v.name: v for v in load_recipes(ROOT / "recipes").variants}


def gpu_variants() -> list[str]:
    return sorted(name for name, v in variants().items() if v.cuda)


def facts(name: str) -> ImageFacts:
    found = with_alternatives((IMAGE, facts_from_variant(variants()[name])), variants())[1]
    assert found is not None
    return found


def capability(platform: str, name: str) -> tuple[int, int] | None:
    """From the raw tables: the compute capability of the GPU `name` carries on `platform`, None for none."""
    if platform in ("vertex", "aiplatform"):
        gpu = RAW["google"][name]
    elif platform == "sagemaker":
        gpu = RAW["sagemaker"].get(name.rpartition(".")[0])
    else:
        gpu = {k.lower(): v[0] for k, v in AZURE.items()}.get(name.lower())
    if gpu is None:
        return None
    major, minor = RAW["gpus"][gpu].split(".")
    return int(major), int(minor)


def gpu_arch_runs(platform: str, name: str, variant: str) -> bool:
    """Whether `variant`'s build runs on the GPU of `name` (True where there is no CUDA GPU to check)."""
    v = variants()[variant]
    cc = capability(platform, name)
    archs = archs_of(v.framework, v.version, v.cuda)
    return cc is None or archs is None or runs_on(archs, cc)


def gpu_of(platform: str, name: str) -> str | None:
    """From the raw tables: the GPU `name` carries on `platform`, None for none."""
    if platform in ("vertex", "aiplatform"):
        return RAW["google"].get(name)
    if platform == "sagemaker":
        return RAW["sagemaker"].get(name.rpartition(".")[0])
    return {k.lower(): v[0] for k, v in AZURE.items()}.get(name.lower())


def cpu_fits(platform: str, name: str, variant: str) -> bool:
    """Whether `variant` is built for the CPU architecture of the machines carrying `name`'s GPU (its `grace`
    superchips are arm64: tests/test_arch_spec.py checks that rule on its own)."""
    gpu = gpu_of(platform, name)
    return gpu is None or ("arm64" if gpu in RAW["grace"] else "amd64") in variants()[variant].arch


# NVIDIA's examples (CUDA C++ Programming Guide, "Binary Compatibility", "Application Compatibility").
@pytest.mark.parametrize(("archs", "cc", "runs"), [
    (("sm_80",), (8, 6), True),  # a cubin for 8.0 runs on 8.6
    (("sm_86",), (8, 0), False),  # ... not the other way round
    (("sm_90",), (10, 0), False),  # never across a major
    (("compute_90",), (10, 0), True),  # PTX is JIT-compiled for newer GPUs
    (("compute_90",), (8, 9), False),  # ... never older ones
    (("sm_70", "sm_80"), (7, 5), True),
    (("sm_75", "sm_120"), (7, 0), False),
])
def test_the_rule_follows_nvidias_examples(archs: tuple[str, ...], cc: tuple[int, int], runs: bool) -> None:
    assert runs_on(archs, cc) is runs


def test_every_gpu_variant_has_its_architectures() -> None:
    assert gpu_variants()
    for name in gpu_variants():
        assert facts(name).archs, name


def test_the_tables_cover_every_name_the_platforms_accept() -> None:
    vertex = {t.name for t in aiplatform_v1.AcceleratorType if t.name != "ACCELERATOR_TYPE_UNSPECIFIED"}
    ml = mlschema.schemas()["GoogleCloudMlV1__AcceleratorConfig"]["properties"]["type"]["enum"]
    assert vertex | set(ml) - {"ACCELERATOR_TYPE_UNSPECIFIED"} <= set(RAW["google"])
    assert set(accelerator_types()["vertex"]) | set(accelerator_types()["aiplatform"]) <= set(RAW["google"])
    for name in sagemaker.gpu_table():
        assert name.rpartition(".")[0] in RAW["sagemaker"], name
    used = {g for g in RAW["google"].values() if g} | set(RAW["sagemaker"].values()) | {g for g, _ in AZURE.values()}
    assert used <= set(RAW["gpus"]), used - set(RAW["gpus"])


def google_machine(platform: str, name: str) -> tuple[str, str] | None:
    """A machine type that carries `name` on `platform`, and the TYPE:COUNT to ask for, from the machine table."""
    for machine in machines().values():
        for carried, count in machine.carries:
            if carried == name and machine.runs_on(platform):
                return machine.name, f"{name}:{count}"
        if machine.series is not None and name in machine.series.accelerators and machine.vcpus == 4:
            return machine.name, f"{name}:1"
    return None


def outcome(opts: SpecOptions) -> str | None:
    """None when spec writes the job; the refusal line when it refuses it."""
    try:
        if opts.platform in ("vertex", "aiplatform"):
            job_spec(opts)
        else:
            cluster_spec(opts)
    except UserInputError as err:
        assert "\n" not in str(err), err
        return str(err)
    return None


def cases() -> list[tuple[str, str, str]]:
    """platform x accelerator name x GPU variant."""
    names = [(p, n) for p in ("vertex", "aiplatform") for n in accelerator_types()[p]]
    names += [("sagemaker", t) for t in sagemaker.instance_types()]
    names += [("azureml", size) for size in [*AZURE, *AZURE_CPU]]
    return [(p, n, v) for p, n in names for v in gpu_variants()]


def options(platform: str, name: str, variant: str) -> SpecOptions | None:
    common = {"platform": platform, "image": IMAGE, "replicas": 2, "facts": facts(variant),
              "command": ("python", "t.py")}
    if platform == "sagemaker":
        return SpecOptions(**common, platform_flags={"instance_type": name, "role_arn": ROLE,
                                                     "output_path": "s3://acme/jobs"})
    if platform == "azureml":
        return SpecOptions(**common, platform_flags={"vm_size": name, "compute": "gpu-cluster"})
    placed = google_machine(platform, name)
    if placed is None:
        return None  # a name no machine type carries (K80, TPU v4): tests/test_machines.py refuses it
    return SpecOptions(**common, machine_type=placed[0], accelerator=placed[1])


def gpu_refusal(opts: SpecOptions) -> str | None:
    try:
        check_gpus(opts)
    except UserInputError as err:
        return str(err)
    return None


def test_every_variant_on_every_accelerator_of_every_platform() -> None:
    checked = refused = 0
    for platform, name, variant in cases():
        opts = options(platform, name, variant)
        if opts is None:  # no machine type carries it, so spec refuses it on the machine first: the GPU check alone
            opts = SpecOptions(platform=platform, image=IMAGE, replicas=2, facts=facts(variant), accelerator=name)
        said = outcome(opts) if opts.machine_type else gpu_refusal(opts)
        runs = gpu_arch_runs(platform, name, variant)
        checked += 1
        if not cpu_fits(platform, name, variant):  # refused first for the CPU architecture (test_arch_spec.py)
            assert said is not None and " only; " in said, (platform, name, variant, said)
            continue
        assert (said is None) is runs, (platform, name, variant, said)
        if said is not None:
            refused += 1
            cc = capability(platform, name)
            assert cc is not None and f"is compute capability {cc[0]}.{cc[1]}" in said, said
            assert f"{variant} runs on {describe(facts(variant).archs or ())}" in said, said
            fits = [v for v in gpu_variants() if variants()[v].framework == variants()[variant].framework
                    and gpu_arch_runs(platform, name, v)]
            assert (fits[0] in said) if fits else "no variant here runs on it" in said, said
    print(f"\n{checked} platform x accelerator x variant specs, {refused} refused")
    assert refused and checked > 1000


def typo(name: str, at: int) -> str:
    return name[:at] + name[at + 1:]


@pytest.mark.parametrize("platform", ["vertex", "sagemaker", "azureml"])
def test_a_mistyped_name_is_refused_with_the_name_it_meant(platform: str) -> None:
    if platform == "vertex":
        known, flag = sorted(machines()), "--machine-type"
    elif platform == "sagemaker":
        known, flag = sorted(sagemaker.gpu_table()), "--instance-type"
    else:
        known, flag = sorted(AZURE), "--vm-size"
    for name in known:
        # Vertex: a series no table knows; else a letter dropped after the part the grammar checks (ml.p, Standard_N)
        wrong = "x" + name[1:] if platform == "vertex" else typo(name, (len(name) + 10) // 2)
        if wrong.lower() in {k.lower() for k in known}:
            continue
        if platform == "vertex":
            opts = SpecOptions(platform=platform, image=IMAGE, replicas=1, machine_type=wrong)
        elif platform == "sagemaker":
            opts = SpecOptions(platform=platform, image=IMAGE, replicas=1, command=("python", "t.py"),
                               platform_flags={"instance_type": wrong, "role_arn": ROLE,
                                               "output_path": "s3://acme/jobs"})
        else:
            opts = SpecOptions(platform=platform, image=IMAGE, replicas=1, command=("python", "t.py"),
                               platform_flags={"vm_size": wrong, "compute": "gpu-cluster"})
        said = outcome(opts)
        assert said is not None and said.startswith(f"{flag}: ") and "did you mean" in said, (wrong, said)
        assert name in said.partition("did you mean")[2], (wrong, said)


def test_cpu_names_outside_the_gpu_tables_still_pass() -> None:
    for size in AZURE_CPU:
        assert outcome(SpecOptions(platform="azureml", image=IMAGE, replicas=1, command=("python", "t.py"),
                                   platform_flags={"vm_size": size, "compute": "gpu-cluster"})) is None
    for machine in ("e2-standard-8", "n2-highmem-16", "c3-standard-88", "n1-standard-1"):
        assert outcome(SpecOptions(platform="vertex", image=IMAGE, replicas=1, machine_type=machine)) is None


@pytest.mark.parametrize("args", [
    ["--platform", "vertex", "--machine-type", "n1-standard-8", "--accelerator", "NVIDIA_TESLA_V100:1"],
    ["--platform", "sagemaker", "--instance-type", "ml.p3.2xlarge", "--role-arn", ROLE, "--output-path", "s3://a/b"],
    ["--platform", "azureml", "--vm-size", "Standard_NC6s_v3", "--compute", "gpu-cluster"],
])
def test_the_issues_cases_exit_2_naming_a_variant_that_runs(capsys: pytest.CaptureFixture[str],
                                                             args: list[str]) -> None:
    code = main(["spec", "--image", CU13.name, "--registry", "europe-docker.pkg.dev/acme/ml", "--replicas", "1",
                 *args, "--", "python", "x.py"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, ""), err
    assert err.count("\n") == 1 and "compute capability 7.0" in err and "CUDA 13 dropped" in err, err
    assert f"{CU12.name} runs on it" in err, err


@pytest.mark.parametrize("args", [["--platform", "vertex", "--machine-type", "banana"],
                                  ["--platform", "azureml", "--vm-size", "Standard_ND96_H100", "--compute", "c1"]])
def test_unknown_machine_names_exit_2(capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    code = main(["spec", "--image", CU13.name, "--registry", "europe-docker.pkg.dev/acme/ml", "--replicas", "1",
                 *args, "--", "python", "x.py"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "") and err.count("\n") == 1, err
    assert args[3] in err, err


def test_the_torch_wheels_own_arch_list_is_the_compat_data(tmp_path: Path) -> None:
    """The manifest reads what the build holds (the image's `trainimg.cuda.archs` label) from libtorch_cuda.so,
    without importing torch; on the real torch 2.14.1 CUDA 13 wheel it must say what compat data says."""
    wheel = next(iter(sorted(Path("/opt/pypi-more/files").glob("torch-2.14.1-*.whl"))), None)
    if wheel is None:
        pytest.fail("torch 2.14.1 wheel not on this machine: CI's machines ship it")
    with zipfile.ZipFile(wheel) as zf:
        zf.extract("torch/lib/libtorch_cuda.so", tmp_path)
    read = torch_archs(str(tmp_path / "torch"))
    assert read is not None and tuple(read) == archs_of("pytorch", "2.14.1", "13.0"), read
    assert torch_archs(str(tmp_path / "nothing")) is None  # a CPU build has no libtorch_cuda.so


def test_an_images_arch_label_comes_before_compat_data() -> None:
    labels = {"trainimg.framework": "pytorch", "trainimg.version.framework": "2.14.1",
              "trainimg.version.cuda": "13.0.96"}
    assert archs_from_labels(labels) == archs_of("pytorch", "2.14.1", "13.0")
    assert archs_from_labels({**labels, CUDA_ARCHS_LABEL: "sm_80,compute_90"}) == ("sm_80", "compute_90")
    assert archs_from_labels({"trainimg.framework": "pytorch", "trainimg.version.cuda": "none"}) is None


def test_a_local_image_is_checked_by_its_label_and_told_a_variant_that_runs() -> None:
    """A reference to a local image: its labels give the architectures (the build's own list wins), and the refusal
    still names a variant that runs on the GPU."""
    labels = {"trainimg.framework": "pytorch", "trainimg.variant": CU13.name,
              "trainimg.version.framework": CU13.version, "trainimg.version.cuda": f"{CU13.cuda}.86",
              CUDA_ARCHS_LABEL: "sm_75,sm_80,sm_86,sm_90,sm_100,sm_120"}
    ref = f"europe-docker.pkg.dev/acme/ml/{CU13.tag}"
    image, found = resolve_image(ref, variants=variants(), lock={}, registry=None, framework=None,
                                 inspect=lambda _: ImageInfo(id="sha256:" + "0" * 64, labels=labels))
    assert found is not None and found.archs == tuple(labels[CUDA_ARCHS_LABEL].split(","))
    said = outcome(SpecOptions(platform="vertex", image=image, replicas=1, machine_type="n1-standard-8",
                               accelerator="NVIDIA_TESLA_V100:1", facts=found))
    assert said is not None and f"{CU12.name} runs on it" in said, said
