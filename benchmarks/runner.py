"""`ci_rebuild_ratio`, measured on an ephemeral CI runner's engine: a dockerd whose data root is empty.

A CI runner that starts empty holds no layer and no BuildKit record; all it has is the registry. Pruning this
machine's engine played that runner badly (`docker system prune -af` and a full builder prune took every other
image and cache with it), and stopping this machine's dockerd to start an empty one in its place stopped every
other user of the engine (other sessions' builds, a CI run). Here each runner is a second dockerd BESIDE the
machine's, sharing nothing with it: its own `--data-root` (under /var/lib, the file system of /var/lib/docker, so
overlay2 behaves the same), `--exec-root` (so its own supervised containerd, shims and runc state), pidfile, unix
socket, containerd namespaces and an empty daemon config file (the machine's daemon.json is not read twice). It
touches no network state of the machine's engine: its default bridge is an interface of its own that the runner
creates and deletes (`--bridge=none` would not do: dockerd deletes the host's `docker0` when its bridge is
disabled, `removeDefaultBridgeInterface`, and so cut the machine's engine off its default network), `--iptables=false`
(a second dockerd's bridge driver recreates the DOCKER chains and would drop the machine's port forwards; without
NAT its containers do not reach the outside, and the bench's gate does not ask them to), `--ip-forward=false`, and
the networks the gate creates there take their subnets from a pool of its own (`RUNNER_POOL`), so no route clashes
with the machine's networks. Builds reach PyPI and the wheelhouses over the host's network (`trainimg build`
passes `--network host` while it serves wheelhouses, which the bench always gives it). The base image is loaded into it (nothing can be pulled here); DOCKER_HOST names
its socket in the bench's environment for the block only; then it is stopped (by its own pid) and its roots are
deleted.

On those runners, for the bench matrix's PyTorch CPU variant (`harness.PIN_VARIANT`):
- cold: built with nothing cached, tested, pushed to a fresh local registry through `trainimg push` (what a first
  release does): the denominator;
- rebuild: on a second empty runner, `trainimg build --cache-from` the pushed image (its `.buildcache` manifest
  beside it), tested, pushed again: the numerator, and the bytes that push uploaded;
- pull: on a third, `docker pull` of the pushed image: what a runner that only pulls pays for the same bytes
  (dockerd 20.10's pull; BuildKit's import of them in the rebuild was quicker, README "Registry cache");
- one change: on a fourth, the recipe with one extra pin moved (`PIN_FROM` to `PIN_TO`), built `--cache-from`
  the pushed image: the steps whose inputs changed must run, the others should come from the registry.
"""

from __future__ import annotations

import json
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from figures import change_pin, parse_pushed_bytes, ratio
from harness import (
    BASE_IMAGE,
    BENCH_RECIPES,
    PIN_FROM,
    PIN_TO,
    PIN_VARIANT,
    Harness,
    StepFailed,
    docker_cli,
    log,
    run,
    step,
)

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


def mounts_under(*folders: Path) -> list[str]:
    """Mount points the host still has under `folders` (a dockerd that died leaves its overlays mounted)."""
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return [p for p in points if any(p == str(f) or p.startswith(f"{f}/") for f in folders)]


def stop_runner(proc: subprocess.Popen[bytes], root: Path, exec_root: Path) -> None:
    """Stop the runner's dockerd by its own pid (its containerd goes with it), then delete its roots, unmounting
    what it left mounted there first (never following a mount out of them)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=ENGINE_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for point in sorted(mounts_under(root, exec_root), key=len, reverse=True):
        run(["umount", "--lazy", point], check=False)
    if mounts_under(root, exec_root):
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


def build(bench: Harness, recipes: Path, label: str, *extra: str) -> dict[str, Any]:
    """`trainimg build PIN_VARIANT` on the current engine: its --json row, with the wall seconds."""
    rows_json = bench.tmp / f"{label}.json"
    res = bench.trainimg("build", PIN_VARIANT, *bench.build_args(), *extra, "--json", str(rows_json), recipes=recipes)
    (row,) = json.loads(rows_json.read_text())
    row["wall_seconds"] = res.seconds
    log(f"  {label}: {res.seconds:.1f} s, {row['cache_hits']}/{row['steps']} steps cached"
        + (f"; cache not read: {row['unread_caches']}" if row.get("unread_caches") else ""))
    return row


def tested_push(bench: Harness, tag: str, host: str, username: str) -> int:
    """`trainimg test` (push wants a passing record of this image), then `trainimg push`: the layer bytes uploaded."""
    bench.trainimg("test", tag, "--replicas", "1", "--progress", "quiet")
    return parse_pushed_bytes(bench.trainimg("push", tag, "--registry", host, "--username", username).stdout)


def ci_rebuild(bench: Harness) -> None:
    from trainimg.recipe.loading import load_recipes

    tag = next(v.tag for v in load_recipes(BENCH_RECIPES).variants if v.name == PIN_VARIANT)
    changed = bench.tmp / "one-change" / "recipes"
    shutil.copytree(BENCH_RECIPES, changed)
    recipe = changed / "pytorch.yaml"
    recipe.write_text(change_pin(recipe.read_text(encoding="utf-8"), PIN_FROM, PIN_TO), encoding="utf-8")
    base_tar = bench.tmp / "base.tar"
    bench.docker("save", "-o", str(base_tar), BASE_IMAGE, what="docker save of the base image")
    with bench.fresh_registry() as info:
        remote = f"{info.host}/{tag}"
        bench.env["DOCKER_CONFIG"] = str(bench.tmp / "docker-config")  # BuildKit reads the cache with this login
        try:
            run([docker_cli(), "login", info.host, "--username", info.username, "--password-stdin"], env=bench.env,
                input=info.password, what="docker login to the bench registry")
            with empty_engine(bench, base_tar, "cold"):
                cold = build(bench, BENCH_RECIPES, "cold")
                first = tested_push(bench, tag, info.host, info.username)
            with empty_engine(bench, base_tar, "rebuild"):
                again = build(bench, BENCH_RECIPES, "rebuild", "--cache-from", remote)
                repush = tested_push(bench, tag, info.host, info.username)
            with empty_engine(bench, base_tar, "pull"):
                pull = bench.docker("pull", remote, what=f"docker pull {remote}").seconds
                log(f"  pull: {pull:.1f} s")
            with empty_engine(bench, base_tar, "one-change"):
                one = build(bench, changed, "one-change", "--cache-from", remote)
        finally:
            bench.env.pop("DOCKER_CONFIG", None)
    bench.details["ci_rebuild"] = {"cold": cold, "rebuild": again, "one_change": one, "pull_seconds": pull,
                                   "first_push_bytes": first, "repush_bytes": repush}
    value = ratio(again["wall_seconds"], cold["wall_seconds"])
    bench.set("ci_rebuild_ratio", value,
              f"`trainimg build {PIN_VARIANT} --cache-from <registry>/{tag}` on an empty engine (a dockerd on a "
              f"fresh data root): {again['wall_seconds']:.1f} s, {again['cache_hits']}/{again['steps']} steps "
              f"cached / the same build on another empty engine, nothing cached: {cold['wall_seconds']:.1f} s; "
              f"`docker pull` of that image on an empty engine {pull:.1f} s ({ratio(pull, cold['wall_seconds']):.3f} "
              f"of cold); one "
              f"extra pin moved ({PIN_FROM} -> {PIN_TO}): {one['wall_seconds']:.1f} s, {one['cache_hits']}/"
              f"{one['steps']} steps cached ({ratio(one['wall_seconds'], cold['wall_seconds']):.3f} of cold); the "
              f"re-push uploaded {repush} bytes (first push {first})")


def measure(bench: Harness) -> None:
    """The runner family (harness.FAMILIES): its builds run on engines of their own, beside the machine's."""
    if bench.quick:
        bench.skip("ci_rebuild_ratio", "skipped (--quick): four cold engines and builds")
        return
    step("ci_rebuild_ratio", bench, lambda: ci_rebuild(bench))
