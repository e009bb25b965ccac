"""A plain ``env://`` world: every process was started with its own ``RANK`` of ``WORLD_SIZE`` and the rendezvous
``MASTER_ADDR``/``MASTER_PORT`` (Ray Train's workers, Azure ML's ``pytorch`` distribution, a hand-made job).

Whoever set a process-level ``RANK`` started the processes, so the launcher keeps them and starts no second layer.
``LOCAL_RANK``/``LOCAL_WORLD_SIZE``/``NODE_RANK`` are read where given (Ray and Azure ML give them); without them
each process is its own node.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..world import ClusterError, ClusterInfo, below, host, integer, node_role, port, present, require

NAME = "env"
STARTS = None  # the launcher starts them
REQUIRED = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")
OPTIONAL = ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK")
RECOGNISED = (*REQUIRED, *OPTIONAL)  # what `platforms.VARIABLES` gathers


def claims(env: Mapping[str, str]) -> tuple[str, ...]:
    """RANK or WORLD_SIZE make a world; MASTER_ADDR alone is only a rendezvous another platform may name."""
    if not present(env, ("RANK", "WORLD_SIZE")):
        return ()
    return present(env, (*REQUIRED, *OPTIONAL))


def read(env: Mapping[str, str], *, reduction_server: bool = False) -> ClusterInfo:
    got = require(env, NAME, REQUIRED)
    world = integer("WORLD_SIZE", got["WORLD_SIZE"], least=1)
    rank = integer("RANK", got["RANK"])
    below("RANK", rank, world, "WORLD_SIZE")
    given = present(env, OPTIONAL)
    local_world = integer("LOCAL_WORLD_SIZE", env["LOCAL_WORLD_SIZE"], least=1) if "LOCAL_WORLD_SIZE" in given \
        else 1
    local = integer("LOCAL_RANK", env["LOCAL_RANK"]) if "LOCAL_RANK" in given else 0
    below("LOCAL_RANK", local, local_world, "LOCAL_WORLD_SIZE")
    if world % local_world:
        raise ClusterError("LOCAL_WORLD_SIZE", f"{local_world} does not divide WORLD_SIZE {world}")
    nodes = world // local_world
    node = integer("NODE_RANK", env["NODE_RANK"]) if "NODE_RANK" in given else rank // local_world
    below("NODE_RANK", node, nodes, "WORLD_SIZE / LOCAL_WORLD_SIZE")
    role, index = node_role(node)
    return ClusterInfo(
        platform=NAME, role=role, index=index, rank=node, world_size=nodes,
        master_addr=host("MASTER_ADDR", got["MASTER_ADDR"]), master_port=port("MASTER_PORT", got["MASTER_PORT"]),
        trial=None, tf_config=None, nnodes=nodes, node_rank=node, nproc_per_node=local_world,
        world_size_processes=world, variables=(*REQUIRED, *given), started_by=NAME, process_rank=rank,
        local_rank=local,
    )
