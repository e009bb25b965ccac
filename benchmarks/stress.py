"""`make stress`: many concurrent `trainimg test` runs of a good image must all pass and leave nothing behind.

A gate that fails a good image now and then gets switched off. This starts RUNS `trainimg test` runs of the CPU
PyTorch variant, PARALLEL at a time, STAGGER seconds apart, cycling through the platforms, so runs start while
others clean up (the race that crashed `reap_leftovers`). It prints every false failure (a run of a good image
that did not exit 0) and every leftover (a container or network with the run label that one of these runs owned,
after all finished). Both must be 0; the exit code is 1 otherwise. Not part of CI: it loads the machine.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from trainimg.engine.docker import DockerEngine
from trainimg.runtime.contract import OWNER_LABEL, RUN_LABEL
from trainimg.runtime.topology import PLATFORMS

ROOT = Path(__file__).resolve().parent.parent
IMAGE = "trainimg/pytorch:2.13.0-cpu-py3.11"
VARIANT = "pytorch-2.13.0-cpu-py3.11"


@dataclass
class Run:
    index: int
    platform: str
    pid: int = 0
    code: int | None = None
    seconds: float = 0.0
    tail: str = ""


class Stagger:
    """Starts at least `gap` seconds apart, whichever worker asks."""

    def __init__(self, gap: float) -> None:
        self.gap, self.lock, self.next = gap, threading.Lock(), time.monotonic()

    def wait(self) -> None:
        with self.lock:
            now = time.monotonic()
            at = max(now, self.next)
            self.next = at + self.gap
        time.sleep(at - now)


def one(run: Run, env: dict[str, str], replicas: int, stagger: Stagger) -> Run:
    """One `trainimg test`, started when the stagger allows."""
    stagger.wait()
    began = time.monotonic()
    proc = subprocess.Popen(["trainimg", "test", IMAGE, "--platform", run.platform, "--replicas", str(replicas),
                             "--progress", "quiet"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    run.pid = proc.pid
    out, err = proc.communicate()
    run.code, run.seconds = proc.returncode, time.monotonic() - began
    said = (err.strip() or out.strip()).splitlines()
    run.tail = said[-1][:300] if said else ""
    print(f"run {run.index:>3} {run.platform:<10} exit {run.code} in {run.seconds:5.1f}s", flush=True)
    return run


def leftovers(engine: DockerEngine, pids: set[int]) -> list[str]:
    """Containers and networks carrying the run label whose owner is one of these runs."""
    owners = {f"{socket.gethostname()}:{pid}" for pid in pids}
    found = [f"container {c.name}" for c in engine.containers(RUN_LABEL) if c.labels.get(OWNER_LABEL) in owners]
    return found + [f"network {n.name}" for n in engine.networks(RUN_LABEL) if n.labels.get(OWNER_LABEL) in owners]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--parallel", type=int, default=6)
    ap.add_argument("--stagger", type=float, default=0.5, help="seconds between starts")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--base-image", default="local/debian:bookworm")
    args = ap.parse_args()
    engine = DockerEngine()
    env = {**os.environ, "TRAINIMG_STATE_DIR": tempfile.mkdtemp(prefix="trainimg-stress-")}
    if engine.image(IMAGE) is None:
        subprocess.run(["trainimg", "build", VARIANT, "--base-image", args.base_image, "--progress", "quiet"],
                       cwd=ROOT, env=env, check=True)
    runs = [Run(i, PLATFORMS[i % len(PLATFORMS)]) for i in range(args.runs)]
    began, stagger = time.monotonic(), Stagger(args.stagger)
    with ThreadPoolExecutor(max_workers=args.parallel) as pool:  # at most `parallel` at once
        done = list(pool.map(lambda r: one(r, env, args.replicas, stagger), runs))
    wall = time.monotonic() - began
    failed = [r for r in done if r.code != 0]
    left = leftovers(engine, {r.pid for r in done})
    for r in failed:
        print(f"false failure: run {r.index} ({r.platform}) exited {r.code} after {r.seconds:.1f}s: {r.tail}")
    for item in left:
        print(f"leftover: {item}")
    per = sorted(r.seconds for r in done)
    print(f"stress: {len(done)} runs of {IMAGE} ({args.parallel} at a time, {args.stagger:g}s apart, "
          f"{args.replicas} replicas, {', '.join(PLATFORMS)}) in {wall:.0f}s; per run median {per[len(per) // 2]:.1f}s"
          f", max {per[-1]:.1f}s")
    print(f"false failures: {len(failed)}")
    print(f"leftovers: {len(left)}")
    return 1 if failed or left else 0


if __name__ == "__main__":
    sys.exit(main())
