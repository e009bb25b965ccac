"""Verbs of the gate: test, push, release, diff."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

import click

from ..errors import CheckFailed, UserInputError
from ..progress import log_printer
from ..runtime.contract import PLATFORMS, VERTEX
from .context import Ctx, emit_json, pass_ctx
from .images import _build_options, _engine, build_flags


def _resolve_image(c: Ctx, ref: str) -> tuple[str, str | None]:
    """IMAGE|VARIANT: a variant name of the recipes gives its tag; anything else is an image reference."""
    from ..recipe.loading import RecipeError

    try:
        recipes = c.recipes()
    except RecipeError:
        recipes = None
    if recipes and ref in recipes.by_name:
        return recipes.by_name[ref].tag, ref
    return ref, None


def test_flags(fn):
    """The test flags `test` and `release` share."""
    for deco in reversed([
        click.option("--platform", type=click.Choice(PLATFORMS), default=VERTEX,
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
    from ..conformance import records
    from ..conformance.suite import Conformance, TestOptions

    opts = TestOptions(platform=platform, replicas=replicas, timeout=timeout, nproc_per_node=nproc_per_node)
    conf = Conformance(_engine(), log_printer(progress, c.env))
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


@click.command("test")
@click.argument("image")
@test_flags
@click.option("--json", "json_path", metavar="FILE", help="Write a JSON report.")
@click.option("--progress", type=click.Choice(["auto", "plain", "quiet"]), default="auto", show_default=True)
@pass_ctx
def test_cmd(c: Ctx, image: str, platform: str, replicas: int, nproc_per_node: int, timeout: float,
             junit_path: str | None, json_path: str | None, progress: str) -> None:
    """Run conformance checks and the multi-container all-reduce on IMAGE (or a VARIANT's image)."""
    from ..conformance.report import write_json, write_junit

    suites = _run_tests(c, [_resolve_image(c, image)], platform, replicas, nproc_per_node, timeout, progress)
    if json_path:
        write_json(suites, json_path)
    if junit_path:
        write_junit(suites, junit_path)
    if not all(s.passed for s in suites):
        raise CheckFailed(f"{image} failed conformance: " + ", ".join(ch.name for s in suites for ch in s.failed))


def _credentials(registry, username: str | None, password_stdin: bool, env: Mapping[str, str]):
    from ..publish.push import resolve_credentials

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
    from ..conformance import records
    from ..publish.push import push
    from ..publish.references import RegistryTarget

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


@click.command("push")
@click.argument("variants", nargs=-1, required=True)
@registry_flags
@pass_ctx
def push_cmd(c: Ctx, variants: tuple[str, ...], registry: str, username: str | None, password_stdin: bool) -> None:
    """Push variants' images to <registry>/<tag>; refuses images without a passing conformance record."""
    _push(c, [_resolve_image(c, v)[0] for v in variants], registry, username, password_stdin)


@click.command()
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
    from ..build.builder import Builder
    from ..conformance.report import write_json, write_junit
    from ..progress import Progress
    from ..publish.references import RegistryTarget

    if not variants and not all_:
        raise UserInputError("name the variants to release, or pass --all", where="release")
    RegistryTarget.parse(registry)  # bad input fails before an hour of building
    opts = _build_options(c, base_image, ca_bundle, wheelhouse, allow_missing, jobs)
    if lock_path:
        from ..publish.lock import read_lock

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
    from ..conformance import records
    from ..publish.lock import push_release, record_release

    target = RegistryTarget.parse(registry)
    creds = _credentials(target, username, password_stdin, c.env)
    pushed = push_release(engine.client, builds, target, creds,
                          gate=lambda image_id, ref: records.require_pass(image_id, ref, c.env),
                          on_pushed=lambda tag, r: click.echo(f"pushed {r.ref}@{r.digest} "
                                                             f"({r.bytes_uploaded} bytes uploaded)"))
    if lock_path:
        record_release(lock_path, engine, recipes, builds, suites, pushed)
        click.echo(f"locked {len(builds)} variant(s) in {lock_path}")


@click.command("diff")
@click.argument("a")
@click.argument("b")
@click.option("--lock", "lock_path", metavar="FILE", default=None,
              help="The lockfile lock:<variant> reads (default: images.lock).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@pass_ctx
def diff_cmd(c: Ctx, a: str, b: str, lock_path: str | None, as_json: bool) -> None:
    """Compare two images (VARIANT, IMAGE, lock:VARIANT or LOCKFILE:VARIANT): versions, labels, layers, size."""
    from ..publish.diff import diff_images, load_side, render_diff

    engine = _engine()
    d = diff_images(*(load_side(engine, _resolve_image(c, ref)[0], lock_path) for ref in (a, b)))
    if as_json:
        emit_json(d, None)
    else:
        click.echo(render_diff(d), nl=False)


