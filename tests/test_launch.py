"""The launcher: launch_env for every role, and real ``python -m trainimg.runtime launch`` runs as subprocesses.

The subprocess tests start the launcher the way an image's entrypoint does, with a cluster variable set, and let
each child print the environment it received, so the rank arithmetic is checked on what processes actually see.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainimg.runtime.cluster import parse_cluster
from trainimg.runtime.launch import choose_mode, launch_env, torchrun_argv, visible_gpus
from trainimg.runtime.world import ClusterError

REPO = Path(__file__).resolve().parents[1]
# Two nodes: a chief and one worker (Vertex pools), as a two-replica job would see them.
TWO_NODES = {"workerpool0": ["chief-host:2222"], "workerpool1": ["worker-host:2222"], "workerpool2": ["ps-host:2222"]}
PRINT_ENV = (
    "import json, os; keys = ['RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE', 'NODE_RANK', 'MASTER_ADDR', "
    "'MASTER_PORT', 'JAX_PROCESS_ID', 'JAX_NUM_PROCESSES', 'JAX_COORDINATOR_ADDRESS', 'TRAINIMG_ROLE', "
    "'TRAINIMG_NODE_RANK', 'TRAINIMG_NNODES', 'TF_CONFIG']; "
    # One write(2) per line: the local processes share the launcher's stdout pipe and must not interleave.
    "os.write(1, (json.dumps({k: os.environ.get(k) for k in keys}) + '\\n').encode())"
)


def vertex_spec(pool: str, index: int) -> str:
    return json.dumps({"cluster": TWO_NODES, "environment": "cloud", "task": {"type": pool, "index": index}})


def launcher_env(**extra: str) -> dict[str, str]:
    """The test process's env without cluster or GPU variables that would leak into the launcher."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CLUSTER_SPEC", "TF_CONFIG", "CUDA_VISIBLE_DEVICES", "RANK", "WORLD_SIZE", "PYTHONPATH")
    }
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def launch(args: list[str], timeout: float = 60, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainimg.runtime", "launch", *args],
        cwd=REPO,
        env=launcher_env(**extra),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def printed_envs(stdout: str) -> list[dict[str, str | None]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


# --- launch_env, pure ---------------------------------------------------------------------------------------------


def test_launch_env_chief() -> None:
    info = parse_cluster({"CLUSTER_SPEC": vertex_spec("workerpool0", 0)})
    env = launch_env(info, {"PATH": "/bin", "KEEP": "1"})
    assert env["PATH"] == "/bin" and env["KEEP"] == "1"
    assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["RANK"], env["WORLD_SIZE"]) == ("chief-host", "2222", "0", "2")
    assert (env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"], env["NODE_RANK"]) == ("0", "1", "0")
    assert env["JAX_COORDINATOR_ADDRESS"] == "chief-host:2222"
    assert (env["JAX_NUM_PROCESSES"], env["JAX_PROCESS_ID"]) == ("2", "0")
    assert (env["TRAINIMG_ROLE"], env["TRAINIMG_NODE_RANK"], env["TRAINIMG_NNODES"]) == ("chief", "0", "2")
    assert json.loads(env["TF_CONFIG"]) == info.tf_config


def test_launch_env_worker() -> None:
    info = parse_cluster({"CLUSTER_SPEC": vertex_spec("workerpool1", 0)})
    env = launch_env(info, {})
    assert (env["RANK"], env["WORLD_SIZE"], env["JAX_PROCESS_ID"], env["TRAINIMG_ROLE"]) == ("1", "2", "1", "worker")
    assert json.loads(env["TF_CONFIG"])["task"] == {"type": "worker", "index": 0}


@pytest.mark.parametrize(("pool", "role"), [("workerpool2", "ps"), ("workerpool3", "evaluator")])
def test_launch_env_ps_and_evaluator_get_tf_config_and_role_only(pool: str, role: str) -> None:
    cluster = {**TWO_NODES, "workerpool3": ["eval-host:2222"]}
    info = parse_cluster({"CLUSTER_SPEC": json.dumps({"cluster": cluster, "task": {"type": pool, "index": 0}})})
    platform_env = {"RANK": "3", "WORLD_SIZE": "4", "MASTER_ADDR": "stale", "PATH": "/bin"}
    env = launch_env(info, platform_env)
    assert set(env) == {"PATH", "TF_CONFIG", "TRAINIMG_ROLE", "TRAINIMG_PLATFORM"}
    assert env["TRAINIMG_ROLE"] == role
    assert json.loads(env["TF_CONFIG"])["task"]["type"] == role
    assert platform_env["RANK"] == "3"  # the input mapping is not modified


def test_launch_env_uai_master_is_renamed_chief() -> None:
    cluster = {"master": ["10.0.0.1:2222"], "ps": ["10.0.0.1:2223"], "worker": ["10.0.0.2:2222"]}
    info = parse_cluster({"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "master", "index": 0}})})
    tf_config = json.loads(launch_env(info, {})["TF_CONFIG"])
    assert tf_config["cluster"] == {"chief": ["10.0.0.1:2222"], "worker": ["10.0.0.2:2222"], "ps": ["10.0.0.1:2223"]}
    assert tf_config["task"] == {"type": "chief", "index": 0}


def test_launch_env_local_sets_no_tf_config() -> None:
    env = launch_env(parse_cluster({}), {})
    assert "TF_CONFIG" not in env
    assert (env["MASTER_ADDR"], env["RANK"], env["WORLD_SIZE"], env["TRAINIMG_NNODES"]) == ("127.0.0.1", "0", "1", "1")


def test_launch_env_ipv6_coordinator_is_bracketed() -> None:
    cluster = {"chief": ["[fd00::1]:2222"], "worker": ["[fd00::2]:2222"]}
    info = parse_cluster({"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}})})
    env = launch_env(info, {})
    assert (env["MASTER_ADDR"], env["JAX_COORDINATOR_ADDRESS"]) == ("fd00::1", "[fd00::1]:2222")


def test_launch_env_per_process_ranks() -> None:
    info = parse_cluster({"CLUSTER_SPEC": vertex_spec("workerpool1", 0)}, nproc_per_node=4)
    env = launch_env(info, {}, local_rank=3)
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == ("7", "8", "3", "4")
    assert (env["JAX_PROCESS_ID"], env["JAX_NUM_PROCESSES"], env["NODE_RANK"]) == ("7", "8", "1")
    assert (env["TRAINIMG_NODE_RANK"], env["TRAINIMG_NNODES"]) == ("1", "2")
    with pytest.raises(ValueError, match="local_rank"):
        launch_env(info, {}, local_rank=4)


@pytest.mark.parametrize(("pool", "index"), [("workerpool0", 0), ("workerpool1", 0), ("workerpool2", 0),
                                           ("workerpool3", 0)])
def test_launched_process_reads_the_launchers_tf_config_with_the_platform_parser(pool: str, index: int) -> None:
    """A process the launcher started reads its TF_CONFIG back through tfconfig's parser: the same task and
    cluster, and the platform's CLUSTER_SPEC, still in the env, is not read a second time."""
    cluster = {**TWO_NODES, "workerpool2": ["ps-host:2222"], "workerpool3": ["eval-host:2222"]}
    spec = json.dumps({"cluster": cluster, "task": {"type": pool, "index": index}})
    info = parse_cluster({"CLUSTER_SPEC": spec})
    again = parse_cluster({**launch_env(info, {}), "CLUSTER_SPEC": spec})
    assert (again.role, again.index, again.tf_config) == (info.role, info.index, info.tf_config)


@pytest.mark.parametrize(("tf_config", "says"), [
    ("{not json", "is not valid JSON"),
    ('["a list"]', "must be a JSON object"),
    ('{"cluster": {"chief": ["chief-host:2222"]}}', "has no 'task' object"),
    ('{"cluster": {"chief": ["chief-host:2222"]}, "task": {"type": "chief", "index": "x"}}', "is not an integer"),
])
def test_launched_process_with_a_damaged_tf_config_is_a_cluster_error(tf_config: str, says: str) -> None:
    """The launcher's layer once did a bare json.loads and int(): a damaged TF_CONFIG was a traceback."""
    env = {"TRAINIMG_PLATFORM": "tfjob", "TRAINIMG_ROLE": "ps", "TF_CONFIG": tf_config}
    with pytest.raises(ClusterError, match=f"TF_CONFIG.*{says}"):
        parse_cluster(env)


# --- helpers ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("visible", "count"),
    [("0,1,2", 3), ("GPU-aaaa,GPU-bbbb", 2), ("", 1), ("-1", 1), ("0,-1,2", 1), ("NoDevFiles", 1), ("3", 1)],
)
def test_visible_gpus_from_cuda_visible_devices(visible: str, count: int) -> None:
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": visible, "PATH": ""}) == count


def test_visible_gpus_from_nvidia_smi(tmp_path: Path) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\necho 'GPU 0: NVIDIA H100 (UUID: GPU-a)'\necho '  MIG 1g.10gb Device 0: (UUID: MIG-a)'\n"
        "echo 'GPU 1: NVIDIA H100 (UUID: GPU-b)'\n"
    )
    smi.chmod(0o755)
    assert visible_gpus({"PATH": str(tmp_path)}) == 2
    assert visible_gpus({"PATH": str(tmp_path / "empty")}) == 1


@pytest.mark.parametrize(
    ("framework", "nproc", "has_torch", "mode"),
    [
        ("auto", 1, True, "exec"),
        ("auto", 2, True, "torchrun"),
        ("auto", 2, False, "spawn"),
        ("pytorch", 2, True, "torchrun"),
        ("pytorch", 2, False, "spawn"),
        ("jax", 2, True, "spawn"),
        ("tensorflow", 2, True, "exec"),
    ],
)
def test_choose_mode(framework: str, nproc: int, has_torch: bool, mode: str) -> None:
    assert choose_mode(parse_cluster({}, nproc), framework, has_torch) == mode


def test_torchrun_argv_uses_node_level_figures() -> None:
    info = parse_cluster({"CLUSTER_SPEC": vertex_spec("workerpool1", 0)}, nproc_per_node=8)
    assert torchrun_argv(info, ["python", "train.py"])[1:] == [
        "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "8",
        "--master-addr", "chief-host", "--master-port", "2222", "--no-python", "python", "train.py",
    ]  # fmt: skip


# --- the launcher as a process ------------------------------------------------------------------------------------


def test_two_nodes_two_processes_each_make_ranks_0_to_3() -> None:
    seen = []
    for pool, node in (("workerpool0", "0"), ("workerpool1", "1")):
        result = launch(
            ["--nproc-per-node", "2", "--framework", "jax", "--", sys.executable, "-c", PRINT_ENV],
            CLUSTER_SPEC=vertex_spec(pool, 0),
        )
        assert result.returncode == 0, result.stderr
        envs = printed_envs(result.stdout)
        assert len(envs) == 2
        for env in envs:
            assert (env["WORLD_SIZE"], env["JAX_NUM_PROCESSES"], env["LOCAL_WORLD_SIZE"]) == ("4", "4", "2")
            assert env["JAX_PROCESS_ID"] == env["RANK"]
            assert (env["NODE_RANK"], env["TRAINIMG_NODE_RANK"], env["TRAINIMG_NNODES"]) == (node, node, "2")
            assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("chief-host", "2222")
            assert env["JAX_COORDINATOR_ADDRESS"] == "chief-host:2222"
            assert int(env["RANK"] or -1) == int(node) * 2 + int(env["LOCAL_RANK"] or -1)
        seen += [int(env["RANK"] or -1) for env in envs]
    assert sorted(seen) == [0, 1, 2, 3]


def test_one_failing_local_process_fails_the_replica() -> None:
    child = "import os, sys, time; sys.exit(3) if os.environ['LOCAL_RANK'] == '1' else time.sleep(600)"
    # The sibling sleeps 600 s, past the 400 s this launch may take: terminated, not waited for.
    result = launch(["--nproc-per-node", "2", "--framework", "jax", "--", sys.executable, "-c", child], timeout=400)
    assert result.returncode == 3, result.stderr


def test_sigterm_is_forwarded_to_local_processes(tmp_path: Path) -> None:
    """Each child receives the SIGTERM the launcher got (it says so in a file of its own) and is gone when the
    launcher has returned: a launcher that exits 143 on its own, leaving its children running, fails here."""
    ready = tmp_path / "ready"
    child = (
        "import os, pathlib, signal, time; "
        f"me = pathlib.Path({str(ready)!r} + os.environ['LOCAL_RANK']); "
        "signal.signal(signal.SIGTERM, lambda *_: (pathlib.Path(f'{me}.term').write_text('SIGTERM'), os._exit(143))); "
        "me.write_text(str(os.getpid())); time.sleep(600)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainimg.runtime", "launch", "--nproc-per-node", "2", "--framework", "jax", "--"]
        + [sys.executable, "-c", child],
        cwd=REPO,
        env=launcher_env(),
        stderr=subprocess.DEVNULL,
    )
    children = [Path(f"{ready}{rank}") for rank in (0, 1)]
    deadline = time.monotonic() + 300  # a hang guard: both children start in a second unless the machine is loaded
    while not all(c.exists() and c.read_text() for c in children):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    pids = [int(c.read_text()) for c in children]
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
        assert [Path(f"{c}.term").read_text() if Path(f"{c}.term").exists() else None for c in children] == [
            "SIGTERM", "SIGTERM"]
        assert [pid for pid in pids if Path(f"/proc/{pid}").exists()] == []  # reaped by the launcher, none left
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_single_process_execs_with_node_env() -> None:
    result = launch(["--", sys.executable, "-c", PRINT_ENV], CLUSTER_SPEC=vertex_spec("workerpool1", 0))
    assert result.returncode == 0, result.stderr
    (env,) = printed_envs(result.stdout)
    assert (env["RANK"], env["WORLD_SIZE"], env["TRAINIMG_ROLE"], env["LOCAL_RANK"]) == ("1", "2", "worker", "0")
    assert json.loads(env["TF_CONFIG"] or "{}")["cluster"]["chief"] == ["chief-host:2222"]


def test_exit_code_of_cmd_is_the_launchers() -> None:
    assert launch(["--", sys.executable, "-c", "raise SystemExit(5)"]).returncode == 5


def test_tensorflow_starts_one_process_per_replica() -> None:
    result = launch(
        ["--nproc-per-node", "2", "--framework", "tensorflow", "--", sys.executable, "-c", PRINT_ENV],
        CLUSTER_SPEC=vertex_spec("workerpool1", 0),
    )
    assert result.returncode == 0, result.stderr
    (env,) = printed_envs(result.stdout)
    assert (env["RANK"], env["WORLD_SIZE"], env["TRAINIMG_NNODES"]) == ("1", "2", "2")


def test_ps_runs_one_process_without_rank() -> None:
    """A stale RANK beside CLUSTER_SPEC is two platforms' variables (refused: see tests/test_platforms.py) until
    --platform says which one made the job; the ps then runs alone, without it."""
    result = launch(
        ["--nproc-per-node", "2", "--framework", "jax", "--platform", "vertex", "--", sys.executable, "-c",
         PRINT_ENV],
        CLUSTER_SPEC=vertex_spec("workerpool2", 0),
        RANK="9",
    )
    assert result.returncode == 0, result.stderr
    (env,) = printed_envs(result.stdout)
    assert (env["TRAINIMG_ROLE"], env["RANK"], env["WORLD_SIZE"]) == ("ps", None, None)
    assert json.loads(env["TF_CONFIG"] or "{}")["task"] == {"type": "ps", "index": 0}


def test_auto_counts_cuda_visible_devices() -> None:
    result = launch(
        ["--nproc-per-node", "auto", "--framework", "jax", "--", sys.executable, "-c", PRINT_ENV],
        CUDA_VISIBLE_DEVICES="0,1,2",
    )
    assert result.returncode == 0, result.stderr
    envs = printed_envs(result.stdout)
    assert sorted(env["LOCAL_RANK"] or "" for env in envs) == ["0", "1", "2"]


def test_torchrun_path_execs_torch_distributed_run(tmp_path: Path) -> None:
    # A stand-in `torch` package: find_spec finds it, and its torch.distributed.run prints what it was given.
    run = tmp_path / "torch" / "distributed" / "run.py"
    run.parent.mkdir(parents=True)
    (tmp_path / "torch" / "__init__.py").write_text("")
    (run.parent / "__init__.py").write_text("")
    run.write_text("import json, os, sys\nprint(json.dumps({'argv': sys.argv[1:], 'rank': os.environ['RANK']}))\n")
    result = launch(
        ["--nproc-per-node", "2", "--", "python", "train.py"],
        CLUSTER_SPEC=vertex_spec("workerpool1", 0),
        PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}",
    )
    assert result.returncode == 0, result.stderr
    (printed,) = printed_envs(result.stdout)
    assert printed["argv"] == [
        "--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "2", "--master-addr", "chief-host",
        "--master-port", "2222", "--no-python", "python", "train.py",
    ]  # fmt: skip
    assert printed["rank"] == "1"  # node-level until torchrun assigns per-process ranks


def test_bad_cluster_spec_exits_2() -> None:
    result = launch(["--", "true"], CLUSTER_SPEC='{"cluster": {}}')
    assert result.returncode == 2
    assert result.stderr.startswith("trainimg-launch: CLUSTER_SPEC: ")
    assert result.stderr.count("\n") == 1


def test_missing_cmd_exits_2_with_usage() -> None:
    result = launch(["--nproc-per-node", "1"])
    assert result.returncode == 2
    assert "usage:" in result.stderr


def test_cmd_not_found_exits_127() -> None:
    result = launch(["--", "trainimg-no-such-command-xyz"])
    assert result.returncode == 127
    assert result.stderr.strip() == "trainimg-launch: trainimg-no-such-command-xyz: command not found"


def test_bad_nproc_exits_2() -> None:
    assert launch(["--nproc-per-node", "0", "--", "true"]).returncode == 2


# --- the framework without --framework; the Reduction Server pool -------------------------------------------------


def manifest(tmp_path: Path, *frameworks: str) -> str:
    """A manifest as `python -m trainimg_runtime manifest` writes it, listing `frameworks`."""
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"frameworks": {name: {"version": "1.0"} for name in frameworks}}))
    return str(path)


def test_tensorflow_image_keeps_one_process_without_framework_flag(tmp_path: Path) -> None:
    # What `trainimg spec --image <TF image> --accelerator T:8` used to produce: N processes sharing one TF task.
    result = launch(["--nproc-per-node", "2", "--manifest", manifest(tmp_path, "tensorflow"), "--",
                     sys.executable, "-c", PRINT_ENV], CLUSTER_SPEC=vertex_spec("workerpool1", 0))
    assert result.returncode == 0, result.stderr
    (env,) = printed_envs(result.stdout)
    assert json.loads(env["TF_CONFIG"] or "{}")["task"] == {"type": "worker", "index": 0}
    assert "1 process(es) via exec" in result.stderr


def test_jax_image_from_manifest_spawns_per_gpu(tmp_path: Path) -> None:
    result = launch(["--nproc-per-node", "2", "--manifest", manifest(tmp_path, "jax"), "--",
                     sys.executable, "-c", PRINT_ENV], CLUSTER_SPEC=vertex_spec("workerpool1", 0))
    assert result.returncode == 0, result.stderr
    assert sorted(env["RANK"] or "" for env in printed_envs(result.stdout)) == ["2", "3"]


def test_several_frameworks_need_the_flag_only_when_it_matters(tmp_path: Path) -> None:
    both = manifest(tmp_path, "pytorch", "tensorflow")
    result = launch(["--nproc-per-node", "2", "--manifest", both, "--", "true"])
    assert result.returncode == 2
    assert result.stderr == "trainimg-launch: this image holds pytorch, tensorflow; pass --framework to say which " \
                            "one CMD uses\n"
    assert launch(["--manifest", both, "--", "true"]).returncode == 0
    assert launch(["--nproc-per-node", "2", "--framework", "tensorflow", "--manifest", both, "--", "true"]
                  ).returncode == 0


def test_without_manifest_the_importable_framework_counts(tmp_path: Path) -> None:
    (tmp_path / "tensorflow").mkdir()
    (tmp_path / "tensorflow" / "__init__.py").write_text("")
    result = launch(["--nproc-per-node", "3", "--manifest", str(tmp_path / "absent.json"), "--",
                     sys.executable, "-c", PRINT_ENV], CLUSTER_SPEC=vertex_spec("workerpool0", 0),
                    PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}")
    assert result.returncode == 0, result.stderr
    assert len(printed_envs(result.stdout)) == 1


def test_reduction_server_flag_keeps_pool_2_out_of_tf_config(tmp_path: Path) -> None:
    args = ["--framework", "tensorflow", "--", sys.executable, "-c", PRINT_ENV]
    plain = launch(args, CLUSTER_SPEC=vertex_spec("workerpool1", 0))
    reduced = launch(["--reduction-server", *args], CLUSTER_SPEC=vertex_spec("workerpool1", 0))
    assert plain.returncode == reduced.returncode == 0, plain.stderr + reduced.stderr
    assert "ps" in json.loads(printed_envs(plain.stdout)[0]["TF_CONFIG"] or "{}")["cluster"]
    assert json.loads(printed_envs(reduced.stdout)[0]["TF_CONFIG"] or "{}")["cluster"] == {
        "chief": ["chief-host:2222"], "worker": ["worker-host:2222"]}
