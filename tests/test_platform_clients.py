"""trainimg's reading of every platform's replica environment, checked against the real clients that read the same
environments: JAX's cluster detection and ``jax.distributed.initialize``, Lightning's ``SLURMEnvironment``,
torchrun's parser and its elastic agent, TensorFlow's ``TFConfigClusterResolver`` and ``SlurmClusterResolver``.

Every environment is generated (seeded) from a job: its hosts, nodes, processes per node, ports and ids. The job is
the ground truth; trainimg (``parse_cluster``, ``launch_env``, ``torchrun_argv``) and the client each read the
environment the platform would write, and the three must agree. Each client runs once per platform, in a
subprocess of its framework's venv (tests/venvs.py) over the whole batch (tests/clients/, JSON in and out).

Where a client departs from the job itself, the departure must be one the job explains (an input shape the client
does not handle: a node list Slurm accepts but never writes, hosts out of sorted order for TensorFlow's resolver,
a ``srun --ntasks`` job Lightning refuses); each is counted and printed, and trainimg must still agree with the job.
Anything else that differs is a failure, shown side by side for the first few environments.
"""

from __future__ import annotations

import functools
import json
import os
import random
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from trainimg.runtime.cluster import parse_cluster
from trainimg.runtime.hostlist import compress_counts
from trainimg.runtime.launch import choose_mode, launch_env, torchrun_argv
from trainimg.runtime.platforms import jobset, slurm
from trainimg.runtime.world import ClusterError, ClusterInfo
from venvs import venv

CLIENTS = Path(__file__).resolve().parent / "clients"
LEAST = 200  # environments per platform and client
SHOWN = 5  # disagreeing environments printed side by side
COMMAND = ["python", "x.py"]


# --- comparing -----------------------------------------------------------------------------------------------------

@dataclass
class Row:
    """One environment: trainimg's answer, the client's, and the job's facts (a subset of their keys)."""

    name: str
    mine: dict[str, Any]
    theirs: dict[str, Any]
    truth: dict[str, Any]
    # Why the client may depart from the job for this environment (a fact of the job); None: it may not.
    excuse: str | None = None


def differing(a: dict[str, Any], b: dict[str, Any], keys: Any) -> list[str]:
    return sorted(k for k in keys if a.get(k, "<absent>") != b.get(k, "<absent>"))


def first_difference(path: str, a: Any, b: Any) -> tuple[str, Any, Any]:
    """Where two values first differ, so a list of 512 workers shows the one entry that is off."""
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        key = next(k for k in a if a[k] != b[k])
        return first_difference(f"{path}[{key!r}]", a[key], b[key])
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        index = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
        return first_difference(f"{path}[{index}]", a[index], b[index])
    return path, a, b


def side_by_side(row: Row, left: str, right: str) -> str:
    a, b = getattr(row, left), getattr(row, right)
    lines = [f"  {row.name}"]
    keys = differing(a, b, b.keys() if right == "truth" else a.keys() | b.keys())
    for key in keys + [k for k in ("error",) if k not in keys and (k in a or k in b)]:
        path, x, y = first_difference(key, a.get(key, "<absent>"), b.get(key, "<absent>"))
        lines.append(f"    {path}: {left} {x!r:.300} | {right} {y!r:.300}")
    return "\n".join(lines)


def judge(title: str, rows: list[Row], least: int = LEAST) -> None:
    """Print the tally and assert: trainimg agrees with the job and the client everywhere, except where the client
    itself departs from the job for a reason the job explains."""
    ours = [r for r in rows if differing(r.mine, r.truth, r.truth)]
    departs = [r for r in rows if differing(r.theirs, r.truth, r.truth)]
    unexplained = [r for r in departs if r.excuse is None]
    excused = {id(r) for r in departs if r.excuse is not None}
    disagree = [r for r in rows if id(r) not in excused and differing(r.mine, r.theirs, r.mine.keys() | r.theirs.keys())]
    print(f"\n{title}: {len(rows)} environments compared, {len(disagree)} disagreements "
          f"(trainimg vs the job: {len(ours)} wrong; the client itself departs from the job in {len(excused)})")
    for reason, count in Counter(r.excuse for r in departs if r.excuse).items():
        sample = next(r for r in departs if r.excuse == reason)
        print(f"  the client departs from the job in {count} environment(s): {reason}\n"
              f"{side_by_side(sample, 'theirs', 'truth')}")
    for label, bad, right in (("trainimg vs the job", ours, "truth"), ("client vs the job, unexplained",
                                                                      unexplained, "truth"),
                              ("trainimg vs client", disagree, "theirs")):
        if bad:
            left = "theirs" if label.startswith("client") else "mine"
            print(f"  {label}: {len(bad)}\n" + "\n".join(side_by_side(r, left, right) for r in bad[:SHOWN]))
    assert len(rows) - len(excused) >= least, f"{title}: only {len(rows) - len(excused)} environments the client reads"
    assert not ours and not unexplained and not disagree, f"{title}: see the environments printed above"


def run_client(name: str, script: str, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One subprocess of venv `name` answers every case (tests/clients/clientio.py)."""
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "TF_CPP_MIN_LOG_LEVEL": "3",
           "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([venv(name), str(CLIENTS / script)], input=json.dumps(cases), capture_output=True,
                          text=True, timeout=600, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    answers = json.loads(proc.stdout)
    assert len(answers) == len(cases)
    return answers


def read(env: dict[str, str], nproc: int | None = None) -> ClusterInfo | dict[str, str]:
    """trainimg's reading, or its refusal as a value to compare."""
    try:
        return parse_cluster(env, nproc)
    except ClusterError as err:
        return {"error": str(err)}


# --- names ---------------------------------------------------------------------------------------------------------

WORDS = ("mnist", "bert-ft", "llama3-8b", "resnet50", "t5-xl", "gpt2", "vit-b16", "w2v", "a", "sd-xl", "rl7")


def k8s_name(rng: random.Random) -> str:
    """A Kubernetes object name (an RFC 1123 label), as users and generators write them."""
    word = rng.choice(WORDS)
    return word if rng.random() < .4 else f"{word}-{''.join(rng.choices('abcdefghijklmnopqrstuvwxyz0123456789', k=5))}"


def port(rng: random.Random, default: int) -> int:
    return default if rng.random() < .5 else rng.randint(1024, 65535)


def positions(count: int, rng: random.Random) -> list[int]:
    """Indices to take from a world of `count`: all of a small one, else first, last and a few in the middle."""
    if count <= 4:
        return list(range(count))
    return sorted({0, count - 1, count // 2, *rng.sample(range(1, count - 1), min(2, count - 2))})


def node_count(rng: random.Random) -> int:
    return rng.choice((1, 2, 3, 4, 5, 8, 16, 32, 64)) if rng.random() < .7 else rng.randint(1, 64)


# --- Slurm -----------------------------------------------------------------------------------------------------------

STEMS = ("node", "gpu", "cpu", "n", "r1n", "dgx", "hpc-gpu-", "compute-", "a100-", "x", "login", "sky")
SUFFIXES = ("-ib", ".cluster", "-eth0", ".hpc.example.org")


@dataclass
class HostList:
    """A hostlist as text and the hosts it names, in Slurm's order; `slurm_form`: Slurm itself writes lists so
    (one bracket per name, no text after it, a bracket only for two or more hosts)."""

    text: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    slurm_form: bool = True


def _numbers(rng: random.Random, count: int) -> tuple[str, list[str]]:
    """A bracket's inside naming `count` numbers (ranges and singles, zero padded or not) and the numbers."""
    spans, left = [], count
    while left:
        length = rng.randint(1, left) if len(spans) < 2 else left
        spans.append(length)
        left -= length
    width = rng.choice((1, 1, 2, 3, 4))
    start, parts, numbers = rng.randint(0, 12), [], []
    for length in spans:
        low, high = start, start + length - 1
        parts.append(f"{low:0{width}d}" if length == 1 else f"{low:0{width}d}-{high:0{width}d}")
        numbers += [f"{n:0{width}d}" for n in range(low, high + 1)]
        start = high + rng.randint(2, 6)
    return ",".join(parts), numbers


def hostlist(rng: random.Random, count: int, odd: bool) -> HostList:
    """`count` distinct hosts written in the shapes Slurm writes (``node[01-04,07]``, ``gpu[1-3],cpu9``, plain
    names) and, where `odd`, also in those it only accepts (``rack[1-2]-n[01-02]``, ``node[1-2]-ib``, ``node[07]``)."""
    out, used = HostList(), Counter[str]()
    if count > 1 and not odd and rng.random() < .5:  # most clusters: one name, one bracket (node[01-64])
        name, (inside, numbers) = rng.choice(STEMS), _numbers(rng, count)
        return HostList([f"{name}[{inside}]"], [f"{name}{n}" for n in numbers])

    def stem() -> str:
        base = rng.choice(STEMS)
        used[base] += 1
        return base if used[base] == 1 else f"{base}{'abcdefghijklmnopqrstuvwxyz'[used[base] % 26]}{used[base]}-"

    while len(out.hosts) < count:
        left = count - len(out.hosts)
        kind = rng.choice(("plain", "range", "range", "range", *(("multi", "suffix", "single") if odd else ())))
        name = stem()
        if kind == "plain" or (left == 1 and kind in ("range", "multi")):
            host = name.rstrip("-") + rng.choice(("", str(rng.randint(0, 99)), ".cluster.local"))
            out.text.append(host)
            out.hosts.append(host)
        elif kind == "multi" and left >= 2:
            outer = rng.randint(1, min(3, left // 2))
            inner_text, inner = _numbers(rng, rng.randint(2, left // outer))
            outer_text, outers = _numbers(rng, outer)
            middle = rng.choice(("-n", "-gpu", "x"))
            out.text.append(f"{name}[{outer_text}]{middle}[{inner_text}]")
            out.hosts += [f"{name}{a}{middle}{b}" for a in outers for b in inner]
            out.slurm_form = False
        else:
            many = 1 if kind == "single" else rng.randint(1 if kind == "suffix" else 2, left)
            inside, numbers = _numbers(rng, many)
            suffix = rng.choice(SUFFIXES) if kind == "suffix" else ""
            out.text.append(f"{name}[{inside}]{suffix}")
            out.hosts += [f"{name}{n}{suffix}" for n in numbers]
            out.slurm_form = out.slurm_form and not suffix and many > 1
    assert len(set(out.hosts)) == len(out.hosts), out.text
    return out


@dataclass
class SlurmTask:
    """One srun task of a generated step, and the step's facts."""

    name: str
    env: dict[str, str]
    hosts: list[str]
    counts: list[int]
    procid: int
    node: int
    local: int
    slurm_form: bool
    per_node_flag: bool
    master: tuple[str | None, str | None]
    jax_port: str | None

    @property
    def ntasks(self) -> int:
        return sum(self.counts)


def slurm_tasks(seed: int = 1) -> list[SlurmTask]:
    """srun tasks as ``srun(1)`` and src/srun (``setup_env``) describe them: block distribution, the step's node
    list in ``SLURM_STEP_NODELIST`` and ``SLURM_NODELIST``, the allocation's in ``SLURM_JOB_NODELIST``."""
    rng, tasks = random.Random(seed), []
    for step in range(140):
        nodes = node_count(rng)
        listed = hostlist(rng, nodes, odd=rng.random() < .3)
        spare = rng.choice((0, 0, 0, 1, 3))  # allocated nodes the step does not use
        job_list = ",".join(listed.text + ([f"spare[1-{spare}]" if spare > 1 else "spare1"] if spare else []))
        per_node_flag = rng.random() < .7
        if per_node_flag:
            counts = [rng.randint(1, 8)] * nodes
        elif rng.random() < .5:  # --ntasks T: as even as the nodes allow, the first ones one more
            total = rng.randint(nodes, nodes * 8)
            counts = [total // nodes + (i < total % nodes) for i in range(nodes)]
        else:  # nodes of different sizes (--ntasks with CPUs per node differing)
            counts = [rng.randint(1, 8) for _ in range(nodes)]
        job_id = rng.choice((rng.randint(1, 999), rng.randint(1000, 99999), rng.randint(100000, 99999999)))
        # The job script's own rendezvous: ``export MASTER_ADDR=$(scontrol show hostnames ... | head -n1)``, an IP,
        # a port, both, or (mostly) nothing.
        addr = listed.hosts[0] if rng.random() < .5 else f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.7"
        chosen_port = str(rng.randint(1024, 65535))
        master = rng.choice([(None, None)] * 15 + [(addr, chosen_port)] * 3 + [(None, chosen_port), (addr, None)])
        jax_port = str(rng.randint(1024, 65535)) if rng.random() < .1 else None
        total = sum(counts)
        starts = [sum(counts[:i]) for i in range(nodes)]
        for procid in positions(total, rng):
            node = max(i for i in range(nodes) if starts[i] <= procid)
            step_list = ",".join(listed.text)
            env = {
                "SLURM_JOB_ID": str(job_id), "SLURM_JOBID": str(job_id), "SLURM_JOB_NAME": "train",
                "SLURM_STEP_ID": "0", "SLURM_PROCID": str(procid), "SLURM_LOCALID": str(procid - starts[node]),
                "SLURM_NODEID": str(node), "SLURM_NTASKS": str(total), "SLURM_NPROCS": str(total),
                "SLURM_STEP_NUM_TASKS": str(total), "SLURM_STEP_NODELIST": step_list, "SLURM_NODELIST": step_list,
                "SLURM_JOB_NODELIST": job_list, "SLURM_STEP_NUM_NODES": str(nodes),
                "SLURM_NNODES": str(nodes), "SLURM_JOB_NUM_NODES": str(nodes + spare),
                "SLURM_STEP_TASKS_PER_NODE": compress_counts(counts), "SLURM_TASKS_PER_NODE": compress_counts(counts),
                "SLURMD_NODENAME": listed.hosts[node], "SLURM_DISTRIBUTION": "block",
                "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in range(max(counts))),
            }
            if per_node_flag:
                env["SLURM_NTASKS_PER_NODE"] = str(counts[0])
            for name, value in zip(("MASTER_ADDR", "MASTER_PORT"), master):
                if value is not None:
                    env[name] = value
            if jax_port is not None:
                env["JAX_COORDINATOR_PORT"] = jax_port
            tasks.append(SlurmTask(
                name=f"step{step} {step_list!r} {compress_counts(counts)} task {procid}", env=env,
                hosts=listed.hosts, counts=counts, procid=procid, node=node, local=procid - starts[node],
                slurm_form=listed.slurm_form, per_node_flag=per_node_flag, master=master, jax_port=jax_port))
    return tasks


@pytest.fixture(scope="module")
def slurm_batch() -> list[SlurmTask]:
    return slurm_tasks()


@pytest.fixture(scope="module")
def slurm_jax(slurm_batch: list[SlurmTask]) -> list[dict[str, Any]]:
    """JAX once for Slurm: its own detection on every task, and its initialize under the launcher's env."""
    cases = [{"mode": "detect", "env": t.env} for t in slurm_batch]
    cases += [{"mode": "initialize", "env": launcher_env(t.env)} for t in slurm_batch]
    return run_client("jax", "jax_client.py", cases)


def launcher_env(env: dict[str, str]) -> dict[str, str]:
    """What trainimg's launcher gives the process that srun started (it starts no second layer)."""
    info = parse_cluster(env)
    assert choose_mode(info, "jax", has_torch=False) == "exec"
    return launch_env(info, env)


def jax_truth(task: SlurmTask) -> dict[str, Any]:
    """Where JAX's coordinator is for this step: the step's first host, on the port the job script exported for
    JAX or else JAX's own port for the job id (jax._src.clusters.slurm_cluster)."""
    job = int(task.env["SLURM_JOB_ID"])
    port_ = task.jax_port or str(job % slurm.JAX_PORT_SPAN + slurm.JAX_PORT_BASE)
    return {"coordinator": f"{task.hosts[0]}:{port_}", "num_processes": task.ntasks, "process_id": task.procid,
            "local_device_ids": [task.local]}


def slurm_list_excuse(task: SlurmTask) -> str | None:
    return None if task.slurm_form else ("a node list Slurm accepts but never writes into SLURM_*NODELIST "
                                         "(text after a bracket, two brackets, one number in a bracket)")


def test_slurm_jax_detection_agrees(slurm_batch: list[SlurmTask], slurm_jax: list[dict[str, Any]]) -> None:
    """JAX's own Slurm detection and trainimg put the coordinator, the process count and id in the same place."""
    rows = []
    for task, theirs in zip(slurm_batch, slurm_jax[:len(slurm_batch)]):
        info = read(task.env)
        mine = info if isinstance(info, dict) else {
            "coordinator": info.jax_coordinator, "num_processes": info.world_size_processes,
            "process_id": info.process_rank, "local_device_ids": [info.local_rank]}
        rows.append(Row(task.name, mine, theirs, jax_truth(task), slurm_list_excuse(task)))
    judge("slurm / JAX ClusterEnv.auto_detect_unset_distributed_params", rows)


def test_slurm_launcher_keeps_srun_ranks_and_jax_coordinator(slurm_batch: list[SlurmTask],
                                                              slurm_jax: list[dict[str, Any]]) -> None:
    """The launcher's env for an srun task: Slurm's own ranks, as torch itself reads them from it (torch.distributed's
    ``env://`` rendezvous: RANK and WORLD_SIZE; LOCAL_RANK, which the program reads itself, against the job), and
    the coordinator JAX itself would pick (what ``jax.distributed.initialize`` reads from it, checked by JAX's own
    initialize)."""
    launched = [launcher_env(task.env) for task in slurm_batch]
    torch_read = run_client("torch", "torch_env_client.py", [{"env": env} for env in launched])
    ranks, jax_rows, local = [], [], []
    for task, out, torch_answer, initialized in zip(slurm_batch, launched, torch_read,
                                                    slurm_jax[len(slurm_batch):]):
        ranks.append(Row(task.name, {"rank": int(out["RANK"]), "world_size": int(out["WORLD_SIZE"])},
                         {k: torch_answer.get(k, torch_answer.get("error")) for k in ("rank", "world_size")},
                         {"rank": task.procid, "world_size": task.ntasks}))
        local.append((out["LOCAL_RANK"], str(task.local)))
        mine = {"coordinator": out["JAX_COORDINATOR_ADDRESS"], "num_processes": int(out["JAX_NUM_PROCESSES"]),
                "process_id": int(out["JAX_PROCESS_ID"])}
        theirs = {k: initialized.get(k, initialized.get("error")) for k in mine}
        jax_rows.append(Row(task.name, mine, theirs, {k: v for k, v in jax_truth(task).items() if k in mine}))
    judge("slurm / torch env:// on the launcher's env vs the job's SLURM_PROCID, SLURM_NTASKS", ranks)
    assert [mine for mine, _ in local] == [job for _, job in local]  # LOCAL_RANK: the task's SLURM_LOCALID
    judge("slurm / jax.distributed.initialize under the launcher's env", jax_rows)


def test_slurm_lightning_agrees(slurm_batch: list[SlurmTask]) -> None:
    """Lightning's ranks and rendezvous (a job script's MASTER_ADDR/MASTER_PORT first) are trainimg's."""
    answers = run_client("torch", "lightning_client.py", [{"env": t.env} for t in slurm_batch])
    rows, refused = [], 0
    for task, theirs in zip(slurm_batch, answers):
        if "error" in theirs and task.ntasks > 1 and not task.per_node_flag:
            refused += 1  # SLURMEnvironment._validate_srun_variables: --ntasks without --ntasks-per-node
            continue
        info = read(task.env)
        mine = info if isinstance(info, dict) else {
            "detect": True, "world_size": info.world_size_processes, "global_rank": info.process_rank,
            "local_rank": info.local_rank, "node_rank": info.node_rank, "main_address": info.master_addr,
            "main_port": info.master_port}
        truth = {"detect": True, "world_size": task.ntasks, "global_rank": task.procid, "local_rank": task.local,
                 "node_rank": task.node, "main_address": task.master[0] or task.hosts[0]}
        if task.master[1] is not None:
            truth["main_port"] = int(task.master[1])
        rows.append(Row(task.name, mine, theirs, truth, slurm_list_excuse(task)))
    print(f"\nLightning refuses {refused} task(s) of steps started with --ntasks and no --ntasks-per-node "
          "(its own rule, SLURMEnvironment._validate_srun_variables); not compared")
    judge("slurm / Lightning SLURMEnvironment", rows)


def test_slurm_tensorflow_agrees(slurm_batch: list[SlurmTask]) -> None:
    """TensorFlow's SlurmClusterResolver on the task, and TFConfigClusterResolver on the TF_CONFIG the launcher
    writes: every task a worker at its host, on ports from 8888 up per node."""
    written = [launcher_env(t.env)["TF_CONFIG"] for t in slurm_batch]
    cases = [{"mode": "slurm", "env": t.env} for t in slurm_batch]
    cases += [{"mode": "tf_config", "env": {"TF_CONFIG": tf_config}} for tf_config in written]
    answers = run_client("tf", "tf_client.py", cases)
    resolver_rows, config_rows = [], []
    for task, tf_config, theirs, resolved in zip(slurm_batch, written, answers, answers[len(slurm_batch):]):
        workers = [f"{h}:{slurm.TF_PORT_BASE + i}" for h, n in zip(task.hosts, task.counts) for i in range(n)]
        truth = {"task_type": "worker", "task_id": task.procid, "cluster": {"worker": workers}}
        ours = json.loads(tf_config)
        mine = {"task_type": ours["task"]["type"], "task_id": ours["task"]["index"], "cluster": ours["cluster"]}
        excuse = slurm_list_excuse(task) or (None if sorted(task.hosts) == task.hosts else
                                             "hosts not in sorted order: SlurmClusterResolver numbers the tasks "
                                             "in its sorted host order, not Slurm's")
        resolver_rows.append(Row(task.name, mine, theirs, truth, excuse))
        config_rows.append(Row(task.name, tf_config_view(parse_cluster(task.env)), resolved,
                               {**truth, "multi_worker": True, "worker_count": task.ntasks,
                                "id_in_cluster": task.procid}))
    judge("slurm / TensorFlow SlurmClusterResolver", resolver_rows)
    judge("slurm / TFConfigClusterResolver on the launcher's TF_CONFIG", config_rows)


# --- TensorFlow: TF_CONFIG -------------------------------------------------------------------------------------------

def tf_config_view(info: ClusterInfo) -> dict[str, Any]:
    """trainimg's answer in TFConfigClusterResolver's terms: the task and cluster of the TF_CONFIG it writes, and
    its all-reduce group as the chief/worker count and this task's place in it."""
    if info.tf_config is None:
        return {"multi_worker": False, "cluster": {}}
    task = info.tf_config["task"]
    in_group = info.rank is not None
    return {"task_type": task["type"], "task_id": task["index"], "cluster": info.tf_config["cluster"],
            "multi_worker": True,
            "worker_count": (info.world_size_processes if info.started_by else info.world_size) if in_group else None,
            "id_in_cluster": (info.process_rank if info.started_by else info.rank) if in_group else None}


def resolver_view(answer: dict[str, Any]) -> dict[str, Any]:
    """TFConfigClusterResolver's answer; without a cluster TensorFlow trains alone and never reads the task."""
    return answer if answer.get("multi_worker", True) else {"multi_worker": False, "cluster": answer["cluster"]}


@dataclass
class TFReplica:
    """A replica's env as its platform writes it, and what TensorFlow should make of the TF_CONFIG it trains with."""

    name: str
    env: dict[str, str]
    truth: dict[str, Any]


def tfjob_replicas(seed: int = 2) -> list[TFReplica]:
    """TFJob replicas (kubeflow/training-operator ``tensorflow.go``): ``<job>-<role>-<i>.<ns>.svc:<port>`` in lower
    case roles, the evaluator listed too, ``"environment": "cloud"``; the task index sometimes a string of digits,
    as TensorFlow's ``int()`` accepts; and the shapes without a cluster that TensorFlow reads as one machine."""
    rng, out = random.Random(seed), []
    for job_number in range(120):
        job, namespace, port_ = k8s_name(rng), rng.choice(("default", "team-a", "kubeflow-user")), port(rng, 2222)
        chief = rng.choice(("chief", "master", None))
        pools = {"worker": rng.randint(0 if chief else 1, 12), "ps": rng.choice((0, 0, 1, 2, 4)),
                 "evaluator": rng.choice((0, 0, 1))}
        if chief:
            pools = {chief: 1, **pools}
        cluster = {role: [f"{job}-{role}-{i}.{namespace}.svc:{port_}" for i in range(n)]
                   for role, n in pools.items() if n}
        training = {("chief" if role == "master" else role): hosts for role, hosts in cluster.items()
                    if role != "evaluator"}
        group = training.get("chief", []) + training.get("worker", [])
        for role, hosts in cluster.items():
            for index in positions(len(hosts), rng):
                written = str(index) if rng.random() < .2 else index
                tf_config = {"cluster": cluster, "task": {"type": role, "index": written}, "environment": "cloud"}
                canonical = "chief" if role == "master" else role
                place = {"chief": 0, "worker": index + bool(training.get("chief"))}.get(canonical)
                out.append(TFReplica(f"tfjob{job_number} {pools} {role}:{written!r}", {"TF_CONFIG": json.dumps(
                    tf_config)}, {"task_type": canonical, "task_id": index, "cluster": training, "multi_worker": True,
                                  "worker_count": len(group) if place is not None else None,
                                  "id_in_cluster": place}))
    alone = {"multi_worker": False, "cluster": {}}
    for number in range(30):
        task = {"type": rng.choice(("worker", "chief", "ps")), "index": rng.choice((0, 1, 3, "0", "3"))}
        for shape in ({}, {"cluster": {}}, {"task": task}, {"cluster": {}, "task": task, "environment": "cloud"}):
            out.append(TFReplica(f"one machine {number}: {shape}", {"TF_CONFIG": json.dumps(shape)}, alone))
    return out


def jobset_pods(seed: int = 3) -> list[dict[str, Any]]:
    """JobSet pods with the variables ``trainimg spec --platform jobset`` copies from their labels, and the job."""
    rng, out = random.Random(seed), []
    for number in range(120):
        name, replicated = k8s_name(rng), rng.choice(("workers", "node", "trainer", "w"))
        jobs = rng.choice((1, 1, 2, 3, 4, 8))
        pods = max(1, node_count(rng) // jobs)
        subdomain = name if rng.random() < .7 else k8s_name(rng)
        port_ = port(rng, 29500)
        hosts = [jobset.hostname(name, replicated, j, p, subdomain) for j in range(jobs) for p in range(pods)]
        for node in positions(len(hosts), rng):
            env = {"JOBSET_NAME": name, "JOBSET_REPLICATED_JOB": replicated, "JOBSET_JOB_INDEX": str(node // pods),
                   "JOBSET_JOB_REPLICAS": str(jobs), "JOBSET_PODS_PER_JOB": str(pods),
                   "JOBSET_SUBDOMAIN": subdomain, "JOBSET_PORT": str(port_), "JOB_COMPLETION_INDEX": str(node % pods)}
            out.append({"name": f"jobset{number} {jobs}x{pods} node {node}", "env": env, "hosts": hosts,
                        "node": node, "port": port_})
    return out


def jobset_tf_replicas() -> list[TFReplica]:
    """JobSet pods as TensorFlow workers: every pod a worker at its hostname, in node order."""
    out = []
    for pod in jobset_pods():
        workers = [f"{h}:{pod['port']}" for h in pod["hosts"]]
        out.append(TFReplica(pod["name"], pod["env"], {
            "task_type": "worker", "task_id": pod["node"], "cluster": {"worker": workers}, "multi_worker": True,
            "worker_count": len(workers), "id_in_cluster": pod["node"]}))
    return out


@pytest.mark.parametrize("platform", ["tfjob", "jobset"])
def test_tf_config_agrees_with_tf_config_cluster_resolver(platform: str) -> None:
    """TFJob: TensorFlow reads the TF_CONFIG trainimg's launcher writes for the replica (TF2-ready: ``master``
    named ``chief``, the evaluator outside the cluster), or the platform's own where trainimg writes none (one
    machine). JobSet: the TF_CONFIG trainimg writes from the JOBSET_* variables."""
    replicas = tfjob_replicas() if platform == "tfjob" else jobset_tf_replicas()
    infos, cases = [], []
    for replica in replicas:
        info = read(replica.env)
        infos.append(info)
        written = launch_env(info, replica.env) if isinstance(info, ClusterInfo) else replica.env
        cases.append({"mode": "tf_config", "env": {"TF_CONFIG": written.get("TF_CONFIG", "{}")}})
    answers = run_client("tf", "tf_client.py", cases)
    rows = [Row(r.name, info if isinstance(info, dict) else tf_config_view(info), resolver_view(theirs), r.truth)
            for r, info, theirs in zip(replicas, infos, answers)]
    judge(f"{platform} / TFConfigClusterResolver on the launcher's TF_CONFIG", rows)


# --- Kubeflow's torch platforms: torchrun ----------------------------------------------------------------------------

@dataclass
class TorchJob:
    """A job of one of Kubeflow's torch platforms: every node's env and the facts it was made from."""

    name: str
    nodes: list[dict[str, str]]
    nproc: int
    written_nproc: str
    master: tuple[str, int]


def trainjob_torch_jobs(seed: int = 4) -> list[TorchJob]:
    """TrainJobs on the torch runtime (kubeflow/trainer ``plugins/torch``): PET_* in the ``node`` container,
    PET_NODE_RANK = the pod's completion index; ``auto`` processes on nodes whose GPUs CUDA_VISIBLE_DEVICES lists."""
    rng, jobs, total = random.Random(seed), [], 0
    while total < 260:
        name, nodes, port_ = k8s_name(rng), node_count(rng), port(rng, 29500)
        nproc = rng.randint(1, 8)
        written = "auto" if rng.random() < .25 else str(nproc)
        master = f"{name}-node-0-0.{name}"
        envs = [{"PET_NNODES": str(nodes), "PET_NPROC_PER_NODE": written, "PET_NODE_RANK": str(node),
                 "PET_MASTER_ADDR": master, "PET_MASTER_PORT": str(port_), "JOB_COMPLETION_INDEX": str(node),
                 **({"CUDA_VISIBLE_DEVICES": ",".join(map(str, range(nproc)))} if written == "auto" else {})}
                for node in range(nodes)]
        jobs.append(TorchJob(f"trainjob {name} {nodes}x{written}", envs, nproc, written, (master, port_)))
        total += nodes
    return jobs


def pytorchjob_jobs(seed: int = 5) -> list[TorchJob]:
    """PyTorchJobs (kubeflow/training-operator v1.9 ``pytorch/envvar.go``, ``master.go``): one master and W
    workers; RANK = PET_NODE_RANK = the node index, WORLD_SIZE = replicas x nprocPerNode (x 1 for ``auto``)."""
    rng, jobs, total = random.Random(seed), [], 0
    while total < 260:
        name, nodes, port_ = k8s_name(rng), node_count(rng), port(rng, 23456)
        nproc = rng.randint(1, 8)
        written = "auto" if rng.random() < .25 else str(nproc)
        master = f"{name}-master-0"
        envs = [{"MASTER_ADDR": master, "MASTER_PORT": str(port_), "PET_MASTER_ADDR": master,
                 "PET_MASTER_PORT": str(port_), "WORLD_SIZE": str(nodes * (1 if written == "auto" else nproc)),
                 "RANK": str(node), "PET_NODE_RANK": str(node), "PET_NNODES": str(nodes),
                 "PET_NPROC_PER_NODE": written, "PYTHONUNBUFFERED": "0",
                 **({"CUDA_VISIBLE_DEVICES": ",".join(map(str, range(nproc)))} if written == "auto" else {})}
                for node in range(nodes)]
        jobs.append(TorchJob(f"pytorchjob {name} {nodes}x{written}", envs, nproc, written, (master, port_)))
        total += nodes
    return jobs


TORCH_JOBS: dict[str, Callable[[], list[TorchJob]]] = {"trainjob": trainjob_torch_jobs,
                                                       "pytorchjob": pytorchjob_jobs}


def torchrun_args(env: dict[str, str]) -> list[str]:
    """The arguments after ``python -m torch.distributed.run`` in the command trainimg's launcher execs."""
    argv = torchrun_argv(parse_cluster(env), COMMAND)
    assert argv[1:3] == ["-m", "torch.distributed.run"], argv
    return argv[3:]


@functools.cache
def torch_reading(platform: str) -> tuple[list[TorchJob], list[dict[str, Any]]]:
    """torchrun once per platform: its reading of every node (its own, and the launcher's argv) and its workers."""
    jobs = TORCH_JOBS[platform]()
    cases = [{"env": {}, "nodes": [{"env": env, "argv": torchrun_args(env)} for env in job.nodes]} for job in jobs]
    return jobs, run_client("torch", "torch_client.py", cases)


def torchrun_figures(info: ClusterInfo | dict[str, str]) -> dict[str, Any]:
    if isinstance(info, dict):
        return info
    return {"nnodes": [info.nnodes, info.nnodes], "node_rank": info.node_rank, "nproc_per_node": str(info.nproc_per_node),
            "master_addr": info.master_addr, "master_port": info.master_port}


def worker_truth(job: TorchJob, node: int, local: int) -> dict[str, str]:
    return {"RANK": str(node * job.nproc + local), "LOCAL_RANK": str(local), "WORLD_SIZE": str(len(job.nodes) *
            job.nproc), "LOCAL_WORLD_SIZE": str(job.nproc), "GROUP_RANK": str(node), "GROUP_WORLD_SIZE":
            str(len(job.nodes)), "MASTER_ADDR": job.master[0], "MASTER_PORT": str(job.master[1])}


@pytest.mark.parametrize("platform", ["trainjob", "pytorchjob"])
def test_torchrun_reads_the_platform_as_trainimg(platform: str) -> None:
    """torchrun's own reading of PET_* and its reading of the argv trainimg's launcher execs both give trainimg's
    nnodes, node rank, processes per node and rendezvous; ``auto`` is the node's GPUs."""
    jobs, answers = torch_reading(platform)
    own, argv = [], []
    for job, answer in zip(jobs, answers):
        for node, env in enumerate(job.nodes):
            info = read(env)
            mine = torchrun_figures(info)
            truth = {"nnodes": [len(job.nodes)] * 2, "node_rank": node, "nproc_per_node": str(job.nproc),
                     "master_addr": job.master[0], "master_port": job.master[1]}
            theirs = {k: v for k, v in answer["own"][node].items() if k != "workers"}
            # On its own torchrun keeps "auto" to count its devices itself: compare what the platform asked for.
            asked = {**mine, "nproc_per_node": info.platform_nproc} if isinstance(info, ClusterInfo) else mine
            own.append(Row(f"{job.name} node {node}", asked, theirs, {**truth, "nproc_per_node": job.written_nproc}))
            argv.append(Row(f"{job.name} node {node}", mine,
                            {k: v for k, v in answer["argv"][node].items() if k != "workers"}, truth))
    judge(f"{platform} / torchrun's own reading of PET_* (get_args_parser)", own)
    judge(f"{platform} / torchrun's reading of the launcher's torchrun_argv", argv)


def spawn_view(env: dict[str, str]) -> dict[str, str]:
    """A launcher env in torchrun's worker terms (the node figures under trainimg's names)."""
    return {"RANK": env["RANK"], "LOCAL_RANK": env["LOCAL_RANK"], "WORLD_SIZE": env["WORLD_SIZE"],
            "LOCAL_WORLD_SIZE": env["LOCAL_WORLD_SIZE"], "GROUP_RANK": env["TRAINIMG_NODE_RANK"],
            "GROUP_WORLD_SIZE": env["TRAINIMG_NNODES"], "MASTER_ADDR": env["MASTER_ADDR"],
            "MASTER_PORT": env["MASTER_PORT"]}


@pytest.mark.parametrize("platform", ["trainjob", "pytorchjob"])
def test_torchrun_workers_get_what_launcher_spawn_computes(platform: str) -> None:
    """Every worker torchrun's agent starts from the launcher's argv gets the ranks trainimg's launcher computes
    when it starts the processes itself (spawn), local rank by local rank."""
    jobs, answers = torch_reading(platform)
    rows = []
    for job, answer in zip(jobs, answers):
        for node, env in enumerate(job.nodes):
            info = parse_cluster(env)
            workers = answer["argv"][node]["workers"]
            for local in range(job.nproc):
                mine = spawn_view(launch_env(info, env, local))
                theirs = {k: workers[local][k] for k in mine} if local < len(workers) else {"error": "no worker"}
                rows.append(Row(f"{job.name} node {node} local {local}", mine, theirs, worker_truth(job, node, local)))
    judge(f"{platform} / torchrun's LocalElasticAgent workers vs launch_env (spawn)", rows)


@pytest.mark.parametrize("platform", ["trainjob", "pytorchjob"])
def test_torchrun_layer_keeps_torchruns_ranks(platform: str) -> None:
    """A process torchrun started, with the platform's PET_* (and PyTorchJob's node RANK/WORLD_SIZE) still in its
    env under torchrun's: trainimg reads torchrun's process ranks, and the launcher hands them on unchanged. Both
    routes: torchrun as the runtime's command (its own reading of PET_*) and torchrun started by the launcher."""
    jobs, answers = torch_reading(platform)
    read_rows, handed = [], []
    for job, answer in zip(jobs, answers):
        for route in ("own", "argv"):
            for node, env in enumerate(job.nodes):
                for local, worker in enumerate(answer[route][node]["workers"] or []):
                    process_env = {**env, **worker}  # start_processes: the agent's env over the parent's
                    name = f"{job.name} {route} node {node} local {local}"
                    info = read(process_env)
                    theirs = {k: worker[k] for k in worker_truth(job, node, local)}
                    mine = info if isinstance(info, dict) else {
                        "RANK": str(info.process_rank), "LOCAL_RANK": str(info.local_rank),
                        "WORLD_SIZE": str(info.world_size_processes), "LOCAL_WORLD_SIZE": str(info.nproc_per_node),
                        "GROUP_RANK": str(info.node_rank), "GROUP_WORLD_SIZE": str(info.nnodes),
                        "MASTER_ADDR": info.master_addr, "MASTER_PORT": str(info.master_port),
                        "started_by": info.started_by}
                    theirs_read = {**theirs, "started_by": "torchrun"}
                    read_rows.append(Row(name, mine, theirs_read, worker_truth(job, node, local)))
                    if isinstance(info, ClusterInfo):
                        assert choose_mode(info, "pytorch", has_torch=True) == "exec", name
                        # Every variable torchrun gave the worker, a missing one too: one the launcher dropped
                        # (say, with no process rank read) fails its row, it is not left out of the comparison.
                        out = launch_env(info, process_env)
                        handed.append(Row(name, {k: out.get(k, "<absent>") for k in theirs}, theirs,
                                          worker_truth(job, node, local)))
    judge(f"{platform} / torchrun's worker env read by parse_cluster (torchrun layer)", read_rows)
    judge(f"{platform} / torchrun's worker env handed on by launch_env", handed)


# --- JAX ---------------------------------------------------------------------------------------------------------------

@dataclass
class JaxNode:
    """A node's env as its platform writes it, and its place in the job."""

    name: str
    env: dict[str, str]
    nodes: int
    node: int
    coordinator: str


def trainjob_jax_nodes(rng: random.Random) -> Iterator[JaxNode]:
    """TrainJob on the JAX runtime (kubeflow/trainer ``plugins/jax``): one process per node, the coordinator
    ``<trainjob>-node-0-0.<trainjob>:<port>``."""
    for number in range(90):
        name, nodes, port_ = k8s_name(rng), node_count(rng), port(rng, 29500)
        coordinator = f"{name}-node-0-0.{name}:{port_}"
        for node in positions(nodes, rng):
            yield JaxNode(f"trainjob-jax {name} node {node}/{nodes}", {
                "JAX_NUM_PROCESSES": str(nodes), "JAX_PROCESS_ID": str(node), "JAX_COORDINATOR_ADDRESS": coordinator,
                "JOB_COMPLETION_INDEX": str(node)}, nodes, node, coordinator)


def jaxjob_nodes(rng: random.Random) -> Iterator[JaxNode]:
    """Training Operator v1 JAXJob (``jax/envvar.go``): the coordinator host ``<job>-worker-0`` and its port apart."""
    for number in range(90):
        name, nodes, port_ = k8s_name(rng), node_count(rng), port(rng, 6666)
        for node in positions(nodes, rng):
            yield JaxNode(f"jaxjob {name} node {node}/{nodes}", {
                "COORDINATOR_ADDRESS": f"{name}-worker-0", "COORDINATOR_PORT": str(port_),
                "NUM_PROCESSES": str(nodes), "PROCESS_ID": str(node)}, nodes, node, f"{name}-worker-0:{port_}")


def jobset_jax_nodes(rng: random.Random) -> Iterator[JaxNode]:
    for pod in jobset_pods():
        yield JaxNode(pod["name"], pod["env"], len(pod["hosts"]), pod["node"], f"{pod['hosts'][0]}:{pod['port']}")


JAX_NODES: dict[str, Callable[[random.Random], Iterator[JaxNode]]] = {
    "trainjob": trainjob_jax_nodes, "jaxjob": jaxjob_nodes, "jobset": jobset_jax_nodes}


@pytest.mark.parametrize("platform", ["trainjob", "jaxjob", "jobset"])
def test_jax_initialize_under_the_launcher(platform: str) -> None:
    """What ``jax.distributed.initialize`` settles from the launcher's env (JAX reads JAX_COORDINATOR_ADDRESS
    itself; the script passes JAX_NUM_PROCESSES/JAX_PROCESS_ID), with one process per node and with N."""
    rng = random.Random(f"jax-{platform}")
    processes = []
    for node in JAX_NODES[platform](rng):
        for nproc in (1, rng.randint(2, 8)):
            info = parse_cluster(node.env, nproc)
            mode = choose_mode(info, "jax", has_torch=False)
            assert mode == ("exec" if nproc == 1 else "spawn"), node.name
            processes += [(node, nproc, local, launch_env(info, node.env, local)) for local in range(nproc)]
    answers = run_client("jax", "jax_client.py", [{"mode": "initialize", "env": env} for *_, env in processes])
    rows = []
    for (node, nproc, local, env), theirs in zip(processes, answers):
        mine = {"coordinator": env["JAX_COORDINATOR_ADDRESS"], "num_processes": int(env["JAX_NUM_PROCESSES"]),
                "process_id": int(env["JAX_PROCESS_ID"])}
        truth = {"coordinator": node.coordinator, "num_processes": node.nodes * nproc,
                 "process_id": node.node * nproc + local}
        rows.append(Row(f"{node.name} x{nproc} local {local}", mine,
                        {k: theirs.get(k, theirs.get("error")) for k in mine}, truth))
    judge(f"{platform} / jax.distributed.initialize under the launcher's env", rows)

