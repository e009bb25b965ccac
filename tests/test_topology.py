"""replica_specs: each platform's injected env and names, checked by parsing it back with parse_cluster.

A topology is only useful if the runtime reads it as the intended role, rank and world; the round trip checks the
two modules against each other, and the golden values below check them against the seeds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainimg.jobs.clusterspec import CLUSTER_PLATFORMS, _launcher
from trainimg.runtime.cluster import parse_cluster
from trainimg.runtime.frameworks import NAMES as FRAMEWORKS
from trainimg.runtime.platforms import FORCEABLE, STARTS, who_starts
from trainimg.runtime.topology import PLATFORMS, ProcessStart, ReplicaSpec, process_start, refusal, replica_specs


def hosts(role: str, index: int) -> str:
    return f"job-{role}-{index}"


def by_name(specs: list[ReplicaSpec]) -> dict[str, ReplicaSpec]:
    return {spec.name: spec for spec in specs}


@pytest.mark.parametrize("platform", ["vertex", "aiplatform", "uai"])
@pytest.mark.parametrize("replicas", [1, 2, 4])
def test_every_replica_parses_to_its_role_and_rank(platform: str, replicas: int) -> None:
    extra = {} if platform == "uai" else {"ps": 1, "evaluators": 1}
    specs = replica_specs(platform, replicas, hosts=hosts, trial="3", **extra)
    assert len({spec.name for spec in specs}) == len(specs)
    ranks = []
    for spec in specs:
        info = parse_cluster(spec.env, nproc_per_node=2)
        assert (info.role, info.index) == (spec.role, spec.index)
        assert spec.name == f"{spec.role}-{spec.index}"
        assert info.world_size == replicas
        assert (info.master_addr, info.master_port) == ("job-chief-0", 2222)
        assert info.trial == "3"
        assert info.world_size_processes == replicas * 2
        if spec.role in ("chief", "worker"):
            ranks.append(info.rank)
            assert info.rank == (0 if spec.role == "chief" else spec.index + 1)
        else:
            assert info.rank is None
        # Whatever the platform sent, the runtime hands TensorFlow 2 a chief and never an evaluator in the cluster.
        assert info.tf_config is not None
        assert "master" not in info.tf_config["cluster"] and "evaluator" not in info.tf_config["cluster"]
        assert info.tf_config["task"]["type"] == spec.role
    assert sorted(ranks) == list(range(replicas))


def test_vertex_shape() -> None:
    specs = by_name(replica_specs("vertex", 3, ps=2, evaluators=1, hosts=hosts, port=3333))
    assert list(specs) == ["chief-0", "worker-0", "worker-1", "ps-0", "ps-1", "evaluator-0"]
    worker = specs["worker-1"]
    assert set(worker.env) == {"CLUSTER_SPEC", "TF_CONFIG"}
    assert worker.node is None
    assert json.loads(worker.env["CLUSTER_SPEC"]) == {
        "cluster": {
            "workerpool0": ["job-chief-0:3333"],
            "workerpool1": ["job-worker-0:3333", "job-worker-1:3333"],
            "workerpool2": ["job-ps-0:3333", "job-ps-1:3333"],
            "workerpool3": ["job-evaluator-0:3333"],
        },
        "environment": "cloud",
        "task": {"type": "workerpool1", "index": 1},
    }
    assert json.loads(worker.env["TF_CONFIG"]) == {
        "cluster": {
            "chief": ["job-chief-0:3333"],
            "worker": ["job-worker-0:3333", "job-worker-1:3333"],
            "ps": ["job-ps-0:3333", "job-ps-1:3333"],
        },
        "environment": "cloud",
        "task": {"type": "worker", "index": 1},
    }
    evaluator = json.loads(specs["evaluator-0"].env["TF_CONFIG"])
    assert evaluator["task"] == {"type": "evaluator", "index": 0}


def test_vertex_single_replica_gets_no_tf_config() -> None:
    (only,) = replica_specs("vertex", 1, hosts=hosts, trial="2")
    assert set(only.env) == {"CLUSTER_SPEC"}
    assert json.loads(only.env["CLUSTER_SPEC"]) == {
        "cluster": {"workerpool0": ["job-chief-0:2222"]},
        "environment": "cloud",
        "task": {"type": "workerpool0", "index": 0, "trial": "2"},
    }
    with_evaluator = replica_specs("vertex", 1, evaluators=1, hosts=hosts)
    assert all("TF_CONFIG" in spec.env for spec in with_evaluator)


def test_aiplatform_shape() -> None:
    specs = by_name(replica_specs("aiplatform", 2, ps=1, hosts=hosts))
    chief = specs["chief-0"]
    assert json.loads(chief.env["CLUSTER_SPEC"]) == {
        "cluster": {"master": ["job-chief-0:2222"], "worker": ["job-worker-0:2222"], "ps": ["job-ps-0:2222"]},
        "environment": "cloud",
        "task": {"type": "master", "index": 0},
    }
    # A custom container's default (no useChiefInTfConfig): the deprecated `master`, which TensorFlow 2 rejects.
    tf_config = json.loads(chief.env["TF_CONFIG"])
    assert tf_config["cluster"]["master"] == ["job-chief-0:2222"] and "chief" not in tf_config["cluster"]
    assert tf_config["task"] == {"type": "master", "index": 0}
    assert parse_cluster({"TF_CONFIG": chief.env["TF_CONFIG"]}).role == "chief"


def test_aiplatform_always_sends_tf_config_and_names_chief_when_the_job_opts_in() -> None:
    (only,) = replica_specs("aiplatform", 1, hosts=hosts)
    assert "TF_CONFIG" in only.env
    specs = by_name(replica_specs("aiplatform", 2, hosts=hosts, use_chief_in_tf_config=True))
    tf_config = json.loads(specs["chief-0"].env["TF_CONFIG"])
    assert tf_config["cluster"] == {"chief": ["job-chief-0:2222"], "worker": ["job-worker-0:2222"]}
    assert tf_config["task"] == {"type": "chief", "index": 0}
    # CLUSTER_SPEC is not affected: it always says master.
    assert json.loads(specs["chief-0"].env["CLUSTER_SPEC"])["task"]["type"] == "master"


def test_uai_shape_matches_seed_004() -> None:
    specs = by_name(replica_specs("uai", 4, hosts=lambda role, i: f"ip{0 if role == 'chief' else i + 1}"))
    assert list(specs) == ["chief-0", "worker-0", "worker-1", "worker-2", "ps-0", "ps-1", "ps-2", "ps-3"]
    for spec in specs.values():
        assert set(spec.env) == {"TF_CONFIG"}
    expected_cluster = {
        "master": ["ip0:2222"],
        "ps": ["ip0:2223", "ip1:2223", "ip2:2223", "ip3:2223"],
        "worker": ["ip1:2222", "ip2:2222", "ip3:2222"],
    }
    assert json.loads(specs["ps-0"].env["TF_CONFIG"]) == {
        "cluster": expected_cluster,
        "environment": "cloud",
        "task": {"type": "ps", "index": 0},
    }
    assert json.loads(specs["chief-0"].env["TF_CONFIG"])["task"] == {"type": "master", "index": 0}
    assert [specs[f"ps-{i}"].node for i in range(4)] == [0, 1, 2, 3]
    assert (specs["chief-0"].node, specs["worker-0"].node, specs["worker-2"].node) == (0, 1, 3)


def test_uai_explicit_ps_count() -> None:
    specs = replica_specs("uai", 3, ps=1, hosts=hosts)
    assert [spec.name for spec in specs] == ["chief-0", "worker-0", "worker-1", "ps-0"]
    assert json.loads(specs[0].env["TF_CONFIG"])["cluster"]["ps"] == ["job-chief-0:2223"]
    no_ps = replica_specs("uai", 2, ps=0, hosts=hosts)
    assert "ps" not in json.loads(no_ps[0].env["TF_CONFIG"])["cluster"]


def test_ipv6_hosts_are_bracketed() -> None:
    specs = replica_specs("vertex", 2, hosts=lambda role, i: f"fd00::{i + (1 if role == 'chief' else 10)}")
    info = parse_cluster(specs[1].env)
    assert (info.master_addr, info.master_port) == ("fd00::1", 2222)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"platform": "vertex", "replicas": 0}, "replicas"),
        ({"platform": "vertex", "replicas": 2, "ps": -1}, "ps"),
        ({"platform": "vertex", "replicas": 2, "evaluators": -1}, "evaluators"),
        ({"platform": "borg", "replicas": 2}, "unknown platform"),
        ({"platform": "vertex", "replicas": 2, "port": 0}, "port"),
        ({"platform": "uai", "replicas": 2, "port": 65535}, "port"),
        ({"platform": "uai", "replicas": 2, "ps": 3}, "ps=3"),
        ({"platform": "uai", "replicas": 2, "evaluators": 1}, "evaluator"),
        ({"platform": "vertex", "replicas": 2, "use_chief_in_tf_config": True}, "use_chief_in_tf_config"),
    ],
)
def test_validation(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        replica_specs(hosts=hosts, **kwargs)


# --- the platforms that name their own hosts: Kubernetes controllers and Slurm ---------------------------------

NEW = ["slurm", "trainjob", "pytorchjob", "tfjob", "jaxjob", "jobset"]
DATA = Path(__file__).parent / "data"


def process_ranks(specs: list[ReplicaSpec], nproc: int) -> list[tuple[int, int]]:
    """(process rank, world) of every process the job runs, as the runtime reads each replica's env."""
    out = []
    for spec in specs:
        info = parse_cluster(spec.env)
        if info.started_by:  # Slurm: the platform started this process
            out.append((info.process_rank, info.world_size_processes))
        else:
            per_node = info if info.nproc_per_node else parse_cluster(spec.env, nproc_per_node=nproc)
            out += [(info.rank * nproc + local, per_node.world_size_processes) for local in range(nproc)]
    return out


def test_every_platform_is_one_the_runtime_detects() -> None:
    assert set(PLATFORMS) <= set(FORCEABLE)


@pytest.mark.parametrize("platform", NEW)
@pytest.mark.parametrize(("replicas", "nproc"), [(1, 1), (2, 1), (4, 1), (2, 2), (3, 4)])
def test_new_platforms_parse_to_every_process_rank(platform: str, replicas: int, nproc: int) -> None:
    specs = replica_specs(platform, replicas, job="ti-0a1b2c3d4e", nproc_per_node=nproc)
    ranks = process_ranks(specs, nproc)
    assert sorted(rank for rank, _ in ranks) == list(range(replicas * nproc))
    assert {world for _, world in ranks} == {replicas * nproc}
    assert len({spec.name for spec in specs}) == len(specs)
    names = {name for spec in specs for name in (spec.host, *spec.aliases)}
    masters = {parse_cluster(spec.env).master_addr for spec in specs}
    assert len(masters) == 1 and masters <= names | {"127.0.0.1"}, masters  # one TFJob replica: no TF_CONFIG
    assert all(spec.host.startswith("ti-0a1b2c3d4e-") for spec in specs)


def test_trainjob_torch_runtime_env() -> None:
    specs = replica_specs("trainjob", 3, job="tj", nproc_per_node=2)
    assert [(s.name, s.host, s.aliases) for s in specs] == [
        (f"node-0-{i}", f"tj-node-0-{i}", (f"tj-node-0-{i}.tj",)) for i in range(3)]
    assert specs[1].env == {"PET_NNODES": "3", "PET_NPROC_PER_NODE": "2", "PET_NODE_RANK": "1",
                            "PET_MASTER_ADDR": "tj-node-0-0.tj", "PET_MASTER_PORT": "29500",
                            "JOB_COMPLETION_INDEX": "1"}
    assert parse_cluster(specs[1].env).platform_nproc == "2"


def test_trainjob_jax_runtime_env_and_no_tensorflow() -> None:
    specs = replica_specs("trainjob", 2, job="tj", framework="jax")
    assert specs[1].env == {"JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "1",
                            "JAX_COORDINATOR_ADDRESS": "tj-node-0-0.tj:29500", "JOB_COMPLETION_INDEX": "1"}
    with pytest.raises(ValueError, match="no TensorFlow runtime.*--platform tfjob"):
        replica_specs("trainjob", 2, framework="tensorflow")
    for platform in ("pytorchjob", "jaxjob"):
        assert "--platform tfjob" in (refusal(platform, "tensorflow") or "")
    assert [p for p in PLATFORMS if refusal(p, "pytorch") or refusal(p, "jax")] == []


def test_pytorchjob_env_as_the_operator_writes_it() -> None:
    specs = replica_specs("pytorchjob", 3, job="pj", nproc_per_node=4)
    assert [(s.name, s.host, s.role, s.index) for s in specs] == [
        ("master-0", "pj-master-0", "chief", 0), ("worker-0", "pj-worker-0", "worker", 0),
        ("worker-1", "pj-worker-1", "worker", 1)]
    assert specs[2].env == {"MASTER_ADDR": "pj-master-0", "PET_MASTER_ADDR": "pj-master-0", "MASTER_PORT": "23456",
                            "PET_MASTER_PORT": "23456", "WORLD_SIZE": "12", "RANK": "2", "PET_NODE_RANK": "2",
                            "PET_NNODES": "3", "PET_NPROC_PER_NODE": "4", "PYTHONUNBUFFERED": "1"}


def test_jaxjob_env() -> None:
    specs = replica_specs("jaxjob", 2, job="jj")
    assert [s.host for s in specs] == ["jj-worker-0", "jj-worker-1"]
    assert specs[1].env == {"COORDINATOR_ADDRESS": "jj-worker-0", "COORDINATOR_PORT": "6666",
                            "NUM_PROCESSES": "2", "PROCESS_ID": "1", "PYTHONUNBUFFERED": "1"}


def test_tfjob_names_services_and_leaves_evaluators_out() -> None:
    specs = by_name(replica_specs("tfjob", 2, ps=1, evaluators=1, job="tf"))
    assert list(specs) == ["chief-0", "worker-0", "ps-0", "evaluator-0"]
    assert specs["ps-0"].aliases == ("tf-ps-0.default.svc",) and specs["ps-0"].host == "tf-ps-0"
    assert json.loads(specs["evaluator-0"].env["TF_CONFIG"]) == {
        "cluster": {"chief": ["tf-chief-0.default.svc:2222"], "worker": ["tf-worker-0.default.svc:2222"],
                    "ps": ["tf-ps-0.default.svc:2222"]},
        "environment": "cloud", "task": {"type": "evaluator", "index": 0}}
    (alone,) = replica_specs("tfjob", 1, job="tf")
    assert alone.env == {}  # the operator writes TF_CONFIG only for a distributed job


def test_jobset_env() -> None:
    specs = replica_specs("jobset", 2, job="js")
    assert specs[1].aliases == ("js-node-0-1.js",)
    assert specs[1].env == {"JOB_COMPLETION_INDEX": "1", "JOBSET_NAME": "js", "JOBSET_REPLICATED_JOB": "node",
                            "JOBSET_JOB_INDEX": "0", "JOBSET_JOB_REPLICAS": "1", "JOBSET_PODS_PER_JOB": "2",
                            "JOBSET_SUBDOMAIN": "js", "JOBSET_PORT": "29500"}


def test_slurm_tasks_share_their_node() -> None:
    specs = replica_specs("slurm", 2, job="sl", nproc_per_node=2, job_id=4242)
    assert [(s.name, s.node, s.host) for s in specs] == [
        ("task-0", 0, "sl-node0"), ("task-1", 0, "sl-node0"), ("task-2", 1, "sl-node1"), ("task-3", 1, "sl-node1")]
    env = specs[3].env
    assert (env["SLURM_STEP_NODELIST"], env["SLURM_JOB_NODELIST"], env["SLURM_STEP_TASKS_PER_NODE"]) == \
        ("sl-node[0-1]", "sl-node[0-1]", "2(x2)")
    assert (env["SLURM_PROCID"], env["SLURM_NODEID"], env["SLURM_LOCALID"], env["SLURM_GTIDS"]) == ("3", "1", "1", "2,3")
    info = parse_cluster(env)
    assert (info.started_by, info.master_addr, info.master_port) == ("slurm", "sl-node0", 15000 + 4242)
    assert replica_specs("slurm", 1, job="sl")[0].env["SLURM_JOB_ID"] == replica_specs("slurm", 1, job="sl")[0].env[
        "SLURM_JOB_ID"] != replica_specs("slurm", 1, job="other")[0].env["SLURM_JOB_ID"]


def test_slurm_variables_are_a_real_sruns() -> None:
    """Every variable the replay writes is one a real ``srun --ntasks-per-node 2`` task had, with the same value
    wherever the value does not name this machine's host or job."""
    samples = DATA / "slurm_env_samples.json"  # recorded from a real srun, committed
    real = json.loads(samples.read_text())["srun_n2_ntasks_per_node2"]
    ours = replica_specs("slurm", 1, job="vm", nproc_per_node=2)
    naming = {"SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_NAME", "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
              "SLURM_NODELIST", "SLURM_TOPOLOGY_ADDR"}
    for task, sample in zip(ours, real):
        assert set(task.env) <= set(sample), set(task.env) - set(sample)
        assert {k: v for k, v in task.env.items() if k not in naming} == \
            {k: sample[k] for k in task.env if k not in naming}


def test_how_each_platform_starts_its_processes() -> None:
    assert process_start("slurm", "pytorch", 2) == ProcessStart((), None, 2)
    assert process_start("trainjob", "pytorch", 2) == ProcessStart(("torchrun", "--no-python"), None, 2)
    assert process_start("trainjob", "jax", 2) == ProcessStart((), 2, 2)
    assert process_start("pytorchjob", "pytorch", 2) == ProcessStart((), None, 2)  # PET_NPROC_PER_NODE says
    assert process_start("tfjob", "tensorflow", 2) == ProcessStart((), 2, 1)
    assert process_start("slurm", "tensorflow", 2) == ProcessStart((), None, 2)
    assert process_start("vertex", "pytorch", 1) == ProcessStart((), None, 1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"platform": "slurm", "replicas": 2, "ps": 1}, "slurm has no ps"),
        ({"platform": "jobset", "replicas": 2, "evaluators": 1}, "jobset has no evaluator"),
        ({"platform": "pytorchjob", "replicas": 2, "nproc_per_node": 0}, "nproc_per_node"),
        ({"platform": "slurm", "replicas": 2, "port": 2222}, "job id"),
        ({"platform": "jaxjob", "replicas": 2, "framework": "tensorflow"}, "tfjob"),
    ],
)
def test_new_platform_validation(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        replica_specs(**kwargs)


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("platform", PLATFORMS)
def test_who_starts_the_processes_is_each_platform_modules_one_attribute(platform: str, framework: str) -> None:
    """The replay hands the launcher a process count exactly where the platform's ``STARTS`` leaves it to the
    launcher; the cluster job specs read the same attribute (`jobs.clusterspec`)."""
    start = process_start(platform, framework, 4)
    assert (start.nproc is None) == (who_starts(platform, framework) is not None)
    if platform in CLUSTER_PLATFORMS:
        written = "--nproc-per-node" in _launcher(platform, framework, 4, ["train"])
        assert written == (STARTS[platform] is None and framework != "tensorflow")
