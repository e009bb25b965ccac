"""``trainimg-runtime selftest``: the conformance gate run inside the image itself, where there is no Docker.

GPU CI runners, Kubernetes pods and Vertex replicas run *inside* the image, so the gate must too. `selftest`
runs every check of `trainimg test`'s probe (the same `probe.run_checks`, against the expectations the image's own
labels file gives, `expect.image_labels`), then a real all-reduce of N local processes under the launcher, with
the chosen platform's cluster variables emulated on 127.0.0.1 (`topology.replica_specs`, every host rewritten to
127.0.0.1, each address to a free local port) and its processes started as the platform starts them
(`topology.process_start`): PyTorch and JAX as one node of N processes (torchrun or the launcher's own children;
a TrainJob's torchrun; Slurm's N tasks), TensorFlow as N one-process replicas, as ``MultiWorkerMirroredStrategy``
expects (on Slurm N tasks of one node, whose TensorFlow ports differ by local id). A JobSet and SageMaker cannot
be emulated (`NOT_EMULATED`), nor TensorFlow where the platform gives it no TF_CONFIG: both exit 2. NCCL when GPUs
are visible (counted as CUDA counts them, `gpus.gpu_view`), gloo otherwise; more NCCL processes than GPUs exit 2
before any check runs (`gpus.too_many_processes`); the NCCL all-reduce is reported skipped, with the reason, where
it could not run. The probe's ``shm`` check sees every emulated rank as this machine's own; where /dev/shm is
smaller than NCCL's floor for them, no rank starts (the all-reduce is reported not started, with the cause), as NCCL
would fail in its shared-memory setup on the node.
Skipped is never passed. The report is `trainimg test`'s (`report`, JSON and JUnit) and so are the exit codes:
0 every check passed or warned, 1 one failed, 2 bad usage.

``--cluster`` is the form a ``spec --conformance`` job runs under ``trainimg-launch`` on every replica: the
platform's own cluster is used as it is, local rank 0 runs the checks, every process runs its rank of the
cross-replica all-reduce, and local rank 0 prints the replica's JSON report as one log line.

Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from typing import IO

from . import osfixes, probe
from .cluster import parse_cluster
from .world import ClusterError
from .contract import DEFAULT_PLATFORM, DEFAULT_TEST_TIMEOUT, EXIT_FAILED, EXIT_OK, EXIT_USAGE, LABELS_PATH, \
    OCI_TITLE, TEST_TIMEOUT_RANGE, VARIANT_LABEL
from .cause import reason as cause_of
from .expect import expectations, image_labels
from .gpus import gpu_view, too_many_processes
from .shm import local_ranks
from .launch import FRAMEWORKS as LAUNCH_FRAMEWORKS
from .launch import GROUP_VARIABLES, nproc_argument
from .report import Check, ReportPathError, Suite, write_json, write_junit
from .platforms import VARIABLES as PLATFORM_VARIABLES, trait
from .topology import PLATFORMS, REPLAYS, ReplicaSpec, process_start, refusal, replica_specs
from .verdict import judge_allreduce

FRAMEWORKS = tuple(f for f in LAUNCH_FRAMEWORKS if f != "auto")
#: Processes per node and seconds a run may take, as `trainimg test` accepts them.
NPROC_RANGE = (1, 16)
_JOB = "selftest"  # the emulated job's name: its hosts are derived from it, then rewritten to 127.0.0.1
_LOOPBACK = "127.0.0.1"
#: Platforms no emulation on 127.0.0.1 can stand in for, and why (each platform module's ``NOT_EMULATED``).
NOT_EMULATED = {name: module.NOT_EMULATED for name, module in REPLAYS.items() if module.NOT_EMULATED}


@dataclass(frozen=True)
class LocalRun:
    """One emulated replica's launcher process, as `verdict.judge_allreduce` reads it."""

    name: str
    role: str
    exit_code: int | None
    timed_out: bool
    logs: str


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((_LOOPBACK, 0))
        return int(s.getsockname()[1])


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
        return True


def _on_loopback(specs: list[ReplicaSpec]) -> list[dict[str, str]]:
    """Each spec's env with every host of the job replaced by 127.0.0.1: a host alone becomes 127.0.0.1, a
    ``host:port`` address 127.0.0.1 and a free port of its own (replicas share this machine's network)."""
    names = sorted({name for spec in specs for name in (spec.host, *spec.aliases)}, key=len, reverse=True)
    found = re.compile(rf"(?<![\w.-])({'|'.join(map(re.escape, names))})(?::([0-9]+))?(?![\w.-])")
    ports: dict[tuple[str, str], int] = {}

    def local(match: re.Match[str]) -> str:
        if match.group(2) is None:
            return _LOOPBACK
        return f"{_LOOPBACK}:{ports.setdefault((match.group(1), match.group(2)), _free_port())}"

    return [{variable: found.sub(local, value) for variable, value in spec.env.items()} for spec in specs]


def local_replicas(platform: str, replicas: int, nproc_per_node: int = 1,
                   framework: str = "pytorch") -> list[tuple[str, str, dict[str, str]]]:
    """(name, role, env) of each training replica of a `platform` job, every address on 127.0.0.1.

    The platform's shapes come from `topology.replica_specs` (no ps or evaluator: they are not in the all-reduce
    group); each host is then rewritten by `_on_loopback`. A platform whose module has ``emulation`` says how it
    is laid out on this one machine (Slurm: the ``replicas x nproc_per_node`` tasks of one node, with the ports its
    job id gives); a port the other platforms state once for the whole job (a rendezvous) is a free one here.
    """
    emulation = trait(platform, "emulation")
    if emulation is not None:
        specs = replica_specs(platform, job=_JOB, **emulation(_JOB, replicas * nproc_per_node, _port_free))
    else:
        specs = replica_specs(platform, replicas, ps=0, job=_JOB, port=_free_port(), nproc_per_node=nproc_per_node,
                              framework=framework)
    return [(spec.name, spec.role, env) for spec, env in zip(specs, _on_loopback(specs))]


def base_env() -> dict[str, str]:
    """This process's environment without any cluster variable: the emulated platform's are the only ones."""
    return {k: v for k, v in os.environ.items() if k not in PLATFORM_VARIABLES and k not in GROUP_VARIABLES}


def _runtime_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", __package__ or "trainimg_runtime", *args]


def _child_env(env: dict[str, str]) -> dict[str, str]:
    """`env` with this package importable by the launcher and the ranks it starts (a carried runtime too), and
    this Python's scripts (torchrun, which a TrainJob runs) first on PATH."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.pathsep.join(p for p in (os.path.dirname(sys.executable), env.get("PATH", "")) if p)
    return {**env, "PATH": path,
            "PYTHONPATH": os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)}


@dataclass(frozen=True)
class Plan:
    """How the local all-reduce runs: `replicas` emulated replicas of `nproc` processes each, over `backend`."""

    framework: str
    backend: str
    replicas: int
    nproc: int
    gpus: int = 0  # the GPUs CUDA sees here (`gpus.gpu_view`): NCCL when there are any

    @property
    def world(self) -> int:
        return self.replicas * self.nproc

    def check_name(self, platform: str) -> str:
        per_node = f"x{self.nproc}" if self.nproc > 1 else ""
        return f"allreduce_{self.backend}_{platform}_x{self.replicas}{per_node}"


def plan_allreduce(framework: str, nproc: int | str, gpus: int, platform: str = DEFAULT_PLATFORM) -> Plan:
    """N local processes (``auto``: the visible GPUs, 1 without) on one node; TensorFlow as N one-process replicas
    where the launcher would start one process per replica (Slurm starts N tasks on the node whatever runs)."""
    n = max(gpus, 1) if nproc == "auto" else int(nproc)
    backend = "nccl" if gpus else "gloo"
    if process_start(platform, framework, n).per_node < n:
        return Plan(framework, backend, replicas=n, nproc=1, gpus=gpus)
    return Plan(framework, backend, replicas=1, nproc=n, gpus=gpus)


def run_local(plan: Plan, platform: str, timeout: float) -> list[LocalRun]:
    """Start every emulated replica as its platform starts it (`topology.process_start`: the launcher, behind
    torchrun for a TrainJob's torch runtime; one per Slurm task) and wait for all, `timeout` seconds at most."""
    worker = _runtime_argv("allreduce", "--framework", plan.framework, "--backend", plan.backend,
                           "--timeout", str(max(5, int(timeout) - 10)))
    start = process_start(platform, plan.framework, plan.nproc)
    nproc = ["--nproc-per-node", str(start.nproc)] if start.nproc else []
    launch = [*start.wrapper, *_runtime_argv("launch", *nproc, "--framework", plan.framework, "--", *worker)]
    replicas = local_replicas(platform, plan.replicas, plan.nproc, plan.framework)
    started: list[tuple[str, str, subprocess.Popen[bytes], IO[bytes]]] = []
    with ExitStack() as stack:
        for index, (name, role, cluster_env) in enumerate(replicas):
            env = _child_env({**base_env(), **cluster_env})
            if plan.backend == "nccl" and plan.framework == "tensorflow":
                env["CUDA_VISIBLE_DEVICES"] = str(index)  # one GPU per one-process replica
            log = stack.enter_context(tempfile.TemporaryFile())
            proc = subprocess.Popen(launch, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            stack.callback(_kill_group, proc)
            started.append((name, role, proc, log))
        return [_finish(name, role, proc, log, time.monotonic() + timeout) for name, role, proc, log in started]


def _finish(name: str, role: str, proc: subprocess.Popen[bytes], log: IO[bytes],
            deadline: float) -> LocalRun:
    timed_out = False
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
    log.seek(0)
    text = log.read().decode("utf-8", "replace")
    sys.stderr.write("".join(f"  [{name}] {line}\n" for line in text.splitlines() if not line.startswith("{")))
    return LocalRun(name, role, None if timed_out else proc.returncode, timed_out, text)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """End a launcher and every rank it started (its own session), if still running."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, 9)
        except ProcessLookupError:
            pass
        proc.wait()


def allreduce_checks(expect: dict[str, object], plan: Plan | None, platform: str, timeout: float) -> list[Check]:
    """The local all-reduce's verdict, and the NCCL all-reduce skipped with its reason where it could not run."""
    if plan is None:
        reason = "no framework in this image (no trainimg.framework label)"
        return [Check("allreduce", "skipped", reason), Check("allreduce_nccl", "skipped", reason)]
    start = time.monotonic()
    runs = run_local(plan, platform, timeout)
    verdict = judge_allreduce(plan.check_name(platform), runs, plan.world, time.monotonic() - start)
    verdict.details["backend"] = plan.backend
    if plan.backend == "nccl":
        return [verdict]
    reason = "no GPU" if expect.get("cuda") else "CPU variant: no NCCL all-reduce"
    return [verdict, Check("allreduce_nccl", "skipped", reason)]


def _unless_short(checks: list[Check], expect: dict[str, object], plan: Plan | None, platform: str,
                  timeout: float) -> list[Check]:
    """`allreduce_checks`, or, where the shm check failed, the all-reduce not started: refused up front, as NCCL
    would fail in its shared-memory setup on the node."""
    short = next((c for c in checks if c.name == "shm" and c.status == "failed"), None)
    if short is not None and plan is not None:
        return [Check(plan.check_name(platform), "skipped", f"not started: {short.reason}")]
    return allreduce_checks(expect, plan, platform, timeout)


def probe_checks(expect: dict[str, object]) -> list[Check]:
    """Every probe check, run here exactly as `trainimg test`'s probe container runs them."""
    with probe.stdout_to_stderr():
        results = probe.run_checks(expect)
    return [Check(r["name"], r["status"], r["reason"], r["duration"], r["details"]) for r in results]


def os_fixes_check(waivers: list) -> Check:
    """The ``os_security_fixes`` check (`osfixes.check`): pending security fixes of this image's OS packages."""
    start = time.monotonic()
    status, reason, details = osfixes.check(waivers)
    return Check(osfixes.CHECK_NAME, status, reason, round(time.monotonic() - start, 3), details)


def gpus_seen(checks: list[Check]) -> int:
    """The GPUs the probe's ``gpu`` check saw (0 where it was skipped or failed)."""
    gpu = next((c for c in checks if c.name == "gpu"), None)
    if gpu is None or gpu.status not in ("passed", "warning"):
        return 0
    return int(gpu.details.get("count") or 0)


def cluster_checks(expect: dict[str, object], framework: str, timeout: float) -> list[Check]:
    """``--cluster``: this process's rank of the platform's all-reduce (after the checks, on local rank 0, with
    the node's local ranks: the processes the launcher or torchrun started, or the GPUs one process drives)."""
    node = {"local_ranks": local_ranks(int(os.environ.get("LOCAL_WORLD_SIZE") or 1), gpu_view(os.environ).visible)}
    checks = probe_checks({**expect, **node}) if os.environ.get("LOCAL_RANK", "0") == "0" else []
    if framework == "none":
        return [*checks, Check("allreduce_cluster", "skipped", "no framework in this image")]
    start = time.monotonic()
    proc = subprocess.run(_runtime_argv("allreduce", "--framework", framework, "--timeout", str(timeout)),
                          env=_child_env(dict(os.environ)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          check=False)
    seconds = round(time.monotonic() - start, 3)
    errors = proc.stderr.decode("utf-8", "replace")
    sys.stderr.write(errors)  # the rank's log stays in the replica's log
    lines = [json.loads(line) for line in proc.stdout.decode("utf-8", "replace").splitlines()
             if line.startswith("{")]
    line = lines[-1] if lines else {}
    details = {"exit_code": proc.returncode, "result": line}
    if proc.returncode == 0 and line.get("ok"):
        reason = f"rank {line['rank']} of {line['world_size']}: sum {line['got']} over {line['backend']}"
        return [*checks, Check("allreduce_cluster", "passed", reason, seconds, details)]
    got = "timed out waiting for peers" if line.get("error") == "timeout" else (
        f"got {line.get('got')!r}, expected {line.get('expected')!r}" if line else cause_of(errors))
    return [*checks, Check("allreduce_cluster", "failed", f"exit {proc.returncode}: {got}", seconds, details)]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainimg-runtime selftest",
                                     description="Run trainimg's conformance checks and all-reduce in this image.")
    parser.add_argument("--platform", choices=PLATFORMS, default=DEFAULT_PLATFORM,
                        help="whose cluster variables, hostnames and process starts to emulate on 127.0.0.1")
    parser.add_argument("--nproc-per-node", type=nproc_argument, default="auto", metavar="N|auto",
                        help="local processes of the all-reduce (auto: the visible GPUs, 1 without)")
    parser.add_argument("--framework", choices=FRAMEWORKS, default=None,
                        help="the all-reduce's framework (default: the image's trainimg.framework label)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TEST_TIMEOUT, help="seconds the all-reduce may take")
    parser.add_argument("--json", default=None, metavar="FILE", help="write the JSON report here")
    parser.add_argument("--junit", default=None, metavar="FILE", help="write the JUnit XML report here")
    parser.add_argument("--labels", default=LABELS_PATH, metavar="FILE",
                        help="the image's labels file, whence the expectations (default: %(default)s)")
    parser.add_argument("--os-fixes", action="store_true",
                        help="also list the OS packages with a published security fix not applied (the release's "
                             "security suite, over the network; `os_security_fixes`)")
    parser.add_argument("--waivers", default=None, metavar="FILE",
                        help="with --os-fixes: a JSON list of waivers (the audit's schema) for pending fixes")
    parser.add_argument("--cluster", action="store_true",
                        help="run under trainimg-launch on a real cluster (spec --conformance): no emulation; "
                             "local rank 0 prints the report as one JSON line")
    return parser


def _cluster_main(suite: Suite, expect: dict[str, object], framework: str, timeout: float) -> int:
    """``--cluster``: the checks and this rank of the all-reduce; local rank 0 prints the report as one line."""
    try:
        info = parse_cluster(os.environ)
    except ClusterError as err:
        return _usage_error(str(err))
    suite.checks = cluster_checks({**expect, "platform": info.platform}, framework, timeout)
    if os.environ.get("LOCAL_RANK", "0") == "0":
        suite.name += f" {info.role}-{info.index}"
        print(json.dumps({"passed": suite.passed, "suites": [suite.to_json()]}, sort_keys=True), flush=True)
    return EXIT_OK if suite.passed else EXIT_FAILED


def _too_many(plan: Plan) -> str | None:
    """`gpus.too_many_processes` for the plan: every local process of its all-reduce runs on this machine."""
    return too_many_processes(plan.world, plan.gpus, plan.backend, where="this machine")


def _usage_error(message: str) -> int:
    print(f"trainimg-runtime selftest: {message}", file=sys.stderr)
    return EXIT_USAGE


def main(argv: list[str]) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else EXIT_USAGE
    if args.nproc_per_node != "auto" and not NPROC_RANGE[0] <= args.nproc_per_node <= NPROC_RANGE[1]:
        return _usage_error(f"--nproc-per-node: {args.nproc_per_node}: use {NPROC_RANGE[0]} to {NPROC_RANGE[1]}")
    low, high = TEST_TIMEOUT_RANGE
    if not low <= args.timeout <= high:
        return _usage_error(f"--timeout: {args.timeout:g}s: use {low:g} to {high:g}")
    try:
        labels = image_labels(args.labels)
    except (OSError, ValueError) as err:
        return _usage_error(f"--labels: {err}")
    if args.waivers and not args.os_fixes:
        return _usage_error("--waivers: the waivers are read by --os-fixes: add it")
    try:
        waivers = osfixes.read_waivers(args.waivers)
    except ValueError as err:
        return _usage_error(f"--waivers: {err}")
    expect = expectations(labels)
    suite = Suite(labels.get(VARIANT_LABEL) or "selftest", labels.get(OCI_TITLE, ""),
                  "", "cluster" if args.cluster else args.platform, 1)
    framework = args.framework or str(expect.get("framework") or "none")
    if args.cluster:
        return _cluster_main(suite, expect, framework, args.timeout)
    refused = NOT_EMULATED.get(args.platform) or refusal(args.platform, framework)
    if refused:
        return _usage_error(f"--platform {args.platform}: {refused}")
    ranks = 1
    if framework != "none":  # more NCCL processes than GPUs: refused before anything runs
        early = plan_allreduce(framework, args.nproc_per_node, gpu_view(os.environ).visible, args.platform)
        too_many = _too_many(early)
        if too_many:
            return _usage_error(too_many)
        ranks = local_ranks(early.world, early.gpus)  # every emulated replica runs on this machine
    suite.checks = probe_checks({**expect, "local_ranks": ranks, "platform": args.platform})
    plan = None if framework == "none" else plan_allreduce(framework, args.nproc_per_node, gpus_seen(suite.checks),
                                                          args.platform)
    too_many = _too_many(plan) if plan else None
    if too_many:  # the gpu check found GPUs nvidia-smi did not list (libcuda's count)
        return _usage_error(too_many)
    suite.replicas = plan.replicas if plan else 1
    suite.checks += _unless_short(suite.checks, expect, plan, args.platform, args.timeout)
    if args.os_fixes:
        suite.checks.append(os_fixes_check(waivers))
    for line in probe.summary_lines([{"name": c.name, "status": c.status, "reason": c.reason}
                                     for c in suite.checks]):
        print(line, file=sys.stderr)
    try:
        if args.json:
            write_json([suite], args.json)
        if args.junit:
            write_junit([suite], args.junit)
    except ReportPathError as err:
        return _usage_error(str(err))
    return EXIT_OK if suite.passed else EXIT_FAILED
