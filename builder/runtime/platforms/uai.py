"""UCloud UAI Train: ``TF_CONFIG`` only, nodes ``0..replicas-1``: node 0 runs the ``master``, node i >= 1 runs
worker i-1, and every node also runs a ps (ps i on node i, same host, ``port + 1``) unless ``ps`` says how many
(then ps 0..ps-1 on nodes 0..ps-1). A ps shares its node's host, so its spec carries ``node`` for the caller to
share the network namespace; every replica shares one output folder (UAI's UFS at ``/data/output``).

Why a module of its own although `tfconfig` reads its env: see `vertex`.
"""

from __future__ import annotations

import json

from ..contract import UAI
from ..shm import NodeShm
from ..topology_spec import TF_CONFIG, Job, ReplicaSpec, tf_config_json
from ..world import format_address
from . import tfconfig

NAME = UAI
READER = tfconfig  # TF_CONFIG is read by the TF_CONFIG family's one parser
STARTS = None  # the launcher starts them (TensorFlow: one per replica)
PORT = tfconfig.PORT
PORTS_USED = 2  # a node's ps listens on port + 1: the highest port a job may name is 65535 - 1
NO_TF_CONFIG: str | None = None  # it runs TensorFlow
NOT_EMULATED: str | None = None  # selftest emulates it on 127.0.0.1
#: Its /dev/shm (`shm.NodeShm`): nothing found that UAI Train documents about it.
SHM = NodeShm(default=None, default_said="not documented: no UAI Train page found that states a size",
              setting=None, source="searched 2026-11-27; no UCloud UAI Train document on /dev/shm found")
SIDE_ROLES = ("ps",)  # the roles outside the all-reduce group it has
PS_PER_NODE = True  # a ps runs beside each node (default: one per node, at most one per node)
SHARED_OUTPUT = "/data/output"  # the folder every replica shares (UAI's UFS), which a replay mounts from the host


def replicas(job: Job) -> list[ReplicaSpec]:
    """One master or worker per node, and ps 0..ps-1 beside them on nodes 0..ps-1 at port + 1."""
    count = job.replicas if job.ps is None else job.ps
    if count > job.replicas:
        raise ValueError(f"{NAME} places at most one ps per node: ps={count} exceeds replicas={job.replicas}")
    node_hosts = [job.hosts("chief", 0)] + [job.hosts("worker", i) for i in range(job.replicas - 1)]
    cluster = {
        "master": [format_address(node_hosts[0], job.port)],
        "ps": [format_address(node_hosts[i], job.port + 1) for i in range(count)],
        "worker": [format_address(host, job.port) for host in node_hosts[1:]],
    }
    cluster = {name: entries for name, entries in cluster.items() if entries}

    def spec(role: str, index: int, task_type: str, node: int) -> ReplicaSpec:
        return ReplicaSpec(f"{role}-{index}", role, index, node,
                           {TF_CONFIG: tf_config_json(cluster, task_type, index, job.trial)}, node_hosts[node])

    return [spec("chief", 0, "master", 0), *(spec("worker", i, "worker", i + 1) for i in range(job.replicas - 1)),
            *(spec("ps", i, "ps", i) for i in range(count))]


_SPEC = {
    "cluster": {
        "master": ["10.9.0.1:2222"],
        "worker": ["10.9.0.2:2222"],
        "ps": ["10.9.0.1:2223", "10.9.0.2:2223"],
    },
    "task": {"type": "ps", "index": 1},
}
#: (label, env, expected facts) the probe's cluster-parsing check reads back (`probe_platform`): a TF_CONFIG alone
#: names no platform, so the parser says ``tf_config``.
SAMPLES: tuple[tuple[str, dict[str, str], dict[str, object]], ...] = (
    (NAME, {TF_CONFIG: json.dumps(_SPEC)},
     {"platform": tfconfig.NAME, "role": "ps", "index": 1, "rank": None, "world_size": 2,
      "master_addr": "10.9.0.1", "master_port": 2222}),
    (f"{NAME}_master", {TF_CONFIG: json.dumps({**_SPEC, "task": {"type": "master", "index": 0}})},
     {"platform": tfconfig.NAME, "role": "chief", "index": 0, "rank": 0, "world_size": 2,
      "master_addr": "10.9.0.1", "master_port": 2222}),
)
