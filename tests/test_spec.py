"""Cloud job bodies (builder/jobs/spec.py, vertex.py, aiplatform.py), checked field by field against the platform documents.

Seed 003 is Vertex AI's distributed-training page: pool order ([0] primary, [1] workers, [2] parameter servers or
Reduction Server, [3] evaluators), ``{}`` for an unused pool before a used one, the Reduction Server images, and the
sizing examples (5 n1-highmem-96 x 8 V100 -> 16 n1-highcpu-16; 8 a2-megagpu-16g -> 25). Seed 000 is AI Platform's
custom-container page: masterConfig / workerConfig / parameterServerConfig with imageUri, and no evaluator role.
Fast: no Docker, no network.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from trainimg.errors import UserInputError
from trainimg.jobs.fields import parse_accelerator
from trainimg.jobs.fields import nproc_per_node as _nproc_per_node
from trainimg.jobs.images import facts_from_variant
from trainimg.jobs.reducers import load_bandwidth, reducers_for, reduction_server_image
from trainimg.jobs.shape import ImageFacts, SpecOptions
from trainimg.jobs.spec import job_spec as build_spec
from trainimg.recipe.loading import Variant

IMAGE = "us-docker.pkg.dev/proj/train/pytorch:2.9.1-cu128-py3.12"
RS_US = "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"
V100x8 = "NVIDIA_TESLA_V100:8"
DISK = {"bootDiskType": "pd-ssd", "bootDiskSizeGb": 100}
DATA = Path(__file__).resolve().parents[1] / "builder" / "jobs" / "data" / "bandwidth.yaml"


def make_variant(**overrides: object) -> Variant:
    fields: dict[str, object] = dict(
        name="pytorch-2.9-cu128-py3.12",
        repository="trainimg/pytorch",
        framework="pytorch",
        version="2.9.1",
        cuda="12.8",
        os="ubuntu24.04",
        flavour="runtime",
        cudnn_image=False,
        python="3.12",
        nccl="2.27.3",
        cudnn="9.10.2",
        reduction_server=True,
        hypertune="0.1.0.dev6",
        extras=(),
        labels=(),
        extends=None,
        base_image="nvidia/cuda:12.8.1-runtime-ubuntu24.04",
        source="recipes/pytorch.yaml",
    )
    fields.update(overrides)
    return Variant(**fields)  # type: ignore[arg-type]


def job_spec(platform: str, variant: Variant | None = None, form: str = "rest", **kw: object) -> dict:
    """The spec for `platform` from keyword flags, `variant` standing for `--image VARIANT`'s recipe facts."""
    facts = facts_from_variant(variant) if variant is not None else None
    return build_spec(SpecOptions(platform=platform, facts=facts, **kw), form)  # type: ignore[arg-type]


def nproc_per_node(accelerator: str | None) -> int:
    return _nproc_per_node(accelerator, "vertex")


PT = make_variant()


def seed_example(**kw: object) -> dict:
    """Seed 003's gcloud example: primary n1-highmem-96 + 4 workers, 8 V100 each, reducers on n1-highcpu-16."""
    kw.setdefault("variant", make_variant())
    return job_spec("vertex", image=IMAGE, replicas=5, machine_type="n1-highmem-96", accelerator=V100x8,
                    region="us-central1", **kw)


def raises(where: str, match: str, fn, *args, **kw) -> UserInputError:
    with pytest.raises(UserInputError, match=match or None) as info:
        fn(*args, **kw)
    assert info.value.where == where
    assert "\n" not in str(info.value)
    return info.value


# --- Vertex: seed 003's Reduction Server example -----------------------------------------------------------------


@pytest.mark.parametrize("count", [16, "auto"])
def test_vertex_seed_reduction_server_example(count: object) -> None:
    body = seed_example(reduction_servers=count, display_name="JOB_NAME")
    assert body["displayName"] == "JOB_NAME"
    pools = body["jobSpec"]["workerPoolSpecs"]
    assert len(pools) == 3  # no evaluators: pool 3 left out
    gpu = {"machineType": "n1-highmem-96", "acceleratorType": "NVIDIA_TESLA_V100", "acceleratorCount": 8}
    assert pools[0]["machineSpec"] == gpu and pools[0]["replicaCount"] == 1
    assert pools[1]["machineSpec"] == gpu and pools[1]["replicaCount"] == 4
    for p in pools[:2]:
        assert p["diskSpec"] == DISK
        assert p["containerSpec"] == {"imageUri": IMAGE, "args": []}
    assert pools[2] == {
        "machineSpec": {"machineType": "n1-highcpu-16"},  # no accelerator on reducers
        "replicaCount": 16,
        "containerSpec": {"imageUri": RS_US},
    }
    json.dumps(body)  # plain JSON


def test_reducers_for_seed_examples() -> None:
    # 5 nodes * 100 Gbps = 500 Gbps; / 32 Gbps = 15.6 -> 16 (512 Gbps, as the page says)
    assert reducers_for("n1-highmem-96", 5, V100x8, platform="vertex") == 16
    # (8 worker VMs * 100 Gbps) / 32 Gbps egress = 25 reducer VMs
    assert reducers_for("a2-megagpu-16g", 8, "NVIDIA_TESLA_A100:16", platform="vertex") == 25
    assert reducers_for("a2-megagpu-16g", 8, "NVIDIA_TESLA_A100:16", "n2-highcpu-16", platform="vertex") == 25
    # 100 / 32 rounds up: never under the workers' egress
    assert reducers_for("n1-highmem-96", 1, V100x8, platform="vertex") == 4


def test_auto_a2_megagpu_job() -> None:
    body = job_spec("vertex", image=IMAGE, replicas=8, machine_type="a2-megagpu-16g",
                    accelerator="NVIDIA_TESLA_A100:16", variant=PT, reduction_servers="auto")
    assert body["jobSpec"]["workerPoolSpecs"][2]["replicaCount"] == 25


def test_auto_unknown_machine_lists_known_types() -> None:
    err = raises("--reduction-servers", "known: ", job_spec, "vertex", image=IMAGE, replicas=2,
                 machine_type="n1-standard-8", accelerator="NVIDIA_TESLA_T4:1", variant=PT, reduction_servers="auto")
    assert "a2-megagpu-16g" in str(err) and "n1-highmem-96 with 8xNVIDIA_TESLA_V100" in str(err)
    # the N1 figure holds only for the sourced GPU count
    raises("--reduction-servers", "no sourced bandwidth", reducers_for, "n1-highmem-96", 2, "NVIDIA_TESLA_V100:2",
           platform="vertex")
    raises("--reduction-servers", "n1-highcpu-16", reducers_for, "n1-highmem-96", 2, V100x8, "e2-standard-2",
           platform="vertex")


def test_explicit_count_needs_no_bandwidth_data() -> None:
    body = job_spec("vertex", image=IMAGE, replicas=2, machine_type="g2-standard-24",
                    accelerator="NVIDIA_L4:2", variant=PT, reduction_servers=3)
    assert body["jobSpec"]["workerPoolSpecs"][2]["replicaCount"] == 3
    assert job_spec("vertex", image=IMAGE, replicas=2, machine_type="g2-standard-24", accelerator="NVIDIA_L4:2",
                    variant=PT, reduction_servers="3")["jobSpec"]["workerPoolSpecs"][2]["replicaCount"] == 3
    # 0 means none: the pool list ends after the workers
    assert len(seed_example(reduction_servers=0)["jobSpec"]["workerPoolSpecs"]) == 2


@pytest.mark.parametrize(
    ("region", "prefix"),
    [(None, "us"), ("us-central1", "us"), ("us-east4", "us"), ("europe-west4", "europe"), ("asia-east1", "asia")],
)
def test_reduction_server_image_by_region(region: str | None, prefix: str) -> None:
    image = f"{prefix}-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"
    assert reduction_server_image(region) == image
    body = job_spec("vertex", image=IMAGE, replicas=2, machine_type="n1-highmem-96", accelerator=V100x8,
                    region=region, variant=PT, reduction_servers=2)
    assert body["jobSpec"]["workerPoolSpecs"][2]["containerSpec"]["imageUri"] == image


def test_region_without_reduction_server_image() -> None:
    raises("--region", "us, europe, asia", job_spec, "vertex", image=IMAGE, replicas=2,
           machine_type="n1-highmem-96", accelerator=V100x8, region="southamerica-east1", variant=PT, reduction_servers=2)
    # without reducers the region does not pick anything on Vertex: accepted
    job_spec("vertex", image=IMAGE, replicas=2, machine_type="n1-highmem-96", region="southamerica-east1")
    raises("--region", "such as us-central1", job_spec, "vertex", image=IMAGE, replicas=1,
           machine_type="n1-standard-4", region="US Central")


# --- Vertex: pool layout -------------------------------------------------------------------------------------------


def test_single_node_job_has_only_the_primary() -> None:
    body = job_spec("vertex", image=IMAGE, replicas=1, machine_type="n1-standard-8", args=["--epochs", "3"],
                    command=["python", "t.py"])
    assert body == {
        "displayName": "trainimg-job",
        "jobSpec": {"workerPoolSpecs": [{
            "machineSpec": {"machineType": "n1-standard-8"},
            "replicaCount": 1,
            "diskSpec": DISK,
            "containerSpec": {"imageUri": IMAGE, "args": ["--epochs", "3"],
                              "command": ["trainimg-launch", "--nproc-per-node", "1", "--", "python", "t.py"]},
        }]},
    }


def test_primary_and_parameter_servers_leave_pool_1_empty() -> None:
    pools = job_spec("vertex", image=IMAGE, replicas=1, machine_type="n1-standard-16", ps=2,
                     accelerator="NVIDIA_TESLA_T4:1")["jobSpec"]["workerPoolSpecs"]
    assert len(pools) == 3 and pools[1] == {}
    assert pools[0]["machineSpec"]["acceleratorType"] == "NVIDIA_TESLA_T4"
    assert pools[2]["machineSpec"] == {"machineType": "n1-standard-16"}  # ps: same image, no accelerator
    assert pools[2]["replicaCount"] == 2 and pools[2]["containerSpec"]["imageUri"] == IMAGE


def test_evaluators_only_leave_pools_1_and_2_empty() -> None:
    pools = job_spec("vertex", image=IMAGE, replicas=1, machine_type="n1-standard-8", evaluators=1,
                     accelerator="NVIDIA_TESLA_T4:1")["jobSpec"]["workerPoolSpecs"]
    assert len(pools) == 4 and pools[1] == {} and pools[2] == {}
    assert pools[3]["replicaCount"] == 1
    assert pools[3]["machineSpec"] == pools[0]["machineSpec"]


def test_all_four_pools() -> None:
    pools = job_spec("vertex", image=IMAGE, replicas=3, machine_type="n1-standard-8", ps=1, evaluators=1,
                     command=["python", "train.py"])["jobSpec"]["workerPoolSpecs"]
    assert [p["replicaCount"] for p in pools] == [1, 2, 1, 1]
    assert all(p for p in pools)


# --- launcher and conformance --------------------------------------------------------------------------------------


def test_nproc_per_node_is_the_accelerator_count() -> None:
    assert nproc_per_node(None) == 1
    assert nproc_per_node("NVIDIA_TESLA_V100:8") == 8
    assert nproc_per_node("NVIDIA_A100_80GB:16") == 16
    assert parse_accelerator("NVIDIA_L4:1", "vertex") == ("NVIDIA_L4", 1)


@pytest.mark.parametrize("bad", ["V100", "NVIDIA_TESLA_V100:0", "NVIDIA_TESLA_V100:17", "nvidia_tesla_v100:8",
                                 "NVIDIA TESLA:8", "NVIDIA_TESLA_V100:8:1", ":8", "NVIDIA_TESLA_V100:-1"])
def test_bad_accelerator(bad: str) -> None:
    raises("--accelerator", "", nproc_per_node, bad)
    raises("--accelerator", "", job_spec, "vertex", image=IMAGE, replicas=1, machine_type="n1-standard-8",
           accelerator=bad)


def test_command_runs_behind_the_launcher() -> None:
    pools = job_spec("vertex", image=IMAGE, replicas=2, machine_type="n1-highmem-96", accelerator=V100x8, ps=1,
                     command=["python", "train.py"], args=["--lr", "0.1"])["jobSpec"]["workerPoolSpecs"]
    launch8 = ["trainimg-launch", "--nproc-per-node", "8", "--", "python", "train.py"]
    assert pools[0]["containerSpec"] == {"imageUri": IMAGE, "command": launch8, "args": ["--lr", "0.1"]}
    assert pools[1]["containerSpec"]["command"] == launch8
    # a parameter server has no GPU: one process
    assert pools[2]["containerSpec"]["command"][:3] == ["trainimg-launch", "--nproc-per-node", "1"]


def test_known_variant_tells_the_launcher_its_framework() -> None:
    tf = make_variant(framework="tensorflow", repository="trainimg/tensorflow", version="2.20.0")
    cmd = job_spec("vertex", image=IMAGE, replicas=1, machine_type="g2-standard-24", accelerator="NVIDIA_L4:2",
                   command=["python", "t.py"], variant=tf)["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["command"]
    assert cmd == ["trainimg-launch", "--nproc-per-node", "2", "--framework", "tensorflow", "--", "python", "t.py"]


def test_conformance_command() -> None:
    body = job_spec("vertex", image=IMAGE, replicas=2, machine_type="n1-highmem-96", accelerator=V100x8,
                    conformance=True)
    assert body["displayName"] == "trainimg-conformance"
    for p in body["jobSpec"]["workerPoolSpecs"]:
        assert p["containerSpec"]["command"] == [
            "trainimg-launch", "--nproc-per-node", "8", "--",
            "python", "-m", "trainimg_runtime", "selftest", "--cluster", "--framework", "pytorch",
        ]
        assert p["containerSpec"]["args"] == []
    jax = make_variant(framework="jax", name="jax-0.7")
    cmd = job_spec("vertex", image=IMAGE, replicas=2, machine_type="a2-highgpu-8g", accelerator="NVIDIA_TESLA_A100:8",
                   conformance=True, variant=jax, reduction_servers="auto")
    pools = cmd["jobSpec"]["workerPoolSpecs"]
    assert cmd["displayName"] == "trainimg-jax-0.7-conformance"
    assert pools[0]["containerSpec"]["command"][-2:] == ["--framework", "jax"]
    assert pools[0]["containerSpec"]["command"][3:5] == ["--framework", "jax"]  # the launcher too
    assert pools[2]["replicaCount"] == 7  # 2 * 100 / 32 = 6.25 -> 7


def test_conformance_refusals() -> None:
    base = dict(image=IMAGE, replicas=2, machine_type="n1-standard-8", conformance=True)
    raises("--conformance", "instead of your program", job_spec, "vertex", command=["python", "x.py"], **base)
    raises("--conformance", "instead of your program", job_spec, "vertex", args=["--x"], **base)
    raises("--conformance", "primary and workers", job_spec, "vertex", ps=1, **base)
    raises("--conformance", "no framework", job_spec, "vertex", variant=make_variant(framework="none"), **base)


# --- Reduction Server refusals -------------------------------------------------------------------------------------


def test_refuses_variant_without_nccl() -> None:
    no_nccl = make_variant(nccl=None, reduction_server=False)
    err = raises("--reduction-servers", "no NCCL; the Reduction Server needs NCCL >= 2.7", seed_example,
                 reduction_servers=16, variant=no_nccl)
    assert IMAGE in str(err)
    # a CPU build has no NCCL either, and its GPUs are refused before the reducers are considered
    raises("--accelerator", "is a CPU build", seed_example, reduction_servers=16,
           variant=make_variant(cuda=None, nccl=None, reduction_server=False))
    raises("--reduction-servers", "NCCL 2.6.4", seed_example, reduction_servers=16, variant=make_variant(nccl="2.6.4"))
    seed_example(reduction_servers=16, variant=make_variant(nccl="2.7.8"))  # the floor itself is fine


def test_refuses_variant_built_without_reduction_server() -> None:
    raises("--reduction-servers", "built without google-reduction-server", seed_example, reduction_servers="auto",
           variant=make_variant(reduction_server=False))


def test_refuses_reduction_server_when_the_image_libraries_are_unknown() -> None:
    # a remote reference known only by --framework: nothing says it holds NCCL (it may be a CPU image)
    facts = ImageFacts(source="--framework", name=None, framework="pytorch")
    raises("--reduction-servers", "cannot tell whether", build_spec,
           SpecOptions(platform="vertex", image=IMAGE, replicas=2, machine_type="n1-highmem-96",
                       accelerator=V100x8, reduction_servers=2, facts=facts))
    raises("--reduction-servers", "cannot tell whether", seed_example, reduction_servers=2, variant=None)


def test_reducer_pool_keeps_out_of_tf_config_through_the_launcher() -> None:
    pools = seed_example(reduction_servers=2, command=["python", "t.py"])["jobSpec"]["workerPoolSpecs"]
    for p in pools[:2]:
        assert p["containerSpec"]["command"] == [
            "trainimg-launch", "--nproc-per-node", "8", "--framework", "pytorch", "--reduction-server",
            "--", "python", "t.py"]
    assert "command" not in pools[2]["containerSpec"]


def test_refuses_ps_with_reduction_server() -> None:
    raises("--reduction-servers", "parameter servers or reducers, not both", seed_example, ps=2, reduction_servers=4)


def test_refuses_cpu_job_and_single_replica() -> None:
    raises("--reduction-servers", "serves GPU workers", job_spec, "vertex", image=IMAGE, replicas=4,
           machine_type="n1-standard-8", reduction_servers=4)
    raises("--reduction-servers", "--replicas >= 2", job_spec, "vertex", image=IMAGE, replicas=1,
           machine_type="n1-highmem-96", accelerator=V100x8, reduction_servers="auto")


def test_refuses_aiplatform_reduction_server() -> None:
    raises("--reduction-servers", "not an aiplatform flag; it is for vertex", job_spec, "aiplatform", image=IMAGE, replicas=5,
           machine_type="n1-highmem-96", accelerator=V100x8, reduction_servers=16)


@pytest.mark.parametrize("bad", [-1, "many", True, 1.5])
def test_bad_reduction_server_count(bad: object) -> None:
    raises("--reduction-servers", "a count or 'auto'", seed_example, reduction_servers=bad)


# --- AI Platform (seed 000) ----------------------------------------------------------------------------------------


def test_aiplatform_master_workers_ps() -> None:
    body = job_spec("aiplatform", image=IMAGE, replicas=3, machine_type="n1-highmem-16", ps=2,
                    accelerator="NVIDIA_TESLA_V100:2", args=["--epochs", "5"], command=["python", "t.py"],
                    display_name="train_1")
    gpu = {"count": "2", "type": "NVIDIA_TESLA_V100"}  # int64 fields are JSON strings in ml.v1.json
    args = ["--epochs", "5"]
    launch = ["trainimg-launch", "--nproc-per-node", "2", "--", "python", "t.py"]
    launch_ps = ["trainimg-launch", "--nproc-per-node", "1", "--", "python", "t.py"]
    assert body == {
        "jobId": "train_1",
        "trainingInput": {
            "scaleTier": "CUSTOM",
            "masterType": "n1-highmem-16",
            "masterConfig": {"imageUri": IMAGE, "acceleratorConfig": gpu, "containerCommand": launch,
                             "containerArgs": args},
            "workerType": "n1-highmem-16",
            "workerCount": "2",
            "workerConfig": {"imageUri": IMAGE, "acceleratorConfig": gpu, "containerCommand": launch,
                             "containerArgs": args},
            "parameterServerType": "n1-highmem-16",
            "parameterServerCount": "2",
            # no accelerator on parameter servers (GPUs attach to N1; a parameter server needs none)
            "parameterServerConfig": {"imageUri": IMAGE, "containerCommand": launch_ps, "containerArgs": args},
            "region": "us-central1",
            "useChiefInTfConfig": False,  # the service's default: `master` in TF_CONFIG
        },
    }


def test_aiplatform_single_master_and_command() -> None:
    body = job_spec("aiplatform", image=IMAGE, replicas=1, machine_type="n1-standard-8", region="europe-west4",
                    accelerator="NVIDIA_TESLA_T4:4", command=["python", "train.py"], use_chief_in_tf_config=True)
    ti = body["trainingInput"]
    assert body["jobId"] == "trainimg_job"  # required by projects.jobs.create
    assert "workerConfig" not in ti and "parameterServerConfig" not in ti and "workerCount" not in ti
    assert ti["region"] == "europe-west4" and "args" not in ti and ti["useChiefInTfConfig"] is True
    assert ti["masterConfig"]["containerCommand"] == [
        "trainimg-launch", "--nproc-per-node", "4", "--", "python", "train.py"]
    assert "containerArgs" not in ti["masterConfig"]


def test_aiplatform_evaluators() -> None:
    ti = job_spec("aiplatform", image=IMAGE, replicas=2, machine_type="n1-highmem-16", evaluators=1,
                  accelerator="NVIDIA_TESLA_T4:1", command=["python", "t.py"], variant=PT)["trainingInput"]
    assert ti["evaluatorType"] == "n1-highmem-16" and ti["evaluatorCount"] == "1"
    assert ti["evaluatorConfig"]["acceleratorConfig"] == {"count": "1", "type": "NVIDIA_TESLA_T4"}
    assert ti["evaluatorConfig"]["containerCommand"][:5] == [
        "trainimg-launch", "--nproc-per-node", "1", "--framework", "pytorch"]


def test_aiplatform_gcloud_form_is_training_input_only() -> None:
    rest = job_spec("aiplatform", image=IMAGE, replicas=2, machine_type="n1-standard-8", display_name="j1")
    assert job_spec("aiplatform", form="gcloud", image=IMAGE, replicas=2, machine_type="n1-standard-8",
                    display_name="j1") == {"trainingInput": rest["trainingInput"]}


def test_aiplatform_conformance() -> None:
    body = job_spec("aiplatform", image=IMAGE, replicas=2, machine_type="n1-standard-8",
                    accelerator="NVIDIA_TESLA_T4:1", conformance=True, variant=PT)
    assert body["jobId"] == "trainimg_pytorch_2_9_cu128_py3_12_conformance"
    assert body["trainingInput"]["workerConfig"]["containerCommand"] == [
        "trainimg-launch", "--nproc-per-node", "1", "--framework", "pytorch", "--",
        "python", "-m", "trainimg_runtime", "selftest", "--cluster", "--framework", "pytorch"]


def test_aiplatform_job_id_grammar() -> None:
    raises("--display-name", "letters, digits and underscores", job_spec, "aiplatform", image=IMAGE, replicas=1,
           machine_type="n1-standard-8", display_name="my-job")
    raises("--display-name", "letters, digits and underscores", job_spec, "aiplatform", image=IMAGE, replicas=1,
           machine_type="n1-standard-8", display_name="1job")


@pytest.mark.parametrize(("platform", "accelerator"), [
    ("vertex", "NVIDIA_TESLA_A1000:8"), ("vertex", "TPU_V2_POD:1"), ("aiplatform", "NVIDIA_H100_80GB:8"),
    ("aiplatform", "NVIDIA_L4:1")])
def test_accelerator_outside_the_platform_enum(platform: str, accelerator: str) -> None:
    err = raises("--accelerator", f"{platform} has no accelerator type", job_spec, platform, image=IMAGE, replicas=1,
                 machine_type="n1-standard-8", accelerator=accelerator)
    assert "NVIDIA_TESLA_V100" in str(err)  # the accepted names are listed


def test_gcloud_form_is_the_custom_job_spec() -> None:
    rest = seed_example(display_name="x")
    assert seed_example(display_name="x", form="gcloud") == rest["jobSpec"]
    raises("--format", "rest, gcloud", seed_example, form="yaml")


# --- input checks --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "where"),
    [
        ({"replicas": 0}, "--replicas"),
        ({"replicas": True}, "--replicas"),
        ({"ps": -1}, "--ps"),
        ({"evaluators": -1}, "--evaluators"),
        ({"image": "Not An Image"}, "--image"),
        ({"image": ""}, "--image"),
        ({"machine_type": "N1 STANDARD"}, "--machine-type"),
        ({"args": "--epochs 3"}, "args"),
        ({"command": []}, "command"),
        ({"display_name": "x" * 129}, "--display-name"),
        ({"display_name": "é" * 129}, "--display-name"),
        ({"display_name": "bad\udcff"}, "--display-name"),  # an undecodable byte from argv: no JSON carries it
        ({"args": ["--epochs", "3"]}, "--args"),  # no program for them: the replica would run "--epochs"
        ({"image": "trainimg/pytorch:2.13.0-cpu-py3.11"}, "--image"),  # Docker Hub, for a cluster
        ({"image": "localhost:5000/trainimg/pytorch:2.13.0-cpu-py3.11"}, "--image"),
    ],
)
def test_bad_input(kw: dict, where: str) -> None:
    call = {"image": IMAGE, "replicas": 1, "machine_type": "n1-standard-8", **kw}
    raises(where, "", job_spec, "vertex", **call)


@pytest.mark.parametrize("platform", ["vertex", "aiplatform"])
def test_names_are_counted_in_characters(platform: str) -> None:
    name = "é" * 128 if platform == "vertex" else "j" + "é" * 127
    if platform == "vertex":  # 256 bytes, 128 characters: Vertex counts characters
        assert job_spec(platform, image=IMAGE, replicas=1, machine_type="n1-standard-8",
                        display_name=name)["displayName"] == name
    else:  # AI Platform's job id is ASCII: refused for its characters, not its length
        raises("--display-name", "letters, digits and underscores", job_spec, platform, image=IMAGE, replicas=1,
               machine_type="n1-standard-8", display_name=name)
        assert job_spec(platform, image=IMAGE, replicas=1, machine_type="n1-standard-8",
                        display_name="j" * 128)["jobId"] == "j" * 128


@pytest.mark.parametrize("platform", ["vertex", "aiplatform"])
@pytest.mark.parametrize("conformance", [False, True])
def test_a_cpu_build_gets_no_accelerator(platform: str, conformance: bool) -> None:
    cpu = make_variant(cuda=None, nccl=None, reduction_server=False)
    machine, accelerator = (("a3-highgpu-8g", "NVIDIA_H100_80GB:8") if platform == "vertex"
                            else ("n1-standard-16", "NVIDIA_TESLA_T4:4"))
    raises("--accelerator", "is a CPU build", job_spec, platform, variant=cpu, image=IMAGE, replicas=2,
           machine_type=machine, accelerator=accelerator, conformance=conformance)
    assert job_spec(platform, variant=cpu, image=IMAGE, replicas=2, machine_type="n1-standard-16",
                    conformance=conformance)


def test_unknown_platform() -> None:
    raises("--platform", "vertex, aiplatform", job_spec, "sagemaker", image=IMAGE, replicas=1,
           machine_type="n1-standard-8")


# --- the data ------------------------------------------------------------------------------------------------------


def test_bandwidth_data_cites_sources() -> None:
    table = load_bandwidth()
    entries = [*table.gpu_workers.values(), *table.reducers.values()]
    assert entries and all(e.source.startswith("https://cloud.google.com/") for e in entries)
    assert table.reducers["n1-highcpu-16"].gbps == 32 and table.reducers["n2-highcpu-16"].gbps == 32
    assert table.gpu_workers["a2-megagpu-16g"].gbps == 100
    raw = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    assert set(raw) == {"gpu_workers", "reducers"}


def test_variant_helper_matches_recipe_tags() -> None:
    v = make_variant()
    assert v.tag == "trainimg/pytorch:2.9.1-cu128-py3.12"
    assert replace(v, cuda=None).tag == "trainimg/pytorch:2.9.1-cpu-py3.12"
