"""Verbs of the gate: test, push, release, diff."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import CheckFailed, UserInputError
from ..options import ENGINE_UPLOAD, NPROC_PER_NODE, REPLICAS, UPLOADS, ReleaseOptions, TestOptions, default
from ..progress import DEFAULT_PROGRESS, PROGRESS_MODES
from ..runtime.report import Suite
from ..runtime.contract import PLATFORMS
from .context import Callback, Ctx, emit_json, pass_ctx
from .images import _build_options, _engine, build_flags

if TYPE_CHECKING:
    from ..publish.push import PushResult
    from ..publish.references import RegistryTarget


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


def test_flags(fn: Callback) -> Callback:
    """The test flags `test` and `release` share."""
    for deco in reversed([
        click.option("--platform", type=click.Choice(PLATFORMS), default=default(TestOptions, "platform"),
                     show_default=True,
                     help="The platform replayed: its env, hostnames and way of starting processes."),
        click.option("--replicas", type=int, default=default(TestOptions, "replicas"), show_default=True,
                     help=f"Replicas in the all-reduce, {REPLICAS}."),
        click.option("--nproc-per-node", type=int, default=default(TestOptions, "nproc_per_node"), show_default=True,
                     help=f"Processes per replica, {NPROC_PER_NODE}."),
        click.option("--timeout", type=float, default=default(TestOptions, "timeout"), show_default=True,
                     help="Seconds before a hung all-reduce fails."),
        click.option("--junit", "junit_path", metavar="FILE", help="Write a JUnit XML report."),
        click.option("--structure-tests", "structure_tests", multiple=True, metavar="FILE",
                     type=click.Path(path_type=Path),
                     help="A container-structure-test config your team keeps; each of its tests becomes a check "
                          "of the gate. Repeatable."),
    ]):
        fn = deco(fn)
    return fn


def _print_suite(suite: Suite) -> None:
    """Each check on its own line, then the verdict with its counts (stderr: stdout stays for JSON)."""
    for check in suite.checks:
        click.echo(f"{check.status.upper():8} {check.name}: {check.reason}", err=True)
    counts = suite.counts()
    verdict = "passed" if suite.passed else "FAILED"
    click.echo(f"trainimg: {suite.name} {verdict} ({counts['passed']} passed, {counts['failed']} failed, "
               f"{counts['skipped']} skipped, {counts['warning']} warnings)", err=True)


def _write_reports(suites: list[Suite], json_path: str | None, junit_path: str | None) -> None:
    from ..runtime.report import ReportPathError, write_json, write_junit

    try:
        if json_path:
            write_json(suites, json_path)
        if junit_path:
            write_junit(suites, junit_path)
    except ReportPathError as err:
        raise UserInputError(str(err)) from None


@click.command("test")
@click.argument("image")
@test_flags
@click.option("--json", "json_path", metavar="FILE", help="Write a JSON report.")
@click.option("--progress", type=click.Choice(PROGRESS_MODES), default=DEFAULT_PROGRESS, show_default=True)
@pass_ctx
def test_cmd(c: Ctx, image: str, platform: str, replicas: int, nproc_per_node: int, timeout: float,
             junit_path: str | None, structure_tests: tuple[Path, ...], json_path: str | None,
             progress: str) -> None:
    """Run conformance checks and the multi-container all-reduce on IMAGE (or a VARIANT's image)."""
    from ..pipeline import test_images

    opts = TestOptions(platform=platform, replicas=replicas, timeout=timeout, nproc_per_node=nproc_per_node,
                       structure_tests=structure_tests)
    suites = test_images(_engine(), [_resolve_image(c, image)], opts, c.env, progress, _print_suite)
    _write_reports(suites, json_path, junit_path)
    if not all(s.passed for s in suites):
        raise CheckFailed(f"{image} failed conformance: " + ", ".join(ch.name for s in suites for ch in s.failed))


def _credentials(registry: RegistryTarget, username: str | None, password_stdin: bool,
                 env: Mapping[str, str]) -> dict[str, str] | None:
    from ..publish.credentials import resolve_credentials

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
    return resolve_credentials(registry, username, password, env=env)


def registry_flags(fn: Callback) -> Callback:
    for deco in reversed([
        click.option("--registry", "registry", required=True, metavar="HOST[:PORT][/PREFIX]"),
        click.option("--username", help="Registry user; the password comes from TRAINIMG_REGISTRY_PASSWORD."),
        click.option("--password-stdin", is_flag=True, help="Read the registry password from standard input."),
    ]):
        fn = deco(fn)
    return fn


upload_flag = click.option(
    "--upload", type=click.Choice(UPLOADS), default=ENGINE_UPLOAD, show_default=True,
    help="Who sends the layers: the engine, or trainimg's registry client (only the layers the registry lacks, "
         "whatever this engine remembers: an empty CI runner).")


def _push(c: Ctx, tags: list[str], registry: str, username: str | None,
          password_stdin: bool, upload: str = ENGINE_UPLOAD) -> list[PushResult]:
    from ..conformance import records
    from ..publish.push import push
    from ..publish.references import RegistryTarget
    from ..publish.sbom import SbomPublisher

    target = RegistryTarget.parse(registry)
    creds = _credentials(target, username, password_stdin, c.env)
    engine = _engine()
    sboms = SbomPublisher(engine, target, creds, click.echo)
    for tag in tags:
        if engine.image(tag) is None:
            raise UserInputError(f"no image {tag} on this engine: run `trainimg build` first", where="push")
        sboms.read(tag)  # an image without its SBOM is refused before anything leaves
    results = []
    for tag in tags:

        def passed(image_id: str, ref: str = tag) -> None:
            records.require_pass(image_id, ref, c.env)

        result = push(engine, tag, target, tag, credentials=creds, gate=passed, upload=upload)
        click.echo(f"pushed {result.ref}@{result.digest} ({result.bytes_uploaded} bytes uploaded)")
        sboms(tag, result)
        results.append(result)
    return results


@click.command("push")
@click.argument("variants", nargs=-1, required=True)
@registry_flags
@upload_flag
@pass_ctx
def push_cmd(c: Ctx, variants: tuple[str, ...], registry: str, username: str | None, password_stdin: bool,
             upload: str) -> None:
    """Push variants' images to <registry>/<tag>; refuses images without a passing conformance record."""
    _push(c, [_resolve_image(c, v)[0] for v in variants], registry, username, password_stdin, upload)


@click.command()
@click.argument("variants", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Release every variant.")
@build_flags
@test_flags
@registry_flags
@click.option("--json", "json_path", metavar="FILE", help="Write the release report as JSON.")
@click.option("--lock", "lock_path", metavar="FILE", default=None,
              help="Record what was released in this lockfile (merged; written only after every push succeeded).")
@click.option("--rebuild", is_flag=True,
              help="Build, test and push even variants whose inputs key and passed image the registry holds.")
@click.option("--stage", is_flag=True,
              help="One CI job of many: push the immutable tags only and write a part per variant to --lock-dir; "
                   "`trainimg promote` moves the tags once every part is in.")
@click.option("--lock-dir", "lock_dir", metavar="DIR", default=default(ReleaseOptions, "lock_dir"), show_default=True,
              help="Where --stage writes <variant>.json.")
@upload_flag
@pass_ctx
def release(c: Ctx, variants: tuple[str, ...], all_: bool, base_image: str | None, ca_bundle: Path | None,
            wheelhouse: tuple[Path, ...], allow_missing: tuple[str, ...], progress: str, jobs: int,
            cache_from: tuple[str, ...], installer: str, platform: str, replicas: int, nproc_per_node: int,
            timeout: float, junit_path: str | None, structure_tests: tuple[Path, ...], registry: str,
            username: str | None, password_stdin: bool, json_path: str | None, lock_path: str | None,
            rebuild: bool, stage: bool, lock_dir: str, upload: str) -> None:
    """Build, test, then push every named variant, only if all of them passed; skip unchanged ones."""
    from ..pipeline import release as run_release
    from ..publish.references import RegistryTarget

    if not variants and not all_:
        raise UserInputError("name the variants to release, or pass --all", where="release")
    target = RegistryTarget.parse(registry)  # bad input fails before an hour of building
    opts = ReleaseOptions(build=_build_options(c, base_image, ca_bundle, wheelhouse, allow_missing, jobs, cache_from,
                                               installer),
                          test=TestOptions(platform=platform, replicas=replicas, timeout=timeout,
                                           nproc_per_node=nproc_per_node, structure_tests=structure_tests),
                          lock_path=lock_path, rebuild=rebuild, stage=stage, lock_dir=lock_dir, upload=upload)
    creds = _credentials(target, username, password_stdin, c.env)
    result = run_release(c.recipes(), _engine(), variants, opts, target=target, credentials=creds, env=c.env,
                         root=c.root, progress=progress, on_suite=_print_suite,
                         on_tested=lambda suites: _write_reports(suites, json_path, junit_path),
                         on_pushed=lambda tag, r: click.echo(f"pushed {r.ref}@{r.digest} "
                                                             f"({r.bytes_uploaded} bytes uploaded)"),
                         on_sbom=click.echo, on_record=click.echo, on_decision=lambda d: click.echo(d.line()))
    if stage:
        click.echo(f"staged {len(result.builds) + len(result.skipped)} variant(s) in {lock_dir}")
    elif lock_path:
        click.echo(f"locked {len(result.builds)} variant(s) in {lock_path}")


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


