"""Who am I in the training cluster? The ``cluster`` verb and `parse_cluster`, the one entry every caller uses.

Training platforms start the same container on every replica and tell each one its role through environment
variables whose names and shapes differ: ``CLUSTER_SPEC``/``TF_CONFIG`` (Vertex AI, AI Platform, UAI Train,
TFJob), ``SLURM_*``, Kubeflow's ``PET_*`` and ``JAX_*``, a JobSet's index, a plain ``env://`` world. Each has its
module in `platforms`, and `platforms.detect` picks the one that made this env (or the one ``--platform`` names).
`parse_cluster` then settles how many processes each node runs: the platform's count where it gives one (it
started them, or it asks for a number), else the caller's ``--nproc-per-node``; the two must agree.

Every fault raises `ClusterError`, whose one-line message names the variable and what is wrong with it; the
``cluster`` verb prints it and exits 2 so a misconfigured replica stops before training starts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import replace

from .contract import EXIT_USAGE
from .gpus import visible_gpus
from .platforms import FORCEABLE, detect
from .world import ClusterError, ClusterInfo, format_address


def parse_cluster(env: Mapping[str, str], nproc_per_node: int | None = None, *, reduction_server: bool = False,
                  platform: str | None = None) -> ClusterInfo:
    """Describe this process from `env` (see the module doc); `platform` forces one platform's reading.

    `nproc_per_node` (processes the caller would start on this node, an int >= 1, or None for "the platform's
    count, else 1") fills the per-process figures. An empty variable counts as unset.
    `reduction_server`: the job's pool 2 holds Vertex Reduction Server replicas (see `platforms.tfconfig`).
    Raises `ClusterError` for anything a platform would not send, or a count that contradicts the platform's.
    """
    if nproc_per_node is not None and (
        isinstance(nproc_per_node, bool) or not isinstance(nproc_per_node, int) or nproc_per_node < 1
    ):
        raise ValueError(f"nproc_per_node must be an integer >= 1, got {nproc_per_node!r}")
    info = detect(env, platform, reduction_server=reduction_server)
    if info.started_by is not None:
        if nproc_per_node is not None and nproc_per_node != info.nproc_per_node:
            raise ClusterError("--nproc-per-node", f"{nproc_per_node}, but {info.started_by} already started "
                                                   f"{info.nproc_per_node} process(es) on this node: the launcher "
                                                   "starts no second layer; leave the flag out or make them agree")
        return info
    given = info.platform_nproc
    wanted = nproc_per_node
    if given is not None:
        count = visible_gpus(env) if given == "auto" else int(given)
        if wanted is not None and wanted != count:
            raise ClusterError("--nproc-per-node", f"{wanted}, but {info.platform} asks for {given} process(es) "
                                                   "per node; leave the flag out or make them agree")
        wanted = count
    return info if wanted is None else with_processes(info, wanted)


def with_processes(info: ClusterInfo, nproc_per_node: int) -> ClusterInfo:
    """`info` of a node-level platform with `nproc_per_node` processes on every node."""
    return replace(info, nnodes=info.world_size, node_rank=info.rank, nproc_per_node=nproc_per_node,
                   world_size_processes=info.world_size * nproc_per_node)


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
    if info.started_by is not None:
        lines.append(f"process   rank {info.process_rank} (local {info.local_rank}), started by {info.started_by}")
    if info.variables:
        lines.append(f"read      {' '.join(info.variables)}")
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
    """``cluster [--json] [--nproc-per-node N] [--platform P]``: print this replica's ClusterInfo; 2 on a bad or
    ambiguous cluster environment."""
    parser = argparse.ArgumentParser(
        prog="python -m trainimg_runtime cluster",
        description="Show this replica's place in the job as its platform's variables say.",
    )
    parser.add_argument("--json", action="store_true", help="print the machine-readable form")
    parser.add_argument("--nproc-per-node", type=positive_int, default=None, metavar="N")
    parser.add_argument("--platform", choices=FORCEABLE, default=None,
                        help="read this platform's variables, whatever else is set")
    parser.add_argument("--reduction-server", action="store_true",
                        help="workerpool2 holds Reduction Server replicas: keep them out of TF_CONFIG")
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # argparse exits on --help and on usage errors; callers want a return code.
        return stop.code if isinstance(stop.code, int) else EXIT_USAGE
    try:
        info = parse_cluster(os.environ, args.nproc_per_node, reduction_server=args.reduction_server,
                             platform=args.platform)
    except ClusterError as err:
        print(f"trainimg: {err}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(info.to_json(), sort_keys=True) if args.json else summary(info))
    return 0
