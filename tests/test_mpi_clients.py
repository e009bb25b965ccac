"""trainimg's reading of the environment ``mpirun`` gives its ranks, checked against JAX's own ``OmpiCluster``
(``jax._src.clusters``, through ``ClusterEnv.auto_detect_unset_distributed_params`` as ``jax.distributed.initialize()``
runs it) and against torch.distributed's own ``env://`` rendezvous on the environment the launcher hands the program.

Every environment is generated (seeded) from a job: nodes with names and addresses, processes per node, where
``mpirun`` runs (on the first node, as a plain ``mpirun`` or the Trainer's DeepSpeed runtime with its launcher as a
node; or on the Trainer MPI runtime's own launcher pod) and how rank 0's host reaches the ranks (``MASTER_ADDR``
forwarded, a hostfile this node reads, one node). Addresses are compared by the node they reach in the job.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from test_platform_clients import Row, judge, node_count, port, read, run_client

from trainimg.runtime.hostfile import format_hostfile
from trainimg.runtime.launch import launch_env
from trainimg.runtime.platforms import azureml, mpi
from trainimg.runtime.world import ClusterInfo, split_address

CASES = 420  # environments generated; the excused (JAX pointed at a launcher pod) do not count towards LEAST
SHAPES = ("plain", "launcher-as-node", "separate-launcher", "one-node")


def ip(rng: random.Random) -> str:
    return f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"


def job(rng: random.Random, tmp: Path, number: int) -> list[tuple[dict[str, Any], dict[str, str]]]:
    """(facts, env) of a few ranks of one generated job."""
    shape = rng.choice(SHAPES)
    nodes = 1 if shape == "one-node" else max(2, node_count(rng))
    nproc = rng.choice((1, 1, 2, 4, 8))
    name = f"job{number}"
    hosts = [f"{name}-node-0-{i}.{name}" if rng.random() < .5 else f"gpu{i:03d}" for i in range(nodes)]
    addresses = [ip(rng) for _ in range(nodes)]
    reach = {**{h: i for i, h in enumerate(hosts)}, **{a: i for i, a in enumerate(addresses)}}
    hnp = ip(rng) if shape == "separate-launcher" else addresses[0]
    reach.setdefault(hnp, -1)  # -1: the launcher pod, where no rank runs
    job_id = rng.randint(1, 2**19) * 2**12
    uri = f"{job_id}.0;tcp://{hnp}{',172.17.0.1' if rng.random() < .3 else ''}:{rng.randint(1024, 65535)}"
    shared = {mpi.SIZE: str(nodes * nproc), mpi.LOCAL_SIZE: str(nproc), mpi.HNP_URI: uri}
    if shape != "one-node":
        shared.update({mpi.KEEP_FQDN: "true", mpi.DEFAULT_SLOTS: str(nproc)})
        if shape == "plain" and rng.random() < .5:
            hostfile = tmp / f"hostfile{number}"
            hostfile.write_text(format_hostfile(hosts, nproc))
            shared[mpi.HOSTFILE] = str(hostfile)
        else:
            shared[mpi.HOSTFILE] = "/etc/mpi/hostfile"  # on the launcher pod only: not readable here
            shared["MASTER_ADDR"] = rng.choice((hosts[0], addresses[0]))
    if rng.random() < .4:
        shared["MASTER_PORT"] = str(port(rng, 29500))
    if rng.random() < .2:
        shared["JAX_COORDINATOR_PORT"] = str(rng.randint(1024, 65535))
    out = []
    for rank in sorted({0, nodes * nproc - 1, *rng.sample(range(nodes * nproc), min(2, nodes * nproc))}):
        node, local = divmod(rank, nproc)
        env = {**shared, mpi.RANK: str(rank), mpi.LOCAL_RANK: str(local), "OMPI_COMM_WORLD_NODE_RANK": str(local)}
        facts = {"shape": shape, "node": node, "reach": {**reach, "127.0.0.1": node if nodes == 1 else -2}}
        out.append((facts, env))
    return out


def batch(tmp: Path, least: int = CASES) -> list[tuple[dict[str, Any], dict[str, str]]]:
    rng, cases, number = random.Random(23), [], 0
    while len(cases) < least:
        cases += job(rng, tmp, number)
        number += 1
    return cases


def jax_view(facts: dict[str, Any], coordinator: str | None, count: Any, process: Any, local: Any) -> dict[str, Any]:
    """The JAX facts of one answer, the coordinator as the node it reaches (-1 the launcher pod, None unknown)."""
    node = None
    if coordinator:
        host, number = split_address("coordinator", coordinator)
        node = {"node": facts["reach"].get(host), "port": number}
    return {"detected": coordinator is not None, "process_count": count, "process_id": process,
            "local_process_id": local, "coordinator": node}


def jax_rows(cases: list[tuple[dict[str, Any], dict[str, str]]], platform: str, label: str) -> list[Row]:
    """trainimg's reading (read as `platform`, started by it), JAX's OmpiCluster's and the job's, per environment."""
    answers = run_client("jax", "jax_client.py", [{"mode": "detect", "env": env} for _, env in cases])
    rows = []
    for i, ((facts, env), theirs) in enumerate(zip(cases, answers)):
        info = read(env)
        assert isinstance(info, ClusterInfo) and info.platform == platform == info.started_by, (env, info)
        mine = launch_env(info, {})
        own = jax_view(facts, mine["JAX_COORDINATOR_ADDRESS"], int(mine["JAX_NUM_PROCESSES"]),
                       int(mine["JAX_PROCESS_ID"]), int(mine["LOCAL_RANK"]))
        ids = theirs.get("local_device_ids")
        client = jax_view(facts, theirs.get("coordinator"), theirs.get("num_processes"), theirs.get("process_id"),
                          ids[0] if ids else None)
        # The port JAX documents: JAX_COORDINATOR_PORT, else the job id's (jax._src.clusters.ompi_cluster).
        jax_port = int(env.get("JAX_COORDINATOR_PORT") or int(env[mpi.HNP_URI].split(".")[0]) // 4096 % 4096 + 61440)
        truth = {"detected": True, "process_count": int(env[mpi.SIZE]), "process_id": int(env[mpi.RANK]),
                 "local_process_id": int(env[mpi.LOCAL_RANK]), "coordinator": {"node": 0, "port": jax_port}}
        excuse = ("JAX's OmpiCluster takes mpirun's host from OMPI_MCA_orte_hnp_uri: the Trainer's launcher pod, "
                  "where no rank runs" if facts["shape"] == "separate-launcher" else None)
        rows.append(Row(f"{label}-{i} {facts['shape']}", own, client, truth, excuse))
    return rows


def test_jax_ompi_cluster_agrees(tmp_path: Path) -> None:
    judge("Open MPI: JAX's OmpiCluster", jax_rows(batch(tmp_path), mpi.NAME, "mpi"))


def test_launcher_hands_torch_the_ompi_ranks(tmp_path: Path) -> None:
    """What torch itself reads from the environment the launcher execs the program with (torch.distributed's
    ``env://`` rendezvous handler: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) is what mpirun set in OMPI_COMM_WORLD_*,
    with the store on rank 0's node; the local figures the program reads itself (LOCAL_RANK, LOCAL_WORLD_SIZE) and
    the node are mpirun's too; nothing is started twice."""
    cases = batch(tmp_path)
    infos = [read(env) for _, env in cases]
    assert all(isinstance(i, ClusterInfo) and i.started_by == mpi.NAME for i in infos), infos
    launched = [launch_env(info, env) for info, (_, env) in zip(infos, cases)]
    answers = run_client("torch", "torch_env_client.py", [{"env": env} for env in launched])
    rows, local = [], []
    for i, ((facts, env), mine, theirs) in enumerate(zip(cases, launched, answers)):
        truth = {"rank": int(env[mpi.RANK]), "world_size": int(env[mpi.SIZE]), "master_node": 0,
                 "master_port": int(env.get("MASTER_PORT", "29500"))}
        own = {"rank": int(mine["RANK"]), "world_size": int(mine["WORLD_SIZE"]),
               "master_node": facts["reach"].get(mine["MASTER_ADDR"]), "master_port": int(mine["MASTER_PORT"])}
        torch_read = {"rank": theirs.get("rank"), "world_size": theirs.get("world_size"),
                      "master_node": facts["reach"].get(theirs.get("master_addr", "")),
                      "master_port": theirs.get("master_port"), **({"error": theirs["error"]} if "error" in theirs
                                                                   else {})}
        rows.append(Row(f"mpi-{i} {facts['shape']}", own, torch_read, truth))
        local.append(((mine["LOCAL_RANK"], mine["LOCAL_WORLD_SIZE"], mine["TRAINIMG_NODE_RANK"]),
                      (env[mpi.LOCAL_RANK], env[mpi.LOCAL_SIZE], str(facts["node"]))))
    judge("Open MPI: torch env:// on the launcher's env, against OMPI_COMM_WORLD_*", rows)
    assert [mine for mine, _ in local] == [source for _, source in local]


def azure_ml(facts: dict[str, Any], env: dict[str, str], rng: random.Random) -> dict[str, str]:
    """The same ranks as Azure ML's ``mpi`` distribution starts them: its run markers, ``AZ_BATCH_MASTER_NODE``
    (multi-node) or ``AZ_BATCHAI_MPI_MASTER_NODE`` (one node) naming node 0, and no hostfile or MASTER_ADDR of the
    job's own (Azure ML's mpirun runs on node 0, so ``OMPI_MCA_orte_hnp_uri`` names node 0 too)."""
    nodes = int(env[mpi.SIZE]) // int(env[mpi.LOCAL_SIZE])
    first = next(address for address, node in facts["reach"].items() if node == 0 and address[0].isdigit())
    kept = {k: v for k, v in env.items() if k not in (mpi.HOSTFILE, "MASTER_ADDR", mpi.KEEP_FQDN, mpi.DEFAULT_SLOTS)}
    markers = {"AZUREML_RUN_ID": f"train_{rng.getrandbits(32):08x}", azureml.NODE_COUNT: str(nodes)}
    master = ({azureml.SINGLE_NODE_MASTER: first} if nodes == 1
              else {azureml.MULTI_NODE_MASTER: f"{first}:{rng.randint(1024, 65535)}"})
    return {**kept, **markers, **master}


def test_jax_ompi_cluster_agrees_on_azure_ml_mpi(tmp_path: Path) -> None:
    """Azure ML's mpi distribution is read as Azure ML (its markers win over Open MPI's) and JAX agrees with it."""
    rng = random.Random(2305)
    cases = [(facts, azure_ml(facts, env, rng)) for facts, env in batch(tmp_path, 2 * CASES)
             if facts["shape"] in ("plain", "one-node")]
    assert len(cases) >= 200, len(cases)
    judge("Azure ML mpi: JAX's OmpiCluster", jax_rows(cases, azureml.NAME, "azureml-mpi"))
