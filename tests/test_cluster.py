"""parse_cluster against every platform example in the seeds, the local default, and the faults it must refuse.

The dictionaries below are the seeds' examples with their placeholders (``[ID_STRING_1]``, ``port-worker``) made
concrete, so a regression in any platform's dialect shows up as the platform's own example failing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainimg.runtime.cluster import main, parse_cluster
from trainimg.runtime.world import DEFAULT_MASTER_PORT, ClusterError, ClusterInfo, split_address

# Seed 000 (AI Platform custom containers): CLUSTER_SPEC with master/worker/ps, trial a string, job to ignore.
AIPLATFORM_CLUSTER = {
    "master": ["cmle-training-master-abc-0:2222"],
    "worker": ["cmle-training-worker-abc-0:2222", "cmle-training-worker-abc-1:2222"],
    "ps": ["cmle-training-ps-abc-0:2222"],
}

# Seed 001 (AI Platform TF_CONFIG, runtime 2.1+): a worker's view during the first tuning trial.
SEED_001_TF_CONFIG = {
    "cluster": {
        "chief": ["cmle-training-chief-id1-0:2222"],
        "ps": ["cmle-training-ps-id1-0:2222"],
        "worker": ["cmle-training-worker-id1-0:2222", "cmle-training-worker-id1-1:2222"],
    },
    "environment": "cloud",
    "job": {"args": ["--epochs", "3"]},
    "task": {"cloud": "id2", "index": 0, "trial": "1", "type": "worker"},
}

# Seed 003 (Vertex AI): the CLUSTER_SPEC example, four pools.
VERTEX_CLUSTER = {
    "workerpool0": ["cmle-training-workerpool0-ab-0:2222"],
    "workerpool1": ["cmle-training-workerpool1-ab-0:2222", "cmle-training-workerpool1-ab-1:2222"],
    "workerpool2": ["cmle-training-workerpool2-ab-0:2222", "cmle-training-workerpool2-ab-1:2222"],
    "workerpool3": [
        "cmle-training-workerpool3-ab-0:2222",
        "cmle-training-workerpool3-ab-1:2222",
        "cmle-training-workerpool3-ab-2:2222",
    ],
}

# Seed 004 (UCloud UAI Train): four nodes ip0..ip3, a master on ip0, a ps on every node; port-worker 2222, port-ps 2223.
UAI_CLUSTER = {
    "master": ["10.0.0.10:2222"],
    "ps": ["10.0.0.10:2223", "10.0.0.11:2223", "10.0.0.12:2223", "10.0.0.13:2223"],
    "worker": ["10.0.0.11:2222", "10.0.0.12:2222", "10.0.0.13:2222"],
}


def spec(cluster: dict, task: dict, **extra: object) -> str:
    return json.dumps({"cluster": cluster, "task": task, **extra})


def vertex(task_type: str, index: int, trial: object = "TRIAL_ID") -> dict[str, str]:
    task = {"type": task_type, "index": index, "trial": trial}
    return {"CLUSTER_SPEC": spec(VERTEX_CLUSTER, task, environment="cloud", job={"x": 1})}


def test_local_default_is_one_chief_process() -> None:
    info = parse_cluster({})
    assert info == ClusterInfo(
        platform="local",
        role="chief",
        index=0,
        rank=0,
        world_size=1,
        master_addr="127.0.0.1",
        master_port=DEFAULT_MASTER_PORT,
        trial=None,
        tf_config=None,
    )


def test_empty_variables_count_as_unset() -> None:
    assert parse_cluster({"CLUSTER_SPEC": "", "TF_CONFIG": "  "}).platform == "local"


@pytest.mark.parametrize(
    ("task_type", "index", "role", "rank"),
    [("master", 0, "chief", 0), ("worker", 0, "worker", 1), ("worker", 1, "worker", 2), ("ps", 0, "ps", None)],
)
def test_aiplatform_cluster_spec(task_type: str, index: int, role: str, rank: int | None) -> None:
    env = {"CLUSTER_SPEC": spec(AIPLATFORM_CLUSTER, {"type": task_type, "index": index, "trial": "1"}, job={})}
    info = parse_cluster(env)
    assert (info.platform, info.role, info.index, info.rank) == ("aiplatform", role, index, rank)
    assert info.world_size == 3
    assert (info.master_addr, info.master_port) == ("cmle-training-master-abc-0", 2222)
    assert info.trial == "1"
    assert info.tf_config is not None
    assert info.tf_config["cluster"] == {
        "chief": AIPLATFORM_CLUSTER["master"],
        "worker": AIPLATFORM_CLUSTER["worker"],
        "ps": AIPLATFORM_CLUSTER["ps"],
    }
    assert info.tf_config["task"] == {"type": role, "index": index, "trial": "1"}
    assert "environment" not in info.tf_config  # seed 000's CLUSTER_SPEC has none, and none is invented


def test_seed_001_tf_config_worker() -> None:
    info = parse_cluster({"TF_CONFIG": json.dumps(SEED_001_TF_CONFIG)})
    assert (info.platform, info.role, info.index, info.rank, info.world_size) == ("tf_config", "worker", 0, 1, 3)
    assert (info.master_addr, info.master_port) == ("cmle-training-chief-id1-0", 2222)
    assert info.trial == "1"
    assert info.tf_config == {
        "cluster": SEED_001_TF_CONFIG["cluster"],
        "environment": "cloud",
        "task": {"cloud": "id2", "index": 0, "trial": "1", "type": "worker"},
    }


def test_deprecated_master_in_tf_config_becomes_chief() -> None:
    cluster = {"master": ["m:2222"], "worker": ["w:2222"]}
    info = parse_cluster({"TF_CONFIG": spec(cluster, {"type": "master", "index": 0}, environment="cloud")})
    assert (info.role, info.rank, info.world_size) == ("chief", 0, 2)
    assert info.tf_config == {
        "cluster": {"chief": ["m:2222"], "worker": ["w:2222"]},
        "task": {"type": "chief", "index": 0},
        "environment": "cloud",
    }


def test_tf_config_without_chief_ranks_workers_from_zero() -> None:
    cluster = {"worker": ["w0:1234", "w1:1234"]}
    info = parse_cluster({"TF_CONFIG": spec(cluster, {"type": "worker", "index": 1})})
    assert (info.role, info.rank, info.world_size, info.master_addr, info.master_port) == ("worker", 1, 2, "w0", 1234)


@pytest.mark.parametrize(
    ("task_type", "index", "role", "rank"),
    [
        ("workerpool0", 0, "chief", 0),
        ("workerpool1", 0, "worker", 1),
        ("workerpool1", 1, "worker", 2),
        ("workerpool2", 1, "ps", None),
        ("workerpool3", 2, "evaluator", None),
    ],
)
def test_seed_003_vertex_every_pool(task_type: str, index: int, role: str, rank: int | None) -> None:
    info = parse_cluster(vertex(task_type, index))
    assert (info.platform, info.role, info.index, info.rank, info.world_size) == ("vertex", role, index, rank, 3)
    assert (info.master_addr, info.master_port) == ("cmle-training-workerpool0-ab-0", 2222)
    assert info.trial == "TRIAL_ID"
    assert info.tf_config == {
        "cluster": {
            "chief": VERTEX_CLUSTER["workerpool0"],
            "worker": VERTEX_CLUSTER["workerpool1"],
            "ps": VERTEX_CLUSTER["workerpool2"],
        },
        "environment": "cloud",
        "task": {"type": role, "index": index, "trial": "TRIAL_ID"},
    }


def test_seed_003_vertex_tf_config_example() -> None:
    tf_config = {
        "cluster": {
            "chief": ["training-workerpool0-id1-0:2222"],
            "ps": ["training-workerpool2-id1-0:2222"],
            "worker": ["training-workerpool1-id1-0:2222", "training-workerpool1-id1-1:2222"],
        },
        "environment": "cloud",
        "task": {"cloud": "id2", "index": 0, "trial": "1", "type": "worker"},
    }
    info = parse_cluster({"TF_CONFIG": json.dumps(tf_config)})
    assert (info.role, info.rank, info.world_size, info.master_addr) == ("worker", 1, 3, "training-workerpool0-id1-0")


@pytest.mark.parametrize(
    ("task_type", "index", "role", "rank"),
    [("master", 0, "chief", 0), ("worker", 0, "worker", 1), ("worker", 2, "worker", 3), ("ps", 3, "ps", None)],
)
def test_seed_004_uai_tf_config(task_type: str, index: int, role: str, rank: int | None) -> None:
    env = {"TF_CONFIG": spec(UAI_CLUSTER, {"type": task_type, "index": index}, environment="cloud")}
    info = parse_cluster(env)
    assert (info.platform, info.role, info.index, info.rank, info.world_size) == ("tf_config", role, index, rank, 4)
    assert (info.master_addr, info.master_port) == ("10.0.0.10", 2222)
    assert info.trial is None
    assert info.tf_config is not None
    assert info.tf_config["cluster"] == {
        "chief": UAI_CLUSTER["master"],
        "worker": UAI_CLUSTER["worker"],
        "ps": UAI_CLUSTER["ps"],
    }
    assert info.tf_config["task"] == {"type": role, "index": index}


def test_evaluator_in_tf_config_is_legal_and_never_in_cluster() -> None:
    cluster = {"chief": ["c:2222"], "worker": ["w:2222"], "evaluator": ["e:2222"]}
    info = parse_cluster({"TF_CONFIG": spec(cluster, {"type": "evaluator", "index": 0})})
    assert (info.role, info.rank, info.world_size) == ("evaluator", None, 2)
    assert info.tf_config is not None and "evaluator" not in info.tf_config["cluster"]
    outside = parse_cluster({"TF_CONFIG": spec({"chief": ["c:2222"]}, {"type": "evaluator", "index": 0})})
    assert (outside.role, outside.rank) == ("evaluator", None)


def test_cluster_spec_wins_over_tf_config() -> None:
    env = {**vertex("workerpool1", 0), "TF_CONFIG": json.dumps(SEED_001_TF_CONFIG)}
    info = parse_cluster(env)
    assert info.platform == "vertex"
    assert info.master_addr == "cmle-training-workerpool0-ab-0"


def test_cluster_spec_wins_even_when_tf_config_is_broken() -> None:
    assert parse_cluster({**vertex("workerpool0", 0), "TF_CONFIG": "{not json"}).platform == "vertex"


@pytest.mark.parametrize(
    ("address", "host", "port"),
    [("[::1]:2222", "::1", 2222), ("[fe80::1%eth0]:80", "fe80::1%eth0", 80), ("10.1.2.3:65535", "10.1.2.3", 65535)],
)
def test_addresses(address: str, host: str, port: int) -> None:
    assert split_address("TF_CONFIG", address) == (host, port)


def test_ipv6_chief() -> None:
    cluster = {"chief": ["[::1]:2222"], "worker": ["[fd00::2]:2222"]}
    info = parse_cluster({"TF_CONFIG": spec(cluster, {"type": "worker", "index": 0})})
    assert (info.master_addr, info.master_port) == ("::1", 2222)


@pytest.mark.parametrize(("trial", "expected"), [("7", "7"), (7, "7"), ("", None), (None, None)])
def test_trial(trial: object, expected: str | None) -> None:
    info = parse_cluster(vertex("workerpool0", 0, trial=trial))
    assert info.trial == expected
    assert info.tf_config is not None
    assert info.tf_config["task"].get("trial") == expected


def test_missing_trial_is_none() -> None:
    assert parse_cluster({"TF_CONFIG": spec({"chief": ["c:1"]}, {"type": "chief", "index": 0})}).trial is None


def test_nproc_per_node_adds_process_figures() -> None:
    info = parse_cluster(vertex("workerpool1", 1), nproc_per_node=4)
    assert (info.nnodes, info.node_rank, info.nproc_per_node, info.world_size_processes) == (3, 2, 4, 12)
    assert parse_cluster(vertex("workerpool1", 1)).nproc_per_node is None
    ps = parse_cluster(vertex("workerpool2", 0), nproc_per_node=2)
    assert (ps.nnodes, ps.node_rank) == (3, None)


@pytest.mark.parametrize("bad", [0, -1, True, "2"])
def test_nproc_per_node_must_be_a_positive_int(bad: object) -> None:
    with pytest.raises(ValueError, match="nproc_per_node"):
        parse_cluster({}, nproc_per_node=bad)  # type: ignore[arg-type]


def test_to_json_has_exactly_the_contract_keys() -> None:
    data = parse_cluster(vertex("workerpool1", 0)).to_json()
    assert set(data) == {
        "platform", "role", "index", "rank", "world_size", "master_addr", "master_port", "trial", "tf_config",
        "nnodes", "node_rank", "nproc_per_node", "world_size_processes", "variables", "started_by",
        "process_rank", "local_rank", "jax_coordinator",
    }  # fmt: skip
    assert json.loads(json.dumps(data)) == data


GOOD_CLUSTER = {"chief": ["c:2222"], "worker": ["w0:2222", "w1:2222"]}
BAD_VALUES = [
    pytest.param("CLUSTER_SPEC", "{not json", "JSON", id="not-json"),
    pytest.param("TF_CONFIG", "[1, 2]", "object", id="not-an-object"),
    pytest.param("TF_CONFIG", json.dumps({"cluster": GOOD_CLUSTER}), "task", id="no-task"),
    pytest.param("TF_CONFIG", spec(GOOD_CLUSTER, {"index": 0}), "type", id="task-without-type"),
    pytest.param("TF_CONFIG", spec(GOOD_CLUSTER, {"type": "worker"}), "index", id="index-missing"),
    pytest.param("TF_CONFIG", spec(GOOD_CLUSTER, {"type": "worker", "index": 1.0}), "integer", id="index-float"),
    pytest.param("TF_CONFIG", spec(GOOD_CLUSTER, {"type": "worker", "index": -1}), "negative", id="index-negative"),
    pytest.param("TF_CONFIG", spec(GOOD_CLUSTER, {"type": "worker", "index": 2}), "out of range", id="index-range"),
    pytest.param("TF_CONFIG", spec(GOOD_CLUSTER, {"type": "ps", "index": 0}), "not in the cluster", id="role-absent"),
    pytest.param("TF_CONFIG", spec({"chief": ["c"]}, {"type": "chief", "index": 0}), "no port", id="no-port"),
    pytest.param("TF_CONFIG", spec({"chief": ["c:22a"]}, {"type": "chief", "index": 0}), "integer", id="port-text"),
    pytest.param("TF_CONFIG", spec({"chief": ["c:0"]}, {"type": "chief", "index": 0}), "1..65535", id="port-zero"),
    pytest.param("TF_CONFIG", spec({"chief": ["c:70000"]}, {"type": "chief", "index": 0}), "1..65535", id="port-big"),
    pytest.param("TF_CONFIG", spec({"chief": ["[::1]"]}, {"type": "chief", "index": 0}), "no port", id="v6-no-port"),
    pytest.param("TF_CONFIG", spec({"chief": ["::1:22"]}, {"type": "chief", "index": 0}), "brackets", id="bare-v6"),
    pytest.param(
        "CLUSTER_SPEC",
        spec({**VERTEX_CLUSTER, "workerpool4": ["x:1"]}, {"type": "workerpool0", "index": 0}),
        "workerpool4",
        id="unknown-pool",
    ),
    pytest.param(
        "CLUSTER_SPEC", spec(VERTEX_CLUSTER, {"type": "workerpool4", "index": 0}), "workerpool4", id="unknown-type"
    ),
    pytest.param("TF_CONFIG", spec({**GOOD_CLUSTER, "foo": ["f:1"]}, {"type": "chief", "index": 0}), "foo", id="foo"),
    pytest.param(
        "CLUSTER_SPEC",
        spec({"master": ["m0:1", "m1:1"], "worker": ["w:1"]}, {"type": "worker", "index": 0}),
        "exactly one",
        id="two-masters",
    ),
    pytest.param(
        "TF_CONFIG",
        spec({"chief": ["c:1"], "master": ["m:1"]}, {"type": "chief", "index": 0}),
        "twice",
        id="chief-and-master",
    ),
    pytest.param("TF_CONFIG", spec({"ps": ["p:1"]}, {"type": "ps", "index": 0}), "no chief", id="only-ps"),
    pytest.param(
        "CLUSTER_SPEC",
        spec({"workerpool0": ["c:1"]}, {"type": "workerpool3", "index": 0}),
        "not in the cluster",
        id="vertex-evaluator-without-pool",
    ),
    pytest.param(
        "TF_CONFIG", spec(GOOD_CLUSTER, {"type": "chief", "index": 0, "trial": [1]}), "trial", id="trial-list"
    ),
    pytest.param("TF_CONFIG", spec({"chief": "c:1"}, {"type": "chief", "index": 0}), "list", id="pool-not-list"),
]


@pytest.mark.parametrize(("variable", "value", "fault"), BAD_VALUES)
def test_bad_values_name_the_variable(variable: str, value: str, fault: str) -> None:
    with pytest.raises(ClusterError) as caught:
        parse_cluster({variable: value})
    err = caught.value
    assert err.variable == variable
    assert str(err).startswith(f"{variable}: ")
    assert fault in str(err)
    assert "\n" not in str(err)


def test_cluster_error_is_a_value_error() -> None:
    assert issubclass(ClusterError, ValueError)


def test_main_json(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.setenv("CLUSTER_SPEC", vertex("workerpool1", 1)["CLUSTER_SPEC"])
    assert main(["--json", "--nproc-per-node", "2"]) == 0
    out = capsys.readouterr().out
    assert out == json.dumps(parse_cluster(vertex("workerpool1", 1), 2).to_json(), sort_keys=True) + "\n"
    data = json.loads(out)
    assert (data["role"], data["rank"], data["world_size_processes"]) == ("worker", 2, 6)


def test_main_local_json(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("CLUSTER_SPEC", raising=False)
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert main(["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["platform"], data["rank"], data["world_size"], data["nnodes"]) == ("local", 0, 1, None)


def test_main_summary(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CLUSTER_SPEC", vertex("workerpool2", 0)["CLUSTER_SPEC"])
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "vertex" in out and "ps 0" in out and "cmle-training-workerpool0-ab-0:2222" in out


def test_main_bad_value_exits_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CLUSTER_SPEC", "{oops")
    assert main(["--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("trainimg: CLUSTER_SPEC: ")
    assert captured.err.count("\n") == 1


def test_main_rejects_bad_nproc(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--nproc-per-node", "0"]) == 2
    assert "nproc-per-node" in capsys.readouterr().err


# --- hosts, depth, the Reduction Server pool ------------------------------------------------------------------------


@pytest.mark.parametrize("address", ["a\nb:1", "$(rm -rf /):1", "host name:1", "-lead:1", "a..b:1", "x_y:1",
                                     "999.1.1.1:1", "1.2.3:1", "[fe80::1%$(id)]:1", "[fe80::1%]:1", "[not-v6]:1", "h;ls:1",
                                     "h`id`:1", "a" * 64 + ":1", "é.example:1"])
def test_bad_hosts_are_refused(address: str) -> None:
    with pytest.raises(ClusterError, match="host name, IPv4|not an IPv4|not an IPv6") as caught:
        parse_cluster({"TF_CONFIG": spec({"chief": [address]}, {"type": "chief", "index": 0})})
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("address", ["cmle-training-workerpool0-ab-0:2222", "10.0.0.10:2222", "[::1]:80",
                                     "[2001:db8::7]:2222", "localhost:1", "a.b.c.example.:2222", "x0:65535"])
def test_good_hosts(address: str) -> None:
    assert parse_cluster({"TF_CONFIG": spec({"chief": [address]}, {"type": "chief", "index": 0})}).world_size == 1


@pytest.mark.parametrize("depth", [50_000, 2_000])
def test_deep_json_is_one_line(depth: int) -> None:
    for text in ("[" * depth + "]" * depth, '{"cluster": ' + "[" * depth + "]" * depth + "}"):
        with pytest.raises(ClusterError) as caught:
            parse_cluster({"CLUSTER_SPEC": text})
        assert "\n" not in str(caught.value)


def test_nested_task_fields_are_refused() -> None:
    deep = {"type": "chief", "index": 0, "note": json.loads("[" * 500 + "]" * 500)}
    with pytest.raises(ClusterError, match="task field 'note'"):
        parse_cluster({"TF_CONFIG": spec({"chief": ["c:1"]}, deep)})
    with pytest.raises(ClusterError, match="'environment' must be a string"):
        parse_cluster({"TF_CONFIG": spec({"chief": ["c:1"]}, {"type": "chief", "index": 0}, environment=[1])})


def test_reduction_server_pool_stays_out_of_tf_config() -> None:
    env = {"CLUSTER_SPEC": spec(VERTEX_CLUSTER, {"type": "workerpool1", "index": 1})}
    assert parse_cluster(env).tf_config["cluster"]["ps"] == VERTEX_CLUSTER["workerpool2"]
    info = parse_cluster(env, reduction_server=True)
    assert set(info.tf_config["cluster"]) == {"chief", "worker"}
    assert (info.role, info.rank, info.world_size) == ("worker", 2, 3)
    with pytest.raises(ClusterError, match="Reduction Server pool"):
        parse_cluster({"CLUSTER_SPEC": spec(VERTEX_CLUSTER, {"type": "workerpool2", "index": 0})},
                      reduction_server=True)


@pytest.mark.parametrize("runner", [
    ["trainimg", "cluster", "--json"],
    [sys.executable, "-m", "trainimg.runtime", "cluster", "--json"],
], ids=["host", "in-image"])
@pytest.mark.parametrize("value", ["[" * 50_000 + "]" * 50_000, spec({"chief": ["$(rm -rf /):1"]},
                                                                     {"type": "chief", "index": 0})],
                         ids=["deep", "shell-host"])
def test_cli_bad_values_exit_2_with_one_line(runner: list[str], value: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("CLUSTER_SPEC", "TF_CONFIG")}
    result = subprocess.run(runner, env={**env, "CLUSTER_SPEC": value}, capture_output=True, text=True, timeout=60,
                            cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 2, result.stderr
    assert result.stdout == "" and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    # The host CLI names the verb that failed (errors.TrainimgError.lines); the in-image one is a single command.
    prefix = "trainimg cluster: " if runner[0] == "trainimg" else "trainimg: "
    assert result.stderr.startswith(f"{prefix}CLUSTER_SPEC: ")


# TensorFlow's own reading is the rule for TF_CONFIG (TFConfigClusterResolver; tests/test_clients.py compares them):
# no cluster is one machine, and a task index is read with int().
@pytest.mark.parametrize(
    "text",
    [
        pytest.param("{}", id="empty-object"),
        pytest.param(spec({}, {"type": "chief", "index": 0}), id="empty-cluster"),
        pytest.param(json.dumps({"task": {"type": "chief", "index": 0}}), id="no-cluster"),
    ],
)
def test_tf_config_without_a_cluster_is_one_machine(text: str) -> None:
    info = parse_cluster({"TF_CONFIG": text})
    assert (info.platform, info.world_size, info.rank, info.variables) == ("tf_config", 1, 0, ("TF_CONFIG",))


def test_tf_config_task_index_as_a_string_is_read_as_tensorflow_reads_it() -> None:
    info = parse_cluster({"TF_CONFIG": spec(GOOD_CLUSTER, {"type": "worker", "index": "0"})})
    assert (info.role, info.index) == ("worker", 0)


def test_cluster_spec_still_needs_a_cluster() -> None:
    with pytest.raises(ClusterError, match="empty or missing 'cluster'"):
        parse_cluster({"CLUSTER_SPEC": spec({}, {"type": "chief", "index": 0})})
