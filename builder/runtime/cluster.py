"""Who am I in the training cluster? One parser for every platform's ``CLUSTER_SPEC`` / ``TF_CONFIG``.

Training platforms start the same container on every replica and tell each one its role through environment
variables whose shapes differ (see ``/work/shared/seeds``):

* **Vertex AI**: ``CLUSTER_SPEC`` on every replica, pools named ``workerpool0`` (the one primary replica),
  ``workerpool1`` (workers), ``workerpool2`` (parameter or reduction servers), ``workerpool3`` (evaluators);
  ``TF_CONFIG`` only for multi-replica jobs.
* **AI Platform Training**: ``CLUSTER_SPEC`` with ``master``/``worker``/``ps``, and ``TF_CONFIG`` with ``chief``
  (or the deprecated ``master`` that TensorFlow 2 rejects).
* **UCloud UAI Train, Kubeflow TFJob**: ``TF_CONFIG`` only; UAI names its chief ``master`` and runs a ps next to it.

`parse_cluster` reads whichever is set (``CLUSTER_SPEC`` wins: it is the platform's own description, while
``TF_CONFIG`` may be an older or rewritten copy) into one `ClusterInfo` with the facts every framework needs: a
canonical role (chief, worker, ps, evaluator), the node-level rank and world size of the all-reduce group (chief plus
workers), the chief's address, and a TensorFlow 2 ready ``TF_CONFIG``. With neither variable set it describes a
single local process, so the same entry point works on a laptop.

Every fault raises `ClusterError`, whose one-line message names the variable and what is wrong with it; the
``cluster`` verb prints it and exits 2 so a misconfigured replica stops before training starts.
"""

from __future__ import annotations

import argparse
import copy
import ipaddress
import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from .contract import EXIT_USAGE, VERTEX_POOLS

#: Where a single local process "meets" itself: torch.distributed's customary default rendezvous.
DEFAULT_MASTER_ADDR = "127.0.0.1"
DEFAULT_MASTER_PORT = 29500

# Vertex AI's pools in workerPoolSpecs[] order (seed 003); a fifth pool does not exist.
# The TensorFlow-style names AI Platform's CLUSTER_SPEC and every TF_CONFIG use; `master` is the deprecated chief.
_TF_TYPES = {"chief": "chief", "master": "chief", "worker": "worker", "ps": "ps", "evaluator": "evaluator"}
_PORT = re.compile(r"[0-9]{1,5}")
# RFC 1123 host names: dot-separated labels of letters, digits and inner hyphens, 253 characters at most.
_HOSTNAME = re.compile(r"(?=.{1,253}\Z)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?")
_DOTTED_DIGITS = re.compile(r"[0-9.]+")
_ZONE = re.compile(r"[A-Za-z0-9_.-]{1,15}")


class ClusterError(ValueError):
    """A cluster variable this replica cannot trust; ``str(err)`` is one line naming `variable` and the fault."""

    def __init__(self, variable: str, fault: str) -> None:
        # Values quoted from JSON may hold newlines; the message must stay one line for logs and `trainimg: ...`.
        self.variable = variable
        self.fault = " ".join(fault.split())
        super().__init__(f"{variable}: {self.fault}")


@dataclass(frozen=True)
class ClusterInfo:
    """This replica's place in the job, in framework-neutral terms.

    `rank` and `world_size` count replicas (nodes) of the all-reduce group, chief first: the platform's view is one
    replica per machine. The ``nproc_per_node`` figures are filled only when the caller says how many processes
    each replica starts, because only then is the per-process world known.
    """

    platform: str  # vertex, aiplatform, tf_config or local
    role: str  # chief, worker, ps or evaluator
    index: int  # the task index the platform gave, within its role or pool
    rank: int | None  # chief 0, workers after it; None for ps and evaluator, which are not in the group
    world_size: int  # chief plus workers
    master_addr: str  # the chief's host (worker 0's without a chief), IPv6 without brackets
    master_port: int
    trial: str | None  # hyperparameter-tuning trial id, None outside tuning
    tf_config: dict[str, Any] | None  # TF2-ready TF_CONFIG; None for a local process, which needs none
    nnodes: int | None = None
    node_rank: int | None = None
    nproc_per_node: int | None = None
    world_size_processes: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The stable JSON form the ``cluster --json`` verb prints and host-side checks compare against."""
        return {
            "platform": self.platform,
            "role": self.role,
            "index": self.index,
            "rank": self.rank,
            "world_size": self.world_size,
            "master_addr": self.master_addr,
            "master_port": self.master_port,
            "trial": self.trial,
            "tf_config": copy.deepcopy(self.tf_config),
            "nnodes": self.nnodes,
            "node_rank": self.node_rank,
            "nproc_per_node": self.nproc_per_node,
            "world_size_processes": self.world_size_processes,
        }


def parse_cluster(env: Mapping[str, str], nproc_per_node: int | None = None, *,
                  reduction_server: bool = False) -> ClusterInfo:
    """Describe this replica from `env` (``CLUSTER_SPEC`` first, then ``TF_CONFIG``, else one local process).

    An empty variable counts as unset: ``docker run -e CLUSTER_SPEC=`` means "no cluster", not a broken one.
    `nproc_per_node` (processes this replica will start) adds the per-process figures; it must be an int >= 1.
    `reduction_server`: the job's pool 2 (``workerpool2``, in TF terms ``ps``) holds Vertex Reduction Server
    replicas, which run Google's image rather than TensorFlow, so they are kept out of ``TF_CONFIG`` (otherwise
    TensorFlow waits for ``/job:ps/task:0`` as its coordination leader forever). ``trainimg spec`` passes it to
    the launcher as ``--reduction-server`` whenever it adds a reducer pool.
    Raises `ClusterError` for anything a platform would not send.
    """
    if nproc_per_node is not None and (
        isinstance(nproc_per_node, bool) or not isinstance(nproc_per_node, int) or nproc_per_node < 1
    ):
        raise ValueError(f"nproc_per_node must be an integer >= 1, got {nproc_per_node!r}")
    for variable in ("CLUSTER_SPEC", "TF_CONFIG"):
        text = env.get(variable, "")
        if text.strip():
            info = _parse_variable(variable, text, reduction_server)
            break
    else:
        info = ClusterInfo(
            platform="local",
            role="chief",
            index=0,
            rank=0,
            world_size=1,
            master_addr=DEFAULT_MASTER_ADDR,
            master_port=DEFAULT_MASTER_PORT,
            trial=None,
            tf_config=None,
        )
    if nproc_per_node is None:
        return info
    return replace(
        info,
        nnodes=info.world_size,
        node_rank=info.rank,
        nproc_per_node=nproc_per_node,
        world_size_processes=info.world_size * nproc_per_node,
    )


def split_address(variable: str, address: object) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` -> (host, port); an unbracketed IPv6 address is ambiguous and refused."""
    if not isinstance(address, str) or not address:
        raise ClusterError(variable, f"cluster address {address!r} is not a 'host:port' string")
    if address.startswith("["):
        host, sep, rest = address[1:].partition("]")
        if not sep:
            raise ClusterError(variable, f"cluster address {address!r} has no closing ']'")
        if not rest.startswith(":"):
            raise ClusterError(variable, f"cluster address {address!r} has no port")
        port_text = rest[1:]
    else:
        host, sep, port_text = address.rpartition(":")
        if not sep:
            raise ClusterError(variable, f"cluster address {address!r} has no port")
        if ":" in host:
            raise ClusterError(variable, f"cluster address {address!r}: write an IPv6 host in brackets, [host]:port")
    if not host:
        raise ClusterError(variable, f"cluster address {address!r} has no host")
    _check_host(variable, address, host, bracketed=address.startswith("["))
    if not _PORT.fullmatch(port_text):
        raise ClusterError(variable, f"cluster address {address!r}: port {port_text!r} is not an integer")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise ClusterError(variable, f"cluster address {address!r}: port {port} is outside 1..65535")
    return host, port


def _check_host(variable: str, address: str, host: str, *, bracketed: bool) -> None:
    """A host is a DNS name, an IPv4 address, or (in brackets) an IPv6 address; nothing else reaches a framework.

    The host becomes ``MASTER_ADDR`` and part of ``TF_CONFIG``, which scripts and shells read: a newline or ``$(``
    in it must stop the replica here, not later in someone's command line.
    """
    if bracketed:
        try:
            address_part, _, zone = host.partition("%")
            if "%" in host and not _ZONE.fullmatch(zone):  # a link-local zone names an interface: eth0, 2
                raise ValueError(host)
            ipaddress.IPv6Address(address_part)
        except ValueError:
            raise ClusterError(variable, f"cluster address {address!r}: {host!r} in brackets is not an IPv6 address"
                               ) from None
        return
    if _DOTTED_DIGITS.fullmatch(host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise ClusterError(variable, f"cluster address {address!r}: {host!r} is not an IPv4 address") from None
        return
    if not _HOSTNAME.fullmatch(host):
        raise ClusterError(variable, f"cluster address {address!r}: {host!r} is not a host name, IPv4 address "
                                     "or [IPv6] address")


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
    if not isinstance(cluster, dict) or not any(cluster.values()):
        raise ClusterError(variable, "has an empty or missing 'cluster'")

    vertex = variable == "CLUSTER_SPEC" and any(str(k).startswith("workerpool") for k in cluster)
    names = VERTEX_POOLS if vertex else _TF_TYPES
    platform = "vertex" if vertex else ("aiplatform" if variable == "CLUSTER_SPEC" else "tf_config")
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


def format_address(host: str, port: int) -> str:
    """``host:port`` with an IPv6 host bracketed again, the form TF_CONFIG and JAX's coordinator expect."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def summary(info: ClusterInfo) -> str:
    """A few lines a person reads in a replica's log to see what the platform told it."""
    rank = f"rank {info.rank} of {info.world_size}" if info.rank is not None else "outside the all-reduce group"
    lines = [
        f"platform  {info.platform}",
        f"role      {info.role} {info.index} ({rank})",
        f"master    {format_address(info.master_addr, info.master_port)}",
    ]
    if info.trial is not None:
        lines.append(f"trial     {info.trial}")
    if info.nproc_per_node is not None:
        lines.append(
            f"processes {info.nproc_per_node} per node x {info.nnodes} nodes = {info.world_size_processes}"
        )
    return "\n".join(lines)


def positive_int(text: str) -> int:
    """argparse type for ``--nproc-per-node``: the parser rejects 0 and negatives before any env is read."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not >= 1")
    return value


def main(argv: list[str]) -> int:
    """``cluster [--json] [--nproc-per-node N]``: print this replica's ClusterInfo; 2 on a bad cluster variable."""
    parser = argparse.ArgumentParser(
        prog="python -m trainimg_runtime cluster",
        description="Show this replica's role as read from CLUSTER_SPEC / TF_CONFIG.",
    )
    parser.add_argument("--json", action="store_true", help="print the machine-readable form")
    parser.add_argument("--nproc-per-node", type=positive_int, default=None, metavar="N")
    parser.add_argument("--reduction-server", action="store_true",
                        help="workerpool2 holds Reduction Server replicas: keep them out of TF_CONFIG")
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # argparse exits on --help and on usage errors; callers want a return code.
        return stop.code if isinstance(stop.code, int) else EXIT_USAGE
    try:
        info = parse_cluster(os.environ, args.nproc_per_node, reduction_server=args.reduction_server)
    except ClusterError as err:
        print(f"trainimg: {err}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(info.to_json(), sort_keys=True) if args.json else summary(info))
    return 0
