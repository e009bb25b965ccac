"""The bench's harness: what every figure family of `make bench` measures with (benchmarks/bench.py runs them).

Why a module of its own: the families (the matrix figures in core.py, the install figures in installs.py, the CI
fleet in cifleet.py) each need the same timed commands, engine and registry helpers and bookkeeping, and none may
import another's runner (bench.py and cifleet.py used to import each other). Every family imports this module and
nothing here imports a family: FAMILIES names each family's measuring function as "module:function", imported
when it runs. A new family is a module with a `measure(bench)` function and one Family line in FAMILIES (its
figures' goals and units go in figures.FIGURES).
"""

from __future__ import annotations

import importlib
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
from pathlib import Path
from typing import Any

from figures import (
    FIGURES,
    bench_refs,
    failure_tail,
    goal_met,
    manifest_bytes,
    parse_du_total,
    parse_meminfo,
    parse_pushed_bytes,
)

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "benchmarks"
BENCH_RECIPES = BENCH_DIR / "recipes"
SHIPPED_RECIPES = ROOT / "recipes"

BASE_IMAGE = "local/debian:bookworm"
WHEELHOUSES = ("/opt/wheels", "/opt/pypi", "/opt/pypi-more")
CMD_TIMEOUT = 3 * 3600
PIN_FROM, PIN_TO = "six==1.16.0", "six==1.17.0"  # the extra pin the one-change figures move
PIN_VARIANT = "pytorch-2.13.0-cpu-py3.11"  # the bench variant that is sized, tested, pushed and rebuilt


@dataclass(frozen=True)
class Family:
    """A family of figures measured together: their names (goals and units: figures.FIGURES) and the function
    that measures them on a Harness, as "module:function" in benchmarks/ (imported when it runs, so the harness
    imports no family and no family another)."""

    name: str
    figures: tuple[str, ...]
    measure: str

    def run(self, bench: Harness) -> None:
        module, _, function = self.measure.partition(":")
        getattr(importlib.import_module(module), function)(bench)


# The families a full run (`make bench`) measures, in this order: ci_rebuild last, its builds on empty engines
# beside the machine's (benchmarks/runner.py). `--ci` and `--installs` measure one family alone.
FAMILIES: tuple[Family, ...] = (
    Family("matrix", ("render_ms_per_variant", "size_vs_naive", "matrix_build_ratio", "noop_rebuild_ratio",
                      "size_overhead", "allreduce_4_vs_1", "repush_bytes", "pin_change_rebuild_ratio"),
           "core:measure"),
    Family("installs", ("uv_vs_pip", "uv_vs_pip_warm", "reproducible_package_diffs"), "installs:measure"),
    Family("ci", ("ci_noop_release", "ci_noop_layer_bytes", "ci_one_change"), "cifleet:measure"),
    Family("coldstart", ("cold_import_ratio",), "coldstart:measure"),
    Family("nodestart", ("node_start_zstd_vs_gzip",), "nodestart:measure"),
    Family("lazystart", ("lazy_import_vs_whole", "lazy_import_gpu_vs_whole", "lazy_allreduce_vs_whole",
                         "lazy_order_vs_none", "lazy_bytes_before_import"), "lazystart:measure"),
    Family("audit", ("audit_s_per_variant",), "audit:measure"),
    Family("signing", ("sign_s_per_variant",), "signing:measure"),
    Family("arm64", ("arm64_build_ratio", "arm64_gate_ratio", "arm64_layer_diffs"), "arm64:measure"),
    Family("grammar", ("registry_refusal_ms", "reference_near_miss_ms"), "grammar:measure"),
    Family("ci_rebuild", ("ci_rebuild_ratio",), "runner:measure"),
)
FAMILY = {f.name: f for f in FAMILIES}


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
        why = failure_tail(proc.stderr or proc.stdout)
        raise StepFailed(f"{what or ' '.join(cmd[:3])} exited {proc.returncode}: {why}")
    return Run(seconds, proc.stdout, proc.stderr)


class Harness:
    """One bench run's state (its temp folder, environment, figures and details) and the commands every family
    measures with. `quick`: prune nothing shared (see bench.py). `carried` holds what one family leaves for a
    later one (the matrix family's images)."""

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
        self.registry_log = self.tmp / "no-registry.log"  # the log of the registry fresh_registry started last
        self.carried: dict[str, Any] = {}

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

    def trainimg(self, *args: str, recipes: Path | None = None, env: Mapping[str, str] | None = None,
                 **kw: Any) -> Run:
        head = [sys.executable, "-m", "trainimg"] + (["--recipes", str(recipes)] if recipes else [])
        return run([*head, *args], env=self.env if env is None else env, what=f"trainimg {args[0]}", **kw)

    # -- cold, and the commands the figures are timed with

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

    def docker_build(self, dockerfile: Path, tag: str, secret_flags: list[str], context: Path,
                     base: str = BASE_IMAGE) -> float:
        return self.docker_build_run(dockerfile, tag, secret_flags, context, base).seconds

    def docker_build_run(self, dockerfile: Path, tag: str, secret_flags: list[str], context: Path,
                         base: str = BASE_IMAGE) -> Run:
        """`docker build --progress plain` of `dockerfile` in `context`: its time and its log (stderr), whose steps
        say what took the time."""
        env = dict(self.env, DOCKER_BUILDKIT="1")
        return run([docker_cli(), "build", "-f", str(dockerfile), "--build-arg", f"BASE_IMAGE={base}",
                    *secret_flags, "--network", "host", "--progress", "plain", "-t", tag, str(context)],
                   env=env, what=f"docker build {dockerfile.name} ({tag})")

    def baked_context(self, recipes: Path, names: Sequence[str]) -> Path:
        """The build context `trainimg bake` writes for variants `names` of `recipes`: the runtime, the base files,
        each variant's lock and its not-audited document, where a rendered Dockerfile takes them from. A plain
        `docker build` of that Dockerfile needs exactly this; each call gets a state folder of its own (bake
        empties its folder each time)."""
        state = self.tmp / f"bake-{len(list(self.tmp.glob('bake-*')))}"
        self.trainimg("bake", *names, "--output", str(self.tmp / "bake.json"), recipes=recipes,
                      env=dict(self.env, TRAINIMG_STATE_DIR=str(state)))
        return state / "bake" / "context"

    def empty_context(self) -> Path:
        """A build context holding nothing, for a Dockerfile that takes nothing from it."""
        folder = self.tmp / "empty-context"
        folder.mkdir(exist_ok=True)
        return folder

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
        from trainimg.registry.localregistry import LocalRegistry

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

    def prune_engine_keeping_base(self) -> None:
        """`docker system prune -af` and `docker builder prune -af`, every user's images and cache, but the base
        image (nothing can be pulled here), held by a sleeping container (cifleet's TRAINIMG_BENCH_PRUNE_ALL=1)."""
        keeper = f"trainimg-bench-keep-{os.getpid()}"
        self.docker("run", "-d", "--name", keeper, "--network", "none", "--entrypoint", "sleep", BASE_IMAGE,
                    "infinity", what="hold the base image through the prune")
        try:
            self.docker("system", "prune", "-af", what="docker system prune")
            self.docker("builder", "prune", "-af", what="docker builder prune")
        finally:
            self.docker("rm", "-f", keeper, check=False)

    def cleanup(self) -> None:
        if not self.keep_images:
            try:
                self.remove_bench_images()
            except StepFailed as exc:
                log(f"bench: could not remove the bench images: {exc}")
        shutil.rmtree(self.tmp, ignore_errors=True)


FAILED = object()


def step(name: str, bench: Harness, fn: Callable[[], Any]) -> Any:
    """Run one measurement; a failure marks figure `name` failed (never a fudged number) and the run goes on."""
    try:
        return fn()
    except (StepFailed, OSError, ValueError, json.JSONDecodeError) as exc:
        bench.fail(name, f"failed: {exc}")
        log(f"bench: {name} failed: {exc}")
        return FAILED


def on_matrix_images(bench: Harness, name: str, measure_images: Callable[[list[str]], Any]) -> None:
    """Figure `name` measured on the images the matrix family built and tested (`bench.carried`: the bench matrix
    is CPU variants only, benchmarks/recipes), as a family of a full run measures them; skipped when it built none."""
    matrix = bench.carried.get("matrix")
    images = list(matrix.bench_tags.values()) if matrix else []
    if not images:
        bench.skip(name, "skipped: the matrix family built no CPU image")
        return
    step(name, bench, lambda: measure_images(images))


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
