"""A containerd of its own, for the tests that pull what trainimg pushed as a Kubernetes node would (arm64's index,
zstd layers): Debian's containerd 1.6 beside dockerd, with its own root, state, socket and config under a folder of
the test's, started for the test and stopped after; `ctr` bound to its socket. Nothing of dockerd's containerd
(/run/containerd) is touched: `ctr run` needs `--fifo-dir` and `--runc-root` of its own too (shared/reference/nodes.md).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path


class containerd:
    """`with containerd(folder) as ctr: ctr("images", "ls")`: a containerd under `folder`/containerd, removed after."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder / "containerd"
        self.socket = self.folder / "containerd.sock"
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self):  # type: ignore[no-untyped-def]
        self.folder.mkdir(parents=True)
        config = self.folder / "config.toml"
        config.write_text(f'version = 2\nroot = "{self.folder}/root"\nstate = "{self.folder}/state"\n'
                          f'[grpc]\n  address = "{self.socket}"\n[ttrpc]\n  address = "{self.socket}.ttrpc"\n'
                          '[debug]\n  address = ""\n[metrics]\n  address = ""\n', encoding="utf-8")
        self.proc = subprocess.Popen([shutil.which("containerd") or "containerd", "--config", str(config)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            if self.ctr("version").returncode == 0:
                return self.ctr
            time.sleep(0.1)
        raise AssertionError("containerd did not answer on its own socket")

    def ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ctr", "--address", str(self.socket), *args], capture_output=True, text=True,
                              timeout=600)

    def run_args(self) -> list[str]:
        """`ctr run`'s options that keep its fifos and runc state in this containerd's folder."""
        return ["--fifo-dir", str(self.folder / "fifo"), "--runc-root", str(self.folder / "runc")]

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=60)
        shutil.rmtree(self.folder, ignore_errors=True)
