"""`ci_rebuild_ratio`, measured on an ephemeral CI runner's engine: a dockerd whose data root is empty.

A CI runner that starts empty holds no layer and no BuildKit record; all it has is the registry. Pruning this
machine's engine played that runner badly (`docker system prune -af` and a full builder prune took every other
image and cache with it, so the next test run rebuilt ~30 GB of GPU variants) and not even faithfully (the prune
leaves the engine's other state, and dockerd 20.10 leaves snapshot folders behind, `.ci/reclaim_overlay.py`).
Here each runner is a real empty engine: this machine's dockerd is stopped, a dockerd with the same flags and a
fresh `--data-root` starts in its place (same socket, same bridge, so builds reach PyPI as they always do), the
base image is loaded into it (nothing can be pulled here), and when the runner is done its root is deleted. The
machine's own dockerd is stopped once for all the runners and started again after the last by `.ci/setup-host`,
its images and cache as they were.

On those runners, for the bench matrix's PyTorch CPU variant (`harness.PIN_VARIANT`):
- cold: built with nothing cached, tested, pushed to a fresh local registry through `trainimg push` (what a first
  release does): the denominator;
- rebuild: on a second empty runner, `trainimg build --cache-from` the pushed image (its `.buildcache` manifest
  beside it), tested, pushed again: the numerator, and the bytes that push uploaded;
- pull: on a third, `docker pull` of the pushed image: what a runner that only pulls pays for the same bytes
  (dockerd 20.10's pull; BuildKit's import of them in the rebuild was quicker, README "Registry cache");
- one change: on a fourth, the recipe with one extra pin moved (`PIN_FROM` to `PIN_TO`), built `--cache-from`
  the pushed image: the steps whose inputs changed must run, the others should come from the registry.

It stops the machine's dockerd, so it refuses to start while a container runs or DOCKER_HOST names another engine.
"""

from __future__ import annotations

import json
import os
import shutil
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
    ROOT,
    Harness,
    StepFailed,
    docker_cli,
    log,
    run,
    step,
)

DOCKERD = "/usr/sbin/dockerd"
RUNNER_ROOTS = Path("/var/lib")  # beside /var/lib/docker: the same file system, so overlay2 behaves the same
ENGINE_WAIT_S = 60


def engine_is_up(bench: Harness) -> bool:
    answer = run([docker_cli(), "version", "--format", "{{.Server.Version}}"], env=bench.env, check=False, timeout=30)
    return answer.stdout.strip() != ""


def dockerd_running() -> bool:
    return run(["pgrep", "-x", "dockerd"], check=False).stdout.strip() != ""


def wait_until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + ENGINE_WAIT_S
    while not done():
        if time.monotonic() > deadline:
            raise StepFailed(f"{what} within {ENGINE_WAIT_S} s")
        time.sleep(0.5)


def stop_dockerd() -> None:
    run(["pkill", "-x", "dockerd"], check=False)
    wait_until(lambda: not dockerd_running(), "dockerd did not stop")


def refuse_a_busy_engine(bench: Harness) -> None:
    """The runner stops this machine's dockerd: never under someone's containers or another engine."""
    if os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock") != "unix:///var/run/docker.sock":
        raise StepFailed(f"DOCKER_HOST={os.environ['DOCKER_HOST']}: the runner figure stops and restarts this "
                         f"machine's dockerd, not another engine")
    running = bench.docker("ps", "-q").stdout.split()
    if running:
        raise StepFailed(f"{len(running)} container(s) running: the runner figure stops this machine's dockerd; "
                         f"run it where nothing else uses the engine")


@contextmanager
def machine_engine_stopped(bench: Harness) -> Iterator[None]:
    """This machine's dockerd stopped for the block (the runners take its place, one after another), then started
    again by `.ci/setup-host`, its images and cache as they were."""
    refuse_a_busy_engine(bench)
    stop_dockerd()
    try:
        yield
    finally:
        run(["bash", str(ROOT / ".ci" / "setup-host")], what="restart this machine's dockerd (.ci/setup-host)")


@contextmanager
def empty_engine(bench: Harness, base_tar: Path, label: str) -> Iterator[None]:
    """A dockerd on an empty data root, holding only the base image, for the block (inside
    `machine_engine_stopped`); its root deleted after."""
    root = Path(tempfile.mkdtemp(prefix="trainimg-bench-runner-", dir=RUNNER_ROOTS))
    with open(bench.tmp / f"dockerd-{label}.log", "wb") as out:
        subprocess.Popen([DOCKERD, "--storage-driver=overlay2", "--data-root", str(root)], stdout=out,
                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_until(lambda: engine_is_up(bench), "the runner's dockerd did not start")
        bench.docker("load", "-i", str(base_tar), what="docker load of the base image")
        yield
    finally:
        stop_dockerd()
        shutil.rmtree(root, ignore_errors=True)


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
            with machine_engine_stopped(bench):
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
    """The runner family (harness.FAMILIES): last in a full run, since it restarts the engine."""
    if bench.quick:
        bench.skip("ci_rebuild_ratio", "skipped (--quick): it stops and restarts this machine's engine")
        return
    step("ci_rebuild_ratio", bench, lambda: ci_rebuild(bench))
