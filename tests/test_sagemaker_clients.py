"""trainimg's reading of SageMaker training containers, checked against the sagemaker-training toolkit itself and
against torchrun running the command that toolkit builds.

Every container is generated (seeded) from a job: its hosts (``algo-1`` .. ``algo-N``, sorted as SageMaker sorts
them: ``algo-10`` before ``algo-2``), the instance type and its GPUs, laid out as ``/opt/ml`` folders
(``input/config/resourceconfig.json`` and the rest the toolkit reads) under ``SAGEMAKER_BASE_DIR``. The job is the
truth; the toolkit's ``Environment`` (its own venv, tests/clients/sagemaker_client.py) and trainimg read each
folder and must agree with it and with each other. Then the toolkit's ``torch_distributed`` command: its torchrun
flags must be what trainimg's launcher would start on that host, and torchrun's own agent, run on those flags
(tests/clients/torch_client.py), must give workers whose environment trainimg reads back as torchrun's world.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from test_platform_clients import Row, judge, read, run_client

from trainimg.runtime.cluster import parse_cluster, with_processes
from trainimg.runtime.launch import choose_mode, launch_env, torchrun_argv
from trainimg.runtime.platforms import sagemaker
from trainimg.runtime.world import ClusterInfo

INSTANCES = {"ml.c5.xlarge": 0, "ml.m5.2xlarge": 0, "ml.g5.xlarge": 1, "ml.g5.12xlarge": 4, "ml.g6e.48xlarge": 8,
             "ml.p3.8xlarge": 4, "ml.p4d.24xlarge": 8, "ml.p5.48xlarge": 8}
INTERFACES = ("eth0", "ethwe")
ENTRY = "train.py"
ARGS = ["--epochs", "3"]


@dataclass
class Job:
    name: str
    hosts: list[str]  # as SageMaker lists them: sorted
    instance_type: str
    gpus: int
    interface: str
    folders: list[Path]  # per host, the folder laid out like /opt/ml

    @property
    def nproc(self) -> int:
        return max(self.gpus, 1)  # the toolkit's runner: the GPUs, else one process


def nvidia_smi(root: Path, gpus: int) -> Path:
    """A folder whose ``nvidia-smi`` lists `gpus` GPUs, the way the toolkit counts them (this machine has none)."""
    folder = root / f"smi-{gpus}"
    if not folder.exists():
        folder.mkdir()
        lines = "".join(f"echo 'GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:08d})'\n" for i in range(gpus))
        (folder / "nvidia-smi").write_text(f"#!/bin/sh\n{lines}")
        (folder / "nvidia-smi").chmod(0o755)
    return folder


def make_jobs(root: Path, seed: int = 23) -> list[Job]:
    """Jobs of 1..12 hosts until there are at least 200 containers; every host a folder as SageMaker fills it."""
    rng = random.Random(seed)
    jobs: list[Job] = []
    while sum(len(j.hosts) for j in jobs) < 240:
        count = rng.choice([1, 1, 2, 2, 3, 4, 5, 8, 11, 12])
        hosts = sorted(f"algo-{i}" for i in range(1, count + 1))
        instance = rng.choice(sorted(INSTANCES))
        job = Job(f"job{len(jobs)}", hosts, instance, INSTANCES[instance], rng.choice(INTERFACES), [])
        for current in hosts:
            base = root / job.name / current
            (base / "input" / "config").mkdir(parents=True)
            (base / "code").mkdir()
            config = {"current_host": current, "hosts": hosts, "current_instance_type": instance,
                      "current_group_name": "homogeneousCluster", "network_interface_name": job.interface,
                      "instance_groups": [{"instance_group_name": "homogeneousCluster", "instance_type": instance,
                                           "hosts": hosts}]}
            (base / sagemaker.RESOURCE_CONFIG).write_text(json.dumps(config))
            # What the SageMaker Python SDK writes for distribution={"torch_distributed": {"enabled": True}}: each
            # hyperparameter JSON-encoded; the toolkit's distribution hosts are the groups it enables.
            (base / "input" / "config" / "hyperparameters.json").write_text(
                json.dumps({"sagemaker_torch_distributed_enabled": "true"}))
            (base / "input" / "config" / "inputdataconfig.json").write_text("{}")
            job.folders.append(base)
        jobs.append(job)
    return jobs


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Job], list[list[dict[str, Any]]]]:
    """Every job, and the toolkit's answer for each of its hosts (one venv subprocess for the whole batch)."""
    root = tmp_path_factory.mktemp("sagemaker")
    jobs = make_jobs(root)
    cases = [{"env": container_env(job, i) | {"PATH": f"{nvidia_smi(root, job.gpus)}:/usr/bin:/bin"},
              "entry_point": ENTRY, "args": ARGS} for job in jobs for i in range(len(job.hosts))]
    answers = iter(run_client("sagemaker", "sagemaker_client.py", cases))
    return jobs, [[next(answers) for _ in job.hosts] for job in jobs]


def container_env(job: Job, node: int) -> dict[str, str]:
    return {sagemaker.BASE_DIR_VARIABLE: str(job.folders[node])}


def truth(job: Job, node: int) -> dict[str, Any]:
    return {"hosts": job.hosts, "node_rank": node, "master": job.hosts[0], "instance_type": job.instance_type,
            "interface": job.interface, "nproc": job.nproc}


def trainimg_view(info: ClusterInfo | dict[str, str], env: dict[str, str]) -> dict[str, Any]:
    """trainimg's reading in the job's terms (hosts and instance facts straight from the file it named)."""
    if isinstance(info, dict):
        return info
    config = json.loads(Path(sagemaker.resource_config_path(env)).read_text())
    nproc = int(info.platform_nproc) if info.platform_nproc else None
    return {"hosts": [w.rpartition(":")[0] for w in info.tf_config["cluster"]["worker"]] if info.tf_config else None,
            "node_rank": info.rank, "master": info.master_addr, "instance_type": config["current_instance_type"],
            "interface": config["network_interface_name"], "nproc": nproc}


def toolkit_view(answer: dict[str, Any]) -> dict[str, Any]:
    if "error" in answer:
        return answer
    return {"hosts": answer["hosts"], "node_rank": answer["hosts"].index(answer["current_host"]),
            "master": answer["master_hostname"], "instance_type": answer["current_instance_type"],
            "interface": answer["network_interface_name"], "nproc": max(answer["num_gpus"], 1)}


def test_environment_agrees_with_trainimg(batch: tuple[list[Job], list[list[dict[str, Any]]]]) -> None:
    """The toolkit's Environment and trainimg read the same cluster from every folder: alone (SageMaker's file, no
    GPU count: the launcher's --nproc-per-node gives it) and with the SM_* variables the toolkit hands the user's
    program beside it (then SM_NUM_GPUS is the platform's count, and the two sources must not disagree)."""
    jobs, answers = batch
    alone, with_toolkit = [], []
    for job, job_answers in zip(jobs, answers):
        for node, answer in enumerate(job_answers):
            env = container_env(job, node)
            theirs, want = toolkit_view(answer), truth(job, node)
            alone.append(Row(f"{job.name} {job.hosts[node]}", trainimg_view(read(env), env) | {"nproc": want["nproc"]},
                             theirs, want))
            both = env | answer.get("sm_env", {})
            with_toolkit.append(Row(f"{job.name} {job.hosts[node]} + SM_*", trainimg_view(read(both), both), theirs,
                                    want))
    judge("sagemaker / the toolkit's Environment vs trainimg (resourceconfig.json alone)", alone)
    judge("sagemaker / the toolkit's Environment vs trainimg (resourceconfig.json and the toolkit's SM_*)",
          with_toolkit)


def flags(argv: list[str]) -> dict[str, str]:
    """``--name value`` pairs of a torchrun command, names spelled with underscores as the toolkit writes them."""
    out = {}
    for i, word in enumerate(argv):
        if word.startswith("--") and i + 1 < len(argv) and word != "--no-python":
            out[word[2:].replace("-", "_")] = argv[i + 1]
    return out


def test_torch_distributed_command_is_what_the_launcher_starts(
        batch: tuple[list[Job], list[list[dict[str, Any]]]]) -> None:
    """The torchrun flags of the toolkit's ``torch_distributed`` command are those of the torchrun trainimg's
    launcher execs on that host when the container holds one process per host (one host: the toolkit gives only
    the counts, and so they are all that is compared)."""
    jobs, answers = batch
    rows = []
    for job, job_answers in zip(jobs, answers):
        for node, answer in enumerate(job_answers):
            env = container_env(job, node)
            info = with_processes(parse_cluster(env), job.nproc)
            assert choose_mode(info, "pytorch", has_torch=True) == ("torchrun" if job.nproc > 1 else "exec")
            theirs = flags(answer["torchrun"][1:answer["torchrun"].index(ENTRY)]) if "torchrun" in answer else answer
            mine = {k: v for k, v in flags(torchrun_argv(info, [ENTRY])[3:]).items() if k in theirs}
            want = {"nnodes": str(len(job.hosts)), "nproc_per_node": str(job.nproc), "master_addr": job.hosts[0],
                    "master_port": str(sagemaker.MASTER_PORT), "node_rank": str(node)}
            rows.append(Row(f"{job.name} {job.hosts[node]}", mine, theirs, {k: want[k] for k in theirs}))
            assert answer["torchrun"][0] == "torchrun" and answer["torchrun"][-3:] == [ENTRY, *ARGS], answer
    judge("sagemaker / the toolkit's torch_distributed torchrun flags vs trainimg-launch's torchrun", rows)


def test_torchrun_started_by_the_toolkit_is_one_layer(batch: tuple[list[Job], list[list[dict[str, Any]]]]) -> None:
    """torchrun's real agent, run on the toolkit's own flags for every host of the multi-host multi-GPU jobs, gives workers
    whose environment (over the container's) trainimg reads as torchrun's world, ranks kept: the launcher inside
    starts no second layer."""
    jobs, answers = batch
    # One host: the toolkit gives torchrun no rendezvous port, torchrun picks a free one when it really starts.
    chosen = [(job, job_answers) for job, job_answers in zip(jobs, answers) if job.nproc > 1 and len(job.hosts) > 1]
    cases = [{"env": {}, "nodes": [{"env": container_env(job, node), "argv": answer["torchrun"][1:]}
                                   for node, answer in enumerate(job_answers)], "readings": ["argv"]}
             for job, job_answers in chosen]
    torch_answers = run_client("torch", "torch_client.py", cases)
    rows = []
    for (job, _), torch_answer in zip(chosen, torch_answers):
        for node, reading in enumerate(torch_answer["argv"]):
            for local, worker in enumerate(reading["workers"] or []):
                process_env = {**container_env(job, node), **worker}
                info = read(process_env)
                rank = node * job.nproc + local
                want = {"rank": rank, "world": len(job.hosts) * job.nproc, "node": node, "master": job.hosts[0],
                        "port": sagemaker.MASTER_PORT, "started_by": "torchrun", "mode": "exec"}
                mine = info if isinstance(info, dict) else {
                    "rank": info.process_rank, "world": info.world_size_processes, "node": info.node_rank,
                    "master": info.master_addr, "port": info.master_port, "started_by": info.started_by,
                    "mode": choose_mode(info, "pytorch", has_torch=True)}
                if isinstance(info, ClusterInfo):
                    handed = launch_env(info, process_env)
                    assert handed["RANK"] == worker["RANK"] and handed["WORLD_SIZE"] == worker["WORLD_SIZE"]
                theirs = {"rank": int(worker["RANK"]), "world": int(worker["WORLD_SIZE"]),
                          "node": int(worker["GROUP_RANK"]), "master": worker["MASTER_ADDR"],
                          "port": int(worker["MASTER_PORT"]), "started_by": "torchrun", "mode": "exec"}
                rows.append(Row(f"{job.name} {job.hosts[node]} local {local}", mine, theirs, want))
    judge("sagemaker / workers of torchrun on the toolkit's flags, read by trainimg (torchrun layer)", rows)


# --- what SageMaker never writes: one line each, the file or variable named ------------------------------------------

def folder(tmp_path: Path, config: object) -> dict[str, str]:
    """A base dir whose resource config holds `config` (a JSON value, or raw text)."""
    path = tmp_path / sagemaker.RESOURCE_CONFIG
    path.parent.mkdir(parents=True)
    path.write_text(config if isinstance(config, str) else json.dumps(config))
    return {sagemaker.BASE_DIR_VARIABLE: str(tmp_path)}


GOOD = {"current_host": "algo-2", "hosts": ["algo-1", "algo-2"], "current_instance_type": "ml.p4d.24xlarge",
        "network_interface_name": "eth0"}


@pytest.mark.parametrize(("config", "extra", "variable", "words"), [
    (GOOD, {"SM_CURRENT_HOST": "algo-1"}, "SM_CURRENT_HOST", "'algo-1' disagrees with current_host 'algo-2' in"),
    (GOOD, {"SM_HOSTS": '["algo-1","algo-2","algo-3"]'}, "SM_HOSTS", "disagrees with hosts"),
    (GOOD, {"SM_CURRENT_INSTANCE_TYPE": "ml.p5.48xlarge"}, "SM_CURRENT_INSTANCE_TYPE", "disagrees"),
    (GOOD, {"SM_HOSTS": "algo-1,algo-2"}, "SM_HOSTS", "is not a JSON list of host names"),
    (GOOD, {"SM_NUM_GPUS": "eight"}, "SM_NUM_GPUS", "is not a whole number"),
    ({**GOOD, "current_host": "algo-9"}, {}, "", "current host 'algo-9' is not one of the hosts"),
    ({**GOOD, "hosts": ["algo-1", "algo-1"]}, {}, "", "names a host twice"),
    ({**GOOD, "hosts": ["algo-1", "$(reboot)"]}, {}, "", "is not a host name"),
    ({**GOOD, "hosts": []}, {}, "", "non-empty list of host names"),
    ({**GOOD, "instance_groups": [{"instance_group_name": "a", "hosts": ["algo-1"]},
                                  {"instance_group_name": "b", "hosts": ["algo-2"]}]}, {}, "", "heterogeneous"),
    ("{not json", {}, "", "cannot be read as JSON"),
    (["algo-1"], {}, "", "is not a JSON object"),
])
def test_refusals_name_the_file_or_variable(tmp_path: Path, config: object, extra: dict[str, str], variable: str,
                                            words: str) -> None:
    env = folder(tmp_path, config) | extra
    answer = read(env)
    assert isinstance(answer, dict), answer
    named = variable or sagemaker.resource_config_path(env)
    assert answer["error"].startswith(f"{named}: ") and words in answer["error"], answer


def test_the_toolkits_variables_alone_and_detection(tmp_path: Path) -> None:
    """Without the file the toolkit's SM_HOSTS and SM_CURRENT_HOST describe the cluster (one of them alone is
    refused); beside another platform's variables the file is one platform of two (--platform picks)."""
    away = {sagemaker.BASE_DIR_VARIABLE: str(tmp_path / "none")}
    info = read(away | {"SM_HOSTS": '["algo-1","algo-2","algo-3"]', "SM_CURRENT_HOST": "algo-3", "SM_NUM_GPUS": "0"})
    assert isinstance(info, ClusterInfo) and (info.rank, info.world_size, info.platform_nproc) == (2, 3, "1")
    alone = read(away | {"SM_CURRENT_HOST": "algo-1"})
    assert isinstance(alone, dict) and alone["error"].startswith("SM_HOSTS: is not set"), alone
    env = folder(tmp_path / "b", GOOD) | {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "h", "MASTER_PORT": "1"}
    both = read(env)
    assert isinstance(both, dict) and "two platforms at once: sagemaker" in both["error"], both
    assert parse_cluster(env, platform="sagemaker").rank == 1
    assert parse_cluster(sagemaker.elsewhere(folder(tmp_path / "c", GOOD))).platform == "local"
