"""The CI figures of `make bench`: what `trainimg release` costs a CI runner when nothing, or one pin, changed.

The bench releases a small fleet (`ci_recipes`: three root variants without a framework FROM local/debian:bookworm,
one of them with an extra pin, and a child that `extends` it; seconds to build from BuildKit's cache) to a private
registry on 127.0.0.1 with its access log on, and then plays an empty CI runner:

* What is pruned by default (this machine is shared): the bench's own images, by `trainimg prune --label
  bench.ci=<this run>` (every image the release made, named or dangling, and nothing else), and the BuildKit cache
  records new since the bench began and not in use, each by `docker builder prune --filter id=...` (BuildKit
  cannot tell which build made a record: one another build made in the same minutes can go too; that costs it a
  cache miss, never a wrong result). The base image and every older cache record stay.
* The full version, for a dedicated CI runner: with PRUNE_ALL_ENV=1 (`TRAINIMG_BENCH_PRUNE_ALL=1 make bench`) it
  is `docker system prune -af` and `docker builder prune -af` (the base image held by a sleeping container, since
  nothing can be pulled here). It removes every unused image and cache record of every user: off by default.

Then `ci_noop_release`: the same `release`, nothing changed: wall seconds per variant (the CLI's start, the inputs
keys, two registry requests per variant), and `ci_noop_layer_bytes`: the bytes of every layer blob the registry
served meanwhile, read from the registry's own access log (goal 0: only manifests and config blobs are read).
`ci_one_change`: one extra pin changed (PIN_FROM -> PIN_TO in CHANGED), `release` again: the count of variants
decided otherwise than "exactly CHANGED and its children built, the others skipped" (goal 0), read from the
release's decision lines.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from figures import change_pin
from harness import FAMILY, PIN_FROM, PIN_TO, Harness, StepFailed, log

PRUNE_ALL_ENV = "TRAINIMG_BENCH_PRUNE_ALL"
CI_PREFIX = "trainimg-bench-ci/"  # not under BENCH_PREFIX: another bench's cleanup never takes these mid-run
LABEL_KEY = "bench.ci"
CHANGED = "ci-a"  # the variant whose extra pin ci_one_change moves
CI_FIGURES = FAMILY["ci"].figures


def ci_recipes(run: str, pin: str) -> dict[str, str]:
    """{file name: recipe} of the bench's fleet: CHANGED (with the extra `pin`), two more roots, and a child of
    CHANGED. Every variant carries the label LABEL_KEY=`run`, which scopes the prune to this run."""
    def root(name: str, extras: str = "") -> str:
        return (f"framework: none\nname: {name}\nrepository: {CI_PREFIX}{name}\nos: debian12\npython: \"3.11\"\n"
                f"{extras}labels: {{{LABEL_KEY}: \"{run}\"}}\n")

    child = (f"name: ci-a-child\nrepository: {CI_PREFIX}ci-a-child\nextends: {CHANGED}\n"
             f"labels: {{{LABEL_KEY}: \"{run}\"}}\n")
    return {f"{CHANGED}.yaml": root(CHANGED, f"extras: [\"{pin}\"]\n"), "ci-b.yaml": root("ci-b"),
            "ci-c.yaml": root("ci-c"), "ci-a-child.yaml": child}


def expected_rebuilds(recipes: Path, changed: str) -> tuple[set[str], set[str]]:
    """(the variants a change to `changed` must rebuild: it and every variant that extends it, however deep; all
    the variants of `recipes`)."""
    from trainimg.recipe.loading import load_recipes

    variants = {v.name: v.extends for v in load_recipes(recipes).variants}

    def descends(name: str | None) -> bool:
        return name is not None and (name == changed or descends(variants.get(name)))

    return {name for name in variants if descends(name)}, set(variants)


class CiFleet:
    """One run of the CI figures on `bench` (benchmarks/harness.py's Harness: its commands, env and temp folder)."""

    def __init__(self, bench: Harness, log: Callable[[str], None], pin_from: str, pin_to: str) -> None:
        self.bench, self.log, self.pin_from, self.pin_to = bench, log, pin_from, pin_to
        self.run = uuid.uuid4().hex[:8]
        self.recipes = bench.tmp / "ci" / "recipes"
        self.recipes.mkdir(parents=True)
        for name, text in ci_recipes(self.run, pin_from).items():
            (self.recipes / name).write_text(text, encoding="utf-8")
        self.lock = bench.tmp / "ci" / "images.lock"
        self.prune_all = os.environ.get(PRUNE_ALL_ENV) == "1"
        self.cache_before = self.cache_records()

    def cache_records(self) -> dict[str, bool]:
        """{BuildKit cache record id: in use} as the engine lists them now."""
        out = self.bench.docker("system", "df", "-v", "--format", "{{json .BuildCache}}").stdout
        return {e["ID"]: str(e.get("InUse")) == "true" for e in json.loads(out or "[]")}

    def release(self, host: str, user: str) -> tuple[float, dict[str, tuple[bool, str]]]:
        """`trainimg release` of every variant: (wall seconds, {variant: (skipped, reason)})."""
        from trainimg.publish.skip import read_decisions

        res = self.bench.trainimg("release", *sorted(expected_rebuilds(self.recipes, CHANGED)[1]),
                                  *self.bench.build_args(), "--registry", host, "--username", user,
                                  "--lock", str(self.lock), "--skip-audit", recipes=self.recipes)
        return res.seconds, read_decisions(res.stdout)

    def empty_the_runner(self) -> str:
        """Prune as the module doc says; returns what was pruned, for the "how" line."""
        if self.prune_all:
            self.bench.prune_engine_keeping_base()
            return "`docker system prune -af` and `docker builder prune -af` (base image held)"
        self.bench.trainimg("prune", "--label", f"{LABEL_KEY}={self.run}")
        fresh = [rid for rid, used in self.cache_records().items() if rid not in self.cache_before and not used]
        for rid in fresh:
            self.bench.docker("builder", "prune", "-af", "--filter", f"id={rid}", check=False)
        now = self.cache_records()
        left = [rid for rid in fresh if rid in now]
        return (f"`trainimg prune --label {LABEL_KEY}={self.run}` and {len(fresh) - len(left)} of {len(fresh)} "
                f"BuildKit cache records new since the bench began ({PRUNE_ALL_ENV}=1: the whole engine)")

    def layer_bytes(self, api: Any, log_path: Path, since: int) -> tuple[int, int]:
        """(bytes of layer blobs, bytes of other blobs) the registry served after byte `since` of its log."""
        from trainimg.registry.accesslog import fetched_blobs, layer_digests, requests_since
        from trainimg.publish.lockfile import read_lock

        layers: set[str] = set()
        for entry in read_lock(self.lock).values():
            layers |= layer_digests(api, *entry.tag.rsplit(":", 1))
        served = fetched_blobs(requests_since(log_path, since))
        return (sum(n for d, n in served if d in layers), sum(n for d, n in served if d not in layers))

    def measure(self) -> None:
        from trainimg.registry.accesslog import log_offset
        from trainimg.registry.references import RegistryTarget
        from trainimg.registry.registryapi import RegistryAPI

        b = self.bench
        with b.fresh_registry(access_log=True) as info, self.own_images_removed():
            first, decided = self.release(info.host, info.username)
            self.log(f"  ci: first release {first:.1f} s, built: "
                     f"{', '.join(sorted(n for n, (skipped, _) in decided.items() if not skipped))}")
            pruned = self.empty_the_runner()
            api = RegistryAPI(RegistryTarget.parse(info.host), {"username": info.username, "password": info.password})
            since = log_offset(b.registry_log)
            seconds, decided = self.release(info.host, info.username)
            layer, other = self.layer_bytes(api, b.registry_log, since)
            built = sorted(name for name, (skipped, _) in decided.items() if not skipped)
            if built or len(decided) != len(expected_rebuilds(self.recipes, CHANGED)[1]):
                raise ValueError(f"nothing changed, yet release built {', '.join(built) or 'none'} and decided "
                                 f"{len(decided)} variants")
            self.log(f"  ci: no-op release {seconds:.2f} s; layer bytes served {layer}, config bytes {other}")
            b.details["ci_noop_release"] = {"first_release_seconds": first, "seconds": seconds, "variants": len(decided),
                                            "layer_bytes": layer, "config_bytes": other, "pruned": pruned}
            b.set("ci_noop_release", seconds / len(decided),
                  f"after {pruned}: `trainimg release` of {len(decided)} unchanged variants {seconds:.2f} s wall "
                  f"(every one skipped: inputs key and passed record)")
            b.set("ci_noop_layer_bytes", layer,
                  f"layer blob bytes the registry's access log shows served during that release: {layer} (config "
                  f"blobs: {other} bytes)")
            self.one_change(info.host, info.username)

    @contextmanager
    def own_images_removed(self) -> Iterator[None]:
        """Whatever happens in the block, this run's images (its label) are removed after it."""
        try:
            yield
        finally:
            self.bench.trainimg("prune", "--label", f"{LABEL_KEY}={self.run}", check=False)

    def one_change(self, host: str, user: str) -> None:
        recipe = self.recipes / f"{CHANGED}.yaml"
        recipe.write_text(change_pin(recipe.read_text(encoding="utf-8"), self.pin_from, self.pin_to),
                          encoding="utf-8")
        must, every = expected_rebuilds(self.recipes, CHANGED)
        seconds, decided = self.release(host, user)
        built = {name for name, (skipped, _) in decided.items() if not skipped}
        wrong = (built ^ must) | (every - set(decided))
        self.bench.set("ci_one_change", len(wrong),
                       f"{self.pin_from} -> {self.pin_to} in {CHANGED}: built {', '.join(sorted(built)) or 'none'}; "
                       f"skipped {', '.join(sorted(set(decided) - built)) or 'none'} (expected built: "
                       f"{', '.join(sorted(must))}); release {seconds:.1f} s")
        self.bench.details["ci_one_change"] = {"decisions": {n: list(d) for n, d in decided.items()},
                                               "seconds": seconds}
        self.log(f"  ci: one change: built {sorted(built)}, expected {sorted(must)}, {seconds:.1f} s")


def measure(bench: Harness) -> None:
    """The CI family (harness.FAMILIES): ci_noop_release, ci_noop_layer_bytes and ci_one_change; a failure marks
    the figures not yet measured failed."""
    try:
        CiFleet(bench, log, PIN_FROM, PIN_TO).measure()
    except (StepFailed, OSError, ValueError, json.JSONDecodeError) as exc:
        log(f"bench: ci figures failed: {exc}")
        for name in CI_FIGURES:
            if bench.figures[name]["status"] != "ok":
                bench.fail(name, f"failed: {exc}")
