"""trainimg's reading of Azure ML's distributions against the real clients that read the same environments:
torch.distributed's own ``env://`` rendezvous for the ``pytorch`` distribution (on Azure ML's env, and on the env
trainimg's launcher hands the program), and TensorFlow's ``TFConfigClusterResolver`` for the ``tensorflow`` one.

Every environment is generated (seeded) from a job: its nodes (IP addresses, as Azure ML gives them), processes per
node, ports and ps; the job is the ground truth (tests/test_platform_clients.py: `judge`, `Row`, the venvs' client
subprocesses). The counts are printed for the closing note.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from test_platform_clients import Row, judge, node_count, port, positions, read, resolver_view, run_client, \
    tf_config_view

from trainimg.runtime.launch import launch_env
from trainimg.runtime.platforms import azureml
from trainimg.runtime.world import ClusterInfo


def run_markers(rng: random.Random, nodes: int) -> dict[str, str]:
    """The run's own variables, as Azure ML sets them for every process of a command job."""
    stem, started = rng.choice(("train", "sweep", "hp")), rng.randint(1_600_000_000, 1_800_000_000)
    run_id = f"{stem}_{started}_{rng.getrandbits(32):08x}"
    return {"AZUREML_RUN_ID": run_id, "AZUREML_NODE_COUNT": str(nodes),
            "AZUREML_EXPERIMENT_ID": f"{rng.getrandbits(64):016x}", "AZUREML_ARM_WORKSPACE_NAME": "ws"}


def node_ips(rng: random.Random, nodes: int) -> list[str]:
    """Distinct private addresses of a compute cluster's nodes, in node order (Azure ML's MASTER_ADDR is node 0's)."""
    base = rng.choice(("10.0", "10.1", "172.16", "192.168"))
    picked = rng.sample(range(4, 4 + 4 * nodes), nodes)
    return [f"{base}.{n // 250}.{n % 250 + 4}" for n in picked]


@dataclass
class TorchProcess:
    name: str
    env: dict[str, str]
    truth: dict[str, Any]


def pytorch_processes(seed: int = 23) -> list[TorchProcess]:
    """Processes of Azure ML's ``pytorch`` distribution: each with the process-level RANK and LOCAL_RANK Azure ML
    gives it, NODE_RANK, WORLD_SIZE = nodes x process_count_per_instance, MASTER_ADDR = node 0's IP, MASTER_PORT
    (6105 unless the job says otherwise)."""
    rng, out = random.Random(seed), []
    for number in range(90):
        nodes, nproc = node_count(rng), rng.choice((1, 2, 4, 8, 8))
        ips, master_port = node_ips(rng, nodes), port(rng, azureml.DEFAULT_MASTER_PORT)
        run = run_markers(rng, nodes)
        for node in positions(nodes, rng):
            for local in positions(nproc, rng):
                rank = node * nproc + local
                env = {**run, "MASTER_ADDR": ips[0], "MASTER_PORT": str(master_port),
                       "WORLD_SIZE": str(nodes * nproc), "NODE_RANK": str(node), "RANK": str(rank),
                       "LOCAL_RANK": str(local)}
                out.append(TorchProcess(f"pytorch{number} {nodes}x{nproc} rank {rank}", env, {
                    "rank": rank, "world_size": nodes * nproc, "master_addr": ips[0], "master_port": master_port,
                    "node_rank": node, "local_rank": local, "nproc_per_node": nproc}))
    return out


RENDEZVOUS = ("rank", "world_size", "master_addr", "master_port")


def torch_view(info: ClusterInfo | dict[str, str]) -> dict[str, Any]:
    """trainimg's reading in torch's terms: the process's rank and world and where the store is."""
    if not isinstance(info, ClusterInfo):
        return info
    return {"rank": info.process_rank, "world_size": info.world_size_processes, "master_addr": info.master_addr,
            "master_port": info.master_port}


def test_pytorch_distribution_agrees_with_torch_env_rendezvous() -> None:
    """torch's ``env://`` handler reads each process on Azure ML's own env and on the env the launcher execs the
    program with; both agree with trainimg and with the job (and trainimg's node view with the job's)."""
    processes = pytorch_processes()
    infos = [read(p.env) for p in processes]
    launched = [launch_env(i, p.env) if isinstance(i, ClusterInfo) else p.env for i, p in zip(infos, processes)]
    cases = [{"env": p.env} for p in processes] + [{"env": env} for env in launched]
    answers = run_client("torch", "torch_env_client.py", cases)
    truths = [{k: p.truth[k] for k in RENDEZVOUS} for p in processes]
    for title, theirs in (("Azure ML's env", answers[:len(processes)]), ("the launcher's env",
                                                                          answers[len(processes):])):
        rows = [Row(p.name, torch_view(i), t, truth) for p, i, t, truth in zip(processes, infos, theirs, truths)]
        judge(f"azureml pytorch / torch env:// rendezvous on {title}", rows)
    nodes = [(i.node_rank, i.local_rank, i.nproc_per_node, i.started_by) if isinstance(i, ClusterInfo) else i
             for i in infos]
    assert nodes == [(p.truth["node_rank"], p.truth["local_rank"], p.truth["nproc_per_node"], "azureml")
                     for p in processes]


def tensorflow_tasks(seed: int = 24) -> list[TorchProcess]:
    """Tasks of Azure ML's ``tensorflow`` distribution: ``worker_count`` workers and ``parameter_server_count`` ps,
    each at its node's IP and the job's port, ``"environment": "cloud"``."""
    rng, out = random.Random(seed), []
    for number in range(110):
        counts = {"worker": rng.choice((1, 2, 2, 3, 4, 8, 16, 32)), "ps": rng.choice((0, 0, 0, 1, 2, 4))}
        ips, task_port = node_ips(rng, sum(counts.values())), port(rng, 2222)
        cluster = {"worker": [f"{ip}:{task_port}" for ip in ips[:counts["worker"]]],
                   "ps": [f"{ip}:{task_port}" for ip in ips[counts["worker"]:]]}
        cluster = {role: hosts for role, hosts in cluster.items() if hosts}
        run = run_markers(rng, sum(counts.values()))
        for role, hosts in cluster.items():
            for index in positions(len(hosts), rng):
                tf_config = {"cluster": cluster, "task": {"type": role, "index": index}, "environment": "cloud"}
                worker = role == "worker"
                out.append(TorchProcess(f"tensorflow{number} {counts} {role}:{index}",
                                        {**run, "TF_CONFIG": json.dumps(tf_config)}, {
                    "task_type": role, "task_id": index, "cluster": cluster, "multi_worker": True,
                    "worker_count": len(cluster["worker"]) if worker else None,
                    "id_in_cluster": index if worker else None}))
    return out


def test_tensorflow_distribution_agrees_with_tf_config_cluster_resolver() -> None:
    """TFConfigClusterResolver on Azure ML's own TF_CONFIG, against trainimg's reading (the TF_CONFIG its launcher
    writes, platform azureml)."""
    tasks = tensorflow_tasks()
    infos = [read(t.env) for t in tasks]
    assert {i.platform for i in infos if isinstance(i, ClusterInfo)} == {"azureml"}
    answers = run_client("tf", "tf_client.py", [{"mode": "tf_config", "env": {"TF_CONFIG": t.env["TF_CONFIG"]}}
                                                for t in tasks])
    rows = [Row(t.name, i if isinstance(i, dict) else tf_config_view(i), resolver_view(theirs), t.truth)
            for t, i, theirs in zip(tasks, infos, answers)]
    judge("azureml tensorflow / TFConfigClusterResolver on Azure ML's TF_CONFIG", rows)
