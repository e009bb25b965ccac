"""The framework all-reduce worker (`trainimg.runtime.allreduce`): real multi-process runs on CPU.

Each framework test starts the ranks itself (environment set directly, no launcher) from a copy of the runtime
package named ``trainimg_runtime``, under a /tmp virtual environment holding the framework (made on first use from
the machine's local wheels when it is missing), and asserts every rank's single JSON line says ok with expected 6.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_platform_clients import read, run_client

from trainimg.runtime import allreduce_bench, allreduce_result
from trainimg.runtime.launch import launch_env
from trainimg.runtime.topology import PLATFORMS, refusal, replica_specs

REPO = Path(__file__).resolve().parents[1]
RUNTIME = REPO / "builder" / "runtime"




@pytest.fixture(scope="session")
def runtime_path(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("rt")
    shutil.copytree(RUNTIME, root / "trainimg_runtime", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def base_env(runtime: Path, *extra_path: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "TF_CONFIG", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                        "TRAINIMG_ROLE", "JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")}
    env["PYTHONPATH"] = os.pathsep.join([*extra_path, str(runtime)])
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return env


def start(python: str, framework: str, env: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen([python, "-m", "trainimg_runtime", "allreduce", "--framework", framework, *args],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/")


def finish(procs: list[subprocess.Popen], timeout: float) -> list[tuple[int, list[dict], str]]:
    out = []
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            stdout, stderr = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            pytest.fail(f"rank did not finish within {timeout} s")
        lines = [json.loads(line) for line in stdout.splitlines() if line.strip()]
        out.append((proc.returncode, lines, stderr))
    return out


def assert_all_ok(results, framework: str, world: int = 3) -> None:
    ranks = set()
    for rc, lines, stderr in results:
        assert len(lines) == 1, (lines, stderr[-2000:])  # exactly one JSON line on stdout
        line = lines[0]
        assert rc == 0, (line, stderr[-2000:])
        assert set(line) >= {"framework", "backend", "rank", "world_size", "expected", "got", "ok", "seconds",
                             "device"}
        assert line["framework"] == framework and line["ok"] is True
        assert line["expected"] == allreduce_result.expected_sum(world) == line["got"]
        assert line["world_size"] == world
        ranks.add(line["rank"])
    assert ranks == set(range(world))


# ---------------------------------------------------------------------------------------------------- helpers


def test_expected_sum_and_busbw():
    assert [allreduce_result.expected_sum(n) for n in (0, 1, 2, 3, 8)] == [0, 1, 3, 6, 36]
    assert allreduce_bench.busbw(100.0, 1) == 0.0
    assert allreduce_bench.busbw(100.0, 2) == 100.0
    assert allreduce_bench.busbw(100.0, 8) == pytest.approx(175.0)
    with pytest.raises(ValueError):
        allreduce_bench.busbw(1.0, 0)


def test_benchmark_result_command_and_parsing():
    result = allreduce_bench.benchmark_result(size_bytes=1_000_000_000, iters=10, nranks=8, elapsed=0.1, ok=True)
    assert result["time_us"] == 10000.0
    assert result["algbw_gbps"] == 100.0 and result["busbw_gbps"] == 175.0
    assert allreduce_bench.benchmark_command(1 << 28, 20) == [
        "python3", "-m", "trainimg_runtime", "allreduce", "--framework", "pytorch", "--backend", "nccl",
        "--benchmark-bytes", str(1 << 28), "--iters", "20"]
    text = "NCCL INFO something\n" + json.dumps(result) + "\n"
    assert allreduce_bench.parse_benchmark_output(text) == result
    with pytest.raises(ValueError):
        allreduce_bench.parse_benchmark_output('{"ok": true}\n')


def test_the_tf_worker_joins_as_tensorflow_reads_each_platforms_tf_config() -> None:
    """On every platform that runs TensorFlow, the task the all-reduce worker joins as (allreduce_result.tf_task and
    tf_rank, on the environment the launcher execs it with) is the one TensorFlow's own TFConfigClusterResolver and
    multi_worker_util read from that TF_CONFIG, whatever TRAINIMG_ROLE says: Slurm's and JobSet's workers-only
    TF_CONFIG have no chief, though TRAINIMG_ROLE names node 0 the chief there. Every job's ranks are 0..N-1."""
    jobs: list[tuple[str, list[dict[str, str]]]] = []
    for platform in (p for p in PLATFORMS if refusal(p, "tensorflow") is None):
        for replicas in (1, 2, 3):
            specs = replica_specs(platform, replicas, framework="tensorflow",
                                  nproc_per_node=2 if platform == "slurm" else 1)
            launched = [launch_env(info, spec.env) for spec in specs for info in [read(spec.env)]
                        if not isinstance(info, dict) and info.role in ("chief", "worker")]
            jobs.append((f"{platform} x{replicas}", [env for env in launched if "TF_CONFIG" in env]))
    assert {name.split()[0] for name, envs in jobs if envs} >= {"vertex", "slurm", "tfjob", "jobset"}, jobs
    envs = [env for _, job in jobs for env in job]
    answers = iter(run_client("tf", "tf_client.py", [{"mode": "tf_config", "env": {"TF_CONFIG": env["TF_CONFIG"]}}
                                                     for env in envs]))
    wrong = []
    for name, job in jobs:
        ranks = []
        for env in job:
            cluster, role, index = allreduce_result.tf_task(env)
            rank, world = allreduce_result.tf_rank(cluster, role, index)
            theirs = next(answers)
            mine = {"task_type": role, "task_id": index, "id_in_cluster": rank, "worker_count": world}
            if mine != {k: theirs.get(k) for k in mine}:
                wrong.append((name, env["TRAINIMG_ROLE"], mine, theirs))
            ranks.append(rank)
        if sorted(ranks) != list(range(len(job))):
            wrong.append((name, "ranks", ranks))
    assert not wrong, wrong[:5]
    print(f"{len(envs)} TensorFlow tasks of {len(jobs)} jobs on "
          f"{len({name.split()[0] for name, _ in jobs})} platforms join as TensorFlow reads them")


def test_tf_task_and_rank():
    cluster = {"chief": ["a:1"], "worker": ["b:1", "c:1"], "ps": ["d:1"]}
    env = {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 1}})}
    assert allreduce_result.tf_task(env) == (cluster, "worker", 1)
    assert allreduce_result.tf_rank(cluster, "worker", 1) == (2, 3)
    assert allreduce_result.tf_rank(cluster, "chief", 0) == (0, 3)
    assert allreduce_result.tf_rank(cluster, "ps", 0) == (None, 3)
    assert allreduce_result.tf_rank({"worker": ["b:1", "c:1"]}, "worker", 1) == (1, 2)
    legacy = {"TF_CONFIG": json.dumps({"cluster": {"master": ["a:1"]}, "task": {"type": "master", "index": 0}})}
    assert allreduce_result.tf_task(legacy) == ({"chief": ["a:1"]}, "chief", 0)
    with pytest.raises(allreduce_result.SetupError):
        allreduce_result.tf_task({})


def test_setup_error_exits_2(runtime_path):
    proc = subprocess.run([sys.executable, "-m", "trainimg_runtime", "allreduce", "--framework", "pytorch"],
                          env=base_env(runtime_path), capture_output=True, text=True, cwd="/", timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == ["allreduce (pytorch): setup error: RANK is not set"]


def test_tensorflow_evaluator_is_skipped(runtime_path):
    env = base_env(runtime_path)
    env["TF_CONFIG"] = json.dumps({"cluster": {"chief": ["127.0.0.1:1"]}, "task": {"type": "evaluator", "index": 0}})
    proc = subprocess.run([sys.executable, "-m", "trainimg_runtime", "allreduce", "--framework", "tensorflow"],
                          env=env, capture_output=True, text=True, cwd="/", timeout=60)
    assert proc.returncode == 0
    line = json.loads(proc.stdout)
    assert line["role"] == "evaluator" and line["status"] == "skipped" and line["ok"] is None


# ------------------------------------------------------------------------------------------------ frameworks


def torch_ranks(python: str, runtime: Path, world: int, ranks, timeout: float, *extra_path: str):
    [port] = free_ports(1)
    procs = []
    for rank in ranks:
        env = base_env(runtime, *extra_path)
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world), RANK=str(rank))
        procs.append(start(python, "pytorch", env, "--backend", "auto", "--timeout", str(timeout)))
    return procs


def test_pytorch_gloo_three_ranks(framework_venv, runtime_path):
    python = framework_venv("torch")
    results = finish(torch_ranks(python, runtime_path, 3, range(3), 60), 120)
    assert_all_ok(results, "pytorch")
    assert {lines[0]["backend"] for _, lines, _ in results} == {"gloo"}
    assert {lines[0]["device"] for _, lines, _ in results} == {"cpu"}


def test_pytorch_wrong_sum_exits_1(framework_venv, runtime_path, tmp_path):
    python = framework_venv("torch")
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\n"
        "if '--supervised-child' in sys.argv:  # the process that runs torch, not its supervisor\n"
        "    import torch.distributed as _dist\n"
        "    _real = _dist.all_reduce\n"
        "    def _broken(tensor, *args, **kwargs):\n"
        "        work = _real(tensor, *args, **kwargs)\n"
        "        tensor.add_(1)\n"
        "        return work\n"
        "    _dist.all_reduce = _broken\n")
    results = finish(torch_ranks(python, runtime_path, 2, range(2), 60, str(tmp_path)), 120)
    for rc, lines, stderr in results:
        assert rc == 1, stderr[-2000:]
        assert lines[0]["ok"] is False and lines[0]["expected"] == 3 and lines[0]["got"] == 4


def test_pytorch_hung_peer_exits_3(framework_venv, runtime_path):
    python = framework_venv("torch")
    results = finish(torch_ranks(python, runtime_path, 3, [0, 1], 6), 600)
    for rc, lines, stderr in results:  # ended by the 6 s timeout, each rank saying so; `finish` fails a hang
        assert rc == 3, stderr[-2000:]
        assert "timed out after 6 s" in stderr
        assert lines and lines[0]["ok"] is False and lines[0]["error"] == "timeout", stderr[-2000:]  # its verdict too


def test_tensorflow_multiworker_with_ps(framework_venv, runtime_path, tmp_path):
    python = framework_venv("tf")
    chief, w0, w1, ps = free_ports(4)
    cluster = {"chief": [f"127.0.0.1:{chief}"], "worker": [f"127.0.0.1:{w0}", f"127.0.0.1:{w1}"],
               "ps": [f"127.0.0.1:{ps}"]}
    env = base_env(runtime_path)
    ps_out = tmp_path / "ps.out"
    with open(ps_out, "w") as fh:
        ps_proc = subprocess.Popen(
            [python, "-m", "trainimg_runtime", "allreduce", "--framework", "tensorflow", "--timeout", "120"],
            env={**env, "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "ps", "index": 0}}),
                 "TRAINIMG_ROLE": "ps"},
            stdout=fh, stderr=subprocess.DEVNULL, cwd="/")
    try:
        procs = []
        for role, index in (("chief", 0), ("worker", 0), ("worker", 1)):
            task_env = {**env, "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": role, "index": index}}),
                        "TRAINIMG_ROLE": role}
            procs.append(start(python, "tensorflow", task_env, "--timeout", "120"))
        results = finish(procs, 180)
        assert_all_ok(results, "tensorflow")
        assert [lines[0]["role"] for _, lines, _ in results] == ["chief", "worker", "worker"]
        assert all(lines[0]["all_ok"] for _, lines, _ in results)
        assert ps_proc.poll() is None  # the ps serves until killed
        ps_line = json.loads(ps_out.read_text().splitlines()[0])
        assert ps_line["role"] == "ps" and ps_line["status"] == "serving"
    finally:
        ps_proc.kill()
        ps_proc.wait(timeout=30)


def test_tensorflow_hung_peer_exits_3(framework_venv, runtime_path):
    """TF's multi-worker start-up blocks holding the GIL: only the supervising parent can end it on time."""
    python = framework_venv("tf")
    ports = free_ports(3)
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{p}" for p in ports[1:]]}
    procs = []
    for role, index in (("chief", 0), ("worker", 0)):  # worker 1 never starts
        env = {**base_env(runtime_path),
               "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": role, "index": index}})}
        procs.append(start(python, "tensorflow", env, "--timeout", "10"))
    results = finish(procs, 600)  # fails a hang
    for rc, lines, stderr in results:
        assert rc == 3, stderr[-2000:]
        assert lines[0]["error"] == "timeout" and lines[0]["ok"] is False
        assert "timed out after 10 s" in stderr


def test_jax_three_processes(framework_venv, runtime_path):
    python = framework_venv("jax")
    [port] = free_ports(1)
    procs = []
    for pid in range(3):
        env = base_env(runtime_path)
        env.update(JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES="3", JAX_PROCESS_ID=str(pid))
        procs.append(start(python, "jax", env, "--timeout", "90"))
    results = finish(procs, 150)
    assert_all_ok(results, "jax")
    assert all(lines[0]["crossed_processes"] for _, lines, _ in results)
    assert {lines[0]["backend"] for _, lines, _ in results} == {"gloo"}
