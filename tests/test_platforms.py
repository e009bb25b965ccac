"""Platform detection (`runtime.platforms`) and what the launcher does with each platform's world.

The two defects that made every replica train alone are tests here: a Kubeflow PyTorchJob replica handed
``MASTER_ADDR=127.0.0.1 WORLD_SIZE=1 RANK=0``, and a Slurm task read as ``platform: local``. Then the rule itself:
two platforms' variables at once and a platform's variables with one missing are exit 2 naming them, ``--platform``
forces one, and the one-process local world is only for an environment with no platform variable at all.
The launcher runs as a real subprocess, and real torchrun (the torch venv) starts the processes where it should.
The real clients' agreement over generated environments is tests/test_platform_clients.py.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from trainimg.runtime.cluster import parse_cluster
from trainimg.runtime.launch import launch_env
from trainimg.runtime.platforms import PLATFORMS, VARIABLES, jobset, pytorchjob, slurm, torchrun, trainjob
from trainimg.runtime.world import ClusterError

REPO = Path(__file__).resolve().parents[1]
PRINT_ENV = (
    "import json, os; keys = ['RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT', "
    "'JAX_PROCESS_ID', 'JAX_NUM_PROCESSES', 'JAX_COORDINATOR_ADDRESS', 'TRAINIMG_ROLE', 'TRAINIMG_NODE_RANK', "
    "'TRAINIMG_NNODES', 'TRAINIMG_PLATFORM', 'TORCHELASTIC_RUN_ID']; "
    "os.write(1, (json.dumps({k: os.environ.get(k) for k in keys}) + '\\n').encode())"
)
# The two environments, as the platforms write them.
PYTORCHJOB_WORKER = {"MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456", "WORLD_SIZE": "8", "RANK": "1",
                     "PET_NPROC_PER_NODE": "4", "PET_NNODES": "2", "PET_NODE_RANK": "1"}
SLURM_TASK = {"SLURM_JOB_ID": "77", "SLURM_PROCID": "3", "SLURM_NTASKS": "8", "SLURM_NODEID": "1",
              "SLURM_LOCALID": "3", "SLURM_STEP_NODELIST": "node[01-02]", "SLURM_STEP_TASKS_PER_NODE": "4(x2)"}
TRAINJOB_NODE = {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "2", "PET_NODE_RANK": "1",
                 "PET_MASTER_ADDR": "tj-node-0-0.tj", "PET_MASTER_PORT": "29500", "JOB_COMPLETION_INDEX": "1"}
JOBSET_POD = {"JOB_COMPLETION_INDEX": "2", "JOBSET_NAME": "js", "JOBSET_REPLICATED_JOB": "node", "JOBSET_JOB_INDEX": "0",
              "JOBSET_JOB_REPLICAS": "1", "JOBSET_PODS_PER_JOB": "4", "JOBSET_SUBDOMAIN": "js", "JOBSET_PORT": "29500"}


def platform_variables() -> set[str]:
    """Every variable some platform module reads, and this process's own platform-looking ones: stripped from the
    test's env so none leaks in."""
    names = set(VARIABLES) | {"CUDA_VISIBLE_DEVICES", "PYTHONPATH"}
    names.update(n for n in os.environ if n.startswith(("SLURM_", "PET_", "JOBSET_", "TORCHELASTIC_", "TRAINIMG_")))
    return names


def launch(args: list[str], env: dict[str, str], python: str = sys.executable,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in platform_variables()}
    return subprocess.run([python, "-m", "trainimg.runtime", "launch", *args], cwd=REPO,
                          env={**clean, "PYTHONPATH": str(REPO), **env}, capture_output=True, text=True,
                          timeout=timeout)


def printed(stdout: str) -> list[dict[str, str | None]]:
    return sorted((json.loads(line) for line in stdout.splitlines() if line.startswith("{")),
                  key=lambda e: int(e["RANK"] or -1))


def image_layout(tmp: Path) -> str:
    """A folder where the runtime is ``trainimg_runtime``, as in an image: a venv without trainimg runs it."""
    (tmp / "trainimg_runtime").symlink_to(REPO / "builder" / "runtime")
    return str(tmp)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- the two defects --------------------------------------------------------------------------------------
def test_pytorchjob_worker_keeps_the_platform_world() -> None:
    """Node 1 of 2, 4 processes a node: ranks 4..7 of 8 meeting at job-master-0 (was 127.0.0.1, rank 0 of 1)."""
    result = launch(["--framework", "jax", "--", sys.executable, "-c", PRINT_ENV], PYTORCHJOB_WORKER)
    assert result.returncode == 0, result.stderr
    envs = printed(result.stdout)
    assert [(e["RANK"], e["LOCAL_RANK"], e["WORLD_SIZE"], e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs] == [
        (str(4 + i), str(i), "8", "job-master-0", "23456") for i in range(4)]
    assert {(e["TRAINIMG_NODE_RANK"], e["TRAINIMG_NNODES"], e["TRAINIMG_PLATFORM"]) for e in envs} == {
        ("1", "2", "pytorchjob")}


def test_slurm_task_is_not_a_local_world() -> None:
    result = subprocess.run([sys.executable, "-m", "trainimg.cli.app", "cluster", "--json"], cwd=REPO,
                            env={**os.environ, **SLURM_TASK}, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert (info["platform"], info["process_rank"], info["world_size_processes"], info["local_rank"],
            info["node_rank"], info["nnodes"], info["master_addr"], info["started_by"]) == (
        "slurm", 3, 8, 3, 1, 2, "node01", "slurm")
    assert set(info["variables"]) >= set(slurm.REQUIRED)


def test_slurm_task_runs_as_itself_under_the_launcher() -> None:
    """srun started every task: the launcher execs CMD once with the task's own ranks, never a second layer."""
    result = launch(["--framework", "jax", "--", sys.executable, "-c", PRINT_ENV], SLURM_TASK)
    assert result.returncode == 0, result.stderr
    (env,) = printed(result.stdout)
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"], env["MASTER_ADDR"],
            env["MASTER_PORT"], env["JAX_COORDINATOR_ADDRESS"]) == (
        "3", "8", "3", "4", "node01", str(slurm.LIGHTNING_PORT_BASE + 77), f"node01:{77 + slurm.JAX_PORT_BASE}")
    refused = launch(["--nproc-per-node", "2", "--", "true"], SLURM_TASK)
    assert refused.returncode == 2 and "no second layer" in refused.stderr


# -- the rule --------------------------------------------------------------------------------------------------
def test_nothing_set_is_one_local_process() -> None:
    info = parse_cluster({"PATH": "/bin", "KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert (info.platform, info.world_size, info.variables) == ("local", 1, ())


@pytest.mark.parametrize(("env", "names"), [
    pytest.param({**SLURM_TASK, "TF_CONFIG": '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", '
                  '"index": 0}}'}, ("slurm", "tf_config"), id="slurm+tf_config"),
    pytest.param({**SLURM_TASK, "RANK": "0", "WORLD_SIZE": "1"}, ("slurm", "env"), id="slurm+env"),
    pytest.param({**TRAINJOB_NODE, **JOBSET_POD}, ("trainjob", "jobset"), id="trainjob+jobset"),
    pytest.param({**PYTORCHJOB_WORKER, "COORDINATOR_ADDRESS": "j-worker-0"}, ("pytorchjob", "jaxjob"), id="pt+jax"),
])
def test_two_platforms_at_once_name_both(env: dict[str, str], names: tuple[str, ...]) -> None:
    with pytest.raises(ClusterError, match="two platforms") as err:
        parse_cluster(env)
    assert all(name in str(err.value) for name in names)
    assert "\n" not in str(err.value)


def test_platform_forces_one_reading() -> None:
    env = {**SLURM_TASK, "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "h", "MASTER_PORT": "1"}
    assert parse_cluster(env, platform="slurm").process_rank == 3
    assert parse_cluster(env, platform="env").process_rank == 0


@pytest.mark.parametrize(("env", "missing"), [
    pytest.param({k: v for k, v in SLURM_TASK.items() if k != "SLURM_NTASKS"}, "SLURM_NTASKS", id="slurm"),
    pytest.param({k: v for k, v in TRAINJOB_NODE.items() if k != "PET_MASTER_ADDR"}, "PET_MASTER_ADDR",
                 id="trainjob"),
    pytest.param({k: v for k, v in PYTORCHJOB_WORKER.items() if k != "MASTER_PORT"}, "MASTER_PORT", id="pytorchjob"),
    pytest.param({k: v for k, v in JOBSET_POD.items() if k != "JOBSET_PODS_PER_JOB"}, "JOBSET_PODS_PER_JOB",
                 id="jobset"),
    pytest.param({"COORDINATOR_ADDRESS": "j-worker-0", "NUM_PROCESSES": "2", "PROCESS_ID": "1"}, "COORDINATOR_PORT",
                 id="jaxjob"),
    pytest.param({"JOB_COMPLETION_INDEX": "1"}, "JOB_COMPLETION_INDEX", id="indexed-job-alone"),
    pytest.param({"SLURM_JOB_ID": "9", "SLURM_PROCID": "0"}, "SLURM_STEP_NODELIST", id="slurm-batch-step"),
])
def test_a_platform_with_one_variable_missing_names_it(env: dict[str, str], missing: str) -> None:
    with pytest.raises(ClusterError) as err:
        parse_cluster(env)
    assert err.value.variable == missing


def test_cli_refusal_is_one_line_exit_2() -> None:
    result = subprocess.run([sys.executable, "-m", "trainimg.cli.app", "cluster", "--json"], cwd=REPO,
                            env={**os.environ, **SLURM_TASK, "RANK": "0", "WORLD_SIZE": "1"}, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "slurm" in result.stderr and "env" in result.stderr


@pytest.mark.parametrize(("variable", "value", "fault"), [
    ("SLURM_PROCID", "8", "outside the world of 8"),
    ("SLURM_LOCALID", "4", "outside the world of 4"),
    ("SLURM_STEP_TASKS_PER_NODE", "4(x3)", "counts 3 node(s)"),
    ("SLURM_STEP_TASKS_PER_NODE", "3(x2)", "adds up to 6"),
    ("SLURM_STEP_NODELIST", "node[01-02", "unclosed"),
    ("SLURM_STEP_NODELIST", "node$(reboot)", "not a host name"),
    ("SLURM_NTASKS", "eight", "not a whole number"),
])
def test_slurm_values_a_task_cannot_trust(variable: str, value: str, fault: str) -> None:
    with pytest.raises(ClusterError, match=fault.replace("(", r"\(").replace(")", r"\)")):
        parse_cluster({**SLURM_TASK, variable: value})


def test_ntasks_per_node_forms() -> None:
    env = {k: v for k, v in SLURM_TASK.items() if k != "SLURM_STEP_TASKS_PER_NODE"}
    assert parse_cluster({**env, "SLURM_NTASKS_PER_NODE": "4"}).nproc_per_node == 4
    assert parse_cluster({**env, "SLURM_TASKS_PER_NODE": "4(x2)"}).nproc_per_node == 4
    uneven = {**env, "SLURM_NTASKS": "7", "SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
              "SLURM_STEP_NODELIST": "node[01-02]", "SLURM_TASKS_PER_NODE": "4,3"}
    assert parse_cluster(uneven).nproc_per_node == 3


def test_pytorchjob_nproc_must_agree_with_the_flag() -> None:
    assert parse_cluster(PYTORCHJOB_WORKER).nproc_per_node == 4
    with pytest.raises(ClusterError, match="asks for 4"):
        parse_cluster(PYTORCHJOB_WORKER, 2)
    with pytest.raises(ClusterError, match="elastic"):
        parse_cluster({**PYTORCHJOB_WORKER, "PET_NNODES": "1:4"})


def test_jobset_world_from_its_variables() -> None:
    info = parse_cluster(JOBSET_POD, 2)
    assert (info.platform, info.rank, info.world_size, info.master_addr, info.master_port,
            info.world_size_processes) == ("jobset", 2, 4, "js-node-0-0.js", 29500, 8)
    assert info.tf_config is not None and info.tf_config["cluster"]["worker"][3] == "js-node-0-3.js:29500"
    assert pytorchjob.NAME in [m.NAME for m in PLATFORMS] and jobset.hostname("a", "b", 1, 2, "c") == "a-b-1-2.c"


def test_trainjob_jax_runtime() -> None:
    env = {"JAX_NUM_PROCESSES": "4", "JAX_PROCESS_ID": "3", "JAX_COORDINATOR_ADDRESS": "tj-node-0-0.tj:29500"}
    info = parse_cluster(env)
    assert (info.platform, info.rank, info.world_size, info.master_addr, info.master_port) == (
        "trainjob", 3, 4, "tj-node-0-0.tj", 29500)
    with pytest.raises(ClusterError, match="not both"):
        parse_cluster({**env, **TRAINJOB_NODE})
    assert trainjob.NAME == "trainjob"


def test_launcher_env_read_back_under_the_launcher() -> None:
    """A program run under the launcher that asks again (selftest --cluster) gets the launcher's process view."""
    info = parse_cluster(PYTORCHJOB_WORKER)
    child = launch_env(info, PYTORCHJOB_WORKER, local_rank=2)
    again = parse_cluster(child)
    assert (again.platform, again.process_rank, again.world_size_processes, again.local_rank, again.started_by) == (
        "pytorchjob", 6, 8, 2, "trainimg-launch")


# -- real torchrun ------------------------------------------------------------------------------------------------
def test_pytorchjob_two_nodes_through_real_torchrun(framework_venv: Callable[[str], str],
                                                     tmp_path: Path) -> None:
    """Two PyTorchJob replicas on this machine (master at 127.0.0.1), 2 processes a node: the launcher execs real
    torchrun with the operator's node-level view, and its workers get ranks 0..3 of 4."""
    python, port, runtime = framework_venv("torch"), str(free_port()), image_layout(tmp_path)
    nodes = [subprocess.Popen(
        [python, "-m", "trainimg_runtime", "launch", "--framework", "pytorch", "--", sys.executable, "-c",
         PRINT_ENV], cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**{k: v for k, v in os.environ.items() if k not in platform_variables()},
             "PYTHONPATH": runtime,
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "WORLD_SIZE": "4", "RANK": str(node),
             "PET_NNODES": "2", "PET_NODE_RANK": str(node), "PET_NPROC_PER_NODE": "2"})
        for node in (0, 1)]
    outputs = [node.communicate(timeout=180) for node in nodes]
    assert [n.returncode for n in nodes] == [0, 0], [err[-2000:] for _, err in outputs]
    envs = sorted((e for out, _ in outputs for e in printed(out)), key=lambda e: int(e["RANK"] or -1))
    assert [(e["RANK"], e["WORLD_SIZE"], e["LOCAL_RANK"]) for e in envs] == [
        ("0", "4", "0"), ("1", "4", "1"), ("2", "4", "0"), ("3", "4", "1")]
    assert all(e["TORCHELASTIC_RUN_ID"] for e in envs)


def test_launcher_under_trainjob_torchrun_keeps_torchruns_ranks(framework_venv: Callable[[str], str],
                                                                tmp_path: Path) -> None:
    """A TrainJob runtime whose command is torchrun: torchrun reads PET_* itself and starts the processes; the
    launcher inside each keeps torchrun's ranks and starts nothing more."""
    python = framework_venv("torch")
    env = {**TRAINJOB_NODE, "PET_NNODES": "1", "PET_NODE_RANK": "0", "JOB_COMPLETION_INDEX": "0",
           "PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": str(free_port())}
    clean = {k: v for k, v in os.environ.items() if k not in platform_variables()}
    result = subprocess.run(
        [python, "-m", "torch.distributed.run", "--no-python", python, "-m", "trainimg_runtime", "launch",
         "--framework", "pytorch", "--", sys.executable, "-c", PRINT_ENV],
        cwd=REPO, env={**clean, "PYTHONPATH": image_layout(tmp_path), **env}, capture_output=True, text=True,
        timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    envs = printed(result.stdout)
    assert [(e["RANK"], e["WORLD_SIZE"], e["LOCAL_RANK"], e["TRAINIMG_PLATFORM"]) for e in envs] == [
        ("0", "2", "0", torchrun.NAME), ("1", "2", "1", torchrun.NAME)]
    assert "started by torchrun" in result.stderr
