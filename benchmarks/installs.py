"""The install figures of issue 25: `uv_vs_pip` (cold build with uv / with pip, and the same with a warm wheel
cache mount) and `reproducible` (two cold builds of one variant: the same lock, packages and `pip freeze`; which
layers still differ by digest, and why).

"Cold" without pruning anything shared: each build's base is a fresh image of its own (`local/debian:bookworm`
plus a one-line marker file, a new layer chain: BuildKit keys every stage on it and runs every step again; the
marker is the one file two builds' base layers differ in), and its wheel cache mount has an id of this run's own
(the rendered Dockerfile's `id=trainimg-wheels-...` renamed), so no wheel another build downloaded is reused. "Warm"
reuses that cache id on another fresh base: every step runs again, the wheels come from the cache. Each build's
image and BuildKit records go once it is timed (the two builds the reproducibility check compares stay until their
variant is done), each wheel cache mount after its warm build, pruned by id: a GPU variant's builds and caches
would hold ~50 GB. The builds run on an engine of the bench's own (benchmarks/ownengine.py: a second dockerd beside
the machine's, on an empty data root): the records pruned "since the build began" are then this family's alone,
and no other user's build (this machine's engine is shared) shares a step with, or slows, the engine being timed."""

from __future__ import annotations

import functools
import json
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

from figures import BENCH_PREFIX, ratio
from harness import BASE_IMAGE, FAILED, FAMILY, SHIPPED_RECIPES, Harness, docker_cli, log, step
from imagediff import differing_lines, image_text, sbom_components, why_layers_differ
from ownengine import own_engine

INSTALLS_VARIANT = "pytorch-2.13.0-cpu-py3.11"
# Rounds of the four builds per variant, each figure the ratio of the medians: a ~33 s build here moves 2-3 s from
# run to run with nothing changed; one round's warm ratio read 0.89 and 1.03 (results/2026-12-03-installs).
ROUNDS = 3
CACHE_MOUNT = "exec.cachemount"  # the BuildKit record type of a `RUN --mount=type=cache`
# What the RUN of each install step says, whichever installer runs it (builder/plan/templates/blocks/install.j2).
INSTALL_STEP_MARK = "--require-hashes"


@dataclass(frozen=True)
class ColdBuild:
    tag: str
    seconds: float
    install_step: float  # the lock's install step alone, as BuildKit timed it


_STEP = re.compile(r"#(\d+) \[[^\]]+\] RUN (.*)")
_DONE = re.compile(r"#(\d+) DONE ([\d.]+)s")


def install_step_seconds(log: str) -> float:
    """The seconds BuildKit's plain progress gives the steps that install the lock (the RUNs that run an installer
    with `--require-hashes`, one per layer group), summed: what the installer changes, the apt stage and the image
    export being the same for both. (Each step mounts its group's slice of the lock since issue 34; only the last
    names requirements.lock, so that name no longer finds them.)"""
    steps = {m.group(1) for m in map(_STEP.match, log.splitlines()) if m and INSTALL_STEP_MARK in m.group(2)}
    done = [float(m.group(2)) for m in map(_DONE.match, log.splitlines()) if m and m.group(1) in steps]
    if not done:
        raise ValueError("the build log times 0 steps that install the lock")
    return round(sum(done), 3)


def allow_missing() -> list[str]:
    """The build argument `--allow-missing google-reduction-server` gives (Google's apt is unreachable here)."""
    from trainimg.imagebuild.archplan import ALLOW_MISSING_ARG
    from trainimg.runtime.contract import REDUCTION_SERVER_PACKAGE

    return ["--build-arg", f"{ALLOW_MISSING_ARG}={REDUCTION_SERVER_PACKAGE}"]


def rendered(variant: str, installer: str, cache_id: str, folder: Path) -> Path:
    """The variant's Dockerfile as `trainimg render` writes it for `installer`, its wheel cache mount renamed."""
    from trainimg.plan.installer import WHEEL_CACHE_ID
    from trainimg.plan.stages import plans
    from trainimg.recipe.loading import load_recipes
    from trainimg.render.dockerfile import render_plan

    recipes = load_recipes(SHIPPED_RECIPES)
    (plan,) = plans(recipes, [recipes.by_name[variant]], installer=installer, arches=("amd64",))
    text = render_plan(plan)
    if f"id={WHEEL_CACHE_ID}-" not in text:
        raise ValueError(f"{variant}'s Dockerfile mounts no wheel cache `id={WHEEL_CACHE_ID}-...`")
    path = folder / f"{variant}.{installer}.{cache_id}.Dockerfile"
    path.write_text(text.replace(f"id={WHEEL_CACHE_ID}-", f"id={cache_id}-"), encoding="utf-8")
    return path


def fresh_base(docker: Callable[..., Any], base: str, name: str) -> str:
    """`base` plus one marker file: a new layer chain, so no BuildKit cache entry matches a stage on it (a new
    label alone is not enough: the 20.10 engine keys a local base on its layers, not its image ID)."""
    tag = f"{BENCH_PREFIX}cold-base:{name}"
    docker("build", "-t", tag, "-", input=f"FROM {base}\nRUN echo {name} > /etc/trainimg-bench-cold\n",
           what=f"fresh base {tag}")
    return tag


# ---- the measurement ----------------------------------------------------------------------------------------


class InstallBench:
    """Cold and warm builds of one variant with each installer, through the bench's own docker and secrets. A
    build's image and layers go as soon as it is timed unless a later comparison needs them (a GPU variant's
    builds are ~6 GB each); each wheel cache mount goes after the warm build that reuses it."""

    def __init__(self, docker: Callable[..., Any], docker_build: Callable[..., Any], docker_cli: str,
                 tmp: Path, base: str, log: Callable[[str], None], variant: str, env: Mapping[str, str]) -> None:
        self.docker, self.docker_build, self.docker_cli, self.env = docker, docker_build, docker_cli, env
        self.tmp, self.base, self.log, self.variant = tmp, base, log, variant
        self.run = uuid.uuid4().hex[:8]
        self.count = 0
        self.tags: list[str] = []
        self.records_before = set(self.cache_records())

    def build(self, installer: str, cache_id: str, flags: list[str], keep: bool = False) -> ColdBuild:
        """One build of the variant on a fresh base, its wheel cache mount `cache_id`; its image and layers
        removed once timed unless `keep`."""
        self.count += 1
        name = f"{self.run}-{self.count}"
        base = fresh_base(self.docker, self.base, name)
        dockerfile = rendered(self.variant, installer, cache_id, self.tmp)
        tag = f"{BENCH_PREFIX}installs:{self.variant}-{installer}-{name}"
        before = set(self.cache_records())
        res = self.docker_build(dockerfile, tag, [*flags, *allow_missing()], base=base)
        build = ColdBuild(tag, res.seconds, install_step_seconds(res.stderr))
        self.log(f"  {self.variant}: {installer} build {name} (cache {cache_id}): {build.seconds:.1f} s, the "
                 f"install step {build.install_step:.1f} s")
        if keep:
            self.tags += [base, tag]
        else:
            self.remove([base, tag], before, lambda kind: kind != CACHE_MOUNT)
        return build

    def cache_records(self) -> dict[str, tuple[str, str]]:
        """ID -> (creation time, type) of each of the engine's BuildKit records. The engine runs one disk-usage
        scan at a time and says so to a second caller (another user's `docker system df`): wait for it."""
        for _ in range(20):
            res = self.docker("system", "df", "-v", "--format", "{{json .BuildCache}}", check=False)
            if res.stdout.strip():
                break
            time.sleep(5)
        return {e["ID"]: (str(e.get("CreatedAt", "")), str(e.get("CacheType", "")))
                for e in json.loads(res.stdout or "[]")}

    def remove(self, tags: list[str], before: set[str], which: Callable[[str], bool]) -> None:
        """Remove `tags`, then the BuildKit records made since `before` was read whose type `which` takes, newest
        first: a record is in use while one made from it is there. The 20.10 engine prunes one ID a call."""
        if tags:
            self.docker("rmi", "--force", *tags, check=False)
        left = -1
        while True:
            records = self.cache_records()
            mine = sorted((r for r in set(records) - before if which(records[r][1])),
                          key=lambda r: records[r][0], reverse=True)
            if len(mine) in (0, left):  # all gone, or a pass removed nothing (in use by someone else)
                return
            left = len(mine)
            for record in mine:
                self.docker("builder", "prune", "-f", "--filter", f"id={record}", check=False)

    def clean(self) -> None:
        """Remove what this variant's builds left: the images kept, every record made since it began."""
        self.remove(self.tags, self.records_before, lambda kind: True)

    def uv_vs_pip(self, flags: list[str], keep_uv_cold: bool) -> dict[str, list[ColdBuild]]:
        """ROUNDS rounds of uv and pip (which goes first alternates), each cold then warm on a wheel cache mount of
        its round's own, dropped after its warm build; the first cold uv image kept if `keep_uv_cold`. A build
        before them is not timed: the engine's first build also reads the base, the wheels and the installers
        from disk into memory (1.4-4.6 s longer than the same build after it, three runs), which no round should pay."""
        before = set(self.cache_records())
        self.build("pip", f"trainimg-bench-{self.run}-first", flags)
        self.remove([], before, lambda kind: kind == CACHE_MOUNT)
        builds: dict[str, list[ColdBuild]] = {f"{i}_{w}": [] for i in ("uv", "pip") for w in ("cold", "warm")}
        for round_ in range(ROUNDS):
            for installer in ("uv", "pip")[::1 if round_ % 2 == 0 else -1]:
                cache = f"trainimg-bench-{self.run}-{installer}-{round_}"
                before = set(self.cache_records())
                keep = keep_uv_cold and installer == "uv" and round_ == 0
                builds[f"{installer}_cold"].append(self.build(installer, cache, flags, keep=keep))
                builds[f"{installer}_warm"].append(self.build(installer, cache, flags))
                self.remove([], before, lambda kind: kind == CACHE_MOUNT)
        return builds

    def reproducible(self, first: ColdBuild, flags: list[str]) -> dict[str, Any]:
        """A second cold uv build against `first`: lock, pip freeze and SBOM components compared; the layers that
        differ by digest, and what differs inside them."""
        second = self.build("uv", f"trainimg-bench-{self.run}-again", flags, keep=True)
        docker = self.docker
        from trainimg.runtime.contract import IMAGE_LOCK_PATH, SBOM_PATH

        texts = {}
        for key, cmd in {"lock": ("cat", IMAGE_LOCK_PATH), "freeze": ("python", "-m", "pip", "freeze"),
                         "sbom": ("sh", "-c", f"cat {SBOM_PATH} 2>/dev/null || echo '{{}}'")}.items():
            texts[key] = [image_text(docker, t, *cmd) for t in (first.tag, second.tag)]
        sboms = [sbom_components(t) for t in texts["sbom"]]
        return {
            "seconds": [first.seconds, second.seconds],
            "lock_differs": differing_lines(*texts["lock"]),
            "freeze_differs": differing_lines(*texts["freeze"]),
            "packages": len(texts["freeze"][0].splitlines()),
            "sbom_components": len(sboms[0]),
            "sbom_differs": sorted(sboms[0] ^ sboms[1]),
            "layers": why_layers_differ(self.docker_cli, docker, first.tag, second.tag, self.env),
        }


# -- the install family of `make bench` (harness.FAMILIES) and `bench.py --installs`


def measure(bench: Harness) -> None:
    """A full run's install figures: INSTALLS_VARIANT's (4 x ROUNDS + 2 builds: none under --quick)."""
    if bench.quick:
        for name in FAMILY["installs"].figures:
            bench.skip(name, f"skipped (--quick): {4 * ROUNDS + 2} cold builds (`--installs` runs them alone)")
    else:
        run_installs(bench, [INSTALLS_VARIANT])


def run_installs(bench: Harness, variants: Sequence[str]) -> None:
    """uv_vs_pip and uv_vs_pip_warm over `variants` (the worst of them is the figure), and
    reproducible_package_diffs for the first (benchmarks/installs.py), on an engine of the bench's own."""
    with own_engine(bench, "installs"):
        measured = measure_installs(bench, variants)
    if len(measured) < len(variants):
        bench.fail("uv_vs_pip", f"failed: not measured for {', '.join(v for v in variants if v not in measured)}")
        bench.fail("uv_vs_pip_warm", "not measured: the uv/pip builds of a variant failed")
        if variants[0] not in measured:
            bench.fail("reproducible_package_diffs", "not measured: the uv/pip builds failed")
        return
    set_installs(bench, measured)


def measure_installs(bench: Harness, variants: Sequence[str]) -> dict[str, dict[str, list[ColdBuild]]]:
    """Each variant's uv and pip builds (and the first's reproducibility); each variant's images and BuildKit
    records go before the next one starts. A variant whose builds failed is not in the answer."""
    measured: dict[str, dict[str, list[ColdBuild]]] = {}
    for i, variant in enumerate(variants):
        context = bench.baked_context(SHIPPED_RECIPES, [variant])
        ib = InstallBench(bench.docker, functools.partial(bench.docker_build_run, context=context), docker_cli(),
                          bench.tmp, BASE_IMAGE, log, variant, bench.env)
        try:
            with bench.pip_secrets() as flags:
                builds = step("uv_vs_pip", bench, lambda: ib.uv_vs_pip(flags, keep_uv_cold=i == 0))
                if builds is FAILED:
                    continue
                measured[variant] = builds
                bench.details.setdefault("installs", {})[variant] = {"seconds": {
                    **{k: [b.seconds for b in bs] for k, bs in builds.items()},
                    **{f"{k}_install_step": [b.install_step for b in bs] for k, bs in builds.items()}}}
                if i == 0:
                    same = step("reproducible_package_diffs", bench,
                                lambda: ib.reproducible(builds["uv_cold"][0], flags))
                    if same is not FAILED:
                        set_reproducible(bench, variant, same)
        finally:
            ib.clean()
    return measured


@dataclass(frozen=True)
class Medians:
    """One installer's builds of one kind (cold or warm): the median whole build, the median install steps, and
    every build's seconds as `how` shows them."""

    seconds: float
    install_step: float
    each: str

    @classmethod
    def of(cls, builds: Sequence[ColdBuild]) -> Medians:
        return cls(median(b.seconds for b in builds), median(b.install_step for b in builds),
                   " / ".join(f"{b.seconds:.1f}" for b in builds))


def set_installs(bench: Harness, measured: Mapping[str, Mapping[str, Sequence[ColdBuild]]]) -> None:
    """The worst variant's ratio of the median whole builds is the figure; each variant's medians, every build's
    seconds, and the install steps' alone (what the installer changes: the rest of a build is the same work for
    both), are in `how`."""
    for figure, (uv, pip), what in (
            ("uv_vs_pip", ("uv_cold", "pip_cold"),
             "built by `docker build` from its rendered Dockerfile on a fresh base (every step runs) with a new, "
             "empty wheel cache mount"),
            ("uv_vs_pip_warm", ("uv_warm", "pip_warm"),
             "the same on another fresh base with the wheel cache mount the cold build filled")):
        rows = {v: (Medians.of(b[uv]), Medians.of(b[pip])) for v, b in measured.items()}
        worst = max(rows, key=lambda v: rows[v][0].seconds / rows[v][1].seconds)
        bench.set(figure, ratio(rows[worst][0].seconds, rows[worst][1].seconds),
                 f"{what}; the medians of {ROUNDS} rounds, worst of {len(rows)}: " + "; ".join(
                     f"{v} uv {u.seconds:.1f} s / pip {p.seconds:.1f} s = {u.seconds / p.seconds:.2f} (the install "
                     f"steps alone {u.install_step:.1f} s / {p.install_step:.1f} s = "
                     f"{u.install_step / p.install_step:.2f}; uv {u.each} s, pip {p.each} s)"
                     for v, (u, p) in rows.items()))


def set_reproducible(bench: Harness, variant: str, same: dict[str, Any]) -> None:
    bench.details["reproducible"] = {"variant": variant, **same}
    diffs = len(same["lock_differs"]) + len(same["freeze_differs"]) + len(same["sbom_differs"])
    layers = "; ".join(f"layer {d['layer']} ({d['step'][:60]}): {d['content_differs']} of {d['files']} files "
                       f"differ in content (e.g. {', '.join(d['content_examples'][:3]) or 'none'}), "
                       f"{d['mtime_only']} only in mtime" for d in same["layers"])
    bench.set("reproducible_package_diffs", diffs,
             f"two cold uv builds of {variant} ({same['seconds'][0]:.0f} s, {same['seconds'][1]:.0f} s): lines "
             f"differing in /etc/trainimg/requirements.lock {len(same['lock_differs'])}, in `pip freeze` "
             f"({same['packages']} packages) {len(same['freeze_differs'])}, SBOM components "
             f"({same['sbom_components']}) {len(same['sbom_differs'])}. Layers differing by digest: "
             f"{len(same['layers'])}: {layers or 'none'}")
