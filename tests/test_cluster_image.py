"""The image checks every cluster platform makes (builder/jobs/clusterimage.py), and how `--image` comes to them
(builder/jobs/images.py): a reference the nodes can pull, and no accelerator for a CPU build.

Which part of a reference is a registry host is docker's rule; the docker SDK's own splitter
(``docker.auth.split_repo_name``) is the judge here. Fast: no Docker engine, no network.
"""

from __future__ import annotations

from pathlib import Path

import docker.auth
import pytest
from trainimg.engine.base import ImageInfo
from trainimg.errors import UserInputError
from trainimg.jobs.clusterimage import check_gpu_image, check_pullable, registry_host
from trainimg.jobs.images import facts_from_labels, facts_from_variant, resolve_image
from trainimg.jobs.shape import ImageFacts
from trainimg.recipe.loading import load_recipes
from shipped import pick

ROOT = Path(__file__).resolve().parents[1]
CPU = pick("pytorch", gpu=False).name  # tests/shipped.py: the CPU PyTorch variant, by its facts
REFERENCES = [
    "trainimg/pytorch:2.13.0-cpu-py3.11", "trainimg/pytorch:2.13-cpu", "ubuntu:22.04", "ubuntu", "library/ubuntu",
    "team/sub/trainer:1", "localhost/team/trainer:1", "localhost:5000/trainimg/pytorch:2.13.0-cpu-py3.11",
    "127.0.0.1:5005/trainimg/pytorch:2.13.0-cpu-py3.11", "docker.io/trainimg/pytorch:2.13.0-cpu-py3.11",
    "europe-docker.pkg.dev/acme/ml/trainimg/pytorch:2.13.0-cpu-py3.11", "gcr.io/acme/t@sha256:" + "a" * 64,
    "registry:5000/t:1", "10.0.0.5:5000/t:1",
]


@pytest.mark.parametrize("reference", REFERENCES)
def test_registry_host_is_dockers(reference: str) -> None:
    index, _ = docker.auth.split_repo_name(reference)
    found = registry_host(reference)
    if found is None:
        assert index == docker.auth.INDEX_NAME and not reference.startswith(index)
    else:
        assert found == index


def test_an_upper_case_first_component_is_a_host() -> None:
    # distribution/reference's splitDockerDomain (the Go rule; the Python SDK predates it): a path component is
    # lower case, so an upper-case first component can only be a host.
    assert registry_host("MyRegistry/team/t:1") == "MyRegistry"


@pytest.mark.parametrize(("reference", "why"), [
    ("trainimg/pytorch:2.13.0-cpu-py3.11", "names no registry, so every node would look for it on Docker Hub"),
    ("ubuntu:22.04", "Docker Hub"),
    ("localhost:5000/trainimg/pytorch:2.13.0-cpu-py3.11", "loopback registry localhost:5000"),
    ("127.0.0.1:5005/trainimg/pytorch:2.13.0-cpu-py3.11", "loopback registry 127.0.0.1:5005"),
    ("127.1.2.3/t:1", "loopback"),
    ("localhost/team/trainer:1", "loopback"),
    ("Not An Image", "not an image reference"),
])
def test_unpullable_references(reference: str, why: str) -> None:
    with pytest.raises(UserInputError, match=why) as info:
        check_pullable(reference, where="--where", fix="THE FIX")
    assert info.value.where == "--where" and str(info.value).endswith("; THE FIX")


@pytest.mark.parametrize("reference", ["europe-docker.pkg.dev/acme/ml/trainimg/pytorch:2.13.0-cpu-py3.11",
                                       "docker.io/trainimg/pytorch:2.13.0-cpu-py3.11", "10.0.0.5:5000/t:1",
                                       "gcr.io/acme/t@sha256:" + "a" * 64])
def test_pullable_references(reference: str) -> None:
    assert check_pullable(reference) == reference


def test_check_gpu_image_refuses_only_a_known_cpu_build() -> None:
    cpu = ImageFacts(source="labels", name=None, framework="pytorch", cuda="none")
    with pytest.raises(UserInputError, match="is a CPU build") as info:
        check_gpu_image("r/t:1", cpu, 8)
    assert info.value.where == "--accelerator"
    check_gpu_image("r/t:1", cpu, 0)
    check_gpu_image("r/t:1", None, 8)  # unknown: let through
    check_gpu_image("r/t:1", ImageFacts(source="--framework", name=None, framework="pytorch"), 8)
    check_gpu_image("r/t:1", ImageFacts(source="labels", name=None, framework="pytorch", cuda="12.8.90"), 8)


@pytest.mark.parametrize(("labels", "cuda"), [
    ({"trainimg.version.cuda": "none"}, "none"),  # read back after the build: holds no CUDA runtime
    ({"trainimg.version.cuda": "12.8.90", "trainimg.recipe.cuda": "12.8"}, "12.8.90"),
    ({"trainimg.recipe.cuda": "12.8", "trainimg.recipe.python": "3.12"}, "12.8"),  # a bake build: recipe labels
    ({"trainimg.recipe.python": "3.11", "trainimg.recipe.framework": "2.13.0"}, "none"),  # recipe set no CUDA
    ({}, None),  # nothing says: unknown
])
def test_cuda_from_labels(labels: dict[str, str], cuda: str | None) -> None:
    facts = facts_from_labels({"trainimg.framework": "pytorch", **labels})
    assert facts is not None and facts.cuda == cuda


def test_cuda_from_the_recipe() -> None:
    variants = load_recipes(ROOT / "recipes").by_name
    assert facts_from_variant(variants[CPU]).cuda == "none"
    assert facts_from_variant(variants[pick("pytorch", gpu=True, buildable=False).name]).cuda not in (None, "none")


def resolve(image: str, registry: str | None = None, framework: str | None = None,
            local: ImageInfo | None = None) -> tuple[str, ImageFacts | None]:
    variants = load_recipes(ROOT / "recipes").by_name
    return resolve_image(image, variants=variants, lock={}, registry=registry, framework=framework,
                         inspect=lambda ref: local)


@pytest.mark.parametrize("image", ["trainimg/pytorch:2.13.0-cpu-py3.11", "trainimg/pytorch:2.13-cpu"])
@pytest.mark.parametrize("framework", [None, "pytorch"])
def test_a_variant_tag_is_refused_naming_the_variant(image: str, framework: str | None) -> None:
    local = ImageInfo(id="sha256:" + "a" * 64, labels={"trainimg.framework": "pytorch"})
    with pytest.raises(UserInputError, match=f"use --image {CPU} --registry R") as info:
        resolve(image, framework=framework, local=local)  # even when the tag is local: the cluster is not
    assert info.value.where == "--image"


def test_a_variant_on_a_loopback_registry_is_refused() -> None:
    with pytest.raises(UserInputError, match="loopback registry 127.0.0.1:5005") as info:
        resolve(CPU, registry="127.0.0.1:5005")
    assert info.value.where == "--registry"
    ref, facts = resolve(CPU, registry="europe-docker.pkg.dev/acme/ml")
    assert ref == "europe-docker.pkg.dev/acme/ml/trainimg/pytorch:2.13.0-cpu-py3.11"
    assert facts is not None and facts.cuda == "none"
