"""`ci_rebuild_ratio`, measured on an ephemeral CI runner's engine: a dockerd whose data root is empty.

A CI runner that starts empty holds no layer and no BuildKit record; all it has is the registry. Pruning this
machine's engine played that runner badly (`docker system prune -af` and a full builder prune took every other
image and cache with it), and stopping this machine's dockerd to start an empty one in its place stopped every
other user of the engine (other sessions' builds, a CI run). Here each runner is a dockerd of the bench's own,
beside the machine's, on an empty data root holding only the base image (benchmarks/ownengine.py).

On those runners, for the bench matrix's PyTorch CPU variant (`harness.PIN_VARIANT`), its lock written beside
its recipes before anything is timed, as a repository commits it (`locked`):
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
import shutil
from pathlib import Path
from typing import Any

from figures import change_pin, parse_pushed_bytes, ratio
from harness import BENCH_RECIPES, PIN_FROM, PIN_TO, PIN_VARIANT, WHEELHOUSES, Harness, docker_cli, log, run, step
from ownengine import own_engine


def locked(bench: Harness, source: Path, recipes: Path) -> Path:
    """`source` (a recipes folder) as `recipes`, with PIN_VARIANT's lock beside it (`<recipes>/../images/`), as a
    repository with committed locks holds it: locking is the developer's step before a commit, not the runner's.
    Without it, every timed build compiled a lock for this recipes folder first (~5 s here: uv resolving against
    the indexes), which no runner of a repository with committed locks pays. Not timed."""
    if source != recipes:
        shutil.copytree(source, recipes)
    wheels = [arg for w in WHEELHOUSES for arg in ("--wheelhouse", w)]
    bench.trainimg("lock", PIN_VARIANT, *wheels, recipes=recipes)
    return recipes


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
    recipes = locked(bench, BENCH_RECIPES, bench.tmp / "repository" / "recipes")
    changed = bench.tmp / "one-change" / "recipes"
    shutil.copytree(recipes.parent, changed.parent)
    recipe = changed / "pytorch.yaml"
    recipe.write_text(change_pin(recipe.read_text(encoding="utf-8"), PIN_FROM, PIN_TO), encoding="utf-8")
    locked(bench, changed, changed)  # the lock moves that pin only (its other pins are kept)
    with bench.fresh_registry() as info:
        remote = f"{info.host}/{tag}"
        bench.env["DOCKER_CONFIG"] = str(bench.tmp / "docker-config")  # BuildKit reads the cache with this login
        try:
            run([docker_cli(), "login", info.host, "--username", info.username, "--password-stdin"], env=bench.env,
                input=info.password, what="docker login to the bench registry")
            with own_engine(bench, "cold"):
                cold = build(bench, recipes, "cold")
                first = tested_push(bench, tag, info.host, info.username)
            with own_engine(bench, "rebuild"):
                again = build(bench, recipes, "rebuild", "--cache-from", remote)
                repush = tested_push(bench, tag, info.host, info.username)
            with own_engine(bench, "pull"):
                pull = bench.docker("pull", remote, what=f"docker pull {remote}").seconds
                log(f"  pull: {pull:.1f} s")
            with own_engine(bench, "one-change"):
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
