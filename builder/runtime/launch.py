"""``python -m trainimg_runtime launch [--nproc-per-node N|auto] [--framework F] [--platform P] -- CMD...``: train.

The platform tells a replica who it is in its own dialect (``CLUSTER_SPEC``, ``TF_CONFIG``, ``SLURM_*``, Kubeflow's
``PET_*``, ...: one module each in `platforms`); the frameworks want their own variables. The launcher translates
once, so the same image and command run unchanged on Vertex AI, AI Platform, UAI Train, Kubernetes, Slurm or a
laptop. Where the platform already started every process (Slurm's tasks, torchrun, an ``env://`` world) it keeps
their ranks and starts nothing more:

* PyTorch: ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` for
  ``init_process_group("nccl")`` with the default ``env://`` init method.
* TensorFlow: a TF2-ready ``TF_CONFIG`` (``master`` renamed ``chief``, no evaluator in the cluster) that
  ``MultiWorkerMirroredStrategy`` and ``ParameterServerStrategy`` read by themselves.
* JAX: ``JAX_COORDINATOR_ADDRESS`` (``host:port``, IPv6 in brackets), ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID``.
  A script passes them on explicitly::

      jax.distributed.initialize(
          coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
          num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
          process_id=int(os.environ["JAX_PROCESS_ID"]),
      )

  The coordinator port is the chief's port from the cluster spec: process 0 runs on the chief and hosts the
  coordinator there, and that port is the one the platform already opens between replicas. A job uses one
  framework, so the coordinator, torch's TCP store and TensorFlow's gRPC server never compete for it.
* Always: ``TRAINIMG_ROLE`` and, for chief and workers, the node-level ``TRAINIMG_NODE_RANK`` / ``TRAINIMG_NNODES``
  (a replica is a node), which stay node-level when ``RANK``/``WORLD_SIZE`` count processes.

Parameter servers and evaluators get only ``TF_CONFIG`` and ``TRAINIMG_ROLE``: they are not in the all-reduce
group, so stale ``RANK``/``WORLD_SIZE``-style variables inherited from the platform are removed rather than left to
mislead a script into joining it.

``--nproc-per-node N`` (or ``auto``: the visible GPUs; default: the count the platform gives, such as
``PET_NPROC_PER_NODE``, else 1) starts N processes per replica where the platform left that to the image:

* pytorch (the default when ``torch`` is importable): exec ``torch.distributed.run`` (torchrun) with the node-level
  ``--nnodes/--node-rank/--master-addr/--master-port``; torchrun then sets the per-process ranks.
* jax, or no torch: this launcher starts the N processes itself with ``RANK = node_rank * N + LOCAL_RANK`` and
  ``WORLD_SIZE = JAX_NUM_PROCESSES = nnodes * N``. One failing process fails the replica: the others are
  terminated and the launcher exits with the failing process's code. SIGINT/SIGTERM are forwarded to the children.
* tensorflow: one process per replica, since ``MultiWorkerMirroredStrategy`` drives every local GPU itself.

More processes than the GPUs CUDA sees here (`gpus.gpu_view`) are refused before any starts (exit 2, one line
naming both numbers): NCCL, the backend wherever a GPU is visible, needs one GPU per process. With no GPU visible
(none, or hidden by ``CUDA_VISIBLE_DEVICES=``) the processes run on CPU over gloo and any count goes.

``--framework`` defaults to ``auto``: the framework the image's manifest (``/etc/trainimg/manifest.json``, written at
build time) lists, or, without a manifest, the one whose package is importable. So a TensorFlow image keeps one
process per replica even when a spec or a user asks for ``--nproc-per-node 8`` and says nothing else. With several
frameworks installed and N > 1 the launcher cannot know which one CMD uses and asks for ``--framework`` (exit 2).

``--reduction-server``: the job's workerpool2 holds Vertex Reduction Server replicas (Google's reducer image, not
a TensorFlow task); they are left out of ``TF_CONFIG`` (see `cluster.parse_cluster`). ``trainimg spec`` adds the
flag to the primary's and workers' command whenever it adds a reducer pool.

Exit codes: 2 for a bad cluster variable or usage, 127 when CMD is not found, else CMD's own.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from types import FrameType

from . import reads
from .cluster import parse_cluster, positive_int, with_processes
from .platforms import FORCEABLE, RUNS_TENSORFLOW
from .world import ClusterInfo, format_address
from .contract import EXIT_CANNOT_EXECUTE, EXIT_NOT_FOUND, EXIT_USAGE, MANIFEST_PATH
from .frameworks import FRAMEWORKS as FRAMEWORK_TABLE, NAMES
from .gpus import gpu_view, too_many_processes, visible_gpus

FRAMEWORKS = ("auto", *NAMES)
# The import name each framework's package installs, for images without a manifest.
_FRAMEWORK_MODULES = {name: framework.module for name, framework in FRAMEWORK_TABLE.items()}

# Everything launch_env may set for a process in the all-reduce group; removed for ps/evaluator (see module doc).
GROUP_VARIABLES = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "JAX_COORDINATOR_ADDRESS",
    "JAX_NUM_PROCESSES",
    "JAX_PROCESS_ID",
    "TRAINIMG_NODE_RANK",
    "TRAINIMG_NNODES",
)
# How long terminated siblings get to exit before SIGKILL: enough to flush logs, short enough to free the GPUs.
_TERMINATE_GRACE_S = 10.0


def launch_env(info: ClusterInfo, env: Mapping[str, str], local_rank: int = 0) -> dict[str, str]:
    """The environment for local process `local_rank` of this replica: a copy of `env` plus the variables above.

    Where the platform started the processes (``info.started_by``), this process's own ranks are kept. Otherwise,
    with ``info.nproc_per_node`` N set, ranks count processes (``RANK = node_rank * N + local_rank``); without it
    the replica runs one process and process and node ranks coincide. Pure, so every role can be unit-tested.
    """
    nproc = info.nproc_per_node or 1
    if not 0 <= local_rank < nproc:
        raise ValueError(f"local_rank {local_rank} is outside 0..{nproc - 1}")
    out = dict(env)
    if info.tf_config is not None:
        out["TF_CONFIG"] = json.dumps(info.tf_config, sort_keys=True)
    out.update(TRAINIMG_ROLE=info.role, TRAINIMG_PLATFORM=info.platform)
    if info.rank is None:
        for name in GROUP_VARIABLES:
            out.pop(name, None)
        return out
    if info.started_by is not None and info.process_rank is not None and info.local_rank is not None:
        rank, local_rank = info.process_rank, info.local_rank
    else:
        rank = info.rank * nproc + local_rank
    world = str(info.world_size_processes or info.world_size * nproc)
    out.update(
        MASTER_ADDR=info.master_addr,
        MASTER_PORT=str(info.master_port),
        WORLD_SIZE=world,
        RANK=str(rank),
        LOCAL_RANK=str(local_rank),
        LOCAL_WORLD_SIZE=str(nproc),
        NODE_RANK=str(info.rank),
        JAX_COORDINATOR_ADDRESS=info.jax_coordinator or format_address(info.master_addr, info.master_port),
        JAX_NUM_PROCESSES=world,
        JAX_PROCESS_ID=str(rank),
        TRAINIMG_NODE_RANK=str(info.rank),
        TRAINIMG_NNODES=str(info.world_size),
    )
    return out


def installed_frameworks(manifest_path: str) -> list[str]:
    """The frameworks this image holds: the manifest's ``frameworks`` keys, else those importable here.

    The manifest is what the build really installed; reading it costs nothing, while importing a framework takes
    seconds, so only the import *specs* are looked up when there is no manifest (a venv, a laptop).
    """
    try:
        with open(manifest_path, encoding="utf-8") as fh:
            listed = json.load(fh).get("frameworks", {})
        return sorted(name for name in listed if name in _FRAMEWORK_MODULES)
    except (OSError, ValueError, AttributeError, RecursionError):
        return sorted(name for name, module in _FRAMEWORK_MODULES.items()
                      if importlib.util.find_spec(module) is not None)


def resolve_framework(requested: str, installed: list[str], nproc: int) -> str:
    """The framework to launch for: the one asked for, else the only one installed, else ``auto`` (no framework).

    Raises ValueError (a usage error) when several are installed, none was asked for and the choice matters.
    """
    if requested != "auto" or not installed:
        return requested
    if len(installed) == 1:
        return installed[0]
    if nproc == 1:
        return "auto"
    raise ValueError(f"this image holds {', '.join(installed)}; pass --framework to say which one CMD uses")


def choose_mode(info: ClusterInfo, framework: str, has_torch: bool) -> str:
    """How this node's processes start: ``exec`` (one process here: the platform started the others, or there is
    one), ``torchrun``, or ``spawn`` (this launcher's own children). Parameter servers and evaluators are single
    processes whatever N says: they hold no GPU rank; TensorFlow drives every local GPU from one process."""
    nproc = info.nproc_per_node or 1
    if info.started_by is not None or info.rank is None or nproc == 1 or framework == "tensorflow":
        return "exec"
    if framework in ("auto", "pytorch") and has_torch:
        return "torchrun"
    return "spawn"


def torchrun_argv(info: ClusterInfo, cmd: list[str]) -> list[str]:
    """torchrun with the node-level figures; ``--no-python`` because CMD is a full command (``python train.py``)."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(info.nnodes),
        "--node-rank",
        str(info.node_rank),
        "--nproc-per-node",
        str(info.nproc_per_node),
        "--master-addr",
        info.master_addr,
        "--master-port",
        str(info.master_port),
        "--no-python",
        *cmd,
    ]


def run_local_processes(cmd: list[str], envs: list[dict[str, str]]) -> int:
    """Run one CMD per env and wait; the first non-zero exit terminates the rest and is returned.

    A signal's death (negative return code) is reported the shell's way, 128 + signal number.
    """
    children: list[subprocess.Popen[bytes]] = []
    try:
        for child_env in envs:
            children.append(subprocess.Popen(cmd, env=child_env))
    except OSError:
        _terminate(children)
        raise

    def forward(signum: int, _frame: FrameType | None) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            codes = [child.poll() for child in children]
            failed = next((code for code in codes if code not in (None, 0)), None)
            if failed is not None:
                _terminate(children)
                return failed if failed > 0 else 128 - failed
            if all(code == 0 for code in codes):
                return 0
            time.sleep(0.05)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _terminate(children: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM the survivors, then SIGKILL whoever is still there after the grace period."""
    for child in children:
        if child.poll() is None:
            child.terminate()
    deadline = time.monotonic() + _TERMINATE_GRACE_S
    for child in children:
        try:
            child.wait(timeout=max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def nproc_argument(text: str) -> int | str:
    """argparse type for ``--nproc-per-node``: a positive int or ``auto``."""
    return text if text == "auto" else positive_int(text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m trainimg_runtime launch",
        usage="%(prog)s [--nproc-per-node N|auto] [--framework {auto,pytorch,tensorflow,jax}] [--platform P] "
              "[--reduction-server] -- CMD...",
        description="Map the platform's cluster variables to framework variables and run CMD.",
    )
    parser.add_argument("--nproc-per-node", type=nproc_argument, default=None, metavar="N|auto",
                        help="processes per node (default: the platform's count where it gives one, else 1)")
    parser.add_argument("--platform", choices=FORCEABLE, default=None,
                        help="read this platform's variables, whatever else is set")
    parser.add_argument("--framework", choices=FRAMEWORKS, default="auto")
    parser.add_argument("--reduction-server", action="store_true",
                        help="workerpool2 holds Reduction Server replicas: keep them out of TF_CONFIG")
    parser.add_argument("--manifest", default=MANIFEST_PATH, help=argparse.SUPPRESS)
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str]) -> int:
    """Parse the cluster, build the env and run CMD; see the module docstring for modes and exit codes."""
    parser = _parser()
    # Split at "--" ourselves: argparse's REMAINDER keeps or drops it depending on the Python version.
    options, cmd = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    try:
        args = parser.parse_args(options)
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else EXIT_USAGE
    if "--" not in argv:
        cmd = args.cmd
    elif args.cmd:
        parser.print_usage(sys.stderr)
        print(f"trainimg-launch: unexpected arguments before '--': {' '.join(args.cmd)}", file=sys.stderr)
        return EXIT_USAGE
    if not cmd:
        parser.print_usage(sys.stderr)
        print("trainimg-launch: no command given after '--'", file=sys.stderr)
        return EXIT_USAGE

    try:
        info, framework = _plan(args)
    except ValueError as err:  # a ClusterError, or a framework the launcher cannot choose
        print(f"trainimg-launch: {err}", file=sys.stderr)
        return EXIT_USAGE
    if shutil.which(cmd[0], path=os.environ.get("PATH")) is None:
        print(f"trainimg-launch: {cmd[0]}: command not found", file=sys.stderr)
        return EXIT_NOT_FOUND

    nproc = info.nproc_per_node or 1
    mode = choose_mode(info, framework, _has_torch())
    started = f", {nproc} started by {info.started_by}" if info.started_by else ""
    print(
        f"trainimg-launch: {info.platform} {info.role} {info.index}: "
        f"{nproc if mode == 'spawn' or mode == 'torchrun' else 1} process(es) via {mode} "
        f"(nproc-per-node {nproc}{started})",
        file=sys.stderr,
        flush=True,
    )
    try:
        if mode == "spawn":
            return run_local_processes(cmd, [launch_env(info, os.environ, local) for local in range(nproc)])
        # One process here (exec, or torchrun which sets per-process ranks itself): the platform's own process
        # ranks where it started the processes, else the node-level view.
        own = info if info.started_by else replace(info, nproc_per_node=1, world_size_processes=info.world_size)
        argv_to_run = torchrun_argv(info, cmd) if mode == "torchrun" else cmd
        sys.stdout.flush()
        reads.flush()  # what this process read, before exec ends it without its atexit
        os.execvpe(argv_to_run[0], argv_to_run, launch_env(own, os.environ))
    except OSError as err:
        print(f"trainimg-launch: {cmd[0]}: {err.strerror}", file=sys.stderr)
        return EXIT_NOT_FOUND if isinstance(err, FileNotFoundError) else EXIT_CANNOT_EXECUTE


def _plan(args: argparse.Namespace) -> tuple[ClusterInfo, str]:
    """The cluster as this launcher will run it (processes per node settled) and the framework CMD uses."""
    wanted = visible_gpus(os.environ) if args.nproc_per_node == "auto" else args.nproc_per_node
    info = parse_cluster(os.environ, wanted, reduction_server=args.reduction_server, platform=args.platform)
    if info.nproc_per_node is None:
        info = with_processes(info, 1)
    framework = resolve_framework(args.framework, installed_frameworks(args.manifest), info.nproc_per_node or 1)
    if framework == "tensorflow" and info.tf_config is None and info.world_size > 1:
        raise ValueError(f"TensorFlow reads TF_CONFIG, which {info.platform} does not describe: a TensorFlow job "
                         "there would train alone on every node; run it on a platform that gives it one or whose "
                         f"hosts trainimg can list ({', '.join(RUNS_TENSORFLOW)})")
    refused = _too_many(info, framework, args.nproc_per_node is not None)
    if refused:
        raise ValueError(refused)
    return info, framework


def _too_many(info: ClusterInfo, framework: str, flag_given: bool) -> str | None:
    """`gpus.too_many_processes` for the processes this launcher would start on this node (torchrun's or its
    own; one where it execs), over NCCL when CUDA sees a GPU here, else gloo."""
    mode = choose_mode(info, framework, _has_torch())
    processes = (info.nproc_per_node or 1) if mode in ("torchrun", "spawn") else 1
    gpus = gpu_view(os.environ).visible
    flag = "--nproc-per-node" if flag_given else f"{info.platform}'s processes per node"
    return too_many_processes(processes, gpus, "nccl" if gpus else "gloo", flag=flag)


def _has_torch() -> bool:
    """Whether torchrun is available, checked without importing torch (which takes seconds)."""
    return importlib.util.find_spec("torch") is not None
