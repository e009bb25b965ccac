"""Shared memory, tested from its table: each platform module's ``SHM`` row (`runtime.shm.NodeShm`).

* every `spec` platform x local ranks per node (1, 2, 8): where the row gives a setting, the job sets /dev/shm to
  `shm.size_for(ranks)` from two ranks on and never for one (a memory-backed emptyDir over /dev/shm in every pod
  template, read by the vendored CRDs and kubernetes-validate; Azure ML's ``resources.shm_size``, read by azure-ai-ml's
  ``load_job``), and nothing is said on stderr; where the row gives none, the job holds no such field and `spec`
  says so on stderr, once, naming the size the ranks need;
* a row that says a platform gives a job no way to set it is held to the platform's own API model: no field of
  Vertex's WorkerPoolSpec/ContainerSpec, AI Platform's ReplicaConfig or SageMaker's CreateTrainingJob names shared
  memory;
* every platform x ranks: the /dev/shm the gate gives (`suite.gate_shm`), and `--shm-size` given wins;
* the probe's ``shm`` check on this machine's own /dev/shm, and the size grammar Docker and Azure ML share.

In-process: no engine, no network.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import k8sconsumers
import mlschema
import pytest
import yaml
from azure.ai.ml import load_job
from google.cloud import aiplatform_v1

from trainimg.cli.app import main
from trainimg.conformance.suite import gate_shm
from trainimg.jobs import sagemaker
from trainimg.jobs.kubernetes import SHM_VOLUME, quantity
from trainimg.jobs.specflags import SPEC_PLATFORMS
from trainimg.runtime import probe, shm
from trainimg.runtime.contract import PLATFORMS
from trainimg.runtime.platforms import BY_NAME
from shipped import pick

REGISTRY = "europe-docker.pkg.dev/acme/ml"
IMAGE = ["--image", pick("pytorch", gpu=True).name, "--registry", REGISTRY, "--replicas", "2"]
ROLE = "arn:aws:iam::123456789012:role/trainer"
RANKS = (1, 2, 8)
#: platform -> local ranks -> the flags that ask for that many GPUs a node (one rank each).
ASK: dict[str, dict[int, list[str]]] = {
    "vertex": {1: ["--machine-type", "a2-highgpu-1g", "--accelerator", "NVIDIA_TESLA_A100:1"],
               2: ["--machine-type", "a2-highgpu-2g", "--accelerator", "NVIDIA_TESLA_A100:2"],
               8: ["--machine-type", "a3-highgpu-8g", "--accelerator", "NVIDIA_H100_80GB:8"]},
    "aiplatform": {n: ["--machine-type", "a2-highgpu-1g" if n == 1 else f"a2-highgpu-{n}g", "--accelerator",
                       f"NVIDIA_TESLA_A100:{n}"] for n in RANKS},
    "sagemaker": {n: ["--instance-type", kind, "--role-arn", ROLE, "--output-path", "s3://acme/out"]
                  for n, kind in ((1, "ml.g5.xlarge"), (2, "ml.g7e.12xlarge"), (8, "ml.p4d.24xlarge"))},
    "azureml": {n: ["--compute", "gpu-cluster", "--gpus", str(n)] for n in RANKS},
}
GPUS = {n: ["--gpus", str(n)] for n in RANKS}  # the Kubernetes platforms and Slurm


def spec(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["spec", *args])
    out, err = capsys.readouterr()
    return code, out, err


def pod_specs(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod spec of every pod template a manifest embeds, found by its CRD's schema (as kubernetes-validate is
    given them)."""
    specs = [doc["spec"] for kind, _path, doc in k8sconsumers.embedded(manifest) if kind == "PodTemplate"]
    assert specs, manifest["kind"]
    return specs


def written_shm(platform: str, out: str, tmp_path: Path) -> list[str]:
    """The /dev/shm sizes the job asks for, one per pod template (or the command job's), after its consumers read it."""
    if platform == "azureml":
        path = tmp_path / "job.yaml"
        path.write_text(out)
        size = load_job(source=path).resources.shm_size
        return [size] if size else []
    if platform in ("vertex", "aiplatform", "sagemaker", "slurm"):
        assert "shm" not in out.lower() and "shared" not in out.lower()
        return []
    sizes = []
    for manifest in yaml.safe_load_all(out):
        k8sconsumers.check(manifest)
        if manifest["kind"] == "TrainJob":  # the runtime it names holds the pods
            continue
        for spec_ in pod_specs(manifest):
            volumes = {v["name"]: v for v in spec_.get("volumes", [])}
            mounts = [m for c in spec_["containers"] for m in c.get("volumeMounts", [])]
            if SHM_VOLUME in volumes:
                assert volumes[SHM_VOLUME]["emptyDir"]["medium"] == "Memory"
                assert mounts == [{"name": SHM_VOLUME, "mountPath": shm.PATH}]
                sizes.append(volumes[SHM_VOLUME]["emptyDir"]["sizeLimit"])
    return sizes


@pytest.mark.parametrize(("platform", "ranks"), list(itertools.product(SPEC_PLATFORMS, RANKS)))
def test_spec_sets_shared_memory_where_the_platform_can(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                        platform: str, ranks: int) -> None:
    row = BY_NAME[platform].SHM
    code, out, err = spec(capsys, "--platform", platform, *IMAGE, *ASK.get(platform, GPUS)[ranks], "--",
                          "python", "train.py")
    assert code == 0, err
    sizes = written_shm(platform, out, tmp_path)
    said = [line for line in err.splitlines() if "/dev/shm" in line]
    if ranks == 1:
        assert sizes == [] and said == []
    elif row.setting is not None:
        want = shm.docker_size(shm.size_for(ranks)) if platform == "azureml" else quantity(shm.size_for(ranks))
        assert sizes and set(sizes) == {want}, sizes
        assert said == []
    else:
        assert sizes == []
        assert said == [f"trainimg: {platform} gives a job no way to set /dev/shm ({row.default_said}); its {ranks} "
                        f"local ranks need {shm.show(shm.size_for(ranks))} (NCCL: {shm.NCCL_ADVICE}); "
                        "`--conformance` checks a node's"], err


def _names(message: Any) -> set[str]:
    """Every field name of a proto-plus message type, nested messages included."""
    names, todo, seen = set(), [message], set()
    while todo:
        descriptor = todo.pop().meta.pb.DESCRIPTOR if hasattr(todo[-1], "meta") else todo.pop()
        if descriptor.full_name in seen:
            continue
        seen.add(descriptor.full_name)
        for field in descriptor.fields:
            names.add(field.name)
            if field.message_type is not None:
                todo.append(field.message_type)
    return names


def _botocore_names(shape: Any, seen: set[str] | None = None) -> set[str]:
    seen = set() if seen is None else seen
    if shape.name in seen:
        return set()
    seen.add(shape.name)
    names: set[str] = set()
    for name, member in getattr(shape, "members", {}).items():
        names |= {name} | _botocore_names(member, seen)
    return names


def _discovery_names(schema: str) -> set[str]:
    return set(mlschema.schemas()[f"{mlschema.PREFIX}{schema}"]["properties"])


#: The API model each row without a setting is held to: every field name a job request can carry on that platform.
MODEL_FIELDS = {
    "vertex": lambda: _names(aiplatform_v1.WorkerPoolSpec),
    "aiplatform": lambda: _discovery_names("ReplicaConfig") | _discovery_names("TrainingInput"),
    "sagemaker": lambda: _botocore_names(sagemaker.member("ResourceConfig")) | _botocore_names(
        sagemaker.member("AlgorithmSpecification")) | set(sagemaker._request_shape().members),
}


@pytest.mark.parametrize("platform", sorted(MODEL_FIELDS))
def test_a_platform_without_a_setting_has_no_field_for_it(platform: str) -> None:
    assert BY_NAME[platform].SHM.setting is None
    fields = MODEL_FIELDS[platform]()
    assert len(fields) > 5, fields
    assert not [f for f in fields if "shm" in f.lower() or "shared" in f.lower() and "memory" in f.lower()], fields


def test_every_platform_row_is_complete() -> None:
    assert set(BY_NAME) == set(PLATFORMS)
    for name, module in BY_NAME.items():
        row = module.SHM
        assert isinstance(row, shm.NodeShm) and row.default_said and row.source, name
        assert row.default is None or row.default > 0, name
        assert "http" in row.source or "tmpfs(5)" in row.source or "searched" in row.source, (name, row.source)


@pytest.mark.parametrize(("platform", "ranks"), list(itertools.product(PLATFORMS, (*RANKS, 3))))
def test_the_gate_gives_what_the_job_asks_for(platform: str, ranks: int) -> None:
    row = BY_NAME[platform].SHM
    given = gate_shm(platform, ranks, None)
    if ranks > 1:
        assert given == shm.size_for(ranks) == ranks * shm.PER_LOCAL_RANK >= shm.needed(ranks)
    else:
        assert given == (row.default or shm.CONTAINER_DEFAULT)
    assert gate_shm(platform, ranks, 64 * shm.MIB) == 64 * shm.MIB  # --shm-size: a node's size replayed


@pytest.mark.parametrize(("text", "size"), [("64m", 64 << 20), ("1g", 1 << 30), ("1G", 1 << 30), ("512k", 512 << 10),
                                            ("1073741824", 1 << 30), ("100b", 100)])
def test_sizes_in_dockers_grammar(text: str, size: int) -> None:
    assert shm.parse_size(text) == size
    assert shm.parse_size(shm.docker_size(size)) == size


@pytest.mark.parametrize("text", ["", "0", "1.5g", "1gb", "-1g", "1t", "g", "1 g x"])
def test_sizes_docker_refuses_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a size"):
        shm.parse_size(text)


@pytest.mark.parametrize(("platform", "ranks"), list(itertools.product((None, *PLATFORMS), RANKS)))
def test_the_probe_measures_this_machines_shm(platform: str | None, ranks: int) -> None:
    """This machine's /dev/shm (a tmpfs larger than NCCL's floor here), seen by the probe's check as the gate sees
    a replica's: one rank is skipped, more pass, or warn where the gate's size stands in for a platform's own."""
    size = shm.measure()
    assert size >= shm.NCCL_FLOOR, "this machine's /dev/shm is smaller than NCCL's floor"
    [result] = probe.run_checks({"local_ranks": ranks, "platform": platform, "shm_replayed": True}, only={"shm"})
    row = BY_NAME[platform].SHM if platform else None
    assert result["details"]["bytes"] == size and result["details"]["needed"] == shm.needed(ranks)
    if ranks == 1:
        assert result["status"] == "skipped"
    elif row is not None and row.setting is None:
        assert result["status"] == "warning" and row.default_said in result["reason"], result
    else:
        assert result["status"] == "passed", result
    json.dumps(result)  # the report is JSON
