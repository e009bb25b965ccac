"""The `trainimg` command. Verbs and flags here are contracts that CI and outside checks call.

Exit codes: 0 fine, 1 a check failed, 2 bad input. Every error is one line on stderr (``file:key: reason`` for
recipes); tracebacks only with TRAINIMG_DEBUG=1. All errors are mapped to exit codes in `main`, nowhere else.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from .errors import CheckFailed, TrainimgError, UserInputError


class Ctx:
    """What every verb shares: the recipes folder, the repository root beside it, the environment."""

    def __init__(self, recipes: Path, env: Mapping[str, str]) -> None:
        self.recipes_dir = recipes
        self.root = recipes.resolve().parent
        self.env = env

    def recipes(self, paths: tuple[Path, ...] = ()):
        from .recipe import load_recipes

        return load_recipes(self.recipes_dir, paths or None)


pass_ctx = click.make_pass_decorator(Ctx)


def _emit_json(data: Any, path: str | None) -> None:
    """Write a JSON report to `path` ('-' is stdout)."""
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    if path in (None, "-"):
        click.echo(text, nl=False)
    else:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text, encoding="utf-8")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--recipes", "recipes", type=click.Path(path_type=Path), default=None,
              help="Recipes folder (default: $TRAINIMG_RECIPES or ./recipes). images/ lies beside it.")
@click.pass_context
def cli(ctx: click.Context, recipes: Path | None) -> None:
    """trainimg: recipes -> Dockerfiles -> images -> conformance -> push."""
    env = dict(os.environ)
    ctx.obj = Ctx(recipes or Path(env.get("TRAINIMG_RECIPES", "recipes")), env)


@cli.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array, one object per variant.")
@pass_ctx
def list_cmd(c: Ctx, as_json: bool) -> None:
    """List the variants the recipes expand to."""
    from .plan import make_plan
    from .compat import load_compat

    recipes = c.recipes()
    rows = []
    for v in recipes.variants:
        plan = make_plan(v, load_compat(), recipes.by_name.get(v.extends or ""))
        rows.append({
            "name": v.name, "tag": v.tag, "dockerfile": plan.dockerfile_path(), "framework": v.framework,
            "base": v.base_image, "extends": v.extends, "recipe": v.source, "gpu": v.gpu,
            "reduction_server": v.reduction_server, "versions": v.versions(), "extras": list(v.extras),
        })
    if as_json:
        _emit_json(rows, None)
        return
    for r in rows:
        click.echo(f"{r['name']:<34} {r['tag']:<44} {r['base']}")


@cli.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@pass_ctx
def validate(c: Ctx, paths: tuple[Path, ...]) -> None:
    """Validate recipes (all, or the files given) against the compatibility data."""
    for p in paths:
        if not p.is_file():
            raise UserInputError(f"{p} is not a file", where="validate")
    recipes = c.recipes(paths)
    click.echo(f"{len(recipes.variants)} variants valid")


@cli.command()
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Root to write images/ under (default: the repository root beside the recipes).")
@click.option("--check", is_flag=True, help="Render in memory; exit 1 listing files that differ from images/.")
@pass_ctx
def render(c: Ctx, out: Path | None, check: bool) -> None:
    """Render every variant's Dockerfile into images/<variant>/Dockerfile."""
    from . import render as r

    files = r.render_all(c.recipes())
    root = out or c.root
    if check:
        drift = r.check(files, root)
        for d in drift:
            click.echo(f"{d.path}: {d.kind}")
        if drift:
            raise CheckFailed(f"{len(drift)} file(s) under images/ differ from the recipes; run `trainimg render`")
        click.echo(f"{len(files)} Dockerfiles up to date")
        return
    changed = r.write(files, root)
    click.echo(f"{len(files)} Dockerfiles rendered, {len(changed)} changed")


def _build_options(c: Ctx, base_image: str | None, ca_bundle: Path | None, wheelhouse: tuple[Path, ...],
                   allow_missing: tuple[str, ...], jobs: int):
    from .build import BuildOptions
    from .recipe import _REFERENCE_RE
    from .wheelhouse import default_ca_bundle, default_wheelhouses

    if base_image is not None and not _REFERENCE_RE.match(base_image):
        raise UserInputError(f"{base_image!r} is not an image reference", where="--base-image")
    return BuildOptions(
        base_image=base_image,
        ca_bundle=ca_bundle if ca_bundle is not None else default_ca_bundle(c.env),
        wheelhouses=wheelhouse or default_wheelhouses(c.env),
        allow_missing=allow_missing,
        jobs=jobs,
    )


def build_flags(fn):
    """The build flags `build` and `release` share."""
    for deco in reversed([
        click.option("--base-image", help="Replace the root FROM (mirrors, offline machines)."),
        click.option("--ca-bundle", type=click.Path(path_type=Path),
                     help="CA bundle for a TLS-intercepting proxy (default: $SSL_CERT_FILE or $PIP_CERT); "
                          "passed as a BuildKit secret, never in a layer."),
        click.option("--wheelhouse", multiple=True, type=click.Path(path_type=Path),
                     help="Folder of wheels or PEP 503 index folder (default: $PIP_FIND_LINKS); repeatable."),
        click.option("--allow-missing", multiple=True, metavar="COMPONENT",
                     help="Build without COMPONENT when it cannot be installed; recorded as absent."),
        click.option("--progress", type=click.Choice(["auto", "plain", "quiet"]), default="auto", show_default=True),
        click.option("--jobs", type=click.IntRange(1, 16), default=3, show_default=True,
                     help="Variants built at once, after the parents they share."),
    ]):
        fn = deco(fn)
    return fn


def _engine():
    from .engine import DockerEngine

    return DockerEngine()


@cli.command()
@click.argument("variants", nargs=-1)
@build_flags
@click.option("--json", "json_path", metavar="FILE", help="Write a JSON report per variant.")
@click.option("--locked", is_flag=True, help="Build each root variant on the base its lockfile entry records.")
@click.option("--lock", "lock_path", metavar="FILE", default=None,
              help="The lockfile --locked reads (default: images.lock).")
@pass_ctx
def build(c: Ctx, variants: tuple[str, ...], base_image: str | None, ca_bundle: Path | None,
          wheelhouse: tuple[Path, ...], allow_missing: tuple[str, ...], progress: str, jobs: int,
          json_path: str | None, locked: bool, lock_path: str | None) -> None:
    """Build variants (default: all) through the Docker engine."""
    import dataclasses

    from .build import Builder
    from .progress import Progress

    if lock_path and not locked:
        raise UserInputError("--lock is read only with --locked", where="--lock")
    if locked and base_image:
        raise UserInputError("--locked builds on the recorded bases; drop --base-image", where="--locked")
    opts = _build_options(c, base_image, ca_bundle, wheelhouse, allow_missing, jobs)
    recipes, engine = c.recipes(), _engine()
    if locked:
        from .lock import DEFAULT_LOCK, locked_bases

        chosen = recipes.with_parents(recipes.select(list(variants)))
        opts = dataclasses.replace(opts, base_overrides=locked_bases(engine, lock_path or DEFAULT_LOCK, chosen))
    builder = Builder(recipes, engine, Progress(progress, c.env), c.env, c.root)
    results = builder.build(list(variants), opts)
    if json_path:
        _emit_json([r.to_json() for r in results], json_path)


@cli.command()
@click.option("--out", "out", metavar="FILE", default="-", help="Write the bake file here (default: stdout).")
@pass_ctx
def bake(c: Ctx, out: str) -> None:
    """Write the build plan as a `docker buildx bake` JSON file."""
    from .bake import bake_file

    _emit_json(bake_file(c.recipes(), c.root), out)


def _resolve_image(c: Ctx, ref: str) -> tuple[str, str | None]:
    """IMAGE|VARIANT: a variant name of the recipes gives its tag; anything else is an image reference."""
    from .recipe import RecipeError

    try:
        recipes = c.recipes()
    except RecipeError:
        recipes = None
    if recipes and ref in recipes.by_name:
        return recipes.by_name[ref].tag, ref
    return ref, None


def _log_printer(progress: str, env: Mapping[str, str]):
    if progress == "quiet" or (progress == "auto" and env.get("CI") is None and not sys.stderr.isatty()):
        return None
    return lambda name, line: click.echo(f"[{name}] {line}", err=True)


def test_flags(fn):
    """The test flags `test` and `release` share."""
    for deco in reversed([
        click.option("--platform", type=click.Choice(["vertex", "aiplatform", "uai"]), default="vertex",
                     show_default=True, help="Whose env the replicas get."),
        click.option("--replicas", type=int, default=2, show_default=True, help="Replicas in the all-reduce."),
        click.option("--nproc-per-node", type=int, default=1, show_default=True, help="Processes per replica."),
        click.option("--timeout", type=float, default=240.0, show_default=True,
                     help="Seconds before a hung all-reduce fails."),
        click.option("--junit", "junit_path", metavar="FILE", help="Write a JUnit XML report."),
    ]):
        fn = deco(fn)
    return fn


def _run_tests(c: Ctx, images: list[tuple[str, str | None]], platform: str, replicas: int, nproc_per_node: int,
               timeout: float, progress: str):
    from . import records
    from .conformance import Conformance, TestOptions

    opts = TestOptions(platform=platform, replicas=replicas, timeout=timeout, nproc_per_node=nproc_per_node)
    conf = Conformance(_engine(), _log_printer(progress, c.env))
    suites = []
    for image, name in images:
        suite = conf.run(image, opts, name)
        suites.append(suite)
        for check in suite.checks:
            click.echo(f"{check.status.upper():8} {check.name}: {check.reason}", err=True)
        if suite.passed:
            records.save(suite, c.env)
        verdict = "passed" if suite.passed else "FAILED"
        click.echo(f"trainimg: {suite.name} {verdict} ({suite.counts()['passed']} passed, "
                   f"{suite.counts()['failed']} failed, {suite.counts()['skipped']} skipped, "
                   f"{suite.counts()['warning']} warnings)", err=True)
    return suites


@cli.command("test")
@click.argument("image")
@test_flags
@click.option("--json", "json_path", metavar="FILE", help="Write a JSON report.")
@click.option("--progress", type=click.Choice(["auto", "plain", "quiet"]), default="auto", show_default=True)
@pass_ctx
def test_cmd(c: Ctx, image: str, platform: str, replicas: int, nproc_per_node: int, timeout: float,
             junit_path: str | None, json_path: str | None, progress: str) -> None:
    """Run conformance checks and the multi-container all-reduce on IMAGE (or a VARIANT's image)."""
    from .report import write_json, write_junit

    suites = _run_tests(c, [_resolve_image(c, image)], platform, replicas, nproc_per_node, timeout, progress)
    if json_path:
        write_json(suites, json_path)
    if junit_path:
        write_junit(suites, junit_path)
    if not all(s.passed for s in suites):
        raise CheckFailed(f"{image} failed conformance: " + ", ".join(ch.name for s in suites for ch in s.failed))


def _credentials(registry, username: str | None, password_stdin: bool, env: Mapping[str, str]):
    from .registry import resolve_credentials

    password = None
    if password_stdin:
        password = sys.stdin.readline().rstrip("\n")
        if not password:
            raise UserInputError("no password on standard input", where="--password-stdin")
    elif username:
        password = env.get("TRAINIMG_REGISTRY_PASSWORD")
        if not password:
            raise UserInputError("--username needs the password in TRAINIMG_REGISTRY_PASSWORD or on "
                                 "--password-stdin", where="--username")
    return resolve_credentials(registry, username, password)


def registry_flags(fn):
    for deco in reversed([
        click.option("--registry", "registry", required=True, metavar="HOST[:PORT][/PREFIX]"),
        click.option("--username", help="Registry user; the password comes from TRAINIMG_REGISTRY_PASSWORD."),
        click.option("--password-stdin", is_flag=True, help="Read the registry password from standard input."),
    ]):
        fn = deco(fn)
    return fn


def _push(c: Ctx, tags: list[str], registry: str, username: str | None, password_stdin: bool):
    from . import records
    from .registry import RegistryTarget, push

    target = RegistryTarget.parse(registry)
    creds = _credentials(target, username, password_stdin, c.env)
    engine = _engine()
    results = []
    for tag in tags:
        info = engine.image(tag)
        if info is None:
            raise UserInputError(f"no image {tag} on this engine: run `trainimg build` first", where="push")
        result = push(engine.client, tag, target, tag, credentials=creds,
                      gate=lambda image_id, ref=tag: records.require_pass(image_id, ref, c.env))
        click.echo(f"pushed {result.ref}@{result.digest} ({result.bytes_uploaded} bytes uploaded)")
        results.append(result)
    return results


@cli.command("push")
@click.argument("variants", nargs=-1, required=True)
@registry_flags
@pass_ctx
def push_cmd(c: Ctx, variants: tuple[str, ...], registry: str, username: str | None, password_stdin: bool) -> None:
    """Push variants' images to <registry>/<tag>; refuses images without a passing conformance record."""
    _push(c, [_resolve_image(c, v)[0] for v in variants], registry, username, password_stdin)


@cli.command()
@click.argument("variants", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Release every variant.")
@build_flags
@test_flags
@registry_flags
@click.option("--json", "json_path", metavar="FILE", help="Write the release report as JSON.")
@click.option("--lock", "lock_path", metavar="FILE", default=None,
              help="Record what was released in this lockfile (merged; written only after every push succeeded).")
@pass_ctx
def release(c: Ctx, variants: tuple[str, ...], all_: bool, base_image: str | None, ca_bundle: Path | None,
            wheelhouse: tuple[Path, ...], allow_missing: tuple[str, ...], progress: str, jobs: int, platform: str,
            replicas: int, nproc_per_node: int, timeout: float, junit_path: str | None, registry: str,
            username: str | None, password_stdin: bool, json_path: str | None, lock_path: str | None) -> None:
    """Build, test, then push every named variant, only if all of them passed."""
    from .build import Builder
    from .progress import Progress
    from .registry import RegistryTarget
    from .report import write_json, write_junit

    if not variants and not all_:
        raise UserInputError("name the variants to release, or pass --all", where="release")
    RegistryTarget.parse(registry)  # bad input fails before an hour of building
    opts = _build_options(c, base_image, ca_bundle, wheelhouse, allow_missing, jobs)
    if lock_path:
        from .lock import read_lock

        read_lock(lock_path)  # a malformed lockfile fails before an hour of building
    recipes, engine = c.recipes(), _engine()
    builds = Builder(recipes, engine, Progress(progress, c.env), c.env, c.root).build(list(variants), opts)
    suites = _run_tests(c, [(b.tag, b.name) for b in builds], platform, replicas, nproc_per_node, timeout, progress)
    if json_path:
        write_json(suites, json_path)
    if junit_path:
        write_junit(suites, junit_path)
    failed = [s for s in suites if not s.passed]
    if failed:
        raise CheckFailed("nothing pushed: " + "; ".join(
            f"{s.name} failed {', '.join(ch.name for ch in s.failed)}" for s in failed))
    from . import records
    from .lock import push_release, record_release

    target = RegistryTarget.parse(registry)
    creds = _credentials(target, username, password_stdin, c.env)
    pushed = push_release(engine.client, builds, target, creds,
                          gate=lambda image_id, ref: records.require_pass(image_id, ref, c.env),
                          on_pushed=lambda tag, r: click.echo(f"pushed {r.ref}@{r.digest} "
                                                             f"({r.bytes_uploaded} bytes uploaded)"))
    if lock_path:
        record_release(lock_path, engine, recipes, builds, suites, pushed)
        click.echo(f"locked {len(builds)} variant(s) in {lock_path}")


@cli.command("diff")
@click.argument("a")
@click.argument("b")
@click.option("--lock", "lock_path", metavar="FILE", default=None,
              help="The lockfile lock:<variant> reads (default: images.lock).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@pass_ctx
def diff_cmd(c: Ctx, a: str, b: str, lock_path: str | None, as_json: bool) -> None:
    """Compare two images (VARIANT, IMAGE, lock:VARIANT or LOCKFILE:VARIANT): versions, labels, layers, size."""
    from .diff import diff_images, load_side, render_diff

    engine = _engine()
    d = diff_images(*(load_side(engine, _resolve_image(c, ref)[0], lock_path) for ref in (a, b)))
    if as_json:
        _emit_json(d, None)
    else:
        click.echo(render_diff(d), nl=False)


@cli.group()
def registry() -> None:
    """The embedded local registry (localhost, htpasswd auth) that `make demo` pushes to."""


def _local_registry(c: Ctx, port: int):
    from .localregistry import LocalRegistry
    from .state import state_dir

    return LocalRegistry(state_dir(c.env) / "registry", port=port)


@registry.command("start")
@click.option("--port", type=int, default=5000, show_default=True)
@click.option("--login", is_flag=True, help="Also log the docker CLI in (config.json), as a user would.")
@pass_ctx
def registry_start(c: Ctx, port: int, login: bool) -> None:
    info = _local_registry(c, port).start()
    if login:
        import docker

        docker.from_env().login(username=info.username, password=info.password, registry=info.host, reauth=True)
        _docker_cli_login(info)
    click.echo(f"registry {info.host} running (user {info.username}, password in {info.htpasswd.parent}/password)")


def _docker_cli_login(info) -> None:
    """`docker login` with the password on stdin, so later pushes find it in ~/.docker/config.json."""
    import subprocess

    from .engine import _find_cli

    subprocess.run([_find_cli(), "login", info.host, "-u", info.username, "--password-stdin"],
                   input=info.password, text=True, capture_output=True, check=True)


@registry.command("stop")
@click.option("--port", type=int, default=5000, show_default=True)
@pass_ctx
def registry_stop(c: Ctx, port: int) -> None:
    _local_registry(c, port).stop()
    click.echo("registry stopped (data kept)")


@registry.command("status")
@click.option("--port", type=int, default=5000, show_default=True)
@pass_ctx
def registry_status(c: Ctx, port: int) -> None:
    st = _local_registry(c, port).status()
    click.echo(f"registry {st.host}: {'running' if st.running else 'stopped'} ({st.backend}, data {st.data_dir})")
    if not st.running:
        raise CheckFailed("registry not running")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--nproc-per-node", type=int, default=None, help="Add the process-level view.")
@pass_ctx
def cluster(c: Ctx, as_json: bool, nproc_per_node: int | None) -> None:
    """Parse CLUSTER_SPEC / TF_CONFIG from the environment into role, rank and world size."""
    from .runtime.cluster import ClusterError, parse_cluster, summary

    if nproc_per_node is not None and nproc_per_node < 1:
        raise UserInputError("must be 1 or more", where="--nproc-per-node")
    try:
        info = parse_cluster(c.env, nproc_per_node)
    except ClusterError as err:
        raise UserInputError(str(err)) from None
    click.echo(json.dumps(info.to_json(), sort_keys=True) if as_json else summary(info))


@cli.command(context_settings={"ignore_unknown_options": True})
@click.option("--platform", type=click.Choice(["vertex", "aiplatform"]), required=True)
@click.option("--image", required=True, help="Image reference, or a variant name (its tag, and its recipe's facts).")
@click.option("--replicas", type=int, required=True, help="Primary plus workers.")
@click.option("--ps", type=int, default=0, show_default=True, help="Parameter servers.")
@click.option("--reduction-servers", default=None, metavar="R|auto", help="Vertex Reduction Server pool size.")
@click.option("--evaluators", type=int, default=0, show_default=True)
@click.option("--machine-type", required=True)
@click.option("--accelerator", default=None, metavar="TYPE:COUNT")
@click.option("--region", default=None)
@click.option("--display-name", default=None)
@click.option("--conformance", is_flag=True, help="Run trainimg's in-image all-reduce check instead of a program.")
@click.option("--args", "args_", multiple=True, help="Arguments for the training program (repeatable).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@pass_ctx
def spec(c: Ctx, platform: str, image: str, replicas: int, ps: int, reduction_servers: str | None, evaluators: int,
         machine_type: str, accelerator: str | None, region: str | None, display_name: str | None,
         conformance: bool, args_: tuple[str, ...], command: tuple[str, ...]) -> None:
    """Print the cloud job body (Vertex CustomJob or AI Platform trainingInput) as JSON."""
    from .spec import job_spec

    ref, name = _resolve_image(c, image)
    variant = c.recipes().by_name[name] if name else None
    body = job_spec(platform, image=ref, replicas=replicas, machine_type=machine_type, ps=ps,
                    reduction_servers=reduction_servers, evaluators=evaluators, accelerator=accelerator,
                    region=region, args=list(args_), command=list(command) or None, variant=variant,
                    conformance=conformance, display_name=display_name)
    _emit_json(body, None)


def job_flags(fn):
    """Flags `run` and `tune` share: the job's shape and what goes into its containers."""
    for deco in reversed([
        click.option("--replicas", type=int, default=1, show_default=True, help="Chief plus workers (UAI: nodes)."),
        click.option("--ps", type=int, default=None, help="Parameter servers (UAI default: one per node)."),
        click.option("--evaluators", type=int, default=0, show_default=True),
        click.option("--nproc-per-node", type=int, default=1, show_default=True),
        click.option("--env", "envs", multiple=True, metavar="K=V", help="Extra environment (repeatable)."),
        click.option("--volume", "volumes", multiple=True, metavar="SRC:DST", help="Bind mount (repeatable)."),
        click.option("--timeout", type=float, default=None, help="Seconds before the job is stopped."),
        click.option("--json", "json_path", metavar="FILE", help="Write a JSON report."),
        click.option("--progress", type=click.Choice(["auto", "plain", "quiet"]), default="auto", show_default=True),
    ]):
        fn = deco(fn)
    return fn


@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("image")
@click.option("--platform", type=click.Choice(["vertex", "aiplatform", "uai"]), required=True)
@job_flags
@click.option("--trial", default=None, help="Hyperparameter trial id the platform would set.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@pass_ctx
def run(c: Ctx, image: str, platform: str, replicas: int, ps: int | None, evaluators: int, nproc_per_node: int,
        envs: tuple[str, ...], volumes: tuple[str, ...], timeout: float | None, json_path: str | None, progress: str,
        trial: str | None, command: tuple[str, ...]) -> None:
    """Run CMD on replicas as the platform would (its env, a fresh network); exit with the first failure's code."""
    from .jobs import parse_env, run_job

    result = run_job(_engine(), _resolve_image(c, image)[0], platform=platform, replicas=replicas, ps=ps,
                     evaluators=evaluators, trial=trial, env=parse_env(envs), volumes=list(volumes),
                     command=list(command), nproc_per_node=nproc_per_node, timeout=timeout,
                     on_log=_log_printer(progress, c.env))
    click.echo(result.summary(), err=True)
    if json_path:
        _emit_json(result.to_json(), json_path)
    if result.exit_code:
        raise click.exceptions.Exit(result.exit_code)


@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("image")
@click.option("--param", "params", multiple=True, required=True, metavar="NAME=V1,V2,...")
@click.option("--metric", default=None, metavar="TAG", help="The hypertune metric tag (default: the only one).")
@click.option("--goal", type=click.Choice(["max", "min"]), default="max", show_default=True)
@click.option("--parallel", type=int, default=1, show_default=True)
@click.option("--platform", type=click.Choice(["vertex", "aiplatform", "uai"]), default=None,
              help="Run each trial distributed as this platform would (default: one container per trial).")
@job_flags
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@pass_ctx
def tune(c: Ctx, image: str, params: tuple[str, ...], metric: str | None, goal: str, parallel: int,
         platform: str | None, replicas: int, ps: int | None, evaluators: int, nproc_per_node: int,
         envs: tuple[str, ...], volumes: tuple[str, ...], timeout: float | None, json_path: str | None,
         progress: str, command: tuple[str, ...]) -> None:
    """One trial per combination of --param values, hyperparameters as --NAME=value, metrics from hypertune."""
    from .jobs import parse_env, parse_params
    from .jobs import tune as run_tune

    result = run_tune(_engine(), _resolve_image(c, image)[0], params=parse_params(params), command=list(command),
                      metric=metric, goal=goal, parallel=parallel, platform=platform, replicas=replicas, ps=ps,
                      evaluators=evaluators, env=parse_env(envs), volumes=list(volumes),
                      nproc_per_node=nproc_per_node, timeout=timeout, on_log=_log_printer(progress, c.env))
    click.echo(result.table())
    if json_path:
        _emit_json(result.to_json(), json_path)
    if result.exit_code:
        raise click.exceptions.Exit(result.exit_code)


def docker_errors():
    """docker.errors, imported only when an error needs mapping (the CLI's fast verbs never load docker)."""
    import docker.errors

    return docker.errors


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI, map every error to its exit code and one line on stderr."""
    debug = os.environ.get("TRAINIMG_DEBUG") == "1"
    try:
        # Without standalone mode click returns (not raises) the code of a click.exceptions.Exit.
        code = cli.main(args=argv, prog_name="trainimg", standalone_mode=False)
        return code if isinstance(code, int) else 0
    except TrainimgError as err:
        if debug:
            raise
        text = str(err).replace("\n", " ")
        click.echo(text if err.where else f"trainimg: {text}", err=True)
        return err.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        click.echo(f"trainimg: {exc.format_message()} (see trainimg --help)", err=True)
        return 2
    except docker_errors().APIError as exc:
        if debug:
            raise
        text = str(getattr(exc, "explanation", None) or exc).splitlines()[0][:300]
        click.echo(f"trainimg: the Docker engine refused: {text}; check `docker info` and retry", err=True)
        return 1
    except click.exceptions.Abort:
        click.echo("trainimg: interrupted", err=True)
        return 130
    except KeyboardInterrupt:
        click.echo("trainimg: interrupted", err=True)
        return 130
    except Exception as exc:  # the last line of defence: never a traceback, one actionable line
        if debug:
            raise
        click.echo(f"trainimg: internal error: {type(exc).__name__}: {exc}; rerun with TRAINIMG_DEBUG=1 "
                   "and report it", err=True)
        return 70


if __name__ == "__main__":
    sys.exit(main())
