"""An Azure ML command job's processes as Azure ML starts them, for the host (and selftest) to replay.

Why its own layout: Azure ML's ``pytorch`` distribution starts every process itself (``process_count_per_instance``
on each of ``instance_count`` nodes), each with its process-level ``RANK`` and ``LOCAL_RANK``, so a replay starts a
container per process, the processes of a node sharing that node's host, as Slurm's tasks do; its ``tensorflow``
distribution starts one process per worker with ``TF_CONFIG`` (workers only, ``"environment": "cloud"``). A JAX
image runs under the ``pytorch`` distribution too: Azure ML has no JAX distribution, and the launcher turns the
``env://`` world into JAX's coordinator. The variable names come from `platforms.azureml` and `platforms.envworld`,
which read them back. Standard library only.
"""

from __future__ import annotations

import zlib

from .platforms import azureml, envworld
from .topology_spec import TF_CONFIG, ReplicaSpec, tf_config_json
from .world import format_address, node_role

RUN_ID, NODE_COUNT, EXPERIMENT_ID = azureml.MARKERS[:3]


def node_host(job: str, node: int) -> str:
    """The host name a replay gives node `node` of job `job` (Azure ML gives IP addresses; names stand in)."""
    return f"{job}-node{node}"


def azureml_replicas(replicas: int, nproc: int, job: str, port: int, framework: str) -> list[ReplicaSpec]:
    """Every process of a `replicas`-node job: `nproc` per node under the pytorch distribution, one per node for
    TensorFlow."""
    run = {RUN_ID: f"{job}_{zlib.crc32(job.encode()):08x}", EXPERIMENT_ID: f"{zlib.crc32(job.encode()[::-1]):08x}",
           NODE_COUNT: str(replicas)}
    hosts = [node_host(job, k) for k in range(replicas)]
    if framework == "tensorflow":
        workers = [format_address(h, port) for h in hosts]
        return [ReplicaSpec(f"worker-{k}", "worker", k, None,
                            {**run, TF_CONFIG: tf_config_json({"worker": workers}, "worker", k, None)}, h)
                for k, h in enumerate(hosts)]
    master_addr, master_port, world_size, rank = envworld.REQUIRED
    local_rank, _local_world, node_rank = envworld.OPTIONAL
    shared = {**run, master_addr: hosts[0], master_port: str(port), world_size: str(replicas * nproc)}
    specs = []
    for node, host in enumerate(hosts):
        for local in range(nproc):
            process = node * nproc + local
            role, index = node_role(process)  # unique per replica, as Slurm's tasks
            env = {**shared, node_rank: str(node), rank: str(process), local_rank: str(local)}
            specs.append(ReplicaSpec(f"rank-{process}", role, index, node if nproc > 1 else None, env, host))
    return specs
