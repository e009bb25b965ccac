"""One replica of a replayed job (`ReplicaSpec`) and the TF_CONFIG-style JSON several platforms write.

Its own module because every platform module (`platforms`) builds these for its replay and `topology` dispatches
to them: the shared shape must sit below all of them for the imports to stay acyclic.
Standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .world import node_role

CLUSTER_SPEC, TF_CONFIG = "CLUSTER_SPEC", "TF_CONFIG"  # the TF-style variables (`platforms.tfconfig` reads them)
OPERATOR_ENV = {"PYTHONUNBUFFERED": "1"}  # what the Training Operator adds to every PyTorchJob and JAXJob container


@dataclass(frozen=True)
class ReplicaSpec:
    """One container to start: its canonical `role` and `index`, and the `env` its platform would inject.

    `host` is the hostname the platform gives it (a pod's name, a Slurm node's name); replicas that share a `node`
    (UAI's ps beside its node's master or worker, the tasks Slurm starts on one node) share that node's `host` and
    network namespace. `aliases` are further DNS names peers reach it by (a pod's ``<host>.<subdomain>``, a
    Service's ``<host>.<namespace>.svc``). `files` are files the platform writes into the container, path -> text
    (SageMaker's ``/opt/ml/input/config/resourceconfig.json``): a replay mounts each read-only at its path.
    """

    name: str  # the platform's own name for it, unique within a job: "chief-0", "master-0", "node-0-1", "task-3"
    role: str  # chief, worker, ps or evaluator, as the runtime reads the replica
    index: int
    node: int | None
    env: dict[str, str]
    host: str
    aliases: tuple[str, ...] = ()
    files: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Job:
    """A job to replay, as `topology.replica_specs` checked it: what each platform module's ``replicas(job)`` lays
    out. `port` is the caller's or the platform module's ``PORT``; `hosts(role, index)` names a cloud replica's
    host; `job_id` is Slurm's (None: derived from `name`)."""

    platform: str
    replicas: int
    name: str
    port: int
    hosts: Callable[[str, int], str]
    nproc: int = 1
    ps: int | None = None
    evaluators: int = 0
    trial: str | None = None
    use_chief_in_tf_config: bool = False
    framework: str = "pytorch"
    job_id: int | None = None


def node_spec(name: str, index: int, env: dict[str, str], host: str, aliases: tuple[str, ...]) -> ReplicaSpec:
    """A replica of a platform without roles: node 0 is the chief, node i worker i - 1 (`world.node_role`)."""
    role, role_index = node_role(index)
    return ReplicaSpec(name, role, role_index, None, env, host, aliases)


def tf_config_json(cluster: dict[str, list[str]], task_type: str, index: int, trial: str | None) -> str:
    """One replica's CLUSTER_SPEC or TF_CONFIG: the shared cluster, its own task, and ``environment: cloud`` as
    every platform that writes one sends it."""
    task: dict[str, Any] = {"type": task_type, "index": index}
    if trial is not None:
        task["trial"] = trial
    return json.dumps({"cluster": cluster, "environment": "cloud", "task": task}, sort_keys=True)
