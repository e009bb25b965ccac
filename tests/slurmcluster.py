"""A real one-machine Slurm for tests: Debian's slurm-wlm 22.05 (`slurmctld`, `slurmd`) and `munged`, all private.

Why private: several test sessions may share this machine, and none may touch the system's own munge or Slurm. Each
cluster gets a folder of its own under BASE (its munge key and socket, slurm.conf, state, spool, logs), free ports,
and a random first job id (tasks on one host network take their rendezvous port from the job id, so two sessions
must not number their jobs alike). The folder is named after its owner (pid and start time of the pytest process):
a session finds the folders of sessions that died without stopping their daemons and stops those daemons, by the
pids their own pid files name and only if that process's command line names the folder.

The node declares CPUS (more than this 2-core machine has: `SlurmdParameters=config_overrides` keeps it usable) so
`srun -n 4` runs, and GPUS fake GPUs (gres/gpu on links to /dev/null: 22.05 drops a GPU without a device file) so
`--gpus-per-node` requests are accepted and get `CUDA_VISIBLE_DEVICES`; nothing uses cgroups.
"""

from __future__ import annotations

import os
import pwd
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from trainimg.conformance.replicas import ReplicaResult

BASE = Path(tempfile.gettempdir()) / "trainimg-slurm"
PARTITION = "debug"
CPUS = 8
GPUS = 4
START_TIMEOUT_S = 60.0
STOP_GRACE_S = 10.0
DAEMONS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd")
CLIENTS = ("munge", "srun", "sbatch", "sinfo", "squeue", "scancel", "scontrol")
SETUP_HINT = "Slurm or munge is not installed here ({}): run .ci/setup-host"
# srun's own line for failed tasks: "srun: error: vm: task 2: Exited with exit code 3" ("tasks 0-1,3: ..." too)
_EXITED = re.compile(r"^srun: error: \S+: tasks? ([0-9,-]+): Exited with exit code ([0-9]+)$", re.M)
_LABELLED = re.compile(r"^ *([0-9]+): (.*)$")  # srun --label / SLURM_LABELIO=1: "<task>: <line>"


@dataclass
class SlurmCluster:
    """A running cluster: `conf` is its slurm.conf; `env()` is what srun, sbatch, squeue and scontrol need."""

    root: Path
    conf: Path
    node: str
    partition: str = PARTITION
    daemons: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        """This process's environment without inherited SLURM_* (a suite run inside a Slurm job), plus SLURM_CONF."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf)
        return env

    def log_tail(self, name: str, lines: int = 15) -> str:
        path = self.root / "log" / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else "(no log)"
        return "\n".join(text.strip().splitlines()[-lines:])

    def run(self, *args: str, timeout: float = 120, env: dict[str, str] | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """A Slurm client command against this cluster (`env` defaults to `env()`), output captured as text."""
        return subprocess.run(args, env=self.env() if env is None else env, cwd=cwd, capture_output=True, text=True,
                              timeout=timeout)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A real one-machine Slurm for the session; fails (never skips) where slurm-wlm or munge is missing."""
    missing = [p for p in DAEMONS if not os.access(p, os.X_OK)] + [c for c in CLIENTS if shutil.which(c) is None]
    if missing:
        pytest.fail(SETUP_HINT.format(", ".join(missing)), pytrace=False)
    reap_leftovers()
    BASE.mkdir(mode=0o755, exist_ok=True)
    root = BASE / f"{os.getpid()}-{_start_time(os.getpid())}"  # the owner in the name: no window without one
    root.mkdir(mode=0o755)
    cluster = SlurmCluster(root=root, conf=Path(), node=_short_hostname())
    try:
        start(cluster)
        yield cluster
    finally:
        stop(cluster)


def reap_leftovers() -> None:
    """Stop the daemons of clusters whose pytest process is gone (folder `<pid>-<start time>`), remove the folders."""
    if not BASE.is_dir():
        return
    for root in BASE.iterdir():
        pid, _, started = root.name.partition("-")
        if pid.isdigit() and _start_time(int(pid)) == started:
            continue  # a live session's cluster
        for pid_file in root.glob("run/*.pid"):
            try:
                pid = pid_file.read_text().strip()
            except FileNotFoundError:
                continue  # removed meanwhile by another session reaping the same folder
            if pid.isdigit() and str(root) in _cmdline(int(pid)):
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass  # gone meanwhile (another session reaping the same folder)
        shutil.rmtree(root, ignore_errors=True)


def start(cluster: SlurmCluster) -> None:
    """Folders, key, conf, then munged, slurmctld and slurmd; returns when the node is idle."""
    root = cluster.root
    os.chmod(root, 0o755)  # munged insists that every folder above its socket is searchable by all (umask aside)
    for sub, mode in (("munge", 0o755), ("key", 0o700), ("run", 0o755), ("log", 0o755), ("state", 0o755),
                      ("spool", 0o755), ("gpu", 0o755)):
        (root / sub).mkdir(mode=mode)
    key = root / "key" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    for i in range(GPUS):
        (root / "gpu" / f"nvidia{i}").symlink_to(os.devnull)
    cluster.conf = write_conf(root, cluster.node)
    socket_path = root / "munge" / "socket"
    daemon(cluster, "munged", ["/usr/sbin/munged", "-F", f"--socket={socket_path}", f"--key-file={key}",
                                f"--pid-file={root / 'run' / 'munged.pid'}", f"--seed-file={root / 'key' / 'seed'}",
                                f"--log-file={root / 'log' / 'munged.log'}"])
    wait(cluster, "munged answering", lambda: subprocess.run(
        ["munge", "-n", "-S", str(socket_path)], capture_output=True).returncode == 0)
    daemon(cluster, "slurmctld", ["/usr/sbin/slurmctld", "-D", "-f", str(cluster.conf)])
    daemon(cluster, "slurmd", ["/usr/sbin/slurmd", "-D", "-f", str(cluster.conf), "-N", cluster.node])
    wait(cluster, f"node {cluster.node} idle", lambda: cluster.run(
        "sinfo", "-h", "-N", "-n", cluster.node, "-o", "%t", timeout=30).stdout.strip() == "idle")


def write_conf(root: Path, node: str) -> Path:
    """slurm.conf and gres.conf (read from slurm.conf's folder) for one node named after this machine."""
    user = pwd.getpwuid(os.getuid()).pw_name
    ctld_port, slurmd_port = _free_ports(2)
    conf = root / "slurm.conf"
    conf.write_text(f"""\
ClusterName=trainimg{ctld_port}
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root / 'munge' / 'socket'}
SlurmUser={user}
SlurmdUser={user}
StateSaveLocation={root / 'state'}
SlurmdSpoolDir={root / 'spool'}
SlurmctldPidFile={root / 'run' / 'slurmctld.pid'}
SlurmdPidFile={root / 'run' / 'slurmd.pid'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=5
FirstJobId={random.randrange(1, 9000)}
GresTypes=gpu
NodeName={node} NodeAddr=127.0.0.1 CPUs={CPUS} Gres=gpu:{GPUS} State=UNKNOWN
PartitionName={PARTITION} Nodes={node} Default=YES MaxTime=INFINITE State=UP
""")
    (root / "gres.conf").write_text(f"NodeName={node} Name=gpu File={root / 'gpu'}/nvidia[0-{GPUS - 1}]\n")
    return conf


def stop(cluster: SlurmCluster) -> None:
    """Cancel what still runs, stop the daemons (slurmd first), remove the folder."""
    if "slurmctld" in cluster.daemons:
        cluster.run("scancel", "--quiet", f"--partition={cluster.partition}", timeout=30)
        deadline = time.monotonic() + STOP_GRACE_S  # let slurmd end the steps while both daemons still answer
        while cluster.run("squeue", "-h", "-o", "%i", timeout=30).stdout.strip() and time.monotonic() < deadline:
            time.sleep(0.5)
    for name in ("slurmd", "slurmctld", "munged"):
        proc = cluster.daemons.get(name)
        if proc is None or proc.poll() is not None:
            continue
        proc.terminate()
        try:
            proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    shutil.rmtree(cluster.root, ignore_errors=True)


def task_runs(output: str, ntasks: int, exit_code: int | None, timed_out: bool = False) -> list[ReplicaResult]:
    """Each task's lines from srun's labelled output, as the all-reduce judge reads replicas.

    A task srun names as exited with a code gets that code; the others get the step's (0 when the step passed)."""
    logs: list[list[str]] = [[] for _ in range(ntasks)]
    for line in output.splitlines():
        m = _LABELLED.match(line)
        if m and int(m[1]) < ntasks:
            logs[int(m[1])].append(m[2])
    codes = {task: int(m[2]) for m in _EXITED.finditer(output) for task in _task_ids(m[1])}
    return [ReplicaResult(f"task-{i}", "worker", i, codes.get(i, exit_code), "\n".join(lines) + "\n", timed_out)
            for i, lines in enumerate(logs)]


def _task_ids(spec: str) -> Iterator[int]:
    for part in spec.split(","):
        first, _, last = part.partition("-")
        yield from range(int(first), int(last or first) + 1)


def daemon(cluster: SlurmCluster, name: str, argv: list[str]) -> None:
    """Start one daemon in the foreground (its log on stderr), in a session of its own so Ctrl-C reaches the tests
    and the fixture's teardown, not the daemons."""
    with open(cluster.root / "log" / f"{name}.log", "ab") as log:
        cluster.daemons[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                                 env=cluster.env(), start_new_session=True)


def wait(cluster: SlurmCluster, what: str, ready: Callable[[], bool], timeout: float = START_TIMEOUT_S) -> None:
    """Poll `ready` until `timeout`; a daemon that exits or a timeout fails with the daemons' log tails."""
    deadline = time.monotonic() + timeout
    while not ready():
        dead = {n: p.returncode for n, p in cluster.daemons.items() if p.poll() is not None}
        if dead or time.monotonic() > deadline:
            why = f"exited {dead}" if dead else f"not ready in {timeout:.0f} s"
            tails = "\n".join(f"--- {n}.log\n{cluster.log_tail(n)}" for n in cluster.daemons)
            pytest.fail(f"Slurm test cluster: waiting for {what}: {why}\n{tails}", pytrace=False)
        time.sleep(0.2)


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _short_hostname() -> str:
    """The node name slurmd would pick by itself."""
    return socket.gethostname().split(".")[0]


def _start_time(pid: int) -> str | None:
    """The live process's start time in clock ticks (/proc/PID/stat field 22): with the pid, it names one process.
    None for no process, and for a zombie (a killed session whose parent has not reaped it yet)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if len(fields) < 20 or fields[0] in ("Z", "X") else fields[19]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
