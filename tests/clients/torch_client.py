"""torchrun's own reading of a Kubeflow job and the worker environments its agent builds (protocol: clientio), in
the torch venv.

A case is one job: every node's ``env`` (the platform's ``PET_*`` and the rest) and the ``argv`` trainimg's launcher
would exec torchrun with on that node. For each node, each of two readings:

* ``own``: torchrun started as ``torchrun python x.py``, every figure from its ``PET_*`` flag defaults (a Trainer v2
  runtime whose command is torchrun);
* ``argv``: torchrun started with the launcher's argv.

Each reading gives the figures torchrun's parser settles (``get_args_parser``/``config_from_args``) and, where the
processes per node are a count (``auto`` depends on this machine's devices), the environment of every worker:
the real ``LocalElasticAgent`` of every node of the job runs its static rendezvous and ``_start_workers``. Two
things are replaced, both outside the ranks' arithmetic: the rendezvous' TCPStore on the master's host is one
in-memory ``HashStore`` the job's agents share (they run in threads), and the process start is recorded, not made.
"""

from __future__ import annotations

import datetime
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch.distributed as dist
from clientio import serve, use_env
from torch.distributed.elastic.agent.server import local_elastic_agent
from torch.distributed.elastic.agent.server.api import WorkerSpec
from torch.distributed.elastic.rendezvous import RendezvousParameters, static_tcp_rendezvous
from torch.distributed.elastic.rendezvous import registry as rdzv_registry
from torch.distributed.launcher.api import _get_addr_and_port
from torch.distributed.run import config_from_args, get_args_parser, parse_min_max_nnodes

logging.disable(logging.CRITICAL)  # torchrun's advice (OMP_NUM_THREADS, ...) would drown the JSON's errors
_RENDEZVOUS_TIMEOUT = datetime.timedelta(seconds=60)


class _Started:
    """What `start_processes` returns, for processes that were recorded rather than started."""

    def pids(self) -> dict[int, int]:
        return {}


def figures(args: Any) -> dict[str, Any]:
    """The node-level figures torchrun's parser settled."""
    low, high = parse_min_max_nnodes(args.nnodes)
    return {"nnodes": [low, high], "node_rank": args.node_rank, "nproc_per_node": args.nproc_per_node,
            "master_addr": args.master_addr, "master_port": args.master_port}


def agent_for(args: Any) -> local_elastic_agent.LocalElasticAgent:
    """The agent torchrun's ``launch_agent`` builds from `args` (read under this node's environment)."""
    config, cmd, cmd_args = config_from_args(args)
    params = RendezvousParameters(backend=config.rdzv_backend, endpoint=config.rdzv_endpoint, run_id=config.run_id,
                                  min_nodes=config.min_nodes, max_nodes=config.max_nodes,
                                  local_addr=config.local_addr, **config.rdzv_configs)
    master_addr, master_port = _get_addr_and_port(params)
    spec = WorkerSpec(role=config.role, local_world_size=config.nproc_per_node, entrypoint=cmd, args=tuple(cmd_args),
                      rdzv_handler=rdzv_registry.get_rendezvous_handler(params), max_restarts=config.max_restarts,
                      monitor_interval=config.monitor_interval, master_addr=master_addr, master_port=master_port,
                      local_addr=config.local_addr, virtual_local_rank=config.virtual_local_rank)
    return local_elastic_agent.LocalElasticAgent(spec=spec, logs_specs=config.logs_specs,
                                                 start_method=config.start_method)


def worker_envs(agents: list[local_elastic_agent.LocalElasticAgent]) -> list[list[dict[str, str]]]:
    """Every node's workers' environments, from the job's agents rendezvousing together."""
    store = dist.HashStore()
    store.set_timeout(_RENDEZVOUS_TIMEOUT)
    static_tcp_rendezvous.TCPStore = lambda *_args, **_kwargs: store
    started: dict[int, list[dict[str, str]]] = {}

    def record(**kwargs: Any) -> _Started:
        envs = kwargs["envs"]
        started[int(envs[0]["GROUP_RANK"])] = [envs[local] for local in sorted(envs)]
        return _Started()

    local_elastic_agent.start_processes = record

    def run(agent: local_elastic_agent.LocalElasticAgent) -> None:
        group = agent.get_worker_group()
        agent._rendezvous(group)
        agent._start_workers(group)

    with ThreadPoolExecutor(max_workers=len(agents)) as pool:
        list(pool.map(run, agents))
    return [started[node] for node in sorted(started)]


def answer(case: dict[str, Any]) -> dict[str, Any]:
    # A case may ask for the argv reading alone: a platform whose torchrun always has flags (SageMaker's toolkit).
    wanted = case.get("readings", ["own", "argv"])
    readings: dict[str, list[dict[str, Any]]] = {name: [] for name in wanted}
    agents: dict[str, list[local_elastic_agent.LocalElasticAgent]] = {name: [] for name in wanted}
    for node in case["nodes"]:
        use_env(node["env"])  # torchrun reads PET_* when it builds its parser
        for reading, argv in (("own", ["python", "x.py"]), ("argv", node["argv"])):
            if reading not in wanted:
                continue
            args = get_args_parser().parse_args(argv)
            readings[reading].append(figures(args))
            if args.nproc_per_node.isdigit():
                agents[reading].append(agent_for(args))
    out: dict[str, Any] = {}
    for reading, nodes in readings.items():
        complete = len(agents[reading]) == len(nodes)
        envs = worker_envs(agents[reading]) if complete else [None] * len(nodes)
        out[reading] = [{**figures_of, "workers": workers} for figures_of, workers in zip(nodes, envs)]
    return out


if __name__ == "__main__":
    serve(answer)
