"""A process trainimg's launcher started: its environment already holds the process-level world the launcher
worked out (``TRAINIMG_PLATFORM``, ``TRAINIMG_ROLE``, ``RANK``, ``WORLD_SIZE``, ...). A program run under the
launcher that asks again (``selftest --cluster``, ``trainimg cluster``) gets that answer, not a second reading of the
platform's node-level variables, which the launcher has already turned into process ranks.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..world import ClusterInfo, below, host, integer, port, present, require
from .tfconfig import parse_tf_config

NAME = "trainimg-launch"
MARKER = "TRAINIMG_PLATFORM"
ROLE = "TRAINIMG_ROLE"
GROUP = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TRAINIMG_NODE_RANK",
         "TRAINIMG_NNODES")
RECOGNISED = (MARKER, ROLE, *GROUP)  # what `platforms.VARIABLES` gathers


def claims(env: Mapping[str, str]) -> tuple[str, ...]:
    return present(env, (MARKER,))


def read(env: Mapping[str, str], *, reduction_server: bool = False) -> ClusterInfo:
    platform, role = require(env, NAME, (MARKER, ROLE)).values()
    # The launcher's TF_CONFIG, read by the platform parser: a damaged one is a ClusterError naming it, not a
    # KeyError or a JSON traceback (`CLUSTER_SPEC`, which the launcher leaves in the env, is not read again).
    described = parse_tf_config(env["TF_CONFIG"]) if env.get("TF_CONFIG", "").strip() else None
    tf_config = described.tf_config if described is not None else None
    index = described.index if described is not None else 0
    if role not in ("chief", "worker"):  # ps and evaluators: outside the group, the launcher removed its variables
        return ClusterInfo(platform=platform, role=role, index=index, rank=None, world_size=0, master_addr="",
                           master_port=0, trial=None, tf_config=tf_config, variables=(MARKER, ROLE),
                           started_by=NAME)
    got = require(env, NAME, GROUP)
    world = integer("WORLD_SIZE", got["WORLD_SIZE"], least=1)
    rank = integer("RANK", got["RANK"])
    below("RANK", rank, world, "WORLD_SIZE")
    nodes = integer("TRAINIMG_NNODES", got["TRAINIMG_NNODES"], least=1)
    node = integer("TRAINIMG_NODE_RANK", got["TRAINIMG_NODE_RANK"])
    local_world = integer("LOCAL_WORLD_SIZE", got["LOCAL_WORLD_SIZE"], least=1)
    return ClusterInfo(
        platform=platform, role=role, index=index, rank=node, world_size=nodes,
        master_addr=host("MASTER_ADDR", got["MASTER_ADDR"]), master_port=port("MASTER_PORT", got["MASTER_PORT"]),
        trial=None, tf_config=tf_config, nnodes=nodes, node_rank=node, nproc_per_node=local_world,
        world_size_processes=world, variables=(MARKER, ROLE, *GROUP), started_by=NAME, process_rank=rank,
        local_rank=integer("LOCAL_RANK", got["LOCAL_RANK"]),
        jax_coordinator=env.get("JAX_COORDINATOR_ADDRESS") or None,
    )
