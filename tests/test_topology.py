"""replica_specs: each platform's injected env, checked by parsing it back with parse_cluster.

A topology is only useful if the runtime reads it as the intended role, rank and world; the round trip checks the
two modules against each other, and the golden values below check them against the seeds.
"""

from __future__ import annotations

import json

import pytest

from trainimg.runtime.cluster import parse_cluster
from trainimg.runtime.topology import ReplicaSpec, replica_specs


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
        ({"platform": "sagemaker", "replicas": 2}, "unknown platform"),
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
