"""A containerd of its own, for the tests and benches that pull what trainimg pushed as a Kubernetes node would
(arm64's index, zstd layers, eStargz pulled lazily): Debian's containerd 1.6 beside dockerd, with its own root,
state, sockets and config under a folder of the caller's, started for the block and stopped after; `ctr` bound to
its socket. Nothing of dockerd's containerd (/run/containerd) is touched: `ctr run` needs `--fifo-dir` and
`--runc-root` of its own too (shared/reference/nodes.md).

`lazy_node` adds the lazy-pulling snapshotter a node runs with stargz-snapshotter: tools/containerd-stargz-grpc
(built from Debian's library by its build.sh, once per source) serving containerd as the proxy snapshotter
`stargz`, its registry credentials in a Docker config file of its own. Whatever happens in the block, both daemons
are stopped, every mount left under the folder (the FUSE layers, a container's overlay) is unmounted and the folder
removed.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STARGZ_BUILD = ROOT / "tools" / "containerd-stargz-grpc" / "build.sh"
STARGZ = "stargz"  # the proxy snapshotter's name in containerd's config, and `ctr run --snapshotter`'s
FUSE_LAYER = "fuse.rawBridge"  # the file system type of a layer stargz-snapshotter mounted lazily (go-fuse's)


class containerd:
    """`with containerd(folder) as ctr: ctr("images", "ls")`: a containerd under `folder`/containerd, removed after.
    `snapshotter`: the unix socket of a proxy snapshotter containerd then knows as `stargz`."""

    def __init__(self, folder: Path, snapshotter: Path | None = None) -> None:
        self.folder = folder / "containerd"
        self.socket = self.folder / "containerd.sock"
        self.snapshotter = snapshotter
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self):  # type: ignore[no-untyped-def]
        self.folder.mkdir(parents=True)
        config = self.folder / "config.toml"
        proxy = (f'[proxy_plugins.{STARGZ}]\n  type = "snapshot"\n  address = "{self.snapshotter}"\n'
                 if self.snapshotter else "")
        config.write_text(f'version = 2\nroot = "{self.folder}/root"\nstate = "{self.folder}/state"\n'
                          'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
                          f'[grpc]\n  address = "{self.socket}"\n[ttrpc]\n  address = "{self.socket}.ttrpc"\n'
                          f'[debug]\n  address = "{self.socket}.debug"\n[metrics]\n  address = ""\n{proxy}',
                          encoding="utf-8")
        self.proc = subprocess.Popen([shutil.which("containerd") or "containerd", "--config", str(config)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(100):
                if self.ctr("version").returncode == 0:
                    return self.ctr
                time.sleep(0.1)
            raise AssertionError("containerd did not answer on its own socket")
        except BaseException:
            self.__exit__()
            raise

    def ctr(self, *args: str, program: str = "ctr") -> subprocess.CompletedProcess[str]:
        """`program` on this containerd; the password of a `--user USER:PASSWORD` is left out of the result's args,
        which a failed assertion prints."""
        done = subprocess.run(self.argv(*args, program=program), capture_output=True, text=True, timeout=1800)
        done.args = [f"{a.split(':', 1)[0]}:***" if before == "--user" else a
                     for before, a in zip(["", *done.args], done.args)]
        return done

    def argv(self, *args: str, program: str = "ctr") -> list[str]:
        """The command line of `program` (ctr, ctr-remote) bound to this containerd, for a caller that streams it."""
        return [program, "--address", str(self.socket), *args]

    def run_args(self) -> list[str]:
        """`ctr run`'s options that keep its fifos and runc state in this containerd's folder."""
        return ["--fifo-dir", str(self.folder / "fifo"), "--runc-root", str(self.folder / "runc")]

    def content_bytes(self) -> int:
        """Bytes in the content store: a whole pull keeps every layer blob there, a lazy one manifests and configs."""
        blobs = self.folder / "root" / "io.containerd.content.v1.content" / "blobs"
        return sum(f.stat().st_size for f in blobs.rglob("*") if f.is_file())

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            stop(self.proc, 60)
        unmount_under(self.folder)
        shutil.rmtree(self.folder, ignore_errors=True)


class stargz_snapshotter:
    """`with stargz_snapshotter(folder, auths) as s`: containerd-stargz-grpc on `s.socket`, its root, log and Docker
    config under `folder`/stargz. `auths`: registry host -> (username, password), written to that config file
    (mode 0600), never to a command line. `config`: the daemon's TOML (stargz-snapshotter's fs settings)."""

    def __init__(self, folder: Path, auths: dict[str, tuple[str, str]], config: str = "") -> None:
        self.folder = folder / "stargz"
        self.socket = self.folder / "stargz.sock"
        self.log = self.folder / "snapshotter.log"
        self.auths = auths
        self.config = config
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> stargz_snapshotter:
        built = subprocess.run([str(STARGZ_BUILD)], capture_output=True, text=True, timeout=1800)
        if built.returncode != 0:
            raise AssertionError(f"{STARGZ_BUILD} failed: {built.stderr.strip()[-1500:]}")
        self.folder.mkdir(parents=True)
        docker_config = self.folder / "docker"
        docker_config.mkdir(mode=0o700)
        fd = os.open(docker_config / "config.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump({"auths": {host: {"auth": base64.b64encode(f"{user}:{secret}".encode()).decode()}
                                 for host, (user, secret) in self.auths.items()}}, fh)
        (self.folder / "config.toml").write_text(self.config, encoding="utf-8")
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [built.stdout.strip().splitlines()[-1], "--address", str(self.socket), "--root",
                 str(self.folder / "root"), "--config", str(self.folder / "config.toml"), "--log-level", "debug"],
                stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, DOCKER_CONFIG=str(docker_config)))
        try:
            for _ in range(300):
                if self.proc.poll() is not None:
                    raise AssertionError(f"containerd-stargz-grpc exited {self.proc.returncode}: {self.log_tail()}")
                if self.socket.is_socket():
                    return self
                time.sleep(0.1)
            raise AssertionError(f"containerd-stargz-grpc made no socket in 30 s: {self.log_tail()}")
        except BaseException:
            self.__exit__()
            raise

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace") if self.log.exists() else ""

    def log_tail(self) -> str:
        return self.log_text()[-1500:]

    def log_records(self) -> list[dict[str, object]]:
        """The daemon's JSON log lines (logrus), the others skipped."""
        records = []
        for line in self.log_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return records

    def fuse_mounts(self) -> list[str]:
        """The mount points of the layers this daemon mounted lazily (FUSE_LAYER), from /proc/self/mountinfo."""
        return [point for point, fstype in mounts() if fstype == FUSE_LAYER and under(point, self.folder)]

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            stop(self.proc, 120)  # SIGTERM: the daemon closes the snapshotter, which unmounts its FUSE layers
        unmount_under(self.folder)
        shutil.rmtree(self.folder, ignore_errors=True)


class lazy_node:
    """`with lazy_node(folder, auths) as node`: `node.snapshotter` (stargz_snapshotter) and `node.containerd` (a
    containerd with it as the proxy snapshotter `stargz`); `node.ctr(...)`, `node.ctr_remote(...)`."""

    def __init__(self, folder: Path, auths: dict[str, tuple[str, str]], config: str = "") -> None:
        self.snapshotter = stargz_snapshotter(folder, auths, config)
        self.containerd = containerd(folder, snapshotter=self.snapshotter.socket)
        self.stack = ExitStack()

    def __enter__(self) -> lazy_node:
        with ExitStack() as stack:
            stack.enter_context(self.snapshotter)
            stack.enter_context(self.containerd)
            self.stack = stack.pop_all()
        return self

    def ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.containerd.ctr(*args)

    def ctr_remote(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Debian's `ctr-remote` (rpull: a pull that leaves the layers to the snapshotter) on this containerd."""
        return self.containerd.ctr(*args, program="ctr-remote")

    def __exit__(self, *exc: object) -> None:
        self.stack.close()  # containerd first, then the snapshotter


def one_replica(folder: Path, framework: str) -> list[str]:
    """`ctr run`'s options that make the container the one replica of a Vertex AI job, as the gate replays it (the
    platform's variables, from topology.replica_specs: the launcher makes TensorFlow's TF_CONFIG from them) with an
    /etc/hosts in `folder` that names its host name, as a pod's does (`ctr run` writes none; JAX's gloo resolves it).
    """
    from trainimg.runtime.topology import replica_specs

    (spec,) = replica_specs("vertex", 1, hosts=lambda role, index: "127.0.0.1", framework=framework)
    hosts = folder / "hosts"
    hosts.write_text(f"127.0.0.1 localhost {socket.gethostname()}\n", encoding="utf-8")
    return [*(f"--env={key}={value}" for key, value in spec.env.items()),
            "--mount", f"type=bind,src={hosts},dst=/etc/hosts,options=rbind:ro"]


def stop(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM, `grace` seconds to exit, then SIGKILL."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def mounts() -> list[tuple[str, str]]:
    """(mount point, file system type) of every mount this process sees, from /proc/self/mountinfo."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text(encoding="utf-8").splitlines():
        fields = line.split()
        dash = fields.index("-")
        found.append((fields[4].replace("\\040", " "), fields[dash + 1]))
    return found


def under(point: str, folder: Path) -> bool:
    return Path(point).is_relative_to(folder)


def unmount_under(folder: Path) -> None:
    """Lazily unmount every mount below `folder`, deepest first (what a killed daemon or container left)."""
    for point in sorted((p for p, _ in mounts() if under(p, folder)), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, timeout=60)
