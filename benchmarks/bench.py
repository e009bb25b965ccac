#!/usr/bin/env python3
"""trainimg's benchmarks, measured on this machine in one run.

Prints one ``name: value`` line per figure on stdout (the names are a contract), how each figure was measured
and any ``goal missed: NAME`` on stderr, writes the same to ``reports/bench.json`` and updates the table between
``<!-- bench:start -->`` and ``<!-- bench:end -->`` in README.md.

"Cold" means cold: before every cold build the BuildKit cache is pruned (``docker builder prune -af``) and the
bench images (tags starting ``trainimg-bench/``, no others) are removed. One cold build is noise on a shared
machine (``matrix_build_ratio`` read 0.44, 0.53 and 0.72 on the same code), so every cold build is run
``COLD_RUNS`` times and its median is used, with the spread printed. ``ci_rebuild_ratio`` plays an ephemeral CI
runner: after ``docker system prune -af`` and a full builder prune (the base image is held by a sleeping
container, since nothing can be pulled here) the released CPU variant is rebuilt with ``--cache-from`` its pushed
image. That slows every other build on the engine and removes every unused image, so ``--quick`` prunes nothing: it skips the builds that need a cold cache (each variant built alone and
the naive baseline), prints their figures as ``skipped``, and writes ``reports/bench-quick.json`` without touching
README.md.

``ci_noop_release``, ``ci_noop_layer_bytes`` and ``ci_one_change`` (benchmarks/cifleet.py) release a small fleet to
a private registry with its access log on, empty the runner (by default only the bench's own images and new cache
records; ``TRAINIMG_BENCH_PRUNE_ALL=1``: ``docker system prune -af`` and ``docker builder prune -af``), release
again with nothing changed, then with one pin changed; ``--ci`` measures only those.

Exit status: 0 when every figure was measured (goals missed or not), 1 when a measurement itself failed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from installs import INSTALLS_VARIANT, ColdBuild
from figures import (
    FIGURES,
    below_the_install,
    GOALS,
    bench_refs,
    change_pin,
    format_goal,
    format_value,
    goal_met,
    machine_line,
    manifest_bytes,
    median_spread,
    parse_du_total,
    parse_meminfo,
    parse_pushed_bytes,
    ratio,
    render_table,
    spread_note,
    update_readme,
)

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "benchmarks"
BENCH_RECIPES = BENCH_DIR / "recipes"
SHIPPED_RECIPES = ROOT / "recipes"
NAIVE_DOCKERFILE = BENCH_DIR / "naive.Dockerfile"
README = ROOT / "README.md"
REPORT = ROOT / "reports" / "bench.json"
QUICK_REPORT = ROOT / "reports" / "bench-quick.json"

BASE_IMAGE = "local/debian:bookworm"
WHEELHOUSES = ("/opt/wheels", "/opt/pypi", "/opt/pypi-more")
PIN_VARIANT = "pytorch-2.13.0-cpu-py3.11"  # the variant whose image is sized, tested and pushed
PIN_FROM, PIN_TO = "six==1.16.0", "six==1.17.0"
NAIVE_TAG = "trainimg-bench/naive:pytorch-2.13.0-cpu-py3.11"
ALONE_REPO = "trainimg-bench/alone"
RENDER_REPEATS = 5
COLD_RUNS = 3
ALLREDUCE_REPEATS = 2
CMD_TIMEOUT = 3 * 3600


# ---- running things -------------------------------------------------------------------------------------------


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class StepFailed(Exception):
    pass


@dataclass
class Run:
    seconds: float
    stdout: str
    stderr: str


def docker_cli() -> str:
    return os.environ.get("TRAINIMG_DOCKER_CLI") or shutil.which("docker") or "/usr/bin/docker"


def run(cmd: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path = ROOT, check: bool = True,
        timeout: float = CMD_TIMEOUT, what: str | None = None, input: str | None = None) -> Run:
    """Run `cmd`, timed with a monotonic clock; a failure raises StepFailed with the output's tail."""
    start = time.monotonic()
    try:
        proc = subprocess.run(list(cmd), cwd=cwd, env=dict(env) if env is not None else None, capture_output=True,
                              text=True, timeout=timeout, input=input,
                              stdin=subprocess.DEVNULL if input is None else None)
    except subprocess.TimeoutExpired:
        raise StepFailed(f"{what or cmd[0]} ran past {timeout:.0f} s") from None
    seconds = time.monotonic() - start
    if check and proc.returncode != 0:
        tail = (proc.stderr.strip() or proc.stdout.strip())[-1500:]
        raise StepFailed(f"{what or ' '.join(cmd[:3])} exited {proc.returncode}: {tail}")
    return Run(seconds, proc.stdout, proc.stderr)


class Bench:
    def __init__(self, quick: bool, keep_images: bool) -> None:
        self.quick = quick
        self.keep_images = keep_images
        self.tmp = Path(tempfile.mkdtemp(prefix="trainimg-bench-"))
        self.env = dict(os.environ)
        self.env["TRAINIMG_DOCKER_CLI"] = docker_cli()
        self.env["TRAINIMG_STATE_DIR"] = str(self.tmp / "state")  # records and logs of this run only
        self.env.pop("TRAINIMG_DEBUG", None)
        self.figures: dict[str, dict[str, Any]] = {
            f.name: {"value": None, "status": "skipped", "how": "", "goal": f.goal, "met": None} for f in FIGURES}
        self.details: dict[str, Any] = {}
        self.bench_variants: list[str] = []
        self.bench_tags: dict[str, str] = {}
        self.dockerfiles: dict[str, Path] = {}
        self.registry_log = self.tmp / "no-registry.log"  # the log of the registry fresh_registry started last

    # -- bookkeeping

    def set(self, name: str, value: float | int | None, how: str, status: str = "ok") -> None:
        fig = self.figures[name]
        fig.update(value=value, how=how, status=status if value is not None or status != "ok" else "skipped",
                   met=goal_met(name, value))

    def fail(self, name: str, reason: str) -> None:
        self.set(name, None, reason, status="failed")

    def skip(self, name: str, reason: str) -> None:
        self.set(name, None, reason, status="skipped")

    def docker(self, *args: str, **kw: Any) -> Run:
        return run([docker_cli(), *args], env=self.env, **kw)

    def trainimg(self, *args: str, recipes: Path | None = None, **kw: Any) -> Run:
        head = [sys.executable, "-m", "trainimg"] + (["--recipes", str(recipes)] if recipes else [])
        return run([*head, *args], env=self.env, what=f"trainimg {args[0]}", **kw)

    # -- cold

    def remove_bench_images(self) -> None:
        listing = self.docker("images", "--format", "{{.Repository}}:{{.Tag}}").stdout
        refs = bench_refs(listing)
        if refs:
            self.docker("rmi", "--force", *refs, check=False)

    def cold(self) -> None:
        """Cold means cold: no BuildKit cache, no bench image. --quick prunes nothing (other builds share it)."""
        self.remove_bench_images()
        if not self.quick:
            self.docker("builder", "prune", "-af", what="docker builder prune")

    # -- measurements

    def prepare(self) -> None:
        from trainimg.recipe.loading import load_recipes
        from trainimg.plan.stages import plans
        from trainimg.render.dockerfile import render_all

        bench = load_recipes(BENCH_RECIPES)
        shipped = {p.variant.name: p for p in plans(load_recipes(SHIPPED_RECIPES))}
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
        out = self.tmp / "rendered"
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
        self.details["render"] = {"variants": count, "best_seconds": best}
        self.set("render_ms_per_variant", best * 1000 / count,
                 f"render_all(load_recipes(recipes/)) in-process, loading and validating included, best of "
                 f"{RENDER_REPEATS}: {best * 1000:.1f} ms for {count} variants")

    def build_args(self) -> list[str]:
        args = ["--base-image", BASE_IMAGE]
        for w in WHEELHOUSES:
            args += ["--wheelhouse", w]
        return args + ["--progress", "quiet"]

    def matrix_build(self, recipes: Path, names: list[str], label: str) -> tuple[float, list[dict[str, Any]]]:
        report = self.tmp / f"{label}.json"
        res = self.trainimg("build", *names, *self.build_args(), "--json", str(report), recipes=recipes)
        rows = json.loads(report.read_text())
        for r in rows:
            log(f"  {label}: {r['tag']} {r['size'] / 1e6:.0f} MB, {r['seconds']:.1f} s, "
                f"{r['cache_hits']}/{r['steps']} steps cached")
        log(f"  {label}: {res.seconds:.1f} s wall")
        self.details[label] = {"wall_seconds": res.seconds, "variants": [
            {k: r[k] for k in ("name", "tag", "image_id", "size", "seconds", "steps", "cache_hits", "shared_parents")}
            for r in rows]}
        return res.seconds, rows

    @contextmanager
    def pip_secrets(self) -> Iterator[list[str]]:
        """The pip.conf, uv.toml (and CA bundle) secrets exactly as `trainimg build` makes them, wheelhouses
        served alike."""
        from trainimg.imagebuild.wheelhouse import check_dirs, default_ca_bundle, pip_conf, serve, uv_conf, write_secret
        from trainimg.plan.stages import CA_SECRET, PIP_CONF_SECRET, UV_CONF_SECRET

        ca = default_ca_bundle(self.env)
        with serve(check_dirs(tuple(Path(w) for w in WHEELHOUSES))) as lines:
            secrets_dir = self.tmp / "secrets"
            secrets_dir.mkdir(mode=0o700, exist_ok=True)
            conf = write_secret(secrets_dir, PIP_CONF_SECRET, pip_conf(lines, ca, self.env))
            uv = write_secret(secrets_dir, UV_CONF_SECRET, uv_conf(lines, self.env))
            flags = ["--secret", f"id={PIP_CONF_SECRET},src={conf}", "--secret", f"id={UV_CONF_SECRET},src={uv}"]
            if ca is not None:
                flags += ["--secret", f"id={CA_SECRET},src={ca}"]
            yield flags

    def docker_build(self, dockerfile: Path, tag: str, secret_flags: list[str], base: str = BASE_IMAGE) -> float:
        return self.docker_build_run(dockerfile, tag, secret_flags, base).seconds

    def docker_build_run(self, dockerfile: Path, tag: str, secret_flags: list[str], base: str = BASE_IMAGE) -> Run:
        """`docker build --progress plain`: its time and its log (stderr), whose steps say what took the time."""
        env = dict(self.env, DOCKER_BUILDKIT="1")
        return run([docker_cli(), "build", "-f", str(dockerfile), "--build-arg", f"BASE_IMAGE={base}",
                    *secret_flags, "--network", "host", "--progress", "plain", "-t", tag, "."],
                   env=env, what=f"docker build {dockerfile.name} ({tag})")

    def alone_builds(self) -> dict[str, float]:
        """Each bench variant's rendered Dockerfile built alone with plain `docker build`, each from cold."""
        runs: dict[str, list[float]] = {}
        with self.pip_secrets() as flags:
            for name in self.bench_variants:
                for _ in range(COLD_RUNS):
                    self.cold()
                    runs.setdefault(name, []).append(
                        self.docker_build(self.dockerfiles[name], f"{ALONE_REPO}:{name}", flags))
                log(f"  alone, cold: {name}: {spread_note(runs[name])}")
        self.details["alone_cold_runs"] = runs
        return {name: median_spread(times)[0] for name, times in runs.items()}

    def naive_size(self) -> int:
        with self.pip_secrets() as flags:
            self.cold()
            seconds = self.docker_build(NAIVE_DOCKERFILE, NAIVE_TAG, flags)
        size = self.image_size(NAIVE_TAG)
        self.details["naive"] = {"size": size, "seconds": seconds}
        log(f"  naive: {size / 1e6:.0f} MB, built in {seconds:.1f} s")
        return size

    def image_size(self, ref: str) -> int:
        return int(self.docker("image", "inspect", "--format", "{{.Size}}", ref).stdout.strip())

    def payload_size(self, tag: str) -> dict[str, int]:
        """du -sb inside the image: /opt/venv, and the files of the apt packages the image added to the base
        (dpkg -L, regular files) plus the .pyc files Debian's python postinst compiles under /usr/lib/python3*."""
        base_pkgs = self.docker("run", "--rm", "--network", "none", "--entrypoint", "dpkg-query", BASE_IMAGE,
                                "-W", "-f=${Package}\\n").stdout.split()
        script = r"""
set -euo pipefail
du -sb /opt/venv
dpkg-query -W -f='${Package}\n' | sort -u > /tmp/now
tr ' ' '\n' <<<"$BASE_PKGS" | sort -u > /tmp/base
comm -13 /tmp/base /tmp/now > /tmp/added
{ xargs -r dpkg -L < /tmp/added; find /usr/lib/python3* -name '*.pyc' 2>/dev/null || true; } | sort -u \
  | while IFS= read -r f; do if [ -f "$f" ] && [ ! -L "$f" ]; then printf '%s\0' "$f"; fi; done \
  | du -sbc --files0-from=- | tail -n 1
wc -l < /tmp/added
"""
        res = self.docker("run", "--rm", "--network", "none", "-e", "BASE_PKGS=" + " ".join(base_pkgs),
                          "--entrypoint", "bash", tag, "-c", script, what="du inside the image")
        lines = res.stdout.strip().splitlines()
        if len(lines) != 3:
            raise StepFailed(f"unexpected du output: {res.stdout!r} {res.stderr[-300:]!r}")
        return {"venv": parse_du_total(lines[0]), "apt": parse_du_total(lines[1]), "apt_packages": int(lines[2])}

    def allreduce(self, tag: str) -> tuple[float, float]:
        times: dict[int, list[float]] = {1: [], 4: []}
        for _ in range(ALLREDUCE_REPEATS):
            for n in (1, 4):
                res = self.trainimg("test", tag, "--replicas", str(n), "--progress", "quiet")
                times[n].append(res.seconds)
                log(f"  trainimg test --replicas {n}: {res.seconds:.1f} s")
        self.details["allreduce_seconds"] = {str(k): v for k, v in times.items()}
        return min(times[1]), min(times[4])

    def repush(self, tag: str) -> int:
        first, second = self.push_to_fresh_registry(tag, 2)
        self.details["push_bytes"] = {"first": first, "second": second}
        log(f"  push 1: {first} bytes uploaded; push 2: {second} bytes uploaded")
        return second

    def push_to_fresh_registry(self, tag: str, times: int) -> list[int]:
        """`trainimg push` `times` times to a fresh LocalRegistry on 127.0.0.1: the layer bytes each uploaded."""
        with self.fresh_registry() as info:
            outs = [self.trainimg("push", tag, "--registry", info.host, "--username", info.username)
                    for _ in range(times)]
        return [parse_pushed_bytes(res.stdout + res.stderr) for res in outs]

    def pushed_size(self, tag: str) -> int:
        """The image's size as pushed: push it to a fresh LocalRegistry, then add up the compressed blob sizes
        its manifest lists (config and layers, as a registry stores and a pull downloads them)."""
        import requests

        with self.fresh_registry() as info:
            self.trainimg("push", tag, "--registry", info.host, "--username", info.username)
            repository, _, name = tag.rpartition(":")
            resp = requests.get(f"http://{info.host}/v2/{repository}/manifests/{name}", timeout=60,
                                auth=(info.username, info.password),
                                headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"})
        if resp.status_code != 200:
            raise StepFailed(f"the registry answered HTTP {resp.status_code} for the manifest of {tag}")
        return manifest_bytes(resp.json())

    @contextmanager
    def fresh_registry(self, access_log: bool = False) -> Iterator[Any]:
        """A LocalRegistry on a free port for this block, its password in TRAINIMG_REGISTRY_PASSWORD, its log at
        `self.registry_log` (one line per request with `access_log`); stopped after, and the registry-prefixed
        tags `push` made removed."""
        from trainimg.publish.localregistry import LocalRegistry

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        reg = LocalRegistry(self.tmp / f"registry-{port}", port=port, access_log=access_log)
        info = reg.start()
        self.registry_log = reg.log_path
        env_backup = self.env.get("TRAINIMG_REGISTRY_PASSWORD")
        self.env["TRAINIMG_REGISTRY_PASSWORD"] = info.password
        try:
            yield info
        finally:
            if env_backup is None:
                self.env.pop("TRAINIMG_REGISTRY_PASSWORD", None)
            else:
                self.env["TRAINIMG_REGISTRY_PASSWORD"] = env_backup
            reg.stop()
            listing = self.docker("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.split()
            mine = [ref for ref in listing if ref.startswith(f"{info.host}/")]
            if mine:
                self.docker("rmi", *mine, check=False)

    def gpu_figures(self) -> dict[str, dict[str, Any]]:
        """--gpu: build, gate, size and push each GPU variant (benchmarks/gpu.py says what and why); a failure is
        recorded on that image and the others go on."""
        from gpu import ALLOW_MISSING, GPU_VARIANTS
        from trainimg.imagebuild.builder import installed_versions

        report = self.tmp / "gpu-build.json"
        self.trainimg("build", *GPU_VARIANTS, *self.build_args(), "--allow-missing", ALLOW_MISSING,
                      "--json", str(report))
        builds = {r["name"]: r for r in json.loads(report.read_text())}
        base = self.image_size(BASE_IMAGE)
        rows: dict[str, dict[str, Any]] = {}
        for name in GPU_VARIANTS:
            build = builds[name]
            try:
                payload = self.payload_size(build["tag"])
                self.trainimg("test", build["tag"], "--replicas", "2", "--progress", "quiet")
                pushed = self.pushed_size(build["tag"])
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

    def prune_engine_keeping_base(self) -> None:
        """An ephemeral CI runner's engine: `docker system prune -af` and `docker builder prune -af`, every user's
        images and cache, but the base image (nothing can be pulled here), held by a sleeping container."""
        keeper = f"trainimg-bench-keep-{os.getpid()}"
        self.docker("run", "-d", "--name", keeper, "--network", "none", "--entrypoint", "sleep", BASE_IMAGE,
                    "infinity", what="hold the base image through the prune")
        try:
            self.docker("system", "prune", "-af", what="docker system prune")
            self.docker("builder", "prune", "-af", what="docker builder prune")
        finally:
            self.docker("rm", "-f", keeper, check=False)

    def ci_figures(self) -> None:
        """ci_noop_release, ci_noop_layer_bytes and ci_one_change (benchmarks/cifleet.py); a failure marks the
        figures not yet measured failed."""
        from cifleet import CI_FIGURES, CiFleet

        try:
            CiFleet(self, log, PIN_FROM, PIN_TO).measure()
        except (StepFailed, OSError, ValueError, json.JSONDecodeError) as exc:
            log(f"bench: ci figures failed: {exc}")
            for name in CI_FIGURES:
                if self.figures[name]["status"] != "ok":
                    self.fail(name, f"failed: {exc}")

    def ci_rebuild(self, tag: str) -> float:
        """An ephemeral CI runner: push the released image, prune the engine to nothing but the base image,
        rebuild with `--cache-from` the pushed image, push again. Returns the rebuild's seconds."""
        # The released variant (pin_change retagged a changed image), tested: push wants a passing record.
        self.trainimg("build", PIN_VARIANT, *self.build_args(), recipes=BENCH_RECIPES)
        self.trainimg("test", tag, "--replicas", "1", "--progress", "quiet")
        with self.fresh_registry() as info:
            self.env["DOCKER_CONFIG"] = str(self.tmp / "docker-config")  # BuildKit reads the cache with this login
            run([docker_cli(), "login", info.host, "--username", info.username, "--password-stdin"], env=self.env,
                input=info.password, what="docker login to the bench registry")
            remote = f"{info.host}/{tag}"
            push = ("push", tag, "--registry", info.host, "--username", info.username)
            first = parse_pushed_bytes(self.trainimg(*push).stdout)
            try:
                self.prune_engine_keeping_base()
                rows_json = self.tmp / "ci_rebuild.json"
                res = self.trainimg("build", PIN_VARIANT, *self.build_args(), "--cache-from", remote, "--json",
                                    str(rows_json), recipes=BENCH_RECIPES)
            finally:
                self.env.pop("DOCKER_CONFIG", None)
            (row,) = json.loads(rows_json.read_text())
            self.trainimg("test", tag, "--replicas", "1", "--progress", "quiet", check=False)
            again = parse_pushed_bytes(self.trainimg(*push).stdout)
        self.details["ci_rebuild"] = {"seconds": res.seconds, "first_push_bytes": first, "repush_bytes": again,
                                      "steps": row["steps"], "cache_hits": row["cache_hits"]}
        log(f"  ci rebuild: {res.seconds:.1f} s, {row['cache_hits']}/{row['steps']} steps cached; re-push "
            f"uploaded {again} bytes (first push {first})")
        return res.seconds

    def pin_change(self) -> float:
        copy = self.tmp / "pin" / "recipes"
        shutil.copytree(BENCH_RECIPES, copy)
        recipe = copy / "pytorch.yaml"
        recipe.write_text(change_pin(recipe.read_text(encoding="utf-8"), PIN_FROM, PIN_TO), encoding="utf-8")
        seconds, _ = self.matrix_build(copy, [PIN_VARIANT], "pin_change_rebuild")
        return seconds

    def installs(self, variants: Sequence[str]) -> None:
        """uv_vs_pip and uv_vs_pip_warm over `variants` (the worst of them is the figure), and
        reproducible_package_diffs for the first (benchmarks/installs.py). Each variant's images and BuildKit
        records go before the next one starts."""
        from installs import InstallBench

        measured: dict[str, dict[str, ColdBuild]] = {}
        for i, variant in enumerate(variants):
            ib = InstallBench(self.docker, self.docker_build_run, docker_cli(), self.tmp, BASE_IMAGE, log, variant)
            try:
                with self.pip_secrets() as flags:
                    builds = step("uv_vs_pip", self, lambda: ib.uv_vs_pip(flags, keep_uv_cold=i == 0))
                    if builds is FAILED:
                        continue
                    measured[variant] = builds
                    self.details.setdefault("installs", {})[variant] = {"seconds": {
                        **{k: b.seconds for k, b in builds.items()},
                        **{f"{k}_install_step": b.install_step for k, b in builds.items()}}}
                    if i == 0:
                        same = step("reproducible_package_diffs", self,
                                    lambda: ib.reproducible(builds["uv_cold"], flags))
                        if same is not FAILED:
                            self.set_reproducible(variant, same)
            finally:
                ib.clean()
        if len(measured) < len(variants):
            self.fail("uv_vs_pip", f"failed: not measured for {', '.join(v for v in variants if v not in measured)}")
            self.fail("uv_vs_pip_warm", "not measured: the uv/pip builds of a variant failed")
            if variants[0] not in measured:
                self.fail("reproducible_package_diffs", "not measured: the uv/pip builds failed")
            return
        self.set_installs(measured)

    def set_installs(self, measured: Mapping[str, Mapping[str, ColdBuild]]) -> None:
        """The worst variant's whole-build ratio is the figure; each variant's seconds, and its install step's
        alone (what the installer changes: the rest of a build is the same work for both), are in `how`."""
        for figure, (uv, pip), what in (
                ("uv_vs_pip", ("uv_cold", "pip_cold"),
                 "built by `docker build` from its rendered Dockerfile on a fresh base (every step runs) with a new, "
                 "empty wheel cache mount"),
                ("uv_vs_pip_warm", ("uv_warm", "pip_warm"),
                 "the same on another fresh base with the wheel cache mount the cold build filled")):
            rows = {v: (b[uv].seconds, b[pip].seconds, b[uv].install_step, b[pip].install_step)
                    for v, b in measured.items()}
            worst = max(rows, key=lambda v: rows[v][0] / rows[v][1])
            self.set(figure, ratio(*rows[worst][:2]),
                     f"{what}; worst of {len(rows)}: " + "; ".join(
                         f"{v} uv {u:.1f} s / pip {p:.1f} s = {u / p:.2f} (the install step alone {iu:.1f} s / "
                         f"{ip:.1f} s = {iu / ip:.2f})" for v, (u, p, iu, ip) in rows.items()))

    def set_reproducible(self, variant: str, same: dict[str, Any]) -> None:
        self.details["reproducible"] = {"variant": variant, **same}
        diffs = len(same["lock_differs"]) + len(same["freeze_differs"]) + len(same["sbom_differs"])
        layers = "; ".join(f"layer {d['layer']} ({d['step'][:60]}): {d['content_differs']} of {d['files']} files "
                           f"differ in content (e.g. {', '.join(d['content_examples'][:3]) or 'none'}), "
                           f"{d['mtime_only']} only in mtime" for d in same["layers"])
        self.set("reproducible_package_diffs", diffs,
                 f"two cold uv builds of {variant} ({same['seconds'][0]:.0f} s, {same['seconds'][1]:.0f} s): lines "
                 f"differing in /etc/trainimg/requirements.lock {len(same['lock_differs'])}, in `pip freeze` "
                 f"({same['packages']} packages) {len(same['freeze_differs'])}, SBOM components "
                 f"({same['sbom_components']}) {len(same['sbom_differs'])}. Layers differing by digest: "
                 f"{len(same['layers'])}: {layers or 'none'}")

    # -- the whole run

    def measure(self) -> None:
        step("render_ms_per_variant", self, self.render_speed)
        self.prepare()
        pin_tag = self.bench_tags[PIN_VARIANT]

        naive = None
        if self.quick:
            self.skip("size_vs_naive", "skipped (--quick): the naive build is not run")
        else:
            naive = step("size_vs_naive", self, self.naive_size)

        alone: dict[str, float] | None = None
        if self.quick:
            self.skip("matrix_build_ratio", "skipped (--quick): the variants are not built alone from cold")
            self.skip("pin_change_rebuild_ratio", "skipped (--quick): no cold build of the variant alone")
        else:
            alone = step("matrix_build_ratio", self, self.alone_builds)

        cold_note = "" if not self.quick else " [--quick: the cache was NOT cleared, so this is not a cold build]"
        matrix_runs = []
        for _ in range(1 if self.quick else COLD_RUNS):
            self.cold()
            matrix_runs.append(self.matrix_build(BENCH_RECIPES, self.bench_variants, "matrix_cold")[0])
        cold_seconds = median_spread(matrix_runs)[0]
        log(f"  matrix cold: {spread_note(matrix_runs)}")
        self.details["matrix_cold_runs"] = matrix_runs
        if alone:
            self.set("matrix_build_ratio", ratio(cold_seconds, sum(alone.values())),
                     f"`trainimg --recipes benchmarks/recipes build` of {len(alone)} CPU variants from cold, "
                     f"{spread_note(matrix_runs)} / sum of the medians of plain `docker build` of each rendered "
                     f"Dockerfile alone, each from cold ({COLD_RUNS} runs each): {sum(alone.values()):.1f} s")

        def noop() -> None:
            seconds, rows = self.matrix_build(BENCH_RECIPES, self.bench_variants, "noop_rebuild")
            self.set("noop_rebuild_ratio", ratio(seconds, cold_seconds),
                     f"the same `trainimg build` again, nothing changed: {seconds:.1f} s / cold matrix build "
                     f"{cold_seconds:.1f} s ({sum(r['cache_hits'] for r in rows)}/{sum(r['steps'] for r in rows)} "
                     f"steps cached){cold_note}")
        step("noop_rebuild_ratio", self, noop)

        def sizes() -> None:
            size = self.image_size(pin_tag)
            base = self.image_size(BASE_IMAGE)
            payload = self.payload_size(pin_tag)
            self.details["sizes"] = {"image": size, "base": base, **payload}
            denominator = base + payload["venv"] + payload["apt"]
            self.set("size_overhead", ratio(size, denominator),
                     f"{pin_tag} {size / 1e6:.1f} MB / (base {base / 1e6:.1f} MB + du -sb /opt/venv "
                     f"{payload['venv'] / 1e6:.1f} MB + du -sb of {payload['apt_packages']} added apt packages' "
                     f"files {payload['apt'] / 1e6:.1f} MB)")
            if naive is not None:
                self.set("size_vs_naive", ratio(size, naive),
                         f"{pin_tag} {size / 1e6:.1f} MB / {NAIVE_DOCKERFILE.relative_to(ROOT)} "
                         f"(one stage, apt lists, pip cache and build-essential left in) {naive / 1e6:.1f} MB")
        step("size_overhead", self, sizes)

        def allreduce() -> None:
            one, four = self.allreduce(pin_tag)
            self.set("allreduce_4_vs_1", ratio(four, one),
                     f"`trainimg test {pin_tag} --replicas 4` {four:.1f} s / `--replicas 1` {one:.1f} s "
                     f"(wall, best of {ALLREDUCE_REPEATS} each)")
        tested = step("allreduce_4_vs_1", self, allreduce) is not FAILED

        if tested:
            def repush() -> None:
                second = self.repush(pin_tag)
                first = self.details["push_bytes"]["first"]
                self.set("repush_bytes", second,
                         f"`trainimg push {pin_tag}` twice to a fresh LocalRegistry on 127.0.0.1: first "
                         f"{first} bytes, second {second} bytes uploaded")
            step("repush_bytes", self, repush)
        else:
            self.fail("repush_bytes", "not measured: the image did not pass `trainimg test` (push refuses it)")

        def pin() -> None:
            seconds = self.pin_change()
            if alone:
                self.set("pin_change_rebuild_ratio", ratio(seconds, alone[PIN_VARIANT]),
                         f"`trainimg build {PIN_VARIANT}` after {PIN_FROM} -> {PIN_TO} in a temp copy of the "
                         f"recipe: {seconds:.1f} s / that variant's Dockerfile built alone from cold "
                         f"{alone[PIN_VARIANT]:.1f} s")
            else:
                log(f"  pin change rebuild took {seconds:.1f} s (no cold denominator in --quick)")
        step("pin_change_rebuild_ratio", self, pin)

        if self.quick:
            for name in ("uv_vs_pip", "uv_vs_pip_warm", "reproducible_package_diffs"):
                self.skip(name, "skipped (--quick): five cold builds (`--installs` runs them alone)")
        else:
            self.installs([INSTALLS_VARIANT])

        self.ci_figures()

        # Last: it prunes the whole engine, so nothing after it could reuse a cache.
        if self.quick or not alone:
            self.skip("ci_rebuild_ratio", "skipped (--quick): the engine is not pruned, no cold denominator")
        elif not tested:
            self.fail("ci_rebuild_ratio", "not measured: the image did not pass `trainimg test` (push refuses it)")
        else:
            def ci() -> None:
                seconds = self.ci_rebuild(pin_tag)
                self.set("ci_rebuild_ratio", ratio(seconds, alone[PIN_VARIANT]),
                         f"`trainimg build {PIN_VARIANT} --cache-from <registry>/{pin_tag}` after `docker system "
                         f"prune -af` and `docker builder prune -af`: {seconds:.1f} s / that variant's Dockerfile "
                         f"built alone from cold, median of {COLD_RUNS}: {alone[PIN_VARIANT]:.1f} s; re-push "
                         f"uploaded {self.details['ci_rebuild'].get('repush_bytes')} bytes")
            step("ci_rebuild_ratio", self, ci)

    def cleanup(self) -> None:
        if not self.keep_images:
            try:
                self.remove_bench_images()
            except StepFailed as exc:
                log(f"bench: could not remove the bench images: {exc}")
        shutil.rmtree(self.tmp, ignore_errors=True)


FAILED = object()


def step(name: str, bench: Bench, fn: Callable[[], Any]) -> Any:
    """Run one measurement; a failure marks figure `name` failed (never a fudged number) and the run goes on."""
    try:
        return fn()
    except (StepFailed, OSError, ValueError, json.JSONDecodeError) as exc:
        bench.fail(name, f"failed: {exc}")
        log(f"bench: {name} failed: {exc}")
        return FAILED


def machine_info(env: Mapping[str, str]) -> dict[str, Any]:
    info: dict[str, Any] = {"nproc": len(os.sched_getaffinity(0)), "kernel": platform.release(),
                            "hostname": platform.node()}
    try:
        info["memory_bytes"] = parse_meminfo(Path("/proc/meminfo").read_text())
    except (OSError, ValueError):
        info["memory_bytes"] = None
    try:
        out = run([docker_cli(), "version", "--format", "{{.Server.Version}} {{.Client.Version}}"], env=env,
                  timeout=60).stdout.split()
        info["docker_server"], info["docker_client"] = out[0], out[1]
    except (StepFailed, IndexError, OSError):
        info["docker_server"] = info["docker_client"] = None
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true",
                        help="prune nothing; skip the alone-cold and naive builds (their figures print `skipped`); "
                             "write reports/bench-quick.json and leave README.md alone")
    parser.add_argument("--keep-images", action="store_true", help="keep the trainimg-bench/* images at the end")
    parser.add_argument("--gpu", action="store_true",
                        help="also build, gate and push the GPU image of each framework and report its size, "
                             "compressed size as pushed and size / (base + payload) (downloads gigabytes cold)")
    parser.add_argument("--installs", metavar="VARIANT", nargs="*",
                        help="measure only uv_vs_pip and uv_vs_pip_warm for each VARIANT (the worst is the figure) "
                             "and reproducible_package_diffs for the first (default "
                             f"{INSTALLS_VARIANT}); prunes nothing shared; writes reports/bench-installs.json")
    parser.add_argument("--ci", action="store_true",
                        help="measure only ci_noop_release, ci_noop_layer_bytes and ci_one_change (prunes only "
                             "the bench's own images and cache unless TRAINIMG_BENCH_PRUNE_ALL=1); writes "
                             "reports/bench-ci.json")
    parser.add_argument("--layers", metavar="ARG", nargs=argparse.REMAINDER,
                        help="only the layer figures (benchmarks/layers.py VARIANT [--allow-missing C]); run on an "
                             "engine of its own (DOCKER_HOST): it removes the variant's images there")
    args = parser.parse_args(argv)
    if args.layers:
        import layers
        return layers.main(args.layers)
    if args.installs is not None:
        return installs_only(args.installs or [INSTALLS_VARIANT])
    if args.ci:
        from cifleet import CI_FIGURES

        return figures_only(CI_FIGURES, "--ci", Bench.ci_figures, ROOT / "reports" / "bench-ci.json", {},
                            keep_images=True)  # it removes its own images: another bench's stay

    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    bench = Bench(quick=args.quick, keep_images=args.keep_images)
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = machine_info(bench.env)
    log(f"bench: {date}, {machine_line(machine)}{' (--quick)' if args.quick else ''}")
    started = time.monotonic()
    setup_error = None
    try:
        bench.measure()
    except StepFailed as exc:
        setup_error = str(exc)
        log(f"bench: stopped: {exc}")
        for name, fig in bench.figures.items():
            if fig["status"] == "skipped" and not fig["how"]:
                bench.fail(name, f"not measured: {exc}")
    except KeyboardInterrupt:
        log("bench: interrupted")
        bench.cleanup()
        return 130
    gpu_rows: dict[str, dict[str, Any]] = {}
    if args.gpu:
        from gpu import figure_lines, render_gpu_table

        try:
            gpu_rows = bench.gpu_figures()
        except (StepFailed, OSError, ValueError, KeyError) as exc:
            log(f"bench: --gpu figures failed: {exc}")
            gpu_rows = {"error": {"error": str(exc)[:300]}}
    bench.cleanup()
    total = time.monotonic() - started

    for fig in FIGURES:  # stdout: the contract
        row = bench.figures[fig.name]
        print(f"{fig.name}: {format_value(row['value'], fig.unit, row['status'])}", flush=True)
    if args.gpu:
        for line in figure_lines(gpu_rows):
            print(line, flush=True)
    for fig in FIGURES:  # stderr: how each was measured
        log(f"how {fig.name}: {bench.figures[fig.name]['how'] or 'not measured'}")
    missed = [f.name for f in FIGURES if bench.figures[f.name]["met"] is False]
    failed = [f.name for f in FIGURES if bench.figures[f.name]["status"] == "failed"]
    for name in missed:
        row = bench.figures[name]
        note = " (--quick: not a cold measurement)" if args.quick and name == "noop_rebuild_ratio" else ""
        log(f"goal missed: {name} ({format_value(row['value'], GOALS[name].unit)}, goal "
            f"{format_goal(name)}){note}")
    for name in failed:
        log(f"not measured: {name}: {bench.figures[name]['how']}")

    report = {
        "date": date, "machine": machine, "quick": args.quick, "total_seconds": round(total, 1),
        "figures": {name: row["value"] for name, row in bench.figures.items()},
        "goals": {f.name: f.goal for f in FIGURES},
        "status": {name: row["status"] for name, row in bench.figures.items()},
        "met": {name: row["met"] for name, row in bench.figures.items()},
        "how": {name: row["how"] for name, row in bench.figures.items()},
        "missed": missed, "failed": failed, "error": setup_error, "details": bench.details,
    }
    if args.gpu:
        report["gpu"] = gpu_rows
        failed += [f"gpu.{name}" for name, row in gpu_rows.items() if "error" in row]
    path = QUICK_REPORT if args.quick else REPORT
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    log(f"bench: wrote {path.relative_to(ROOT)} in {total:.0f} s total")
    if not args.quick:
        table = render_table(bench.figures, date, machine)
        if args.gpu:
            table += "\n\n" + render_gpu_table(gpu_rows)
        README.write_text(update_readme(README.read_text(encoding="utf-8"), table), encoding="utf-8")
        log("bench: README.md table updated")
    else:
        log("bench: --quick leaves README.md alone")
    return 1 if failed else 0


def installs_only(variants: Sequence[str]) -> int:
    """`--installs VARIANT...`: the install figures alone (cold without pruning: benchmarks/installs.py)."""
    return figures_only(("uv_vs_pip", "uv_vs_pip_warm", "reproducible_package_diffs"),
                        f"--installs {' '.join(variants)}", lambda bench: bench.installs(variants),
                        ROOT / "reports" / "bench-installs.json", {"variants": list(variants)}, keep_images=False)


def figures_only(names: Sequence[str], what: str, measure: Callable[[Bench], None], path: Path,
                 extra: Mapping[str, Any], keep_images: bool) -> int:
    """Some figures alone (`what`: the option that asked, for the log): measured by `measure`, printed, written
    to `path` with `extra`; README.md is left alone; the trainimg-bench/* images removed unless `keep_images`.
    Exit status as main's."""
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    bench = Bench(quick=False, keep_images=keep_images)
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = machine_info(bench.env)
    log(f"bench {what}: {date}, {machine_line(machine)}")
    try:
        measure(bench)
    finally:
        bench.cleanup()
    for name in names:
        row = bench.figures[name]
        print(f"{name}: {format_value(row['value'], GOALS[name].unit, row['status'])}", flush=True)
        log(f"how {name}: {row['how'] or 'not measured'}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"date": date, "machine": machine, **extra,
                                "figures": {n: bench.figures[n] for n in names}, "details": bench.details},
                               indent=2, sort_keys=True) + "\n", encoding="utf-8")
    log(f"bench: wrote {path.relative_to(ROOT)}")
    return 1 if any(bench.figures[n]["status"] == "failed" for n in names) else 0


if __name__ == "__main__":
    sys.exit(main())
