"""Processes torchrun started: each has its process-level ranks from torchrun's agent, which the launcher keeps.

torchrun (``torch.distributed.run``) gives every worker ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``LOCAL_WORLD_SIZE``, ``GROUP_RANK`` (the node), ``GROUP_WORLD_SIZE`` (the nodes), ``MASTER_ADDR``/``MASTER_PORT``
and ``TORCHELASTIC_RUN_ID`` (torch/distributed/elastic/agent/server/local_elastic_agent.py). It is the innermost
starter wherever it runs: inside a TrainJob's runtime command, inside a Slurm task (``srun torchrun ...``), or under
trainimg's own launcher; its variables then describe this process, whatever the platform said about the node.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..world import ClusterInfo, below, host, integer, node_role, port, present, require

NAME = "torchrun"
MARKER = "TORCHELASTIC_RUN_ID"
REQUIRED = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "MASTER_ADDR",
            "MASTER_PORT")
RECOGNISED = (MARKER, *REQUIRED)  # what `platforms.VARIABLES` gathers
PLATFORM_VARIABLE = "TRAINIMG_PLATFORM"  # the platform trainimg-launch read before it started torchrun


def claims(env: Mapping[str, str]) -> tuple[str, ...]:
    return present(env, (MARKER,))


def read(env: Mapping[str, str], *, reduction_server: bool = False) -> ClusterInfo:
    got = require(env, NAME, REQUIRED)
    world = integer("WORLD_SIZE", got["WORLD_SIZE"], least=1)
    rank = integer("RANK", got["RANK"])
    below("RANK", rank, world, "WORLD_SIZE")
    nodes = integer("GROUP_WORLD_SIZE", got["GROUP_WORLD_SIZE"], least=1)
    node = integer("GROUP_RANK", got["GROUP_RANK"])
    below("GROUP_RANK", node, nodes, "GROUP_WORLD_SIZE")
    local_world = integer("LOCAL_WORLD_SIZE", got["LOCAL_WORLD_SIZE"], least=1)
    local = integer("LOCAL_RANK", got["LOCAL_RANK"])
    below("LOCAL_RANK", local, local_world, "LOCAL_WORLD_SIZE")
    role, index = node_role(node)
    return ClusterInfo(
        platform=env.get(PLATFORM_VARIABLE, "").strip() or NAME, role=role, index=index, rank=node,
        world_size=nodes, master_addr=host("MASTER_ADDR", got["MASTER_ADDR"]),
        master_port=port("MASTER_PORT", got["MASTER_PORT"]), trial=None, tf_config=None, nnodes=nodes,
        node_rank=node, nproc_per_node=local_world, world_size_processes=world, variables=(MARKER, *REQUIRED),
        started_by=NAME, process_rank=rank, local_rank=local,
    )
