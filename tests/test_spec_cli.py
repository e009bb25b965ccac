"""`trainimg spec` as a user runs it: which image a job gets (variant + registry, images.lock, a local image's labels,
--framework), the gcloud form, and the AI Platform shutdown line. The bodies themselves are checked against the real
clients in tests/test_clients.py.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
import yaml
from brokenimages import TestImages
from conftest import LOCAL_BASE, ROOT, trainimg
from google.cloud import aiplatform_v1

from trainimg.jobs.node import shm_note

TF = "tensorflow-2.21.0-cu125-py3.11"
TF_TAG = "trainimg/tensorflow:2.21.0-cu125-py3.11"
REGISTRY = "europe-docker.pkg.dev/acme/ml"
PULLABLE = f"{REGISTRY}/{TF_TAG}"
SHAPE = ["--replicas", "2", "--machine-type", "n1-standard-16", "--accelerator", "NVIDIA_TESLA_T4:4"]


def spec(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["trainimg", "spec", *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          check=False)


def one_line_error(result: subprocess.CompletedProcess[str], where: str, text: str) -> None:
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"{where}: ") and text in result.stderr


def pool0(result: subprocess.CompletedProcess[str]) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["jobSpec"]["workerPoolSpecs"][0]


def test_variant_with_registry_gives_the_pushed_reference_and_the_recipe_facts() -> None:
    pool = pool0(spec("--platform", "vertex", "--image", TF, "--registry", REGISTRY, *SHAPE, "--", "python", "t.py"))
    assert pool["containerSpec"]["imageUri"] == PULLABLE
    assert pool["containerSpec"]["command"] == [
        "trainimg-launch", "--nproc-per-node", "4", "--framework", "tensorflow", "--", "python", "t.py"]


def test_variant_alone_is_a_local_tag_and_refused() -> None:
    one_line_error(spec("--platform", "vertex", "--image", TF, *SHAPE), "--image", "cannot pull")


def test_variant_from_the_release_lockfile(tmp_path: Path) -> None:
    entry = {"variant": TF, "recipe": "recipes/tensorflow.yaml", "tag": TF_TAG, "image_id": "sha256:" + "a" * 64,
             "base_image": "nvidia/cuda:12.5.1-base-ubuntu22.04", "base_digest": "sha256:" + "b" * 64,
             "pushed": {PULLABLE: "sha256:" + "c" * 64, f"{REGISTRY}/trainimg/tensorflow:2.21-cu125": "sha256:" + "c" * 64}}
    lock = tmp_path / "images.lock"
    lock.write_text(json.dumps({"format": 1, "variants": {TF: entry}}))
    pool = pool0(spec("--platform", "vertex", "--image", TF, "--lock", str(lock), *SHAPE, "--", "python", "t.py"))
    assert pool["containerSpec"]["imageUri"] == PULLABLE  # the immutable tag, not the moving one
    assert "--framework" in pool["containerSpec"]["command"]
    # outside a checkout (no recipes), the lockfile still gives the reference
    outside = spec("--platform", "vertex", "--image", TF, "--lock", str(lock), *SHAPE, cwd=tmp_path)
    assert pool0(outside)["containerSpec"]["imageUri"] == PULLABLE


def test_unknown_variant_name_is_an_error_outside_a_checkout(tmp_path: Path) -> None:
    one_line_error(spec("--platform", "vertex", "--image", "pytorch-9.9-cu999", *SHAPE, cwd=tmp_path), "--image",
                   "unknown variant 'pytorch-9.9-cu999'")


def test_remote_reference_needs_framework(docker_engine: str) -> None:
    """A reference no local image answers for (spec asks the engine first) needs --framework."""
    one_line_error(spec("--platform", "vertex", "--image", PULLABLE, *SHAPE), "--image", "add --framework")
    pool = pool0(spec("--platform", "vertex", "--image", PULLABLE, "--framework", "tensorflow", *SHAPE,
                      "--", "python", "t.py"))
    assert pool["containerSpec"]["command"][3:5] == ["--framework", "tensorflow"]
    one_line_error(spec("--platform", "vertex", "--image", PULLABLE, "--framework", "tensorflow", *SHAPE,
                        "--reduction-servers", "2"), "--reduction-servers", "cannot tell whether")


@pytest.fixture(scope="module")
def labelled(docker_engine: str) -> Iterator[TestImages]:
    client = docker.from_env(timeout=600)
    made = TestImages(client, LOCAL_BASE)
    yield made
    made.remove_all()  # by image ID, forced: the registry-qualified tags go with it
    client.close()


def pushed_name(images: TestImages, tag: str) -> str:
    """`tag` (a local test image) also tagged under REGISTRY, as the image is after a push: a reference a cluster
    could pull, whose labels the local engine still has."""
    repository, _, version = f"{REGISTRY}/{tag}".rpartition(":")
    images.client.images.get(tag).tag(repository, tag=version)
    return f"{repository}:{version}"


def test_local_reference_reads_the_image_labels(labelled: TestImages) -> None:
    cpu = pushed_name(labelled, labelled.build(
        "spec-cpu", [], labels={"trainimg.framework": "tensorflow", "trainimg.variant": "tf-cpu",
                                "trainimg.version.nccl": "none", "trainimg.reduction-server": "none"},
        labels_file=False))
    pool = pool0(spec("--platform", "vertex", "--image", cpu, *SHAPE, "--", "python", "t.py"))
    assert pool["containerSpec"]["command"][3:5] == ["--framework", "tensorflow"]
    # a CPU image's labels say it has no NCCL: no Reduction Server for it
    one_line_error(spec("--platform", "vertex", "--image", cpu, *SHAPE, "--reduction-servers", "2"),
                   "--reduction-servers", "no NCCL")
    gpu = pushed_name(labelled, labelled.build(
        "spec-gpu", [], labels={"trainimg.framework": "pytorch", "trainimg.version.nccl": "2.27.7",
                                "trainimg.reduction-server": "wanted", "trainimg.absent": ""}, labels_file=False))
    # its labels name the framework and say it has NCCL: the Reduction Server's pool is there, with its 2 replicas
    pools = json.loads(spec("--platform", "vertex", "--image", gpu, *SHAPE, "--reduction-servers", "2", "--",
                            "python", "t.py").stdout)["jobSpec"]["workerPoolSpecs"]
    assert pools[0]["containerSpec"]["command"][3:5] == ["--framework", "pytorch"]
    assert "reductionserver" in pools[2]["containerSpec"]["imageUri"] and int(pools[2]["replicaCount"]) == 2, pools
    plain = pushed_name(labelled, labelled.build("spec-plain", []))
    one_line_error(spec("--platform", "vertex", "--image", plain, *SHAPE), "--image", "no trainimg labels")


@pytest.mark.parametrize("platform", ["vertex", "aiplatform"])
def test_a_cpu_build_gets_no_accelerator(labelled: TestImages, platform: str) -> None:
    """The labels a CPU build carries (`trainimg.version.cuda=none`, read back; or recipe labels without a CUDA
    one) refuse any accelerator, conformance job or not; a CPU machine is fine."""
    built = pushed_name(labelled, labelled.build("spec-cpu-built", [], labels_file=False, labels={
        "trainimg.framework": "pytorch", "trainimg.version.cuda": "none", "trainimg.version.nccl": "none"}))
    asked = pushed_name(labelled, labelled.build("spec-cpu-asked", [], labels_file=False, labels={
        "trainimg.framework": "pytorch", "trainimg.recipe.python": "3.11", "trainimg.recipe.framework": "2.13.0"}))
    gpu_shapes = (["--machine-type", "a3-highgpu-8g", "--accelerator", "NVIDIA_H100_80GB:8"]
                  if platform == "vertex" else ["--machine-type", "n1-standard-16", "--accelerator", "NVIDIA_TESLA_T4:4"])
    for image in (built, asked):
        for extra in ([], ["--conformance"]):
            one_line_error(spec("--platform", platform, "--image", image, "--replicas", "2", *gpu_shapes, *extra),
                           "--accelerator", "is a CPU build")
        assert spec("--platform", platform, "--image", image, "--replicas", "2", "--machine-type", "n1-standard-16",
                    "--conformance").returncode == 0


def test_gcloud_format_is_yaml_custom_job_spec() -> None:
    result = spec("--platform", "vertex", "--image", TF, "--registry", REGISTRY, *SHAPE, "--format", "gcloud",
                  "--reduction-servers", "2", "--", "python", "t.py")
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(result.stdout)
    parsed = aiplatform_v1.CustomJobSpec.from_json(json.dumps(config), ignore_unknown_fields=False)
    assert [p.replica_count for p in parsed.worker_pool_specs] == [1, 1, 2]
    assert "--reduction-server" in config["workerPoolSpecs"][0]["containerSpec"]["command"]


def test_aiplatform_spec_says_the_service_is_shut_down() -> None:
    result = spec("--platform", "aiplatform", "--image", TF, "--registry", REGISTRY, *SHAPE, "--format", "gcloud")
    assert result.returncode == 0
    assert result.stderr == ("trainimg: AI Platform Training was shut down on 2025-01-31; this spec is for old "
                             "tooling that still reads its format (new jobs: --platform vertex)\n"
                             f"trainimg: {shm_note('aiplatform', 4)}\n")  # 4 GPUs a replica: see test_shm_table
    assert set(yaml.safe_load(result.stdout)) == {"trainingInput"}
    vertex = trainimg("spec", "--platform", "vertex", "--image", TF, "--registry", REGISTRY, *SHAPE).stderr
    assert vertex == f"trainimg: {shm_note('vertex', 4)}\n"


# --- refused before anything queues (the cases as a new user types them) ------------------------------

CPU = "pytorch-2.13.0-cpu-py3.11"
CPU_SHAPE = ["--replicas", "2", "--machine-type", "n1-standard-8"]


@pytest.mark.parametrize("image", ["trainimg/pytorch:2.13.0-cpu-py3.11", "trainimg/pytorch:2.13-cpu"])
@pytest.mark.parametrize("framework", [[], ["--framework", "pytorch"]])
def test_a_variant_local_tag_or_moving_tag_names_the_variant_to_use(image: str, framework: list[str]) -> None:
    result = spec("--platform", "vertex", "--image", image, *framework, *CPU_SHAPE, "--", "python", "t.py")
    one_line_error(result, "--image", "names no registry, so every node would look for it on Docker Hub")
    assert f"use --image {CPU} --registry R" in result.stderr


@pytest.mark.parametrize("image", ["localhost:5000/trainimg/pytorch:2.13.0-cpu-py3.11",
                                   "127.0.0.1:5005/trainimg/pytorch:2.13.0-cpu-py3.11",
                                   "localhost/team/trainer:1"])
def test_a_loopback_reference_is_refused(image: str) -> None:
    one_line_error(spec("--platform", "vertex", "--image", image, "--framework", "pytorch", *CPU_SHAPE,
                        "--", "python", "t.py"), "--image", "which no cluster node can reach")


def test_a_variant_pushed_to_a_loopback_registry_is_refused(tmp_path: Path) -> None:
    one_line_error(spec("--platform", "vertex", "--image", TF, "--registry", "localhost:5000", *SHAPE),
                   "--registry", "loopback registry localhost:5000")
    entry = {"variant": TF, "recipe": "recipes/tensorflow.yaml", "tag": TF_TAG, "image_id": "sha256:" + "a" * 64,
             "base_image": "nvidia/cuda:12.5.1-base-ubuntu22.04", "base_digest": "sha256:" + "b" * 64,
             "pushed": {f"localhost:5000/{TF_TAG}": "sha256:" + "c" * 64}}
    lock = tmp_path / "images.lock"
    lock.write_text(json.dumps({"format": 1, "variants": {TF: entry}}))
    result = spec("--platform", "vertex", "--image", TF, "--lock", str(lock), *SHAPE)
    one_line_error(result, "--image", "loopback registry localhost:5000")
    assert f"trainimg release {TF} --registry R" in result.stderr
    # a loopback push beside a reachable one: the reachable one, not "pushed to several registries"
    entry["pushed"][PULLABLE] = "sha256:" + "c" * 64
    lock.write_text(json.dumps({"format": 1, "variants": {TF: entry}}))
    pool = pool0(spec("--platform", "vertex", "--image", TF, "--lock", str(lock), *SHAPE, "--", "python", "t.py"))
    assert pool["containerSpec"]["imageUri"] == PULLABLE


@pytest.mark.parametrize("platform", ["vertex", "aiplatform"])
def test_args_without_a_program_are_refused(platform: str) -> None:
    result = spec("--platform", platform, "--image", TF, "--registry", REGISTRY, *SHAPE, "--args=--epochs",
                  "--args=3")
    one_line_error(result, "--args", "would run '--epochs' as its program")
    assert pool0(spec("--platform", "vertex", "--image", TF, "--registry", REGISTRY, *SHAPE, "--args=--epochs",
                      "--args=3", "--", "python", "t.py"))["containerSpec"]["args"] == ["--epochs", "3"]


@pytest.mark.parametrize("platform", ["vertex", "aiplatform"])
def test_a_cpu_variant_gets_no_accelerator(platform: str) -> None:
    machine = (["--machine-type", "a3-highgpu-8g", "--accelerator", "NVIDIA_H100_80GB:8"] if platform == "vertex"
               else ["--machine-type", "n1-standard-16", "--accelerator", "NVIDIA_TESLA_T4:4"])
    for extra in ([], ["--conformance"]):
        one_line_error(spec("--platform", platform, "--image", CPU, "--registry", REGISTRY, "--replicas", "2",
                            *machine, *extra), "--accelerator", "is a CPU build")


@pytest.mark.parametrize(("machine", "accelerator", "text"), [
    ("n1-standard-8", "NVIDIA_H100_80GB:8", "n1-standard-8 takes NVIDIA_TESLA_T4"),
    ("a3-highgpu-8g", "NVIDIA_TESLA_A100:8", "a3-highgpu-8g comes with NVIDIA_H100_80GB:8, not NVIDIA_TESLA_A100:8"),
    ("a2-highgpu-8g", "NVIDIA_H100_80GB:8", "a2-highgpu-8g comes with NVIDIA_TESLA_A100:8"),
    ("n1-highmem-96", "NVIDIA_TESLA_V100:16", "in counts of 1, 2, 4, 8, not 16"),
    ("a2-megagpu-16g", "TPU_V2:8", "a2-megagpu-16g comes with NVIDIA_TESLA_A100:16, not TPU_V2:8"),
])
def test_an_accelerator_its_machine_type_cannot_carry_is_refused(machine: str, accelerator: str, text: str) -> None:
    one_line_error(spec("--platform", "vertex", "--image", TF, "--registry", REGISTRY, "--replicas", "2",
                        "--machine-type", machine, "--accelerator", accelerator, "--", "python", "t.py"),
                   "--accelerator", text)


def test_a_display_name_is_counted_in_characters() -> None:
    name = "é" * 128  # 256 bytes in UTF-8: the API counts characters
    result = spec("--platform", "vertex", "--image", TF, "--registry", REGISTRY, *SHAPE, "--display-name", name)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["displayName"] == name
    one_line_error(spec("--platform", "vertex", "--image", TF, "--registry", REGISTRY, *SHAPE,
                        "--display-name", name + "é"), "--display-name", "1..128 UTF-8 characters")
