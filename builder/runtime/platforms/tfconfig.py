"""``CLUSTER_SPEC`` and ``TF_CONFIG``: Vertex AI, AI Platform Training, UCloud UAI Train, Kubeflow's TFJob, Azure ML's
``tensorflow`` distribution: one container per replica, roles chief/worker/ps/evaluator (see the seeds).

* **Vertex AI**: ``CLUSTER_SPEC`` on every replica, pools named ``workerpool0`` (the one primary replica),
  ``workerpool1`` (workers), ``workerpool2`` (parameter or reduction servers), ``workerpool3`` (evaluators);
  ``TF_CONFIG`` only for multi-replica jobs.
* **AI Platform Training**: ``CLUSTER_SPEC`` with ``master``/``worker``/``ps``, and ``TF_CONFIG`` with ``chief``
  (or the deprecated ``master`` that TensorFlow 2 rejects).
* **UAI Train, TFJob**: ``TF_CONFIG`` only; UAI names its chief ``master`` and runs a ps next to it.

``CLUSTER_SPEC`` wins when both are set: it is the platform's own description, while ``TF_CONFIG`` may be an older
or rewritten copy. A ``TF_CONFIG`` without a cluster (``{}``, ``{"cluster": {}}``) is one machine, as TensorFlow's
``TFConfigClusterResolver`` reads it; a task index written as a string of digits is read as TensorFlow reads it.

Why one module for several platforms: their variables are one family, so detection asks one parser (the
``READER`` of `vertex`, `aiplatform`, `uai` and `tfjob`, whose own modules hold their replays); `cloud` lays out
the two cloud dialects those modules choose between.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..contract import AIPLATFORM, TFJOB, UAI, VERTEX, VERTEX_POOLS
from ..topology_spec import CLUSTER_SPEC, TF_CONFIG, Job, ReplicaSpec, tf_config_json
from ..world import ClusterError, ClusterInfo, format_address, local_world, present, split_address

NAME = "tf_config"
PORT = 2222  # the port of the cloud platforms' TF_CONFIG examples and the TFJob's default, where a job names none
VARIABLES = (CLUSTER_SPEC, TF_CONFIG)
RECOGNISED = VARIABLES  # what `platforms.VARIABLES` gathers: every variable it recognises a platform by

# The TensorFlow-style names AI Platform's CLUSTER_SPEC and every TF_CONFIG use; `master` is the deprecated chief.
_TF_TYPES = {"chief": "chief", "master": "chief", "worker": "worker", "ps": "ps", "evaluator": "evaluator"}


def claims(env: Mapping[str, str]) -> tuple[str, ...]:
    return present(env, VARIABLES)


def read(env: Mapping[str, str], *, reduction_server: bool = False) -> ClusterInfo:
    """This replica from ``CLUSTER_SPEC`` (first) or ``TF_CONFIG``.

    `reduction_server`: the job's pool 2 (``workerpool2``, in TF terms ``ps``) holds Vertex Reduction Server
    replicas, which run Google's image rather than TensorFlow, so they are kept out of ``TF_CONFIG`` (otherwise
    TensorFlow waits for ``/job:ps/task:0`` as its coordination leader forever).
    """
    found = claims(env)
    if not found:
        # Forced (--platform vertex, aiplatform, uai, tfjob) on an env that has neither: name both, not an index.
        raise ClusterError(VARIABLES[0], f"is not set, nor {VARIABLES[1]}: {VERTEX} and {AIPLATFORM} set "
                                         f"{VARIABLES[0]}, {UAI} and {TFJOB} {VARIABLES[1]}")
    return _parse_variable(found[0], env[found[0]], reduction_server)


def parse_tf_config(text: str) -> ClusterInfo:
    """A ``TF_CONFIG`` alone, whatever else is set: how a process trainimg-launch started (`launched`) reads the
    TF2-ready copy the launcher wrote, with the same checks as the platform's own (one parser, one set of errors)."""
    return _parse_variable("TF_CONFIG", text, False)


def _parse_variable(variable: str, text: str, reduction_server: bool) -> ClusterInfo:
    """Validate one variable's JSON and map its pools and task onto canonical roles."""
    try:
        spec = json.loads(text)
    except ValueError as err:
        raise ClusterError(variable, f"is not valid JSON ({err})") from None
    except RecursionError:
        raise ClusterError(variable, "nests its JSON too deeply for any platform to have sent it") from None
    if not isinstance(spec, dict):
        raise ClusterError(variable, f"must be a JSON object, got {type(spec).__name__}")
    cluster = spec.get("cluster")
    if variable == "TF_CONFIG" and (cluster is None or cluster == {}):
        # TFConfigClusterResolver: no cluster is an empty ClusterSpec, a single machine, whatever the task says.
        return replace(local_world(), platform=NAME, variables=(variable,))
    if not isinstance(cluster, dict) or not any(cluster.values()):
        raise ClusterError(variable, "has an empty or missing 'cluster'")

    vertex = variable == "CLUSTER_SPEC" and any(str(k).startswith("workerpool") for k in cluster)
    names = VERTEX_POOLS if vertex else _TF_TYPES
    platform = VERTEX if vertex else (AIPLATFORM if variable == "CLUSTER_SPEC" else NAME)
    pools = _read_pools(variable, cluster, names)
    group = pools.get("chief", []) + pools.get("worker", [])
    task = spec.get("task")
    if not isinstance(task, dict):
        raise ClusterError(variable, "has no 'task' object")
    role, index = _read_task(variable, task, names, pools, evaluator_outside=not vertex)
    trial = _trial(variable, task.get("trial"))

    if reduction_server and role == "ps":
        raise ClusterError(variable, "this replica is in the Reduction Server pool, which runs Google's reducer "
                                     "image, not trainimg's launcher")
    rank = {"chief": 0, "worker": index + 1 if pools.get("chief") else index}.get(role)
    master_addr, master_port = split_address(variable, group[0])
    roles = ("chief", "worker") if reduction_server else ("chief", "worker", "ps")
    tf_config = _tf_config(variable, spec, {name: list(pools[name]) for name in roles if pools.get(name)},
                           task, role, index, trial)
    return ClusterInfo(
        platform=platform,
        role=role,
        index=index,
        rank=rank,
        world_size=len(group),
        master_addr=master_addr,
        master_port=master_port,
        trial=trial,
        tf_config=tf_config,
        variables=(variable,),
    )


def _tf_config(variable: str, spec: dict[str, Any], tf_cluster: dict[str, list[str]], task: dict[str, Any],
               role: str, index: int, trial: str | None) -> dict[str, Any]:
    """The TF2-ready TF_CONFIG: canonical task type and index, other task fields and ``environment`` kept.

    Kept fields must be JSON scalars: they are copied into every process's environment, and a nested value is
    nothing a platform sends (and could nest deeper than the JSON encoder goes).
    """
    tf_task: dict[str, Any] = {}
    for key, value in task.items():
        if key in ("type", "index", "trial"):
            continue
        if isinstance(value, (dict, list)):
            raise ClusterError(variable, f"task field {key!r} must be a string, number or boolean")
        tf_task[key] = value
    tf_task.update(type=role, index=index)
    if trial is not None:
        tf_task["trial"] = trial
    tf_config: dict[str, Any] = {"cluster": tf_cluster, "task": tf_task}
    if "environment" in spec:
        if not isinstance(spec["environment"], str):
            raise ClusterError(variable, f"'environment' must be a string, got {type(spec['environment']).__name__}")
        tf_config["environment"] = spec["environment"]
    return tf_config


def _read_pools(variable: str, cluster: dict[str, Any], names: Mapping[str, str]) -> dict[str, list[str]]:
    """Canonical role -> addresses, every address checked; one chief at most, and someone to train on."""
    pools: dict[str, list[str]] = {}
    for key, addresses in cluster.items():
        role = names.get(key)
        if role is None:
            raise ClusterError(variable, f"unknown cluster pool {key!r} (expected one of {', '.join(names)})")
        if role in pools:
            raise ClusterError(variable, "cluster names its chief twice ('chief' and 'master')")
        if not isinstance(addresses, list):
            raise ClusterError(variable, f"cluster pool {key!r} must be a list of 'host:port' strings")
        for address in addresses:
            split_address(variable, address)
        pools[role] = addresses
    if len(pools.get("chief", [])) > 1:
        raise ClusterError(variable, f"cluster has {len(pools['chief'])} chief/master entries; exactly one is allowed")
    if not pools.get("chief") and not pools.get("worker"):
        raise ClusterError(variable, "cluster has no chief, master or worker to train on")
    return pools


def _read_task(
    variable: str,
    task: dict[str, Any],
    names: Mapping[str, str],
    pools: Mapping[str, list[str]],
    *,
    evaluator_outside: bool,
) -> tuple[str, int]:
    """(role, index) of this replica's task, which must point at an entry of the cluster.

    `evaluator_outside`: an evaluator absent from the cluster is how TF_CONFIG (and AI Platform) describe it, since
    it is not a training peer; Vertex lists it in workerpool3 instead.
    """
    task_type = task.get("type")
    if not isinstance(task_type, str) or not task_type:
        raise ClusterError(variable, "task has no 'type'")
    role = names.get(task_type)
    if role is None:
        raise ClusterError(variable, f"unknown task type {task_type!r} (expected one of {', '.join(names)})")
    if "index" not in task:
        raise ClusterError(variable, "task has no 'index'")
    index = task["index"]
    if isinstance(index, str) and index.strip().isdigit() and index.strip().isascii():
        index = int(index)  # TensorFlow reads the index with int(): "0" is task 0
    if isinstance(index, bool) or not isinstance(index, int):
        raise ClusterError(variable, f"task index {index!r} is not an integer")
    if index < 0:
        raise ClusterError(variable, f"task index {index} is negative")
    if role in pools:
        if index >= len(pools[role]):
            raise ClusterError(
                variable, f"task index {index} is out of range for {task_type!r} ({len(pools[role])} entries)"
            )
    elif not (role == "evaluator" and evaluator_outside):
        raise ClusterError(variable, f"task type {task_type!r} is not in the cluster")
    return role, index


def _trial(variable: str, value: object) -> str | None:
    """Platforms send the trial as a string ("1"); accept an int too, and treat empty as "not tuning"."""
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ClusterError(variable, f"task trial {value!r} is not a string")
    return str(value)


# -- the replay, shared by the platforms whose replicas are described this way (`vertex`, `aiplatform`) ---------
def cloud(job: Job, spec_type: Mapping[str, str], *, spec_roles: tuple[str, ...], tf_chief: str,
          always_tf_config: bool) -> list[ReplicaSpec]:
    """A cloud job's replicas: ``CLUSTER_SPEC`` in the platform's dialect (`spec_type`: role -> its pool's name,
    `spec_roles`: the roles its cluster lists) on every replica, and ``TF_CONFIG`` (its chief called `tf_chief`)
    where the job has more than one replica or the platform always sends it (`topology`'s module doc)."""
    counts = {"chief": 1, "worker": job.replicas - 1, "ps": job.ps or 0, "evaluator": job.evaluators}
    names = {role: [job.hosts(role, i) for i in range(count)] for role, count in counts.items()}
    addresses = {role: [format_address(host, job.port) for host in names[role]] for role in counts}
    tf_names = {"chief": tf_chief, "worker": "worker", "ps": "ps"}
    tf_cluster = {tf_names[role]: addresses[role] for role in tf_names if addresses[role]}
    send_tf_config = always_tf_config or sum(counts.values()) > 1
    spec_cluster = {spec_type[role]: addresses[role] for role in spec_roles if addresses[role]}
    specs = []
    for role in counts:
        for index, host in enumerate(names[role]):
            env = {CLUSTER_SPEC: tf_config_json(spec_cluster, spec_type[role], index, job.trial)}
            if send_tf_config:
                env[TF_CONFIG] = tf_config_json(tf_cluster, tf_names.get(role, role), index, job.trial)
            specs.append(ReplicaSpec(f"{role}-{index}", role, index, None, env, host))
    return specs
