"""`run_job` and `tune` in real containers: each platform's layout with a real gloo all-reduce in the user's own
script, a failing replica, UAI's ps-per-node and shared /data/output, a hypertune grid read from real metric
files, cleanup on failure and Ctrl-C, and the input errors naming their flag."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from trainimg.engine.docker import DockerEngine
from trainimg.errors import UserInputError
from trainimg.jobs.run import parse_env, parse_volumes, run_job
from trainimg.jobs.tune import judge, parse_params, trials_for, tune
from trainimg.options import JobOptions, TuneOptions
from trainimg.conformance.replicas import OWNER_LABEL, RUN_LABEL
from brokenimages import TestImages
from conftest import default_sigint, engine_events, trainimg

IMAGE = "trainimg/pytorch:2.13.0-cpu-py3.11"
ROOT = Path(__file__).resolve().parent.parent

TRAIN = textwrap.dedent("""\
    import json, os, socket, sys, time
    role = os.environ["TRAINIMG_ROLE"]
    out = "/data/output" if os.path.isdir("/data/output") else None
    side_dir = os.environ.get("SIDE_DIR") or out  # where a ps or evaluator says it ran (a folder every replica sees)
    info = {"role": role, "host": socket.gethostname(), "tf_config": os.environ.get("TF_CONFIG"),
            "cluster_spec": os.environ.get("CLUSTER_SPEC"), "args": sys.argv[1:],
            "trial": os.environ.get("CLOUD_ML_TRIAL_ID"), "user": os.environ.get("USER_VAR")}
    if role in ("ps", "evaluator"):
        task = json.loads(os.environ.get("TF_CONFIG") or os.environ["CLUSTER_SPEC"])["task"]
        if side_dir:
            with open(f"{side_dir}/{role}-{task['index']}.json", "w") as f:
                json.dump(info, f)
        print("SIDE " + json.dumps(info), flush=True)
        time.sleep(3600)  # a ps never exits by itself
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    expected = world * (world + 1) // 2
    info.update(rank=rank, world=world, got=t.item(), expected=expected)
    print("RESULT " + json.dumps(info), flush=True)
    if out:
        with open(f"{out}/rank-{rank}.json", "w") as f:
            json.dump(info, f)
    if side_dir and role == "chief":  # wait for WAIT_SIDE side replicas to have written their files
        want = int(os.environ.get("WAIT_SIDE", "0"))
        deadline = time.time() + 600  # a hang guard: the loop ends once every one wrote
        while len([n for n in os.listdir(side_dir) if n.startswith(("ps-", "evaluator-"))]) < want \
                and time.time() < deadline:
            time.sleep(0.2)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(0 if t.item() == expected else 1)
""")

HPTUNE = textwrap.dedent("""\
    import argparse, json, os, hypertune
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float, required=True)
    args = p.parse_args()
    role = os.environ.get("TRAINIMG_ROLE", "chief")
    trial = None
    for var in ("CLUSTER_SPEC", "TF_CONFIG"):
        if os.environ.get(var):
            trial = json.loads(os.environ[var])["task"].get("trial")
            break
    ht = hypertune.HyperTune()
    # A worker's report goes to its own /tmp: only the chief's file is the trial's (as on the platforms).
    ht.report_hyperparameter_tuning_metric("accuracy", 0.0 if role == "chief" else 99.0, global_step=1)
    ht.report_hyperparameter_tuning_metric("accuracy", 1 - abs(args.lr - 0.2) if role == "chief" else 99.0,
                                           global_step=2)
    if os.environ.get("SECOND_TAG"):
        ht.report_hyperparameter_tuning_metric("trial_seen", float(trial or -1))
        ht.report_hyperparameter_tuning_metric("trial_env", float(os.environ["CLOUD_ML_TRIAL_ID"]))
    print("lr", args.lr, "trial", os.environ["CLOUD_ML_TRIAL_ID"], "task.trial", trial, flush=True)
""")


@pytest.fixture(scope="module")
def engine(pinned_cpu_image: str) -> DockerEngine:
    e = DockerEngine()
    if e.image(IMAGE) is None:
        pytest.fail(f"{IMAGE} is not on this engine: build it with `trainimg build pytorch-2.13.0-cpu-py3.11`")
    return e


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "hptune.py").write_text(HPTUNE)
    return tmp_path


def _leftovers(client: docker.DockerClient, run_id: str) -> list[str]:
    flt = {"label": f"{RUN_LABEL}={run_id}"}
    return ([c["Names"][0] for c in client.api.containers(all=True, filters=flt)]
            + [n["Name"] for n in client.api.networks(filters=flt)])


def _records(logs: str, prefix: str) -> list[dict]:
    return [json.loads(line[len(prefix):]) for line in logs.splitlines() if line.startswith(prefix)]


def _check_allreduce(result, world: int) -> None:
    assert result.exit_code == 0, result.summary() + "\n" + "\n".join(r.logs[-2000:] for r in result.replicas)
    records = [rec for r in result.replicas if r.role in ("chief", "worker") for rec in _records(r.logs, "RESULT ")]
    assert len(records) == world
    assert sorted(rec["rank"] for rec in records) == list(range(world))
    assert all(rec["got"] == world * (world + 1) // 2 == rec["expected"] for rec in records)


def test_vertex_allreduce_with_evaluator(engine: DockerEngine, workdir: Path, tmp_path: Path) -> None:
    lines: list[tuple[str, str]] = []
    opts = JobOptions(platform="vertex", replicas=2, ps=None, evaluators=1, trial=None,
                      env=parse_env(["USER_VAR=hello", "SIDE_DIR=/work", "WAIT_SIDE=1"]),
                      volumes=parse_volumes([f"{workdir}:/work"]),
                      command=["python", "/work/train.py", "--epochs=1"], timeout=120)
    result = run_job(engine, IMAGE, opts, on_log=lambda n, line: lines.append((n, line)), state=tmp_path / "state")
    _check_allreduce(result, 2)
    chief = next(r for r in result.replicas if r.name == "chief-0")
    rec = _records(chief.logs, "RESULT ")[0]
    assert rec["user"] == "hello" and rec["args"] == ["--epochs=1"]
    spec = json.loads(rec["cluster_spec"])
    assert set(spec["cluster"]) == {"workerpool0", "workerpool1", "workerpool3"}
    assert spec["task"] == {"type": "workerpool0", "index": 0}
    assert json.loads(rec["tf_config"])["task"]["type"] == "chief"
    assert [r.role for r in result.replicas] == ["chief", "worker", "evaluator"]
    # The evaluator ran as one (Vertex's workerpool3, TF_CONFIG's evaluator), was not waited for, and its sleep of
    # an hour ended with the job: the job is over and nothing of it is left (below).
    evaluator = result.replicas[2]
    (side,) = _records(evaluator.logs, "SIDE ")
    assert side == json.loads((workdir / "evaluator-0.json").read_text())
    assert json.loads(side["cluster_spec"])["task"] == {"type": "workerpool3", "index": 0}
    assert json.loads(side["tf_config"])["task"] == {"type": "evaluator", "index": 0}
    assert evaluator.exit_code is None and not evaluator.timed_out
    assert any(n == "chief-0" and line.startswith("RESULT ") for n, line in lines)
    assert result.output_dir is None
    assert _leftovers(engine.client, result.run_id) == []


def test_aiplatform_allreduce_two_processes_per_node_with_ps(engine: DockerEngine, workdir: Path,
                                                             tmp_path: Path) -> None:
    # the chief waits for the ps's file (SIDE_DIR, WAIT_SIDE): a ps that never ran fails the job's check below
    opts = JobOptions(platform="aiplatform", replicas=2, ps=1, evaluators=0, trial="7",
                      env=parse_env(["SIDE_DIR=/work", "WAIT_SIDE=1"]),
                      volumes=parse_volumes([f"{workdir}:/work"]), command=["python", "/work/train.py"],
                      nproc_per_node=2, timeout=120)
    result = run_job(engine, IMAGE, opts, on_log=None, state=tmp_path / "state")
    _check_allreduce(result, 4)  # 2 nodes x 2 processes (torchrun)
    assert [r.name for r in result.replicas] == ["chief-0", "worker-0", "ps-0"]
    rec = _records(result.replicas[0].logs, "RESULT ")[0]
    assert json.loads(rec["cluster_spec"])["task"] == {"type": "master", "index": 0, "trial": "7"}
    assert json.loads(rec["tf_config"])["task"]["trial"] == "7" and rec["trial"] == "7"
    assert set(json.loads(rec["tf_config"])["cluster"]) == {"chief", "worker", "ps"}
    # The ps ran as AI Platform's ps of trial 7 (its CLUSTER_SPEC and TF_CONFIG say so), in its own container.
    ps = json.loads((workdir / "ps-0.json").read_text())
    assert (ps["role"], ps["trial"]) == ("ps", "7")
    assert json.loads(ps["cluster_spec"])["task"] == {"type": "ps", "index": 0, "trial": "7"}
    assert json.loads(ps["tf_config"])["task"] == {"type": "ps", "index": 0, "trial": "7"}
    assert ps["host"] != rec["host"]
    assert _leftovers(engine.client, result.run_id) == []


def test_uai_allreduce_shared_output_and_ps_on_every_node(engine: DockerEngine, workdir: Path,
                                                          tmp_path: Path) -> None:
    nodes = 3
    opts = JobOptions(platform="uai", replicas=nodes, ps=None, evaluators=0, trial=None,
                      env={"WAIT_SIDE": str(nodes)}, volumes=parse_volumes([f"{workdir}:/work"]),
                      command=["python", "/work/train.py"], timeout=120)
    result = run_job(engine, IMAGE, opts, on_log=None, state=tmp_path / "state")
    _check_allreduce(result, nodes)
    out = result.output_dir
    assert out is not None and out.is_dir() and str(out).startswith(str(tmp_path / "state"))
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [f"rank-{i}.json" for i in range(nodes)] + [f"ps-{i}.json" for i in range(nodes)])
    # ps on every node, each sharing its node's network namespace (and so its hostname).
    ps = [r for r in result.replicas if r.role == "ps"]
    assert len(ps) == nodes
    hosts = {json.loads((out / f"rank-{i}.json").read_text())["rank"]: json.loads(
        (out / f"rank-{i}.json").read_text())["host"] for i in range(nodes)}
    for i in range(nodes):
        ps_info = json.loads((out / f"ps-{i}.json").read_text())
        assert ps_info["host"] == hosts[i]  # node i: master (rank 0) or worker i-1 (rank i)
        assert ps_info["cluster_spec"] is None
        tf = json.loads(ps_info["tf_config"])
        assert tf["task"] == {"type": "ps", "index": i}
        assert len(tf["cluster"]["ps"]) == nodes and len(tf["cluster"]["worker"]) == nodes - 1
    rec = _records(result.replicas[0].logs, "RESULT ")[0]
    # UAI sends "master"; the launcher hands the script a TF2-ready TF_CONFIG ("chief").
    assert rec["cluster_spec"] is None and json.loads(rec["tf_config"])["task"]["type"] == "chief"
    assert "/data/output of every replica is" in result.summary()
    assert _leftovers(engine.client, result.run_id) == []


def test_uai_given_output_volume_and_explicit_ps(engine: DockerEngine, workdir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    opts = JobOptions(platform="uai", replicas=2, ps=1, evaluators=0, trial=None, env={},
                      volumes=parse_volumes([f"{workdir}:/work", f"{out}:/data/output"]),
                      command=["sh", "-c", 'hostname > /data/output/$TRAINIMG_ROLE-$TRAINIMG_NODE_RANK'],
                      timeout=60)
    since = time.time_ns()
    result = run_job(engine, IMAGE, opts, on_log=None, state=tmp_path / "state")
    assert result.exit_code == 0, result.summary()
    assert result.output_dir == out
    # The ps may or may not have written its own file before the job ended and it was stopped.
    assert {"chief-0", "worker-1"} <= {p.name for p in out.iterdir()}
    assert [r.name for r in result.replicas] == ["chief-0", "worker-0", "ps-0"]
    # A node's holder keeps its network alive: the ps always starts, even when its node's command ends at once
    # (the engine's own events; its exit code is None or 0 whether it ran or not).
    ours = {"type": "container", "event": "start", "label": f"{RUN_LABEL}={result.run_id}"}
    started = [e["Actor"]["Attributes"]["name"] for e in engine_events(engine.client, since, ours)]
    assert [n for n in started if n.endswith("ps-0")], started
    assert not (tmp_path / "state" / "runs").exists()
    assert _leftovers(engine.client, result.run_id) == []


def test_failing_replica_fails_the_job_and_everything_is_removed(engine: DockerEngine, tmp_path: Path) -> None:
    script = 'if [ "$TRAINIMG_ROLE" = worker ] && [ "$TRAINIMG_NODE_RANK" = 2 ]; then exit 3; fi; sleep 900'
    # The others sleep 900 s, past the job's 600 s timeout: a job that waited them out would have timed out.
    opts = JobOptions(platform="vertex", replicas=3, ps=1, evaluators=0, command=["sh", "-c", script], timeout=600)
    result = run_job(engine, IMAGE, opts, on_log=None, state=tmp_path)
    assert result.exit_code == 3 and not any(r.timed_out for r in result.replicas), result.summary()
    failed = result.failed_replica
    assert failed is not None and failed.name == "worker-1"
    assert "worker-1 exited 3" in result.summary()
    assert _leftovers(engine.client, result.run_id) == []
    owner = f"{socket.gethostname()}:{os.getpid()}"
    mine = engine.containers(f"{OWNER_LABEL}={owner}")
    assert [c.name for c in mine if RUN_LABEL in c.labels] == []


@pytest.fixture(scope="module")
def own_programs(client: docker.DockerClient, pinned_cpu_image: str) -> Iterator[tuple[str, str]]:
    """Two team images FROM the CPU image: one whose ENTRYPOINT is its trainer (the all-reduce script) with its
    arguments as CMD, and one that clears both."""
    made = TestImages(client, pinned_cpu_image)
    trainer = made.build("entrypoint", ["COPY train.py /app/train.py", 'ENTRYPOINT ["python", "/app/train.py"]',
                                        'CMD ["--epochs", "1"]'], files={"train.py": TRAIN.encode()})
    bare = made.build("no-program", ["ENTRYPOINT []", "CMD []"])
    yield trainer, bare
    made.remove_all()


def test_run_without_a_program_runs_the_images_entrypoint_and_cmd(own_programs: tuple[str, str],
                                                                  state_env: dict[str, str], tmp_path: Path,
                                                                  client: docker.DockerClient) -> None:
    """`trainimg run IMAGE --platform vertex --replicas 2`, no `-- CMD`: each replica runs ENTRYPOINT + CMD, as
    `docker run` would, under the launcher and Vertex's env (the script's all-reduce needs both)."""
    trainer, bare = own_programs
    r = trainimg("run", trainer, "--platform", "vertex", "--replicas", "2", "--progress", "plain", "--json",
                 str(tmp_path / "run.json"), env=state_env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    records = [json.loads(line.partition("RESULT ")[2]) for line in r.stderr.splitlines() if "RESULT " in line]
    assert sorted(rec["rank"] for rec in records) == [0, 1], r.stderr[-3000:]
    assert all(rec["args"] == ["--epochs", "1"] and rec["got"] == rec["expected"] == 3 for rec in records), records
    assert [rec["role"] for rec in sorted(records, key=lambda rec: rec["rank"])] == ["chief", "worker"]
    assert json.loads((tmp_path / "run.json").read_text())["exit_code"] == 0
    assert _leftovers(client, json.loads((tmp_path / "run.json").read_text())["run_id"]) == []
    r = trainimg("run", bare, "--platform", "vertex", "--replicas", "2", env=state_env, timeout=120)
    assert (r.returncode, r.stderr.splitlines()) == (2, [
        f"command: {bare} sets no ENTRYPOINT or CMD: give the program after `--`, e.g. -- python train.py"]), r.stderr


def test_missing_command_exits_127(engine: DockerEngine, tmp_path: Path) -> None:
    result = run_job(engine, IMAGE, JobOptions(platform=None, command=["no-such-command"], timeout=60),
                     on_log=None, state=tmp_path)
    assert result.exit_code == 127
    assert "command not found" in result.replicas[0].logs


def test_ctrl_c_removes_everything(engine: DockerEngine, tmp_path: Path) -> None:
    code = textwrap.dedent(f"""\
        import sys
        from trainimg.engine.docker import DockerEngine
        from trainimg.jobs.run import run_job
        from trainimg.options import JobOptions
        try:
            opts = JobOptions(platform="aiplatform", replicas=2, ps=1, evaluators=0, command=["sleep", "300"])
            run_job(DockerEngine(), {IMAGE!r}, opts, on_log=lambda n, line: None,
                    state=__import__("pathlib").Path({str(tmp_path)!r}))
        except KeyboardInterrupt:
            print("INTERRUPTED", flush=True)
            sys.exit(130)
    """)
    _interrupt_and_check(engine, code, want=3)


def test_ctrl_c_during_tune_removes_every_trial(engine: DockerEngine, tmp_path: Path) -> None:
    code = textwrap.dedent(f"""\
        import sys
        from trainimg.engine.docker import DockerEngine
        from trainimg.jobs.tune import tune
        from trainimg.options import JobOptions, TuneOptions
        try:
            job = JobOptions(command=["sh", "-c", "sleep 300", "sh"], platform="vertex", replicas=2)
            tune(DockerEngine(), {IMAGE!r}, TuneOptions(params={{"lr": ["1", "2", "3"]}}, job=job, parallel=2),
                 state=__import__("pathlib").Path({str(tmp_path)!r}))
        except KeyboardInterrupt:
            print("INTERRUPTED", flush=True)
            sys.exit(130)
    """)
    _interrupt_and_check(engine, code, want=4)
    assert list((tmp_path / "tune").iterdir()) == []  # the per-trial metric folders are gone too


def _interrupt_and_check(engine: DockerEngine, code: str, want: int) -> None:
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=default_sigint)
    owner = f"{socket.gethostname()}:{proc.pid}"
    flt = {"label": f"{OWNER_LABEL}={owner}"}
    try:
        deadline = time.monotonic() + 600  # a hang guard: it returns once they run (a loaded machine is slow)
        while time.monotonic() < deadline:
            running = engine.client.api.containers(filters={**flt, "status": "running"})
            if len(running) >= want:
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.3)
        else:
            pytest.fail("the replicas never all started")
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "INTERRUPTED" in out
    assert engine.containers(flt["label"]) == []
    assert engine.networks(flt["label"]) == []


def test_tune_finds_the_best_trial_from_real_metric_files(engine: DockerEngine, workdir: Path,
                                                          tmp_path: Path) -> None:
    seen: list = []
    job = JobOptions(command=["python", "/work/hptune.py"], volumes=parse_volumes([f"{workdir}:/work"]), timeout=120)
    opts = TuneOptions(params=parse_params(["lr=0.1,0.2,0.3"]), job=job, metric=None, goal="max", parallel=3)
    result = tune(engine, IMAGE, opts, on_trial=seen.append, state=tmp_path / "state")
    assert [t.id for t in result.trials] == ["1", "2", "3"]
    assert [t.params for t in result.trials] == [{"lr": "0.1"}, {"lr": "0.2"}, {"lr": "0.3"}]
    assert all(t.status == "succeeded" for t in result.trials), result.table()
    assert result.metric == "accuracy"
    assert result.best is not None and result.best.id == "2" and result.best.params == {"lr": "0.2"}
    assert result.best.value == pytest.approx(1.0)
    assert [t.value for t in result.trials] == pytest.approx([0.9, 1.0, 0.9])
    for t in result.trials:  # the metric file as cloudml-hypertune wrote it, trial id included
        assert [r["trial"] for r in t.metrics] == [t.id, t.id]
        assert [r["global_step"] for r in t.metrics] == ["1", "2"]
        assert f"trial {t.id}" in t.job.replicas[0].logs
    assert sorted(t.id for t in seen) == ["1", "2", "3"]
    table = result.table()
    assert "2 *" in table and "best: trial 2 (lr=0.2): accuracy = 1 (max)" in table
    data = json.loads(json.dumps(result.to_json()))
    assert data["best"] == "2" and data["best_params"] == {"lr": "0.2"} and len(data["trials"]) == 3
    assert list((tmp_path / "state" / "tune").iterdir()) == []
    # min picks a worst-accuracy trial: the earliest of the tie
    assert judge(result.trials, "accuracy", "min").best.id == "1"


def test_tune_distributed_trials_and_a_failing_trial(engine: DockerEngine, workdir: Path, tmp_path: Path) -> None:
    # Vertex trials of 2 replicas: only the chief's metric file counts, task.trial and CLOUD_ML_TRIAL_ID are set;
    # lr=boom makes argparse exit 2: that trial fails and is never best.
    job = JobOptions(command=["python", "/work/hptune.py"], platform="vertex", replicas=2, env={"SECOND_TAG": "1"},
                     volumes=parse_volumes([f"{workdir}:/work"]), timeout=120)
    opts = TuneOptions(params={"lr": ["0.3", "boom", "0.25"]}, job=job, metric="accuracy", goal="max", parallel=2)
    result = tune(engine, IMAGE, opts, state=tmp_path / "state")
    by_id = {t.id: t for t in result.trials}
    assert by_id["2"].status == "failed" and by_id["2"].exit_code == 2, result.table()
    assert by_id["1"].status == by_id["3"].status == "succeeded", result.table()
    assert result.best is by_id["3"] and result.best.value == pytest.approx(0.95)
    for t in (by_id["1"], by_id["3"]):
        trial_seen = [r["trial_seen"] for r in t.metrics if "trial_seen" in r]
        trial_env = [r["trial_env"] for r in t.metrics if "trial_env" in r]
        assert trial_seen == trial_env == [f"{float(t.id)}"]
    # argparse fails on both replicas: whichever exits first fails the trial, the other is stopped
    assert by_id["2"].reason in ("chief-0 exited 2", "worker-0 exited 2"), result.table()
    assert f"failed: {by_id['2'].reason}" in result.table()
    # without --metric, several tags are ambiguous: no best, and the reason says to choose
    ambiguous = judge(result.trials, None, "max")
    assert ambiguous.best is None and "--metric" in ambiguous.problem and ambiguous.exit_code == 1


def test_trials_are_the_cartesian_product_in_service_order() -> None:
    trials = trials_for({"lr": ["0.1", "0.2"], "batch-size": ["16", "32", "64"]})
    assert [t.id for t in trials] == [str(i) for i in range(1, 7)]
    assert trials[0].params == {"lr": "0.1", "batch-size": "16"}
    assert trials[1].params == {"lr": "0.1", "batch-size": "32"}
    assert trials[5].params == {"lr": "0.2", "batch-size": "64"}


@pytest.mark.parametrize("items", [["NOEQUALS"], ["1BAD=x"], ["A-B=x"], ["=x"], ["A B=x"]])
def test_bad_env_names_the_flag(items: list[str]) -> None:
    with pytest.raises(UserInputError) as exc:
        parse_env(items)
    assert exc.value.where == "--env"


def test_env_parses() -> None:
    assert parse_env(["A=1", "_b=x=y", "EMPTY=", "A=2"]) == {"A": "2", "_b": "x=y", "EMPTY": ""}


def test_bad_volumes_name_the_flag(tmp_path: Path) -> None:
    for item in [f"{tmp_path}/missing:/x", f"{tmp_path}:relative", str(tmp_path), f"{tmp_path}:/x:ro",
                 ":/x", f"{tmp_path}:", f"{tmp_path}:/"]:
        with pytest.raises(UserInputError) as exc:
            parse_volumes([item])
        assert exc.value.where == "--volume", item
    (tmp_path / "a").mkdir()
    with pytest.raises(UserInputError, match="twice"):
        parse_volumes([f"{tmp_path}:/x", f"{tmp_path}/a:/x"])
    assert parse_volumes([f"{tmp_path}/a/../a:/data/in/"]) == {str(tmp_path / "a"): "/data/in"}


@pytest.mark.parametrize("items", [["lr"], ["lr="], ["lr=0.1,,0.2"], ["lr=0.1,"], ["1lr=0.1"], ["l r=1"],
                                   ["lr=1", "lr=2"], ["lr=1,1"], []])
def test_bad_params_name_the_flag(items: list[str]) -> None:
    with pytest.raises(UserInputError) as exc:
        parse_params(items)
    assert exc.value.where == "--param"


def test_params_parse() -> None:
    assert parse_params(["lr=0.1,0.2", "batch-size=32", "_x=a=b"]) == {
        "lr": ["0.1", "0.2"], "batch-size": ["32"], "_x": ["a=b"]}


def test_bad_shapes_name_their_flag(tmp_path: Path) -> None:
    engine = DockerEngine(client=object())  # never reached: input is checked first
    cases = [
        (dict(platform="gke"), "--platform"),
        (dict(platform="vertex", replicas=0), "--replicas"),
        (dict(platform="vertex", ps=-1), "--ps"),
        (dict(platform="uai", replicas=2, ps=3), "--ps"),
        (dict(platform="uai", evaluators=1), "--evaluators"),
        (dict(platform=None, replicas=2), "--platform"),
        (dict(platform="vertex", nproc_per_node=0), "--nproc-per-node"),
        (dict(platform="vertex", timeout=-1), "--timeout"),
        (dict(platform="vertex", command=[""]), "command"),
        (dict(platform="vertex", volumes=[f"{tmp_path}/nope:/x"]), "--volume"),
        (dict(platform="vertex", env={"BAD-NAME": "1"}), "--env"),
    ]
    for kwargs, where in cases:
        kwargs = {"command": ["true"], **kwargs}
        with pytest.raises(UserInputError) as exc:
            if "volumes" in kwargs:
                kwargs["volumes"] = parse_volumes(kwargs["volumes"])
            run_job(engine, IMAGE, JobOptions(**kwargs))
        assert exc.value.where == where, kwargs
    for kwargs, where in [(dict(goal="up"), "--goal"), (dict(parallel=0), "--parallel"),
                          (dict(params={"lr": ["1", ""]}), "--param"), (dict(metric="trial"), "--metric"),
                          (dict(volumes=[f"{tmp_path}:/tmp/hypertune"]), "--volume"), (dict(command=[]), "command")]:
        job = JobOptions(command=kwargs.pop("command", ["true"]), volumes=parse_volumes(kwargs.pop("volumes", [])))
        kwargs = {"params": {"lr": ["1"]}, **kwargs}
        with pytest.raises(UserInputError) as exc:
            tune(engine, IMAGE, TuneOptions(job=job, **kwargs))
        assert exc.value.where == where, kwargs
