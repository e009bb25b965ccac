"""The cluster variables each platform injects into a job's replicas, so the host can replay a platform locally.

Conformance runs start one container per replica and must give each exactly what the real platform would, or a
green local run proves nothing about the cloud one. The shapes follow the platforms' documentation (seeds 000-004):

* ``vertex``: pools ``workerpool0`` (one chief), ``workerpool1`` (``replicas - 1`` workers), ``workerpool2``
  (``ps``), ``workerpool3`` (``evaluators``) in ``CLUSTER_SPEC`` on every replica; ``TF_CONFIG`` (chief/worker/ps,
  evaluator never in the cluster) only when the job has more than one replica in total.
* ``aiplatform``: ``CLUSTER_SPEC`` with ``master``/``worker``/``ps`` and ``TF_CONFIG`` on every replica. A custom
  container's TF_CONFIG names the chief with the deprecated ``master`` (TensorFlow 2 rejects it) unless the job set
  ``useChiefInTfConfig`` (``use_chief_in_tf_config=True`` here): the service's default is replayed by default, since
  that is what an image meets when a job does not opt in (seed 001, "chief en comparación con master").
* ``uai``: ``TF_CONFIG`` only, nodes ``0..replicas-1``: node 0 runs the ``master``, node i >= 1 runs worker i-1,
  and every node also runs a ps (ps i on node i, same host, ``port + 1``) unless ``ps`` says how many (then ps
  0..ps-1 on nodes 0..ps-1). A ps shares its node's host, so its spec carries ``node`` for the caller to share the
  network namespace.

Unused pools are left out of the cluster. Replicas come back chief first, then workers, ps and evaluators.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .world import format_address
from .contract import AIPLATFORM, PLATFORMS, UAI, VERTEX, VERTEX_POOLS


_VERTEX_POOL = {role: pool for pool, role in VERTEX_POOLS.items()}


@dataclass(frozen=True)
class ReplicaSpec:
    """One replica to start: its canonical `role` and `index`, and the `env` its platform would inject."""

    name: str  # "<role>-<index>", e.g. "chief-0", "worker-1": unique within a job, usable in container names
    role: str  # chief, worker, ps or evaluator
    index: int
    node: int | None  # UAI only: the node whose host (network namespace) this replica runs on
    env: dict[str, str]


def replica_specs(
    platform: str,
    replicas: int,
    *,
    ps: int | None = None,
    evaluators: int = 0,
    hosts: Callable[[str, int], str],
    port: int = 2222,
    trial: str | None = None,
    use_chief_in_tf_config: bool = False,
) -> list[ReplicaSpec]:
    """Every replica of a `platform` job with `replicas` training replicas (chief plus workers).

    `hosts(role, index)` names the host a replica is reachable at (role is chief, worker, ps or evaluator; UAI ps
    replicas reuse their node's host and never ask). `trial` goes into each task as the platforms send it. Raises
    ValueError for counts a platform would refuse.
    """
    for name, value, least in (("replicas", replicas, 1), ("ps", ps, 0), ("evaluators", evaluators, 0)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    if platform not in PLATFORMS:
        raise ValueError(f"unknown platform {platform!r}; expected one of {', '.join(PLATFORMS)}")
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= (65534 if platform == UAI else 65535):
        raise ValueError(f"port must be an integer in 1..65535 (UAI also uses port + 1), got {port!r}")
    if use_chief_in_tf_config and platform != AIPLATFORM:
        raise ValueError("use_chief_in_tf_config applies to aiplatform only: the others never send 'master' to TF2")
    if platform == UAI:
        if evaluators:
            raise ValueError("uai has no evaluator replicas; pass evaluators=0")
        return _uai(replicas, replicas if ps is None else ps, hosts, port, trial)
    counts = {"chief": 1, "worker": replicas - 1, "ps": ps or 0, "evaluator": evaluators}
    addresses = {
        role: [format_address(hosts(role, i), port) for i in range(count)] for role, count in counts.items()
    }
    tf_chief = "master" if platform == AIPLATFORM and not use_chief_in_tf_config else "chief"
    tf_names = {"chief": tf_chief, "worker": "worker", "ps": "ps"}
    tf_cluster = {tf_names[role]: addresses[role] for role in tf_names if addresses[role]}
    send_tf_config = platform == AIPLATFORM or sum(counts.values()) > 1
    if platform == VERTEX:
        spec_cluster = {_VERTEX_POOL[role]: addresses[role] for role in counts if addresses[role]}
        spec_type = _VERTEX_POOL
    else:
        # AI Platform's CLUSTER_SPEC always says master; an evaluator's task type is not in its cluster.
        spec_type = {"chief": "master", "worker": "worker", "ps": "ps", "evaluator": "evaluator"}
        spec_cluster = {spec_type[role]: addresses[role] for role in tf_names if addresses[role]}
    specs = []
    for role, count in counts.items():
        for index in range(count):
            env = {"CLUSTER_SPEC": _dump(spec_cluster, spec_type[role], index, trial)}
            if send_tf_config:
                env["TF_CONFIG"] = _dump(tf_cluster, tf_names.get(role, role), index, trial)
            specs.append(ReplicaSpec(name=f"{role}-{index}", role=role, index=index, node=None, env=env))
    return specs


def _uai(replicas: int, ps: int, hosts: Callable[[str, int], str], port: int, trial: str | None) -> list[ReplicaSpec]:
    """UAI Train: one master or worker per node, and ps 0..ps-1 beside them on nodes 0..ps-1 at port + 1."""
    if ps > replicas:
        raise ValueError(f"uai places at most one ps per node: ps={ps} exceeds replicas={replicas}")
    node_hosts = [hosts("chief", 0)] + [hosts("worker", i) for i in range(replicas - 1)]
    cluster = {
        "master": [format_address(node_hosts[0], port)],
        "ps": [format_address(node_hosts[i], port + 1) for i in range(ps)],
        "worker": [format_address(host, port) for host in node_hosts[1:]],
    }
    cluster = {name: entries for name, entries in cluster.items() if entries}
    specs = [ReplicaSpec("chief-0", "chief", 0, 0, {"TF_CONFIG": _dump(cluster, "master", 0, trial)})]
    specs += [
        ReplicaSpec(f"worker-{i}", "worker", i, i + 1, {"TF_CONFIG": _dump(cluster, "worker", i, trial)})
        for i in range(replicas - 1)
    ]
    specs += [ReplicaSpec(f"ps-{i}", "ps", i, i, {"TF_CONFIG": _dump(cluster, "ps", i, trial)}) for i in range(ps)]
    return specs


def _dump(cluster: dict[str, list[str]], task_type: str, index: int, trial: str | None) -> str:
    """One replica's variable: the shared cluster, its own task, and ``environment: cloud`` as every platform sends."""
    task: dict[str, Any] = {"type": task_type, "index": index}
    if trial is not None:
        task["trial"] = trial
    return json.dumps({"cluster": cluster, "environment": "cloud", "task": task}, sort_keys=True)
