"""The matrix family of `make bench` (benchmarks/bench.py says what each figure means and how "cold" is made):
render speed, the matrix built cold against each variant alone, a no-op rebuild, sizes, the all-reduce's
scaling, a re-push and a one-pin rebuild (the CI rebuild on an empty engine is benchmarks/runner.py's).
Also the GPU figures of `--gpu` (benchmarks/gpu.py says what and why)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from figures import below_the_install, change_pin, median_spread, ratio, spread_note
from harness import (
    BASE_IMAGE,
    BENCH_DIR,
    BENCH_RECIPES,
    FAILED,
    PIN_FROM,
    PIN_TO,
    PIN_VARIANT,
    ROOT,
    SHIPPED_RECIPES,
    Harness,
    StepFailed,
    log,
    step,
)

NAIVE_DOCKERFILE = BENCH_DIR / "naive.Dockerfile"
NAIVE_TAG = "trainimg-bench/naive:pytorch-2.13.0-cpu-py3.11"
ALONE_REPO = "trainimg-bench/alone"
RENDER_REPEATS = 5
COLD_RUNS = 3
ALLREDUCE_REPEATS = 2


def naive_dockerfile() -> str:
    """benchmarks/naive.Dockerfile with the CA bundle mounted where the pip.conf trainimg writes names it."""
    from trainimg.plan.installer import CA_SECRET, SECRETS_DIR

    text = NAIVE_DOCKERFILE.read_text(encoding="utf-8")
    return text.replace("@CA_SECRET@", CA_SECRET).replace("@CA_TARGET@", f"{SECRETS_DIR}/{CA_SECRET}")


class Matrix:
    """The matrix family's measurements on one bench run `b`, and the bench variants they build."""

    def __init__(self, b: Harness) -> None:
        self.b = b
        self.bench_variants: list[str] = []
        self.bench_tags: dict[str, str] = {}
        self.dockerfiles: dict[str, Path] = {}

    def prepare(self) -> None:
        from trainimg.recipe.loading import load_recipes
        from trainimg.plan.stages import plans
        from trainimg.render.dockerfile import render_all

        bench = load_recipes(BENCH_RECIPES)
        shipped = {p.variant.name: p for p in plans(load_recipes(SHIPPED_RECIPES), arches=("amd64",))}
        self.bench_variants = [v.name for v in bench.variants]
        self.bench_tags = {v.name: v.tag for v in bench.variants}
        if len(self.bench_variants) < 3:
            raise StepFailed(f"the bench matrix has {len(self.bench_variants)} variants; it needs at least 3")
        for plan in plans(bench):  # the bench copies must share their parents exactly as the shipped ones do
            ref = shipped.get(plan.variant.name)
            mine = below_the_install(plan.parents)
            theirs = below_the_install(ref.parents) if ref else None
            if mine != theirs:
                raise StepFailed(f"bench variant {plan.variant.name} does not render to the shipped variant's stages")
        out = self.b.tmp / "rendered"
        for rel, text in render_all(bench).items():
            path = out / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            self.dockerfiles[Path(rel).parent.name] = path

    def render_speed(self) -> None:
        from trainimg.recipe.loading import load_recipes
        from trainimg.render.dockerfile import render_all

        best, count = float("inf"), 0
        for _ in range(RENDER_REPEATS):
            start = time.perf_counter()
            count = len(render_all(load_recipes(SHIPPED_RECIPES)))
            best = min(best, time.perf_counter() - start)
        self.b.details["render"] = {"variants": count, "best_seconds": best}
        self.b.set("render_ms_per_variant", best * 1000 / count,
                 f"render_all(load_recipes(recipes/)) in-process, loading and validating included, best of "
                 f"{RENDER_REPEATS}: {best * 1000:.1f} ms for {count} variants")

    def alone_builds(self) -> dict[str, float]:
        """Each bench variant's rendered Dockerfile built alone with plain `docker build`, each from cold."""
        runs: dict[str, list[float]] = {}
        context = self.b.baked_context(BENCH_RECIPES, self.bench_variants)
        with self.b.pip_secrets() as flags:
            for name in self.bench_variants:
                for _ in range(COLD_RUNS):
                    self.b.cold()
                    runs.setdefault(name, []).append(
                        self.b.docker_build(self.dockerfiles[name], f"{ALONE_REPO}:{name}", flags, context))
                log(f"  alone, cold: {name}: {spread_note(runs[name])}")
        self.b.details["alone_cold_runs"] = runs
        return {name: median_spread(times)[0] for name, times in runs.items()}

    def naive_size(self) -> int:
        dockerfile = self.b.tmp / NAIVE_DOCKERFILE.name
        dockerfile.write_text(naive_dockerfile(), encoding="utf-8")
        with self.b.pip_secrets() as flags:
            self.b.cold()
            seconds = self.b.docker_build(dockerfile, NAIVE_TAG, flags, self.b.empty_context())
        size = self.b.image_size(NAIVE_TAG)
        self.b.details["naive"] = {"size": size, "seconds": seconds}
        log(f"  naive: {size / 1e6:.0f} MB, built in {seconds:.1f} s")
        return size

    def allreduce(self, tag: str) -> tuple[float, float]:
        times: dict[int, list[float]] = {1: [], 4: []}
        for _ in range(ALLREDUCE_REPEATS):
            for n in (1, 4):
                res = self.b.trainimg("test", tag, "--replicas", str(n), "--progress", "quiet")
                times[n].append(res.seconds)
                log(f"  trainimg test --replicas {n}: {res.seconds:.1f} s")
        self.b.details["allreduce_seconds"] = {str(k): v for k, v in times.items()}
        return min(times[1]), min(times[4])

    def repush(self, tag: str) -> int:
        first, second = self.b.push_to_fresh_registry(tag, 2)
        self.b.details["push_bytes"] = {"first": first, "second": second}
        log(f"  push 1: {first} bytes uploaded; push 2: {second} bytes uploaded")
        return second

    def pin_change(self) -> float:
        copy = self.b.tmp / "pin" / "recipes"
        shutil.copytree(BENCH_RECIPES, copy)
        recipe = copy / "pytorch.yaml"
        recipe.write_text(change_pin(recipe.read_text(encoding="utf-8"), PIN_FROM, PIN_TO), encoding="utf-8")
        seconds, _ = self.b.matrix_build(copy, [PIN_VARIANT], "pin_change_rebuild")
        return seconds


    # -- the family's run, in the order its figures depend on each other

    def cold_denominators(self) -> tuple[int | None, dict[str, float] | None]:
        """The naive image's size and each variant built alone from cold (None under --quick: no cold cache)."""
        naive = alone = None
        if self.b.quick:
            self.b.skip("size_vs_naive", "skipped (--quick): the naive build is not run")
            self.b.skip("matrix_build_ratio", "skipped (--quick): the variants are not built alone from cold")
            self.b.skip("pin_change_rebuild_ratio", "skipped (--quick): no cold build of the variant alone")
        else:
            naive = step("size_vs_naive", self.b, self.naive_size)
            alone = step("matrix_build_ratio", self.b, self.alone_builds)
        return (None if naive is FAILED else naive), (None if alone is FAILED else alone)

    def cold_matrix(self, alone: dict[str, float] | None) -> float:
        """The bench matrix built from cold (COLD_RUNS times; once, warm, under --quick): its median seconds."""
        matrix_runs = []
        for _ in range(1 if self.b.quick else COLD_RUNS):
            self.b.cold()
            matrix_runs.append(self.b.matrix_build(BENCH_RECIPES, self.bench_variants, "matrix_cold")[0])
        cold_seconds = median_spread(matrix_runs)[0]
        log(f"  matrix cold: {spread_note(matrix_runs)}")
        self.b.details["matrix_cold_runs"] = matrix_runs
        if alone:
            self.b.set("matrix_build_ratio", ratio(cold_seconds, sum(alone.values())),
                       f"`trainimg --recipes benchmarks/recipes build` of {len(alone)} CPU variants from cold, "
                       f"{spread_note(matrix_runs)} / sum of the medians of plain `docker build` of each rendered "
                       f"Dockerfile alone, each from cold ({COLD_RUNS} runs each): {sum(alone.values()):.1f} s")
        return cold_seconds

    def noop(self, cold_seconds: float) -> None:
        cold_note = "" if not self.b.quick else " [--quick: the cache was NOT cleared, so this is not a cold build]"
        seconds, rows = self.b.matrix_build(BENCH_RECIPES, self.bench_variants, "noop_rebuild")
        self.b.set("noop_rebuild_ratio", ratio(seconds, cold_seconds),
                   f"the same `trainimg build` again, nothing changed: {seconds:.1f} s / cold matrix build "
                   f"{cold_seconds:.1f} s ({sum(r['cache_hits'] for r in rows)}/{sum(r['steps'] for r in rows)} "
                   f"steps cached){cold_note}")

    def sizes(self, naive: int | None) -> None:
        pin_tag = self.bench_tags[PIN_VARIANT]
        size = self.b.image_size(pin_tag)
        base = self.b.image_size(BASE_IMAGE)
        payload = self.b.payload_size(pin_tag)
        self.b.details["sizes"] = {"image": size, "base": base, **payload}
        denominator = base + payload["venv"] + payload["apt"]
        self.b.set("size_overhead", ratio(size, denominator),
                   f"{pin_tag} {size / 1e6:.1f} MB / (base {base / 1e6:.1f} MB + du -sb /opt/venv "
                   f"{payload['venv'] / 1e6:.1f} MB + du -sb of {payload['apt_packages']} added apt packages' "
                   f"files {payload['apt'] / 1e6:.1f} MB)")
        if naive is not None:
            self.b.set("size_vs_naive", ratio(size, naive),
                       f"{pin_tag} {size / 1e6:.1f} MB / {NAIVE_DOCKERFILE.relative_to(ROOT)} "
                       f"(one stage, apt lists, pip cache and build-essential left in) {naive / 1e6:.1f} MB")

    def tested_and_pushed(self) -> None:
        """allreduce_4_vs_1, then repush_bytes if the image passed `trainimg test` (push refuses it otherwise)."""
        pin_tag = self.bench_tags[PIN_VARIANT]

        def allreduce() -> None:
            one, four = self.allreduce(pin_tag)
            self.b.set("allreduce_4_vs_1", ratio(four, one),
                       f"`trainimg test {pin_tag} --replicas 4` {four:.1f} s / `--replicas 1` {one:.1f} s "
                       f"(wall, best of {ALLREDUCE_REPEATS} each)")

        def repush() -> None:
            second = self.repush(pin_tag)
            first = self.b.details["push_bytes"]["first"]
            self.b.set("repush_bytes", second,
                       f"`trainimg push {pin_tag}` twice to a fresh LocalRegistry on 127.0.0.1: first "
                       f"{first} bytes, second {second} bytes uploaded")

        if step("allreduce_4_vs_1", self.b, allreduce) is not FAILED:
            step("repush_bytes", self.b, repush)
        else:
            self.b.fail("repush_bytes", "not measured: the image did not pass `trainimg test` (push refuses it)")

    def pin(self, alone: dict[str, float] | None) -> None:
        seconds = self.pin_change()
        if alone:
            self.b.set("pin_change_rebuild_ratio", ratio(seconds, alone[PIN_VARIANT]),
                       f"`trainimg build {PIN_VARIANT}` after {PIN_FROM} -> {PIN_TO} in a temp copy of the "
                       f"recipe: {seconds:.1f} s / that variant's Dockerfile built alone from cold "
                       f"{alone[PIN_VARIANT]:.1f} s")
        else:
            log(f"  pin change rebuild took {seconds:.1f} s (no cold denominator in --quick)")


def measure(bench: Harness) -> None:
    """The matrix family (harness.FAMILIES). A failed prepare (StepFailed) stops the run; a failed figure is
    marked failed and the others go on. Later families find its images in `bench.carried`."""
    m = Matrix(bench)
    step("render_ms_per_variant", bench, m.render_speed)
    m.prepare()
    naive, alone = m.cold_denominators()
    cold_seconds = m.cold_matrix(alone)
    step("noop_rebuild_ratio", bench, lambda: m.noop(cold_seconds))
    step("size_overhead", bench, lambda: m.sizes(naive))
    m.tested_and_pushed()
    step("pin_change_rebuild_ratio", bench, lambda: m.pin(alone))
    bench.carried.update(matrix=m)


def gpu_figures(bench: Harness) -> dict[str, dict[str, Any]]:
    """--gpu: build, gate, size and push each GPU variant (benchmarks/gpu.py says what and why); a failure is
    recorded on that image and the others go on."""
    from gpu import ALLOW_MISSING, GPU_VARIANTS
    from trainimg.imagebuild.builder import installed_versions

    report = bench.tmp / "gpu-build.json"
    bench.trainimg("build", *GPU_VARIANTS, *bench.build_args(), "--allow-missing", ALLOW_MISSING,
                  "--json", str(report))
    builds = {r["name"]: r for r in json.loads(report.read_text())}
    base = bench.image_size(BASE_IMAGE)
    rows: dict[str, dict[str, Any]] = {}
    for name in GPU_VARIANTS:
        build = builds[name]
        try:
            payload = bench.payload_size(build["tag"])
            bench.trainimg("test", build["tag"], "--replicas", "2", "--progress", "quiet")
            pushed = bench.pushed_size(build["tag"])
        except (StepFailed, ValueError) as exc:
            rows[name] = {"error": str(exc)[:300]}
            log(f"bench: gpu {name} failed: {exc}")
            continue
        rows[name] = {
            "size_bytes": build["size"], "pushed_bytes": pushed, "build_seconds": build["seconds"],
            "size_overhead": ratio(build["size"], base + payload["venv"] + payload["apt"]),
            "base_bytes": base, **{f"payload_{k}": v for k, v in payload.items()},
            "versions": installed_versions(build["manifest"]),
        }
        log(f"  gpu: {name} {build['size'] / 1e6:.0f} MB, pushed {pushed / 1e6:.0f} MB, "
            f"size / (base + payload) {rows[name]['size_overhead']:.3f}")
    return rows

