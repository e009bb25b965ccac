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
                   allow_missing: tuple[str, ...], locked: bool = False, lock: Path | None = None):
    from .build import BuildOptions
    from .recipe import _REFERENCE_RE
    from .wheelhouse import default_ca_bundle, default_wheelhouses

    if base_image is not None and not _REFERENCE_RE.match(base_image):
        raise UserInputError(f"{base_image!r} is not an image reference", where="--base-image")
    locked_bases: dict[str, str] = {}
    if locked:
        from .lock import read_lock

        locked_bases = {name: entry["base_digest"] for name, entry in read_lock(lock or Path("images.lock")).items()
                        if entry.get("base_digest")}
    return BuildOptions(
        base_image=base_image,
        ca_bundle=ca_bundle if ca_bundle is not None else default_ca_bundle(c.env),
        wheelhouses=wheelhouse or default_wheelhouses(c.env),
        allow_missing=allow_missing,
        locked_bases=locked_bases,
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
@click.option("--locked", is_flag=True, help="Build from the base digests recorded in the lockfile.")
@click.option("--lock", type=click.Path(path_type=Path), default=None, help="Lockfile (default: images.lock).")
@pass_ctx
def build(c: Ctx, variants: tuple[str, ...], base_image: str | None, ca_bundle: Path | None,
          wheelhouse: tuple[Path, ...], allow_missing: tuple[str, ...], progress: str, json_path: str | None,
          locked: bool, lock: Path | None) -> None:
    """Build variants (default: all) through the Docker engine."""
    from .build import Builder
    from .progress import Progress

    opts = _build_options(c, base_image, ca_bundle, wheelhouse, allow_missing, locked, lock)
    builder = Builder(c.recipes(), _engine(), Progress(progress, c.env), c.env, c.root)
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


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI, map every error to its exit code and one line on stderr."""
    debug = os.environ.get("TRAINIMG_DEBUG") == "1"
    try:
        cli.main(args=argv, prog_name="trainimg", standalone_mode=False)
        return 0
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
