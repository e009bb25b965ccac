"""Every output checked by the real client it is for (issue 14): Vertex's protos, AI Platform's discovery document,
TensorFlow's cluster resolver and a real MultiWorkerMirroredStrategy.

* google-cloud-aiplatform: every body of a generated matrix of `spec` flags parses strictly as
  ``aiplatform_v1.CustomJob`` (``ignore_unknown_fields=False``), its gcloud form as ``CustomJobSpec``.
* google-api-python-client's ``ml.v1.json``: every AI Platform body validates against ``GoogleCloudMlV1__Job``
  with tests/mlschema.py (unknown fields, types, enums, the prose rules of the descriptions).
* tensorflow-cpu 2.21.0 (the "tf" venv of tests/venvs.py, driven through subprocesses): for every platform shape
  of the seeds, what ``trainimg cluster --json`` says agrees with ``TFConfigClusterResolver`` on its TF_CONFIG; and
  the launcher's TF_CONFIG, from a spec's own replica command, drives a real MultiWorkerMirroredStrategy on
  127.0.0.1 to the right sum, Reduction Server pool included.

Each test prints how many cases the client checked (``pytest -s`` shows them).
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import mlschema
import pytest
import yaml
from google.cloud import aiplatform_v1
from trainimg.cli.app import main as trainimg_main
from trainimg.errors import UserInputError
from trainimg.jobs.fields import accelerator_types
from trainimg.jobs.images import facts_from_variant
from trainimg.jobs.shape import ImageFacts, SpecOptions
from trainimg.jobs.spec import job_spec
from shipped import pick

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "europe-docker.pkg.dev/acme/ml/trainimg/tensorflow:2.21.0-cu125-py3.11"


@pytest.fixture(scope="module")
def facts() -> list[ImageFacts | None]:
    """Real recipe facts (a CUDA PyTorch image with NCCL and reducers, a CUDA TF one, a CPU one) and none."""
    chosen = (pick("pytorch", gpu=True, buildable=False), pick("tensorflow", gpu=True, buildable=False),
              pick("pytorch", gpu=False))  # tests/shipped.py: by their facts, not their versions
    return [None, *(facts_from_variant(v) for v in chosen)]


def spec_matrix(platform: str, facts: list[ImageFacts | None]) -> Iterator[SpecOptions]:
    """Every combination of the flags that shape a body: pools, reducers, accelerators, regions, programs."""
    machines = [("n1-standard-8", None), ("n1-highmem-96", "NVIDIA_TESLA_V100:8"),
                ("a2-megagpu-16g", "NVIDIA_TESLA_A100:16"), ("g2-standard-24", "NVIDIA_L4:2"),
                ("n1-standard-16", "NVIDIA_TESLA_T4:4"), ("ct5lp-hightpu-4t", "TPU_V5_LITEPOD:4")]
    for (replicas, ps, reducers, evaluators, (machine, accel), region, conformance, command, args, fact,
         chief) in itertools.product(
            (1, 3), (0, 2), (None, 2, "auto"), (0, 1), machines, (None, "europe-west4", "asia-east1"),
            (False, True), (None, ("python", "train.py")), ((), ("--epochs", "3")), facts, (False, True)):
        if chief and platform == "vertex":
            continue  # an AI Platform flag only
        yield SpecOptions(platform=platform, image=IMAGE, replicas=replicas, ps=ps, reduction_servers=reducers,
                          evaluators=evaluators, machine_type=machine, accelerator=accel, region=region,
                          conformance=conformance, command=command, args=args, facts=fact,
                          use_chief_in_tf_config=chief)


def bodies(platform: str, facts: list[ImageFacts | None], form: str) -> tuple[list[dict], int]:
    """The bodies the matrix produces, and how many combinations were refused (each with a one-line reason)."""
    made, refused = [], 0
    for opts in spec_matrix(platform, facts):
        try:
            made.append(job_spec(opts, form))
        except UserInputError as err:
            assert "\n" not in str(err) and err.where
            refused += 1
    return made, refused


# --- Vertex: google-cloud-aiplatform ---------------------------------------------------------------------------


def test_vertex_accelerator_list_is_the_proto_enum() -> None:
    names = [t.name for t in aiplatform_v1.AcceleratorType if t.name != "ACCELERATOR_TYPE_UNSPECIFIED"]
    assert list(accelerator_types()["vertex"]) == names


def test_aiplatform_accelerator_list_is_the_discovery_enum() -> None:
    enum = mlschema.schemas()["GoogleCloudMlV1__AcceleratorConfig"]["properties"]["type"]["enum"]
    assert list(accelerator_types()["aiplatform"]) == [n for n in enum if n != "ACCELERATOR_TYPE_UNSPECIFIED"]


def test_every_vertex_body_parses_strictly_as_custom_job(facts: list[ImageFacts | None]) -> None:
    made, refused = bodies("vertex", facts, "rest")
    for body in made:
        job = aiplatform_v1.CustomJob.from_json(json.dumps(body), ignore_unknown_fields=False)
        assert len(job.job_spec.worker_pool_specs) == len(body["jobSpec"]["workerPoolSpecs"])
    with_reducers = sum(1 for b in made if len(b["jobSpec"]["workerPoolSpecs"]) > 2
                        and "reductionserver" in json.dumps(b["jobSpec"]["workerPoolSpecs"][2]))
    print(f"\nCustomJob: {len(made)} bodies parsed strictly ({with_reducers} with reducers), {refused} refused")
    assert len(made) > 1000 and with_reducers > 100


def test_every_gcloud_config_parses_strictly_as_custom_job_spec(facts: list[ImageFacts | None]) -> None:
    made, _ = bodies("vertex", facts, "gcloud")
    for config in made:
        # YAML as `spec --format gcloud` prints it (libyaml's safe dumper, for speed; the CLI's own output is
        # parsed in tests/test_spec_cli.py)
        text = yaml.dump(config, Dumper=yaml.CSafeDumper, sort_keys=False)
        loaded = yaml.load(text, Loader=yaml.CSafeLoader)
        aiplatform_v1.CustomJobSpec.from_json(json.dumps(loaded), ignore_unknown_fields=False)
    print(f"\nCustomJobSpec: {len(made)} gcloud configs parsed strictly")
    assert len(made) > 1000


def test_vertex_rejects_what_trainimg_refuses() -> None:
    # The proto really rejects the names `spec` refuses: the enum is the client's, not a guess.
    body = job_spec(SpecOptions(platform="vertex", image=IMAGE, replicas=1, machine_type="g2-standard-4",
                                accelerator="NVIDIA_L4:1"))
    for bad in ("NVIDIA_TESLA_A1000", "TPU_V2_POD"):
        body["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["acceleratorType"] = bad
        with pytest.raises(Exception, match="enum"):
            aiplatform_v1.CustomJob.from_json(json.dumps(body), ignore_unknown_fields=False)


# --- AI Platform: ml.v1.json ------------------------------------------------------------------------------------


def test_validator_reads_the_rules_the_descriptions_state() -> None:
    found = {(r.kind, r.schema.removeprefix(mlschema.PREFIX), r.field) for r in mlschema.rules()}
    assert ("exclusive-with-ancestor", "ReplicaConfig", "containerCommand") in found
    assert ("exclusive-with-ancestor", "ReplicaConfig", "containerArgs") in found
    assert ("only-one", "TrainingInput", "masterConfig") in found
    assert ("present-when", "TrainingInput", "evaluatorType") in found
    assert ("required-when", "TrainingInput", "masterType") in found


@pytest.mark.parametrize(("mutate", "fault"), [
    (lambda ti: ti.update(args=["--x"]), "mutually exclusive"),  # the old shape: containerCommand + args
    (lambda ti: ti["masterConfig"].update(imagURI="x"), "unknown field"),
    (lambda ti: ti.update(workerCount="2.0"), "decimal string"),
    (lambda ti: ti.update(workerCount=2), "expected a string"),
    (lambda ti: ti["masterConfig"]["acceleratorConfig"].update(type="NVIDIA_H100_80GB"), "is not one of"),
    (lambda ti: ti.pop("workerType"), "needs workerType"),
    (lambda ti: ti.update(runtimeVersion="2.11"), "only one of masterConfig.imageUri and runtimeVersion"),
    (lambda ti: ti.update(useChiefInTfConfig="true"), "boolean"),
    (lambda ti: ti.update(scaleTier="BASIC"), "only when scaleTier is CUSTOM"),
    (lambda ti: ti.pop("masterType"), "required when scaleTier is CUSTOM"),
])
def test_validator_rejects_what_the_service_would(mutate, fault: str) -> None:
    body = job_spec(SpecOptions(platform="aiplatform", image=IMAGE, replicas=2, machine_type="n1-standard-8",
                                accelerator="NVIDIA_TESLA_T4:1", command=("python", "t.py")))
    assert mlschema.validate("Job", body) == []
    mutate(body["trainingInput"])
    assert any(fault in e for e in mlschema.validate("Job", body)), mlschema.validate("Job", body)


def test_every_aiplatform_body_validates_against_ml_v1(facts: list[ImageFacts | None]) -> None:
    made, refused = bodies("aiplatform", facts, "rest")
    for body in made:
        assert mlschema.validate("Job", body) == [], body
        assert body["jobId"] and body["trainingInput"]["region"] and body["trainingInput"]["scaleTier"]
    configs, _ = bodies("aiplatform", facts, "gcloud")
    for config in configs:
        assert set(config) == {"trainingInput"}
        assert mlschema.validate("TrainingInput", config["trainingInput"]) == []
    print(f"\nml.v1 Job: {len(made)} bodies and {len(configs)} gcloud configs valid, {refused} refused")
    assert len(made) > 1000 and any("evaluatorConfig" in b["trainingInput"] for b in made)


# --- TensorFlow: TFConfigClusterResolver -------------------------------------------------------------------------

RESOLVE = r"""
import json, os, sys
from tensorflow.python.distribute import multi_worker_util as mwu
from tensorflow.python.distribute.cluster_resolver import TFConfigClusterResolver
out = []
for tf_config in json.load(sys.stdin):
    os.environ["TF_CONFIG"] = tf_config
    r = TFConfigClusterResolver()
    spec = r.cluster_spec()
    cluster = spec.as_dict()
    row = {"role": r.task_type, "index": r.task_id, "rank": None, "world_size": None, "master": None}
    if r.task_type in ("chief", "worker"):
        row["rank"] = mwu.id_in_cluster(spec, r.task_type, r.task_id)
        row["world_size"] = mwu.worker_count(spec, r.task_type)
    leader = mwu.collective_leader(spec, r.task_type, r.task_id)
    if leader:
        job, task = leader.split("/")[1][4:], int(leader.split("/")[3][5:])
        row["master"] = cluster[job][task]
    out.append(row)
print(json.dumps(out))
"""


def shapes() -> Iterator[tuple[str, str, dict, list[str]]]:
    """(name, variable, cluster, task types) for every platform shape of the seeds, in several sizes."""
    def hosts(kind: str, n: int, port: int = 2222) -> list[str]:
        return [f"cmle-training-{kind}-ab-{i}:{port}" for i in range(n)]

    for workers, ps, evaluators in itertools.product((0, 1, 3, 6), (0, 2), (0, 2)):
        aip = {"master": hosts("master", 1), **({"worker": hosts("worker", workers)} if workers else {}),
               **({"ps": hosts("ps", ps)} if ps else {})}
        yield f"aiplatform-cluster-spec-w{workers}-ps{ps}", "CLUSTER_SPEC", aip, ["master"] * 1 + [
            "worker"] * workers + ["ps"] * ps + ["evaluator"] * evaluators
        tf_chief = {("chief" if k == "master" else k): v for k, v in aip.items()}
        yield f"aiplatform-tf-config-chief-w{workers}-ps{ps}", "TF_CONFIG", tf_chief, ["chief"] + [
            "worker"] * workers + ["ps"] * ps + ["evaluator"] * evaluators
        vertex = {"workerpool0": hosts("workerpool0", 1), "workerpool1": hosts("workerpool1", workers),
                  "workerpool2": hosts("workerpool2", ps), "workerpool3": hosts("workerpool3", evaluators)}
        vertex = {k: v for k, v in vertex.items() if v}
        tasks = [k for k, v in vertex.items() for _ in v]
        yield f"vertex-w{workers}-pool2x{ps}-eval{evaluators}", "CLUSTER_SPEC", vertex, tasks
        if ps:  # the same pools with pool 2 as Reduction Server replicas: only the launcher's peers are parsed
            yield (f"vertex-reducers-w{workers}-x{ps}-eval{evaluators}", "CLUSTER_SPEC+reducers", vertex,
                   [t for t in tasks if t != "workerpool2"])
    for nodes in (1, 2, 4):  # seed 004: UAI, a ps beside the master and every worker, master named `master`
        uai = {"master": ["10.0.0.10:2222"], "ps": [f"10.0.0.{10 + i}:2223" for i in range(nodes)],
               **({"worker": [f"10.0.0.{11 + i}:2222" for i in range(nodes - 1)]} if nodes > 1 else {})}
        yield f"uai-{nodes}", "TF_CONFIG", uai, ["master"] + ["worker"] * (nodes - 1) + ["ps"] * nodes


def cluster_json(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], variable: str,
                 value: str) -> dict:
    """``trainimg cluster --json`` (the real CLI entry point, in-process) for one replica's environment."""
    monkeypatch.delenv("CLUSTER_SPEC", raising=False)
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.setenv(variable.split("+")[0], value)
    capsys.readouterr()
    args = ["cluster", "--json", *(["--reduction-server"] if variable.endswith("+reducers") else [])]
    assert trainimg_main(args) == 0
    return json.loads(capsys.readouterr().out)


def test_cluster_json_agrees_with_tf_config_cluster_resolver(framework_venv: Callable[[str], str], monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    ours, names = [], []
    for name, variable, cluster, tasks in shapes():
        seen: dict[str, int] = {}
        for task_type in tasks:
            index = seen[task_type] = seen.get(task_type, -1) + 1
            task = {"type": task_type, "index": index, **({"trial": "3"} if "w3" in name else {})}
            value = json.dumps({"cluster": cluster, "task": task, "environment": "cloud"})
            ours.append(cluster_json(monkeypatch, capsys, variable, value))
            names.append(f"{name}/{task_type}:{index}")
    tf = subprocess.run([framework_venv("tf"), "-c", RESOLVE], input=json.dumps([json.dumps(o["tf_config"]) for o in ours]),
                        capture_output=True, text=True, timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
                        check=False)
    assert tf.returncode == 0, tf.stderr[-3000:]
    disagree = []
    for name, mine, theirs in zip(names, ours, json.loads(tf.stdout), strict=True):
        master = f"{mine['master_addr']}:{mine['master_port']}" if theirs["master"] is not None else None
        seen = {"role": mine["role"], "index": mine["index"], "rank": mine["rank"],
                "world_size": mine["world_size"] if mine["rank"] is not None else None, "master": master}
        if seen != theirs:
            disagree.append(f"{name}: trainimg {seen} != TensorFlow {theirs}")
    print(f"\nTFConfigClusterResolver: {len(ours) - len(disagree)} of {len(ours)} replicas agree")
    assert not disagree and len(ours) >= 240, "\n".join(disagree[:10])


# --- TensorFlow: a real MultiWorkerMirroredStrategy through the launcher ------------------------------------------

MWMS = r"""
import json, os
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
value = float(int(os.environ["RANK"]) + 1)
result = strategy.run(lambda: tf.distribute.get_replica_context().all_reduce("sum", tf.constant(value)))
print(json.dumps({"rank": int(os.environ["RANK"]), "sum": float(strategy.experimental_local_results(result)[0])}))
"""


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def launcher_command(pool: dict, python: str) -> list[str]:
    """A pool's container command from a real spec, with the in-image launcher and python made local (`python`)."""
    command = pool["containerSpec"]["command"]
    assert command[0] == "trainimg-launch"
    cut = command.index("--")
    assert command[cut + 1] == "python"
    return [sys.executable, "-m", "trainimg.runtime", "launch", *command[1:cut], "--", python, *command[cut + 2:]]


@pytest.mark.parametrize("platform", ["vertex-reducers", "aiplatform-master"])
def test_launcher_tf_config_drives_multi_worker_mirrored_strategy(framework_venv: Callable[[str], str], platform: str,
                                                                  tmp_path: Path) -> None:
    script = tmp_path / "mwms.py"
    script.write_text(MWMS)
    a, b, r1, r2 = (f"127.0.0.1:{p}" for p in free_ports(4))
    tf_facts = ImageFacts(source="recipe", name="tf", framework="tensorflow", nccl="2.27.7", reduction_server=True)
    vertex = platform.startswith("vertex")
    body = job_spec(SpecOptions(platform="vertex" if vertex else "aiplatform", image=IMAGE, replicas=2,
                                machine_type="n1-standard-16", accelerator="NVIDIA_TESLA_T4:4", facts=tf_facts,
                                reduction_servers=2 if vertex else None, command=("python", str(script))))
    if vertex:
        pools = body["jobSpec"]["workerPoolSpecs"]
        commands = [launcher_command(pool, framework_venv("tf")) for pool in pools[:2]]
        cluster = {"workerpool0": [a], "workerpool1": [b], "workerpool2": [r1, r2]}  # nobody serves r1, r2
        tasks = [("workerpool0", 0), ("workerpool1", 0)]
    else:
        ti = body["trainingInput"]
        commands = [launcher_command({"containerSpec": {"command": ti[k]["containerCommand"]}}, framework_venv("tf"))
                    for k in ("masterConfig", "workerConfig")]
        cluster = {"master": [a], "worker": [b]}
        tasks = [("master", 0), ("worker", 0)]
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "CLUSTER_SPEC", "RANK", "WORLD_SIZE")}
    env.update(PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    procs = [subprocess.Popen(cmd, env={**env, "CLUSTER_SPEC": json.dumps(
        {"cluster": cluster, "task": {"type": t, "index": i}, "environment": "cloud"})},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for cmd, (t, i) in zip(commands, tasks)]
    try:
        outs = [p.communicate(timeout=240) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
        assert "1 process(es) via exec (nproc-per-node 4)" in err  # TensorFlow: one process per replica
    results = sorted((json.loads(out.strip().splitlines()[-1]) for out, _ in outs), key=lambda r: r["rank"])
    assert results == [{"rank": 0, "sum": 3.0}, {"rank": 1, "sum": 3.0}]
