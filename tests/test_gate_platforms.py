"""`trainimg test` and `trainimg run` on the platforms that name their own hosts: Slurm and Kubernetes' controllers.

Each run is the real gate: N containers with exactly the env the platform injects, the hostnames and DNS aliases
it gives (``<job>-worker-0``, ``<trainjob>-node-0-0.<trainjob>``, ``<job>-chief-0.default.svc``), its processes
started as it starts them (one container per Slurm task, a TrainJob's torchrun, else the launcher), and the exact
all-reduce sum on every rank. The CPU PyTorch image runs on every platform at 2 and 4 replicas and 2 x 2
processes; the CPU JAX and TensorFlow images once on each platform that fits them. Every run is one parametrized
case, so ``--durations`` times each.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import trainimg

from trainimg.conformance.suite import gate_shm
from trainimg.engine.docker import DockerEngine
from trainimg.errors import UserInputError
from trainimg.jobs.run import run_job
from trainimg.options import JobOptions
from trainimg.runtime.platforms import BY_NAME

PLATFORMS = ["slurm", "trainjob", "pytorchjob", "tfjob", "jaxjob", "jobset", "azureml", "sagemaker"]
# (replicas, processes per replica): 4 replicas of one process, and 2 replicas of two processes each; 2 replicas of
# one process are what test_framework_on_the_platforms_that_fit_it runs for JAX and TensorFlow.
SHAPES = [(4, 1), (2, 2)]
#: Platforms that start every process themselves: a container per process (Slurm's tasks, Azure ML's pytorch).
PER_PROCESS = ("slurm", "azureml")
# How each replica's launcher says it was started (its first line): by the platform, or starting them itself.
STARTED = {"slurm": "started by slurm", "trainjob": "started by torchrun",
           "azureml": "started by azureml"}
LAUNCH_LINE = re.compile(r"^\[(?P<replica>[^\]]+)\] trainimg-launch: (?P<how>.*)$", re.M)


def gate(image: str, platform: str, replicas: int, nproc: int, env: dict[str, str],
         tmp_path: Path) -> tuple[dict, str]:
    """One `trainimg test` run: (its all-reduce check, the replicas' streamed output)."""
    report = tmp_path / "r.json"
    r = trainimg("test", image, "--platform", platform, "--replicas", str(replicas), "--nproc-per-node", str(nproc),
                 "--json", str(report), "--progress", "plain", env=env, timeout=900)
    assert report.exists(), r.stderr[-3000:]
    checks = {c["name"]: c for c in json.loads(report.read_text())["suites"][0]["checks"]}
    per_node = f"x{nproc}" if nproc > 1 else ""
    check = checks[f"allreduce_{platform}_x{replicas}{per_node}"]
    assert r.returncode == 0, r.stderr[-3000:]
    # Every container had the /dev/shm the platform's row says the job gets (runtime/shm.py), and the check saw it.
    shm, row = checks["shm"], BY_NAME[platform].SHM
    assert shm["details"]["bytes"] == gate_shm(platform, nproc, None) and shm["details"]["local_ranks"] == nproc
    assert shm["status"] == ("skipped" if nproc == 1 else "warning" if row.setting is None else "passed"), shm
    return check, r.stderr


def ranks(check: dict) -> list[int]:
    return sorted(line["rank"] for replica in check["details"]["replicas"].values() for line in replica["results"])


@pytest.mark.parametrize(("replicas", "nproc"), SHAPES, ids=[f"x{r}x{n}" for r, n in SHAPES])
@pytest.mark.parametrize("platform", PLATFORMS)
def test_pytorch_on_each_platform(pinned_cpu_image: str, platform: str, replicas: int, nproc: int,
                                  state_env: dict[str, str], tmp_path: Path) -> None:
    check, output = gate(pinned_cpu_image, platform, replicas, nproc, state_env, tmp_path)
    world = replicas * nproc
    assert check["status"] == "passed", check["reason"]
    assert check["reason"] == f"sum {world * (world + 1) // 2} on all {world} ranks"
    assert ranks(check) == list(range(world))
    names = list(check["details"]["replicas"])
    assert len(names) == (world if platform in PER_PROCESS else replicas), names
    launched = {m["replica"]: m["how"] for m in LAUNCH_LINE.finditer(output)}
    assert set(launched) == set(names), output[-3000:]
    expected = STARTED.get(platform) or (f"via torchrun (nproc-per-node {nproc})" if nproc > 1 else "via exec")
    assert all(expected in how for how in launched.values()), launched


FITS = [("jax", "slurm"), ("jax", "jobset"), ("jax", "jaxjob"), ("jax", "trainjob"), ("tensorflow", "tfjob"),
        ("tensorflow", "slurm"), ("tensorflow", "jobset"),
        ("tensorflow", "azureml"), ("jax", "azureml"),
        ("tensorflow", "sagemaker"), ("jax", "sagemaker")]


@pytest.mark.parametrize(("framework", "platform"), FITS)
def test_framework_on_the_platforms_that_fit_it(pinned_framework_images: dict[str, str],
                                                framework: str, platform: str, state_env: dict[str, str],
                                                tmp_path: Path) -> None:
    check, _ = gate(pinned_framework_images[framework], platform, 2, 1, state_env, tmp_path)
    assert check["status"] == "passed" and check["reason"] == "sum 3 on all 2 ranks", check["reason"]
    lines = [line for replica in check["details"]["replicas"].values() for line in replica["results"]]
    assert {line["framework"] for line in lines} == {framework} and ranks(check) == [0, 1]


def test_tensorflow_is_refused_where_no_tf_config_comes(pinned_framework_images: dict[str, str],
                                                        state_env: dict[str, str]) -> None:
    """A TrainJob has no TensorFlow runtime, a PyTorchJob gives no TF_CONFIG: one line, exit 2, nothing started."""
    for platform in ("trainjob", "pytorchjob"):
        r = trainimg("test", pinned_framework_images["tensorflow"], "--platform", platform, "--progress", "quiet",
                     env=state_env, timeout=120)
        assert r.returncode == 2, r.stderr[-2000:]
        assert r.stderr.strip().splitlines() == [r.stderr.strip()] and "--platform tfjob" in r.stderr, r.stderr


@pytest.mark.parametrize(("platform", "framework"), [("slurm", "pytorch"), ("trainjob", "jax")])
def test_run_uses_the_same_replicas(pinned_cpu_image: str, pinned_framework_images: dict[str, str],
                                    platform: str, framework: str) -> None:
    """`trainimg run` starts the platform's replicas under the launcher: Slurm's tasks keep their ranks (no second
    layer), a JAX image's TrainJob gets the JAX runtime's env, which the launcher maps to 2 processes a node."""
    script = ("import os; print('RANK', os.environ['RANK'], os.environ['WORLD_SIZE'], "
              "os.environ['JAX_COORDINATOR_ADDRESS'], os.environ.get('SLURM_PROCID', os.environ.get('JAX_PROCESS_ID')))")
    image = pinned_cpu_image if framework == "pytorch" else pinned_framework_images[framework]
    opts = JobOptions(command=["python3", "-c", script], platform=platform, replicas=2, nproc_per_node=2,
                      timeout=300)
    result = run_job(DockerEngine(), image, opts)
    assert result.exit_code == 0, result.summary() + "\n".join(r.logs[-1500:] for r in result.replicas)
    said = [line.split() for r in result.replicas for line in r.logs.splitlines() if line.startswith("RANK ")]
    assert sorted(int(words[1]) for words in said) == [0, 1, 2, 3] and {words[2] for words in said} == {"4"}
    assert all(words[1] == words[4] for words in said), said  # Slurm's ranks kept; JAX's process ids mapped
    job = f"ti-{result.run_id}"
    master = {"slurm": f"{job}-node0", "trainjob": f"{job}-node-0-0.{job}"}[platform]
    assert {words[3].rpartition(":")[0] for words in said} == {master}
    assert len(result.replicas) == (4 if platform == "slurm" else 2)


@pytest.mark.parametrize(("kwargs", "where", "words"), [
    (dict(platform="slurm", ps=1), "--ps", "slurm has no ps"),
    (dict(platform="jobset", evaluators=1), "--evaluators", "jobset has no evaluator"),
    (dict(platform="trainjob", ps=2), "--ps", "trainjob has no ps"),
    (dict(platform="pytorchjob", evaluators=2), "--evaluators", "pytorchjob has no evaluator"),
])
def test_run_shapes_each_platform_refuses(kwargs: dict, where: str, words: str) -> None:
    engine = DockerEngine(client=object())  # never reached: the shape is checked first
    with pytest.raises(UserInputError) as exc:
        run_job(engine, "any", JobOptions(command=["true"], replicas=2, **kwargs))
    assert exc.value.where == where and words in exc.value.message


def test_tensorflow_on_azureml_at_four_workers(pinned_framework_images: dict[str, str],
                                               state_env: dict[str, str], tmp_path: Path) -> None:
    """Azure ML's tensorflow distribution at 4 workers (2 is in FITS): TF_CONFIG workers only, ``environment: cloud``,
    a real MultiWorkerMirroredStrategy all-reduce across the 4 containers."""
    check, _ = gate(pinned_framework_images["tensorflow"], "azureml", 4, 1, state_env, tmp_path)
    assert check["status"] == "passed" and check["reason"] == "sum 10 on all 4 ranks", check["reason"]
    assert sorted(check["details"]["replicas"]) == [f"worker-{k}" for k in range(4)] and ranks(check) == [0, 1, 2, 3]


def test_sagemaker_replicas_read_their_mounted_resource_config(pinned_cpu_image: str) -> None:
    """Each SageMaker replica finds its own resourceconfig.json where SageMaker puts it, read-only, answers to the
    name it lists (algo-1, algo-2); the launcher reads the file (no SM_* variable is set)."""
    # Its own name resolves on the job's network (the peers' names carry the all-reduce in the runs above).
    script = ("import json, os, socket; c = json.load(open('/opt/ml/input/config/resourceconfig.json')); "
              "print('SM', c['current_host'], ','.join(c['hosts']), os.environ['RANK'], os.environ['MASTER_ADDR'], "
              "os.environ['MASTER_PORT'], os.access('/opt/ml/input/config/resourceconfig.json', os.W_OK), "
              "bool(socket.gethostbyname(c['current_host'])), os.environ['TRAINIMG_PLATFORM'])")
    opts = JobOptions(command=["python3", "-c", script], platform="sagemaker", replicas=2, timeout=300)
    result = run_job(DockerEngine(), pinned_cpu_image, opts)
    assert result.exit_code == 0, result.summary() + "\n".join(r.logs[-1500:] for r in result.replicas)
    said = sorted(line.split()[1:] for r in result.replicas for line in r.logs.splitlines() if line.startswith("SM "))
    assert said == [["algo-1", "algo-1,algo-2", "0", "algo-1", "7777", "False", "True", "sagemaker"],
                    ["algo-2", "algo-1,algo-2", "1", "algo-1", "7777", "False", "True", "sagemaker"]], said
