"""Kubernetes job specs (builder/jobs/trainjob.py, pytorchjob.py, tfjob.py, jobset.py) checked by their consumers.

Every manifest of a generated matrix of jobs (nodes x GPUs per node x framework x namespace x name) passes every
consumer of tests/k8sconsumers.py: the vendored CRD's schema with unknown fields refused, its CEL rules, the
Kubernetes 1.37 schemas of kubernetes-validate on its metadata and embedded templates, and the Kubeflow SDK's
pydantic models; the Kubeflow SDK's own ``TrainerClient.get_runtime`` reads every TrainingRuntime as a runtime of
the right framework, image, nodes and GPUs, and trainimg's in-image launcher (``runtime.platforms.detect``) reads
every JobSet pod's environment as the right rank of the right world. One negative test per consumer proves it refuses, so no check is
vacuous. Each matrix test prints how many manifests the consumers checked (``pytest -s`` shows them).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from typing import Any

import jsonschema
import k8sconsumers
import pytest
import yaml
from k8sconsumers import Refused
from kubeflow.common.types import KubernetesBackendConfig
from kubeflow.trainer import TrainerClient
from kubernetes import client as k8s_client
from trainimg.jobs import jobset, pytorchjob, tfjob, trainjob
from trainimg.jobs.k8s_shape import FRAMEWORKS, K8sJob
from trainimg.jobs.kubernetes import GPU_RESOURCE, MAX_LABEL, OPERATOR_API_VERSION, ManifestInputError, dump_yaml
from trainimg.runtime.platforms import detect

IMAGE = "europe-docker.pkg.dev/acme/ml/trainimg/pytorch:2.13.0-cu128-py3.12"
COMMAND = ["trainimg-launch", "--nproc-per-node", "8", "--", "python", "train.py", "--epochs", "3"]
WRITERS: dict[str, Callable[[K8sJob], list[dict[str, Any]]]] = {
    module.PLATFORM: module.manifests for module in (trainjob, pytorchjob, tfjob, jobset)}
# One CRD per kind the writers emit: the vendored files must serve exactly these.
KINDS = {(trainjob.API_VERSION, trainjob.KIND), (trainjob.API_VERSION, trainjob.RUNTIME_KIND),
         (OPERATOR_API_VERSION, pytorchjob.KIND), (OPERATOR_API_VERSION, tfjob.KIND), (jobset.API_VERSION, jobset.KIND)}


NAMES = ("t", "bert-large-2", "distributed-bert-pretraining-run-2026-11")  # 1, 12 and 40 characters


def job_matrix() -> Iterator[K8sJob]:
    """4 node counts x 3 GPU counts x 3 frameworks x namespace set/unset x 3 names: 216 jobs."""
    for nodes, gpus, framework, namespace, name in itertools.product(
            (1, 2, 4, 8), (0, 1, 8), FRAMEWORKS, (None, "ml-team"), NAMES):
        yield K8sJob(name=name, image=IMAGE, nodes=nodes, gpus_per_node=gpus, command=COMMAND,
                     framework=framework, namespace=namespace)


def job(**changes: Any) -> K8sJob:
    fields = {"name": "bert", "image": IMAGE, "nodes": 4, "gpus_per_node": 8, "command": COMMAND,
              "framework": "pytorch", "namespace": "ml-team"}
    return K8sJob(**{**fields, **changes})


@pytest.fixture(scope="module")
def sdk() -> TrainerClient:
    """The Kubeflow SDK's client; no cluster (its version probe fails and only logs), runtimes come from `serve`."""
    config = KubernetesBackendConfig(namespace="ml-team",
                                     client_configuration=k8s_client.Configuration(host="http://127.0.0.1:9"))
    return TrainerClient(backend_config=config)


def serve(sdk: TrainerClient, runtime: dict[str, Any]) -> None:
    """Make the SDK's CustomObjectsApi answer with `runtime`, as the API server would, for exactly its name."""

    class Answer:
        def get(self, timeout: float | None = None) -> dict[str, Any]:
            return runtime

    class CustomObjects:
        def get_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str,
                                         async_req: bool = False) -> Answer:
            assert (f"{group}/{version}", plural, name) == (runtime["apiVersion"], "trainingruntimes",
                                                            runtime["metadata"]["name"])
            return Answer()

    sdk.backend.custom_api = CustomObjects()


def test_vendored_crds_serve_every_kind_written() -> None:
    assert KINDS <= set(k8sconsumers.crd_schemas())
    assert k8sconsumers.K8S_VERSION == ".".join(k8sconsumers.kubernetes_validate.utils.latest_version().split(".")[:2])


@pytest.mark.parametrize("platform", sorted(WRITERS))
def test_every_manifest_passes_every_consumer(platform: str, sdk: TrainerClient) -> None:
    checked = 0
    cases = [case for case in job_matrix()
             if not (platform == trainjob.PLATFORM and case.framework == "tensorflow")]  # refused, tested below
    for case in cases:
        manifests = WRITERS[platform](case)
        assert list(yaml.safe_load_all(dump_yaml(manifests))) == manifests
        for manifest in manifests:
            ran = k8sconsumers.check(manifest)
            assert ran == expected_checks(manifest, case), (case, ran)
            checked += 1
        SEMANTICS[platform](case, manifests, sdk)
    print(f"{platform}: {checked} manifests of {len(cases)} jobs passed every consumer")
    assert checked == len(cases) * (2 if platform == trainjob.PLATFORM else 1) and len(cases) >= 144


def expected_checks(manifest: dict[str, Any], case: K8sJob) -> list[str]:
    """What `k8sconsumers.check` must have run: the CEL rules and templates each kind has (none skipped)."""
    roles = 1 if case.nodes == 1 else 2
    cel, templates = {"TrainingRuntime": (2, 2), "TrainJob": (2, 0), "JobSet": (1, 2),
                      "PyTorchJob": (0, roles), "TFJob": (0, roles)}[manifest["kind"]]
    ran = ["crd-schema", f"cel:{cel}", f"kubernetes-validate:{templates}"]
    return [*ran, "trainer-api"] if manifest["kind"] in ("TrainingRuntime", "TrainJob", "JobSet") else ran


def _containers(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    return [value["spec"]["containers"][0] for kind, _, value in k8sconsumers.embedded(manifest)
            if kind == "PodTemplate"]


def _gpus(container: dict[str, Any]) -> int:
    return int(container.get("resources", {}).get("limits", {}).get(GPU_RESOURCE, 0))


# Kubeflow Trainer's mlPolicy plugin for each framework (the vendored CRD's mlPolicy holds flux, jax, mpi, torch and
# xgboost; torch is the torchrun plugin), written here, not read from trainjob.POLICIES: the SDK reports the policy
# as the runtime's framework, so a swapped table would agree with itself.
TRAINER_POLICY = {"pytorch": "torch", "jax": "jax"}


def _trainjob(case: K8sJob, manifests: list[dict[str, Any]], sdk: TrainerClient) -> None:
    runtime, train = manifests
    serve(sdk, runtime)
    seen = sdk.get_runtime(case.name)
    assert (seen.trainer.framework, seen.trainer.image, seen.trainer.num_nodes) == (
        TRAINER_POLICY[case.framework], case.image, case.nodes)
    assert set(runtime["spec"]["mlPolicy"]) == {"numNodes", TRAINER_POLICY[case.framework]}
    if case.gpus_per_node:
        assert (seen.trainer.device, seen.trainer.device_count) == ("gpu", str(case.gpus_per_node * case.nodes))
    assert train["spec"]["runtimeRef"]["name"] == runtime["metadata"]["name"]
    assert train["metadata"].get("namespace") == runtime["metadata"].get("namespace") == case.namespace
    assert train["spec"]["trainer"].get("numProcPerNode") == (case.nproc if case.framework == "pytorch" else None)
    assert [c["name"] for c in _containers(runtime)] == ["node"]


def _operator(role_key: str, primary: str, container: str) -> Callable[[K8sJob, list[dict[str, Any]], Any], None]:
    def check(case: K8sJob, manifests: list[dict[str, Any]], sdk: Any) -> None:
        (manifest,) = manifests
        replicas = {role: spec["replicas"] for role, spec in manifest["spec"][role_key].items()}
        assert replicas == ({primary: 1} if case.nodes == 1 else {primary: 1, "Worker": case.nodes - 1})
        assert all(c["name"] == container and _gpus(c) == case.gpus_per_node for c in _containers(manifest))
        if manifest["kind"] == pytorchjob.KIND:
            assert manifest["spec"]["nprocPerNode"] == str(case.gpus_per_node or 1)
    return check


def _jobset(case: K8sJob, manifests: list[dict[str, Any]], sdk: Any) -> None:
    (manifest,) = manifests
    (replicated,) = manifest["spec"]["replicatedJobs"]
    spec = replicated["template"]["spec"]
    assert (replicated["name"], replicated["replicas"]) == ("node", 1)
    assert (spec["completions"], spec["parallelism"], spec["completionMode"], spec["backoffLimit"]) == (
        case.nodes, case.nodes, "Indexed", 0)
    assert manifest["spec"]["network"] == {"enableDNSHostnames": True, "subdomain": case.name}
    (container,) = _containers(manifest)
    assert _gpus(container) == case.gpus_per_node
    env = {e["name"]: e.get("value", e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath"))
           for e in container["env"]}
    assert env == {  # the launcher's contract, spelled out independently of both sides' tables
        "JOBSET_NAME": "metadata.labels['jobset.sigs.k8s.io/jobset-name']",
        "JOBSET_REPLICATED_JOB": "metadata.labels['jobset.sigs.k8s.io/replicatedjob-name']",
        "JOBSET_JOB_INDEX": "metadata.labels['jobset.sigs.k8s.io/job-index']",
        "JOBSET_JOB_REPLICAS": "metadata.labels['jobset.sigs.k8s.io/replicatedjob-replicas']",
        "JOBSET_PODS_PER_JOB": str(case.nodes),
        "JOBSET_SUBDOMAIN": case.name,
        "JOBSET_PORT": "29500",
    }
    for pod in range(case.nodes):  # the in-image launcher's reader, on each pod's environment
        world = detect(pod_env(manifest, pod))
        assert (world.platform, world.rank, world.world_size, world.master_addr, world.master_port) == (
            jobset.PLATFORM, pod, case.nodes, f"{case.name}-node-0-0.{case.name}", 29500)


def pod_env(manifest: dict[str, Any], pod: int) -> dict[str, str]:
    """What Kubernetes gives pod `pod` of the JobSet's job 0: the container's env, its downward-API references
    resolved against the labels JobSet's controller puts on the pod (pkg/controllers/jobset_controller.go
    ``labelAndAnnotateObject``), and the Indexed Job's ``JOB_COMPLETION_INDEX``."""
    (replicated,) = manifest["spec"]["replicatedJobs"]
    labels = {"jobset.sigs.k8s.io/jobset-name": manifest["metadata"]["name"],
              "jobset.sigs.k8s.io/replicatedjob-name": replicated["name"],
              "jobset.sigs.k8s.io/job-index": "0",
              "jobset.sigs.k8s.io/replicatedjob-replicas": str(replicated["replicas"])}
    env = {"JOB_COMPLETION_INDEX": str(pod)}
    for variable in _containers(manifest)[0]["env"]:
        if "value" in variable:
            env[variable["name"]] = variable["value"]
        else:
            reference = re.fullmatch(r"metadata\.labels\['(.+)'\]", variable["valueFrom"]["fieldRef"]["fieldPath"])
            assert reference is not None
            env[variable["name"]] = labels[reference.group(1)]
    return env


SEMANTICS: dict[str, Callable[[K8sJob, list[dict[str, Any]], Any], None]] = {
    trainjob.PLATFORM: _trainjob,
    pytorchjob.PLATFORM: _operator("pytorchReplicaSpecs", "Master", "pytorch"),
    tfjob.PLATFORM: _operator("tfReplicaSpecs", "Chief", "tensorflow"),
    jobset.PLATFORM: _jobset,
}


@pytest.mark.parametrize("platform", sorted(WRITERS))
@pytest.mark.parametrize("nodes", [1, 8, 11, 1000])
def test_longest_accepted_name_passes_and_one_more_character_is_refused(platform: str, nodes: int) -> None:
    """The writers refuse a name whose derived pod/Service names would not be DNS labels; at the boundary the
    manifests still pass every consumer."""
    def attempt(length: int) -> list[dict[str, Any]]:
        return WRITERS[platform](job(name="b" * length, nodes=nodes))

    longest = next(length for length in range(MAX_LABEL, 0, -1) if _accepts(lambda: attempt(length)))
    assert 40 <= longest < MAX_LABEL
    for manifest in attempt(longest):
        k8sconsumers.check(manifest)
    with pytest.raises(ManifestInputError, match="too long") as refused:
        attempt(longest + 1)
    assert "\n" not in str(refused.value)


def _accepts(attempt: Callable[[], object]) -> bool:
    try:
        attempt()
    except ManifestInputError:
        return False
    return True


@pytest.mark.parametrize("field, value, where", [
    ("name", "Bert", "name"), ("name", "b" * 64, "name"), ("name", "1bert", "name"), ("name", "bert-", "name"),
    ("name", "bert_large", "name"), ("name", "", "name"), ("namespace", "ML", "namespace"),
    ("namespace", "n" * 64, "namespace"), ("nodes", 0, "nodes"), ("nodes", True, "nodes"),
    ("gpus_per_node", -1, "gpus_per_node"), ("framework", "none", "framework"), ("command", [], "command"),
    ("command", "python train.py", "command"), ("image", "", "image"),
])
def test_bad_inputs_are_refused_with_one_line(field: str, value: Any, where: str) -> None:
    with pytest.raises(ManifestInputError) as refused:
        job(**{field: value})
    assert refused.value.where == where
    assert isinstance(refused.value, ValueError)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("name", ["a", "a-b", "a--b", "b0", "a" * 63, "a" * 64, "", "-a", "a-", "0a", "Ab", "a_b",
                                  "a.b", "a b", "a\n", "\u00e9t\u00e9"])
def test_name_grammar_is_the_trainjob_crds_own_rule(name: str) -> None:
    """`K8sJob` accepts a name exactly when the TrainJob CRD's CEL rules (RFC 1035 label, <= 63) accept it."""
    manifest = {"apiVersion": trainjob.API_VERSION, "kind": trainjob.KIND, "metadata": {"name": name}}
    try:
        k8sconsumers.check_cel(manifest)
        crd_accepts = True
    except Refused:
        crd_accepts = False
    assert _accepts(lambda: job(name=name)) is crd_accepts


def test_namespace_may_start_with_a_digit_but_a_name_may_not() -> None:
    assert job(namespace="1-team").namespace == "1-team"
    with pytest.raises(ManifestInputError, match="lower-case letter first"):
        job(name="1-team")


def test_trainer_v2_refuses_tensorflow_naming_tfjob() -> None:
    with pytest.raises(ValueError, match=f"--platform {tfjob.PLATFORM}") as refused:
        trainjob.manifests(job(framework="tensorflow"))
    assert "\n" not in str(refused.value)
    assert tfjob.manifests(job(framework="tensorflow"))


# Negative tests: each consumer refuses what it must, so the matrix's passes mean something.

def _pytorch() -> dict[str, Any]:
    (manifest,) = pytorchjob.manifests(job())
    return manifest


def test_crd_schema_refuses_an_unknown_field_that_the_raw_schema_lets_through() -> None:
    manifest = _pytorch()
    manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["imagePolicy"] = "x"
    jsonschema.Draft4Validator(k8sconsumers.schema_for(manifest)).validate(manifest)  # what jsonschema alone says
    with pytest.raises(Refused, match="crd-schema: .*containers.0: Additional properties .*'imagePolicy'"):
        k8sconsumers.check_crd_schema(manifest)


def test_crd_schema_refuses_a_wrong_type() -> None:
    manifest = _pytorch()
    manifest["spec"]["nprocPerNode"] = 8  # the CRD types it as a string
    with pytest.raises(Refused, match="crd-schema: spec.nprocPerNode: 8 is not of type 'string'"):
        k8sconsumers.check_crd_schema(manifest)


def test_crd_schema_refuses_duplicate_keys_of_a_map_list() -> None:
    manifest = _pytorch()
    containers = manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"]
    containers.append(dict(containers[0]))
    with pytest.raises(Refused, match=r"crd-schema: .*containers: duplicate keys \['name'\]"):
        k8sconsumers.check_crd_schema(manifest)


def test_cel_refuses_a_trainjob_name_and_two_ml_policies() -> None:
    runtime, train = trainjob.manifests(job())
    train["metadata"]["name"] = "Bert"
    k8sconsumers.check_crd_schema(train)  # metadata is a bare object in the schema: only the CEL rule sees it
    with pytest.raises(Refused, match="cel: <root>: metadata.name must match RFC 1035 DNS label format"):
        k8sconsumers.check_cel(train)
    runtime["spec"]["mlPolicy"]["jax"] = {}
    with pytest.raises(Refused, match="cel: spec.mlPolicy: Only one of the policy can be configured"):
        k8sconsumers.check_cel(runtime)


def test_kubernetes_validate_refuses_bad_metadata_and_a_bad_pod_template() -> None:
    manifest = _pytorch()
    manifest["metadata"]["label"] = {"a": "b"}
    k8sconsumers.check_crd_schema(manifest)  # the CRD leaves metadata to the API server's ObjectMeta
    with pytest.raises(Refused, match="kubernetes-validate: metadata.*'label' was unexpected"):
        k8sconsumers.check_core(manifest)
    manifest = _pytorch()
    manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"] = "python"
    with pytest.raises(Refused, match="kubernetes-validate: .*Worker.template.*command: 'python' is not of type"):
        k8sconsumers.check_core(manifest)


def test_trainer_api_refuses_a_wrong_type_and_an_unknown_field() -> None:
    _, train = trainjob.manifests(job())
    train["spec"]["trainer"]["numNodes"] = "4"
    with pytest.raises(Refused, match="trainer-api: numNodes: Input should be a valid integer"):
        k8sconsumers.check_trainer_api(train)
    _, train = trainjob.manifests(job())
    train["spec"]["trainer"]["numProcsPerNode"] = 8
    with pytest.raises(Refused, match="trainer-api: spec.trainer.numProcsPerNode: not what the model gives back"):
        k8sconsumers.check_trainer_api(train)


def test_the_sdk_refuses_a_runtime_without_its_trainer_container(sdk: TrainerClient) -> None:
    runtime, _ = trainjob.manifests(job())
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"][0]["name"] = "trainer"
    serve(sdk, runtime)
    with pytest.raises(RuntimeError, match="Failed to get") as refused:
        sdk.get_runtime("bert")
    assert "doesn't have trainer container" in str(refused.value.__cause__)
