"""A dockerd of the bench's own, beside this machine's, on an empty data root: an ephemeral CI runner's engine
(benchmarks/runner.py) and the engine cold builds run on (benchmarks/installs.py).

Why: a figure that needs an empty engine used to prune this machine's (every other user's images and cache went with
it) or stop its dockerd and start an empty one in its place (every other user of the engine stopped: other sessions'
builds, a CI run). Here each is a second dockerd BESIDE the machine's, sharing nothing with it: its own
`--data-root` (under /var/lib, the file system of /var/lib/docker, so overlay2 behaves the same), `--exec-root` (so
its own supervised containerd, shims and runc state), pidfile, unix socket, containerd namespaces and an empty
daemon config file (the machine's daemon.json is not read twice). It touches no network state of the machine's
engine: its default bridge is an interface of its own that the runner creates and deletes (`--bridge=none` would not
do: dockerd deletes the host's `docker0` when its bridge is disabled, `removeDefaultBridgeInterface`, and so cut the
machine's engine off its default network), `--iptables=false` (a second dockerd's bridge driver recreates the DOCKER
chains and would drop the machine's port forwards; without NAT its containers do not reach the outside, and the
bench's gate does not ask them to), `--ip-forward=false`, and the networks the gate creates there take their subnets
from a pool of its own (`RUNNER_POOL`), so no route clashes with the machine's networks. Builds reach PyPI and the
wheelhouses over the host's network (`trainimg build` passes `--network host` while it serves wheelhouses, which the
bench always gives it). The base image is loaded into it (nothing can be pulled here); DOCKER_HOST names its socket
in the bench's environment for the block only; then it is stopped (by its own pid) and its roots are deleted.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from harness import BASE_IMAGE, ROOT, Harness, StepFailed, docker_cli, log, run

DOCKERD = "/usr/sbin/dockerd"
RUNNER_ROOTS = Path("/var/lib")  # beside /var/lib/docker: the same file system, so overlay2 behaves the same
RUNNER_EXEC_ROOTS = Path("/run")  # short paths: containerd's sockets live under the exec root (108 bytes at most)
RUNNER_POOL = "base=10.231.0.0/16,size=24"  # the runner's networks: far from the machine's 172.17-31 and 192.168
RUNNER_BRIDGE_NET = "10.232"  # the runner's own default bridge: 10.232.N.1/24, N drawn per runner
RUNNER_NAMESPACE = "trainimg-bench-runner"  # its containerd namespaces: runc's state apart from the machine's
ENGINE_WAIT_S = 60


def wait_until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + ENGINE_WAIT_S
    while not done():
        if time.monotonic() > deadline:
            raise StepFailed(f"{what} within {ENGINE_WAIT_S} s")
        time.sleep(0.5)


def runner_command(root: Path, exec_root: Path, config: Path, bridge: str) -> list[str]:
    """The second dockerd: everything it writes under `root` and `exec_root`, its default network on `bridge`."""
    return [DOCKERD, "--storage-driver=overlay2", "--data-root", str(root), "--exec-root", str(exec_root),
            "--pidfile", str(exec_root / "dockerd.pid"), "--host", f"unix://{exec_root / 'docker.sock'}",
            "--config-file", str(config), "--bridge", bridge, "--iptables=false", "--ip-forward=false",
            "--ip-masq=false", "--default-address-pool", RUNNER_POOL, "--containerd-namespace", RUNNER_NAMESPACE,
            "--containerd-plugins-namespace", f"{RUNNER_NAMESPACE}-plugins"]


@contextmanager
def own_bridge() -> Iterator[str]:
    """A bridge interface of the runner's own (its name and address drawn here), deleted after the block."""
    name = f"tbr{secrets.token_hex(4)}"
    run(["ip", "link", "add", name, "type", "bridge"], what=f"create the runner's bridge {name}")
    try:
        address = f"{RUNNER_BRIDGE_NET}.{secrets.randbelow(250) + 1}.1/24"
        run(["ip", "addr", "add", address, "dev", name], what=f"address the runner's bridge {name}")
        run(["ip", "link", "set", name, "up"], what=f"bring the runner's bridge {name} up")
        yield name
    finally:
        run(["ip", "link", "del", name], check=False)


def stop_runner(proc: subprocess.Popen[bytes], root: Path, exec_root: Path) -> None:
    """Stop the runner's dockerd by its own pid (its containerd goes with it), then delete its roots, unmounting
    what it left mounted there first (never following a mount out of them): the tests' own teardown of a daemon
    they started (tests/containerdnode.py), as benchmarks/lazystart.py uses its lazy node."""
    sys.path.insert(0, str(ROOT / "tests"))
    from containerdnode import mounts, stop, under, unmount_under

    stop(proc, ENGINE_WAIT_S)
    for folder in (root, exec_root):
        unmount_under(folder)
    if any(under(point, folder) for point, _ in mounts() for folder in (root, exec_root)):
        log(f"  runner: {root} keeps mounts; left in place")
        return
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(exec_root, ignore_errors=True)


@contextmanager
def empty_engine(bench: Harness, base_tar: Path, label: str) -> Iterator[None]:
    """A second dockerd beside the machine's, on an empty data root holding only the base image, DOCKER_HOST in the
    bench's environment for the block; stopped and deleted after."""
    root = Path(tempfile.mkdtemp(prefix="trainimg-bench-runner-", dir=RUNNER_ROOTS))
    exec_root = Path(tempfile.mkdtemp(prefix="tbr-", dir=RUNNER_EXEC_ROOTS))
    config = exec_root / "daemon.json"
    config.write_text("{}\n", encoding="utf-8")
    before = bench.env.get("DOCKER_HOST")
    with own_bridge() as bridge:
        with open(bench.tmp / f"dockerd-{label}.log", "wb") as out:
            proc = subprocess.Popen(runner_command(root, exec_root, config, bridge), stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        bench.env["DOCKER_HOST"] = f"unix://{exec_root / 'docker.sock'}"
        try:
            wait_until(lambda: proc.poll() is None and engine_is_up(bench), "the runner's dockerd did not start "
                       f"(log: {bench.tmp / f'dockerd-{label}.log'})")
            bench.docker("load", "-i", str(base_tar), what="docker load of the base image")
            yield
        finally:
            if before is None:
                bench.env.pop("DOCKER_HOST", None)
            else:
                bench.env["DOCKER_HOST"] = before
            stop_runner(proc, root, exec_root)


def engine_is_up(bench: Harness) -> bool:
    answer = run([docker_cli(), "version", "--format", "{{.Server.Version}}"], env=bench.env, check=False, timeout=30)
    return answer.stdout.strip() != ""


@contextmanager
def own_engine(bench: Harness, label: str) -> Iterator[None]:
    """`empty_engine` holding this machine's base image (saved from the machine's engine, which is only read)."""
    base_tar = bench.tmp / "base.tar"
    if not base_tar.exists():
        bench.docker("save", "-o", str(base_tar), BASE_IMAGE, what="docker save of the base image")
    with empty_engine(bench, base_tar, label):
        yield
