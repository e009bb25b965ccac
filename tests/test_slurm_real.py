"""Slurm for real: a one-machine cluster (tests/slurmcluster.py) runs the CPU PyTorch image's all-reduce as Slurm
tasks, by `srun` directly and through the batch script `trainimg.jobs.slurm` writes, judged by the one all-reduce
judge (`runtime.verdict`); every runtime's script passes `bash -n` and the real `sbatch --test-only`.

tests/data/slurm_env_samples.json holds what this Slurm gives tasks and batch steps (only SLURM_*). The test that
reads it checks that the live cluster still gives the same names; after a Slurm upgrade, rewrite it with
``TRAINIMG_UPDATE_GOLDEN=1 python -m pytest tests/test_slurm_real.py`` and read the diff before committing it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from slurmcluster import BASE, GPUS, SlurmCluster, daemon, reap_leftovers, task_runs, wait

from trainimg.errors import UserInputError
from trainimg.jobs.slurm import CONTAINER_RUNTIMES, DOCKER, enroot_image, sbatch_script
from trainimg.runtime.verdict import judge_allreduce

SAMPLES = Path(__file__).resolve().parent / "data" / "slurm_env_samples.json"
UPDATE = os.environ.get("TRAINIMG_UPDATE_GOLDEN") == "1"
DOCKER_CLI = os.environ.get("TRAINIMG_DOCKER_CLI", "/usr/bin/docker")
WORLD = 4
ALLREDUCE = ["trainimg-launch", "--framework", "pytorch", "--", "python3", "-m", "trainimg_runtime", "allreduce",
             "--framework", "pytorch", "--backend", "gloo", "--timeout", "60"]
# What each task of the srun test runs: its own SLURM_* into an env file, then the image on the host network.
# (The batch script's docker runtime passes the names instead; two ways in, one judge.)
SRUN_TASK = """set -euo pipefail
env_file="$1/env.$SLURM_PROCID"; shift
env | grep '^SLURM_' >"$env_file"
exec "$DOCKER_CLI" run --rm --network host --name "$PREFIX-$SLURM_PROCID" --env-file "$env_file" "$@"
"""


def labelled_env(output: str, ntasks: int) -> list[dict[str, str]]:
    """Each task's SLURM_* from `env` run under srun --label, less the SLURM_LABELIO that --label itself sets."""
    return [dict(line.split("=", 1) for line in run.logs.splitlines()
                 if line.startswith("SLURM_") and not line.startswith("SLURM_LABELIO="))
            for run in task_runs(output, ntasks, 0)]


def batch(cluster: SlurmCluster, script: str, folder: Path, env: dict[str, str] | None = None,
          timeout: float = 300) -> tuple[int, str]:
    """Submit `script` with the real sbatch and wait for the job: its exit code and its output."""
    (folder / "job.sh").write_text(script)
    out = folder / "job.out"
    result = cluster.run("sbatch", "--wait", f"--output={out}", str(folder / "job.sh"), env=env, cwd=folder,
                         timeout=timeout)
    return result.returncode, (out.read_text() if out.exists() else "") + result.stderr


def remove_containers(prefix: str) -> None:
    """Containers a killed task left behind (their docker client died before --rm ran)."""
    ids = subprocess.run([DOCKER_CLI, "ps", "-aq", "--filter", f"name={prefix}"], capture_output=True, text=True,
                         timeout=60).stdout.split()
    if ids:
        subprocess.run([DOCKER_CLI, "rm", "-f", *ids], capture_output=True, timeout=120)


# -- the cluster and what it tells tasks -------------------------------------------------------------------------


def test_srun_tasks_get_their_ranks(slurm_cluster: SlurmCluster) -> None:
    r = slurm_cluster.run("srun", "--label", "-n", "4", "bash", "-c", 'echo "$SLURM_PROCID $SLURM_NTASKS"')
    assert r.returncode == 0, r.stderr
    assert [run.logs.split() for run in task_runs(r.stdout, 4, r.returncode)] == [[str(i), "4"] for i in range(4)]


def test_a_daemon_that_dies_fails_with_its_log(tmp_path: Path) -> None:
    """The fixture's wait: a real slurmd that cannot start fails at once, with the tail of its own log."""
    (tmp_path / "log").mkdir()
    cluster = SlurmCluster(root=tmp_path, conf=tmp_path / "slurm.conf", node="n1")
    cluster.conf.write_text("NoSuchOption=1\n")
    daemon(cluster, "slurmd", ["/usr/sbin/slurmd", "-D", "-f", str(cluster.conf)])
    try:
        with pytest.raises(pytest.fail.Exception) as failed:
            wait(cluster, "node n1 idle", lambda: False, timeout=60)
    finally:
        cluster.daemons["slurmd"].kill()
        cluster.daemons["slurmd"].wait()
    message = str(failed.value)
    assert "waiting for node n1 idle: exited {'slurmd': 1}" in message and "NoSuchOption" in message


def test_a_crashed_sessions_daemons_are_reaped() -> None:
    """A folder whose owner is gone: the process its pid file names is killed if its command line names the
    folder, spared if not; the folder goes.

    The folder is made beside BASE and moved in whole: another worker's session fixture reaps BASE at its start,
    and one that saw the folder before its pid files were written removed it and killed nothing."""
    BASE.mkdir(mode=0o755, exist_ok=True)
    root = BASE / f"999999999-{os.getpid()}"  # no such pid; this worker's own name
    making = Path(tempfile.mkdtemp(dir=BASE.parent, prefix="trainimg-slurm-test-"))
    (making / "run").mkdir()
    ours = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", str(root)])
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        (making / "run" / "slurmd.pid").write_text(f"{ours.pid}\n")
        (making / "run" / "munged.pid").write_text(f"{other.pid}\n")
        making.rename(root)
        reap_leftovers()
        assert ours.wait(10) == -signal.SIGKILL and other.poll() is None and not root.exists()
    finally:
        for proc in (ours, other):
            proc.kill()
            proc.wait()
        shutil.rmtree(making, ignore_errors=True)  # left only where the test failed before the move


def live_samples(cluster: SlurmCluster, folder: Path) -> dict[str, Any]:
    """The SLURM_* a task (srun -n 4; srun -n 2 --ntasks-per-node=2; srun inside a batch job) and a batch step get."""
    samples: dict[str, Any] = {}
    for key, args, n in (("srun_n4", ["-N1", "-n", "4"], 4), ("srun_n2_ntasks_per_node2", ["-n", "2",
                                                                                          "--ntasks-per-node=2"], 2)):
        r = cluster.run("srun", "--label", *args, "env")
        assert r.returncode == 0, r.stderr
        samples[key] = labelled_env(r.stdout, n)
    script = "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --ntasks-per-node=4\nenv\necho ---\nsrun --label env\n"
    rc, out = batch(cluster, script, folder)
    assert rc == 0, out
    step, tasks = out.split("---\n", 1)
    samples["batch_step"] = dict(line.split("=", 1) for line in step.splitlines() if line.startswith("SLURM_"))
    samples["batch_srun_n4"] = labelled_env(tasks, 4)
    return samples


def names(sample: Any) -> Any:
    return [sorted(task) for task in sample] if isinstance(sample, list) else sorted(sample)


def test_env_samples_are_what_this_slurm_gives(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """The recorded samples name exactly the variables the real cluster gives; the facts the launcher's Slurm
    detection rests on hold: tasks have a step, the batch step has none but looks like rank 0 of the job."""
    live = live_samples(slurm_cluster, tmp_path)
    if UPDATE:
        SAMPLES.parent.mkdir(exist_ok=True)
        SAMPLES.write_text(json.dumps(live, indent=1, sort_keys=True) + "\n")
    assert SAMPLES.exists(), f"{SAMPLES} missing; run with TRAINIMG_UPDATE_GOLDEN=1 and review it"
    recorded = json.loads(SAMPLES.read_text())
    assert {k: names(v) for k, v in recorded.items()} == {k: names(v) for k, v in live.items()}
    srun = live["srun_n4"]
    assert [t["SLURM_PROCID"] for t in srun] == ["0", "1", "2", "3"]
    assert all(t["SLURM_STEP_ID"] == "0" and t["SLURM_STEP_NODELIST"] == slurm_cluster.node for t in srun)
    assert live["batch_step"]["SLURM_PROCID"] == "0" and live["batch_step"]["SLURM_NTASKS"] == "4"
    assert not {"SLURM_STEP_ID", "SLURM_STEP_NODELIST"} & set(live["batch_step"])


# -- the CPU PyTorch image's all-reduce as Slurm tasks -----------------------------------------------------------


def test_pytorch_allreduce_as_srun_tasks(slurm_cluster: SlurmCluster, cpu_image: str, tmp_path: Path) -> None:
    """srun -n 4, each task a container on the host network with its task's SLURM_*: the exact sum on every rank."""
    prefix = f"trainimg-slurmtest-{uuid.uuid4().hex[:8]}"
    env = {**slurm_cluster.env(), "DOCKER_CLI": DOCKER_CLI, "PREFIX": prefix}
    started = time.monotonic()
    try:
        r = slurm_cluster.run("srun", "--label", "--kill-on-bad-exit=1", "--time=3", "-N1", "-n", str(WORLD),
                              "bash", "-c", SRUN_TASK, "task", str(tmp_path), cpu_image, *ALLREDUCE, env=env,
                              timeout=300)
    finally:
        remove_containers(prefix)
    seconds = time.monotonic() - started
    verdict = judge_allreduce("allreduce_slurm_srun", task_runs(r.stdout + r.stderr, WORLD, r.returncode), WORLD,
                              seconds)
    assert verdict.status == "passed", (verdict.reason, r.stdout[-3000:], r.stderr[-3000:])


def test_sbatch_docker_script_runs_the_allreduce(slurm_cluster: SlurmCluster, cpu_image: str,
                                                 tmp_path: Path) -> None:
    """The docker runtime's batch script, 1 node x 4 tasks, submitted to the real sbatch: exit 0, exact sum."""
    name = f"trainimg-sbatch-{uuid.uuid4().hex[:8]}"
    script = sbatch_script(name=name, image=cpu_image, nodes=1, tasks_per_node=WORLD, gpus_per_node=0,
                           command=ALLREDUCE, container_runtime=DOCKER, time_limit="5")
    started = time.monotonic()
    try:  # SLURM_LABELIO: the script's srun labels each task's lines, so the judge sees the ranks apart
        rc, out = batch(slurm_cluster, script, tmp_path, env={**slurm_cluster.env(), "SLURM_LABELIO": "1"})
    finally:
        remove_containers(name)
    verdict = judge_allreduce("allreduce_slurm_sbatch", task_runs(out, WORLD, rc), WORLD, time.monotonic() - started)
    assert rc == 0 and verdict.status == "passed", (rc, verdict.reason, out[-4000:])


def test_sbatch_docker_script_passes_the_command_word_for_word(slurm_cluster: SlurmCluster, cpu_image: str,
                                                               tmp_path: Path) -> None:
    """Quotes, spaces, `$`, an empty word: sbatch -> srun -> bash -> docker run hands the program its argv."""
    words = ["it's", "$HOME", "a  b", "", "*", '"q"', "--"]
    name = f"trainimg-argv-{uuid.uuid4().hex[:8]}"
    script = sbatch_script(name=name, image=cpu_image, nodes=1, tasks_per_node=1, gpus_per_node=0,
                           command=["python3", "-c", "import json, sys; print(json.dumps(sys.argv[1:]))", *words],
                           container_runtime=DOCKER)
    try:
        rc, out = batch(slurm_cluster, script, tmp_path)
    finally:
        remove_containers(name)
    assert rc == 0, out
    assert json.loads(out.strip().splitlines()[-1]) == words


# -- every runtime's script against bash and the real sbatch -----------------------------------------------------

MATRIX = [  # nodes, tasks per node, GPUs per node, partition, time limit
    (1, 1, 0, None, None),
    (1, 4, 0, "debug", "00:10:00"),
    (1, 8, GPUS, None, "1-00:00:00"),
    (1, 2, 1, "debug", "30"),
    (2, 4, 2, "debug,other", "UNLIMITED"),  # bash -n only: this cluster has one node and one partition
]


@pytest.mark.parametrize("runtime", CONTAINER_RUNTIMES)
def test_every_runtime_script_parses(slurm_cluster: SlurmCluster, tmp_path: Path, runtime: str) -> None:
    for nodes, tasks, gpus, partition, limit in MATRIX:
        script = sbatch_script(name="train", image="registry.example.com/team/trainer:1.0", nodes=nodes,
                               tasks_per_node=tasks, gpus_per_node=gpus, command=ALLREDUCE,
                               container_runtime=runtime, partition=partition, time_limit=limit)
        path = tmp_path / f"{runtime}-{nodes}-{tasks}-{gpus}.sh"
        path.write_text(script)
        syntax = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, timeout=30)
        assert syntax.returncode == 0, (syntax.stderr, script)
        assert script.startswith("#!/bin/bash\n#SBATCH --job-name=train\n") and "\nset -euo pipefail\n" in script
        assert (f"#SBATCH --gpus-per-node={gpus}\n" in script) == bool(gpus)
        if nodes > 1 or "," in (partition or ""):
            continue
        r = slurm_cluster.run("sbatch", "--test-only", str(path), cwd=tmp_path, timeout=60)
        assert r.returncode == 0 and "to start at" in r.stderr, (r.stderr, script)


def test_srun_line_per_runtime() -> None:
    common = {"name": "train", "nodes": 1, "tasks_per_node": 2, "gpus_per_node": 2, "command": ["echo", "a b"]}
    pyxis = sbatch_script(image="localhost:5000/trainimg/pytorch:1", container_runtime="pyxis", **common)
    assert pyxis.splitlines()[-1] == ("srun --kill-on-bad-exit=1 '--container-image=localhost:5000#trainimg/pytorch:1'"
                                      " echo 'a b'")
    apptainer = sbatch_script(image="trainimg/pytorch:1", container_runtime="apptainer", **common)
    assert apptainer.splitlines()[-1] == "srun --kill-on-bad-exit=1 apptainer exec --nv docker://trainimg/pytorch:1 " \
                                         "echo 'a b'"
    docker = sbatch_script(image="trainimg/pytorch:1", container_runtime="docker", **common)
    assert docker.splitlines()[-1].endswith("' docker-task trainimg/pytorch:1 echo 'a b'")
    assert '--gpus "$gpus"' in docker and "--ipc host" in docker and "--network host" in docker
    assert "--gpus" not in sbatch_script(image="t/p:1", container_runtime="docker", **{**common, "gpus_per_node": 0})


@pytest.mark.parametrize("image, uri", [
    ("trainimg/pytorch:2.13.0-cpu-py3.11", "trainimg/pytorch:2.13.0-cpu-py3.11"),
    ("ubuntu", "ubuntu"),
    ("nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io#nvidia/pytorch:24.01-py3"),
    ("localhost/x:1", "localhost#x:1"),
    ("registry:5000/team/x", "registry:5000#team/x"),
])
def test_enroot_image(image: str, uri: str) -> None:
    assert enroot_image(image) == uri


@pytest.mark.parametrize("change, fault", [
    ({"name": "my job"}, "job name"),
    ({"name": "-x"}, "job name"),
    ({"image": "Not An Image"}, "image"),
    ({"nodes": 0}, "nodes"),
    ({"tasks_per_node": True}, "tasks per node"),
    ({"gpus_per_node": -1}, "GPUs per node"),
    ({"command": []}, "command"),
    ({"command": ["", "x"]}, "command"),
    ({"container_runtime": "singularity"}, "container runtime"),
    ({"partition": "a b"}, "partition"),
    ({"time_limit": "10 minutes"}, "time limit"),
])
def test_bad_input_is_refused(change: dict[str, Any], fault: str) -> None:
    args: dict[str, Any] = {"name": "train", "image": "trainimg/pytorch:1", "nodes": 1, "tasks_per_node": 1,
                            "gpus_per_node": 0, "command": ["true"], "container_runtime": "docker", **change}
    with pytest.raises(UserInputError, match=fault):
        sbatch_script(**args)
