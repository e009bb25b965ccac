"""`trainimg spec` for the cluster platforms (TrainJob, PyTorchJob, TFJob, JobSet, Slurm) as a user runs it: a
generated flag matrix whose every manifest passes its real consumers (tests/k8sconsumers.py: the CRDs' schemas and
CEL rules, kubernetes-validate, the Kubeflow trainer models) and whose every script passes ``bash -n``; the
launcher command each platform needs; and the refusals, each one line and exit 2, before anything queues.

The real `sbatch` reads these scripts in tests/test_slurm_real.py; the writers' own edge cases are in
tests/test_k8s_specs.py. The CLI runs in this process (`cli.app.main`), so the matrix stays fast.
"""

from __future__ import annotations

import itertools
import subprocess

import pytest
import yaml
from k8sconsumers import check
from shipped import pick

from trainimg.cli.app import main
from trainimg.jobs.clusterspec import CLUSTER_PLATFORMS
from trainimg.jobs.slurm import CONTAINER_RUNTIMES
from trainimg.runtime.contract import SLURM
from trainimg.runtime.topology import refusal

REGISTRY = "europe-docker.pkg.dev/acme/ml"
# The shipped variants, by their facts (tests/shipped.py): the CPU PyTorch one, each framework's GPU one.
CPU = pick("pytorch", gpu=False).name
GPU = {fw: pick(fw, gpu=True).name for fw in ("pytorch", "jax", "tensorflow")}


#: The platforms whose specs the matrix below hands to tests/k8sconsumers.py or bash; Azure ML's command jobs go to
#: azure-ai-ml's load_job in tests/test_azureml_spec.py.
K8S_OR_SLURM = tuple(p for p in CLUSTER_PLATFORMS if p not in ("azureml", "sagemaker"))
#: The platforms that take --gpus; SageMaker's instance type says its GPUs (tests/test_sagemaker_spec.py).
BY_GPUS = tuple(p for p in CLUSTER_PLATFORMS if p != "sagemaker")
#: What a platform needs besides the shared flags: Azure ML names its compute cluster.
NEEDS = {"azureml": ("--compute", "gpu-cluster")}


def spec(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["spec", *args])
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys: pytest.CaptureFixture[str], where: str, text: str, *args: str) -> None:
    code, out, err = spec(capsys, *args)
    assert (code, out) == (2, ""), err
    assert err.count("\n") == 1 and err.startswith(f"{where}: ") and text in err, err


def matrix() -> list[tuple[str, str, int, int, bool]]:
    """platform x framework x nodes x GPUs x (program | conformance), less what the runtime's table refuses
    (`topology.refusal`: TensorFlow where no TF_CONFIG is given; tests/test_spec_flags.py checks those refusals)."""
    cases = itertools.product(K8S_OR_SLURM, sorted(GPU), (1, 2, 4), (0, 1, 8), (False, True))
    return [c for c in cases if refusal(c[0], c[1]) is None]


def test_every_generated_spec_is_accepted_by_its_consumer(capsys: pytest.CaptureFixture[str]) -> None:
    checked = {platform: 0 for platform in K8S_OR_SLURM}
    for platform, framework, nodes, gpus, conformance in matrix():
        program = ["--conformance"] if conformance else ["--", "python", "train.py", "--epochs", "3"]
        code, out, err = spec(capsys, "--platform", platform, "--image", GPU[framework], "--registry", REGISTRY,
                              "--replicas", str(nodes), "--gpus", str(gpus), *program)
        assert code == 0, (platform, framework, nodes, gpus, err)
        assert f"{REGISTRY}/trainimg/" in out
        if platform == SLURM:
            assert subprocess.run(["bash", "-n"], input=out, text=True).returncode == 0, out
            assert f"--nodes={nodes}" in out and f"--ntasks-per-node={gpus or 1}" in out
        else:
            for manifest in yaml.safe_load_all(out):
                assert check(manifest), manifest
        checked[platform] += 1
    assert all(n >= 36 for n in checked.values()), checked
    print(f"specs accepted by their consumers: {checked}")


@pytest.mark.parametrize("runtime", CONTAINER_RUNTIMES)
def test_slurm_container_runtimes(capsys: pytest.CaptureFixture[str], runtime: str) -> None:
    code, out, err = spec(capsys, "--platform", "slurm", "--image", GPU["pytorch"], "--registry", REGISTRY,
                          "--replicas", "2", "--gpus", "8", "--container-runtime", runtime, "--partition", "gpu",
                          "--", "python", "train.py")
    assert code == 0, err
    assert "#SBATCH --partition=gpu" in out and "#SBATCH --gpus-per-node=8" in out
    # srun starts the 8 tasks a node: the launcher is told no process count of its own.
    assert "--nproc-per-node" not in out and "trainimg-launch --framework pytorch -- python train.py" in out


def test_launcher_gets_a_process_count_only_where_the_platform_gives_none(capsys: pytest.CaptureFixture[str]) -> None:
    commands = {}
    for platform in BY_GPUS:
        code, out, err = spec(capsys, "--platform", platform, "--image", GPU["pytorch"], "--registry", REGISTRY,
                              "--replicas", "2", "--gpus", "4", *NEEDS.get(platform, ()), "--", "python", "t.py")
        assert code == 0, err
        commands[platform] = "--nproc-per-node 4" in out or "- --nproc-per-node\n        - '4'" in out or \
            "--nproc-per-node\n" in out
    # TF_CONFIG and a JobSet say nothing of processes per node; a PyTorch program there needs the count.
    assert commands == {"trainjob": False, "pytorchjob": False, "tfjob": True, "jobset": True, "slurm": False,
                        "azureml": False}


@pytest.mark.parametrize("platform", BY_GPUS)
def test_cpu_build_given_gpus_is_refused_before_it_queues(capsys: pytest.CaptureFixture[str], platform: str) -> None:
    refused(capsys, "--gpus", "CPU", "--platform", platform, "--image", CPU, "--registry", REGISTRY,
            "--replicas", "2", "--gpus", "8", *NEEDS.get(platform, ()), "--", "python", "t.py")


@pytest.mark.parametrize("platform", ["vertex", "aiplatform"])
def test_cpu_build_given_accelerators_is_refused_on_the_cloud_too(capsys: pytest.CaptureFixture[str],
                                                                   platform: str) -> None:
    """The issue's example: the CPU variant on a3-highgpu-8g with 8 H100s (Vertex accepted it)."""
    accelerator = "NVIDIA_H100_80GB:8" if platform == "vertex" else "NVIDIA_TESLA_V100:8"
    machine = "a3-highgpu-8g" if platform == "vertex" else "n1-highmem-96"
    refused(capsys, "--accelerator", "CPU", "--platform", platform, "--image", CPU, "--registry", REGISTRY,
            "--replicas", "2", "--machine-type", machine, "--accelerator", accelerator, "--", "python", "t.py")


@pytest.mark.parametrize(("platform", "where", "text", "extra"), [
    ("jobset", "--accelerator", "--gpus", ["--accelerator", "NVIDIA_TESLA_T4:1"]),
    ("slurm", "--machine-type", "not a slurm flag", ["--machine-type", "n1-standard-8"]),
    ("tfjob", "--partition", "not a tfjob flag", ["--partition", "gpu"]),
    ("slurm", "--namespace", "not a slurm flag", ["--namespace", "ml"]),
    ("pytorchjob", "--ps", "not a pytorchjob flag", ["--ps", "1"]),
    ("trainjob", "--format", "it is for vertex, aiplatform", ["--format", "rest"]),
    ("jobset", "--gpus", "at least 0", ["--gpus", "-1"]),
    ("pytorchjob", "--replicas", "at least 1", ["--replicas", "0"]),
])
def test_flags_of_another_platform_are_refused(capsys: pytest.CaptureFixture[str], platform: str, where: str,
                                               text: str, extra: list[str]) -> None:
    args = ["--platform", platform, "--image", GPU["pytorch"], "--registry", REGISTRY]
    if "--replicas" not in extra:
        args += ["--replicas", "2"]
    refused(capsys, where, text, *args, *extra, "--", "python", "t.py")


def test_program_and_image_refusals(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--platform", "jobset", "--replicas", "2"]
    refused(capsys, "command", "a cluster job runs a program", *base, "--image", GPU["pytorch"], "--registry",
            REGISTRY)
    refused(capsys, "--args", "need the program", *base, "--image", GPU["pytorch"], "--registry", REGISTRY,
            "--args=--epochs", "--args=3")
    refused(capsys, "--image", "Docker Hub", *base, "--image", "trainimg/pytorch:2.13-cpu", "--framework", "pytorch",
            "--", "python", "t.py")
    refused(capsys, "--image", "loopback", *base, "--image", "localhost:5000/trainimg/pytorch:2.13.0-cpu-py3.11",
            "--framework", "pytorch", "--", "python", "t.py")
    refused(capsys, "--image", "tfjob", "--platform", "trainjob", "--image", GPU["tensorflow"], "--registry",
            REGISTRY, "--replicas", "2", "--", "python", "t.py")
