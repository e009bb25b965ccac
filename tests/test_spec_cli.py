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


@pytest.mark.engine
def test_remote_reference_needs_framework() -> None:
    one_line_error(spec("--platform", "vertex", "--image", PULLABLE, *SHAPE), "--image", "add --framework")
    pool = pool0(spec("--platform", "vertex", "--image", PULLABLE, "--framework", "tensorflow", *SHAPE,
                      "--", "python", "t.py"))
    assert pool["containerSpec"]["command"][3:5] == ["--framework", "tensorflow"]
    one_line_error(spec("--platform", "vertex", "--image", PULLABLE, "--framework", "tensorflow", *SHAPE,
                        "--reduction-servers", "2"), "--reduction-servers", "cannot tell whether")


@pytest.fixture(scope="module")
def labelled() -> Iterator[TestImages]:
    client = docker.from_env(timeout=600)
    made = TestImages(client, LOCAL_BASE)
    yield made
    made.remove_all()
    client.close()


@pytest.mark.engine
def test_local_reference_reads_the_image_labels(labelled: TestImages) -> None:
    cpu = labelled.build("spec-cpu", [], labels={"trainimg.framework": "tensorflow", "trainimg.variant": "tf-cpu",
                                                  "trainimg.version.nccl": "none",
                                                  "trainimg.reduction-server": "none"}, labels_file=False)
    pool = pool0(spec("--platform", "vertex", "--image", cpu, *SHAPE, "--", "python", "t.py"))
    assert pool["containerSpec"]["command"][3:5] == ["--framework", "tensorflow"]
    # a CPU image's labels say it has no NCCL: no Reduction Server for it
    one_line_error(spec("--platform", "vertex", "--image", cpu, *SHAPE, "--reduction-servers", "2"),
                   "--reduction-servers", "no NCCL")
    gpu = labelled.build("spec-gpu", [], labels={"trainimg.framework": "pytorch", "trainimg.version.nccl": "2.27.7",
                                                  "trainimg.reduction-server": "wanted", "trainimg.absent": ""},
                         labels_file=False)
    assert pool0(spec("--platform", "vertex", "--image", gpu, *SHAPE, "--reduction-servers", "2"))
    plain = labelled.build("spec-plain", [])
    one_line_error(spec("--platform", "vertex", "--image", plain, *SHAPE), "--image", "no trainimg labels")


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
                             "tooling that still reads its format (new jobs: --platform vertex)\n")
    assert set(yaml.safe_load(result.stdout)) == {"trainingInput"}
    assert trainimg("spec", "--platform", "vertex", "--image", TF, "--registry", REGISTRY, *SHAPE).stderr == ""
