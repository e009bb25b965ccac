"""Verbs that turn recipes into files and images: list, validate, render, build, bake."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import CheckFailed, UserInputError
from ..options import BUILD_JOBS, DEFAULT_INSTALLER, INSTALLERS, BuildOptions, default
from ..progress import DEFAULT_PROGRESS, PROGRESS_MODES
from ..runtime.contract import VARIANT_LABEL
from .context import Callback, Ctx, check_writable, emit_json, pass_ctx

if TYPE_CHECKING:
    from ..engine.docker import DockerEngine
    from ..recipe.loading import Variant


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array, one object per variant.")
@pass_ctx
def list_cmd(c: Ctx, as_json: bool) -> None:
    """List the variants the recipes expand to."""
    from ..plan.stages import plans

    recipes = c.recipes()
    rows = []
    installed = _installed(recipes.variants) if as_json else {}
    for plan in plans(recipes):
        v = plan.variant
        rows.append({
            "name": v.name, "tag": v.tag, "dockerfile": plan.dockerfile_path(), "framework": v.framework,
            "base": v.base_image, "extends": v.extends, "recipe": v.source, "gpu": v.gpu,
            "reduction_server": v.reduction_server, "versions": v.versions(), "extras": list(v.extras),
            "installed": installed.get(v.tag),
        })
    if as_json:
        emit_json(rows, None)
        return
    for r in rows:
        click.echo(f"{r['name']:<34} {r['tag']:<44} {r['base']}")


def _installed(variants: list[Variant]) -> dict[str, dict[str, str | None]]:
    """Tag -> the versions its built image holds (read back at build time, kept in its labels); `versions` is
    what the recipe asks for. No engine, or no image under the tag: nothing for it."""
    from ..runtime.expect import versions_from_labels
    from ..engine.docker import DockerEngine
    from ..errors import EngineError

    engine, out = DockerEngine(), {}  # type: tuple[DockerEngine, dict[str, dict[str, str | None]]]
    try:
        for v in variants:
            info = engine.image(v.tag)
            labels = info.labels if info else {}
            if labels.get(VARIANT_LABEL) == v.name:
                out[v.tag] = versions_from_labels(labels)
    except EngineError:
        return {}
    return out


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@pass_ctx
def validate(c: Ctx, paths: tuple[Path, ...]) -> None:
    """Validate recipes (all, or the files given) against the compatibility data."""
    for p in paths:
        if not p.is_file():
            raise UserInputError(f"{p} is not a file", where="validate")
    recipes = c.recipes(paths)
    click.echo(f"{len(recipes.variants)} variants valid")


@click.command()
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Root to write images/ under (default: the repository root beside the recipes).")
@click.option("--check", is_flag=True, help="Render in memory; exit 1 listing files that differ from images/.")
@pass_ctx
def render(c: Ctx, out: Path | None, check: bool) -> None:
    """Render every variant's Dockerfile into images/<variant>/Dockerfile."""
    from ..plan.requirements import lock_states
    from ..recipe.compat import load_compat
    from ..render.dockerfile import HAND_WRITTEN, check as drift_of, render_all, write

    recipes = c.recipes()
    files = render_all(recipes)
    root = out or c.root
    found = drift_of(files, root)
    kept = [d for d in found if d.kind == HAND_WRITTEN and d.path not in files]
    for d in kept:
        click.echo(f"{d.path}: kept (hand-written: no trainimg header, no recipe renders it)")
    locks = [s for s in lock_states(recipes.variants, load_compat(), root) if s.state != "fresh"]
    for s in locks:  # one line naming the recipe and its lock
        click.echo(f"{s.path}: stale lock: {s.source} changed for {s.variant} since it was locked; run "
                   f"`trainimg lock {s.variant}`" if s.state == "stale" else
                   f"{s.path}: missing lock for {s.variant} ({s.source}); run `trainimg lock {s.variant}`")
    if check:
        drift = [d for d in found if d not in kept]
        for d in drift:
            click.echo(f"{d.path}: {d.kind}")
        if drift or locks:
            raise CheckFailed(f"{len(drift) + len(locks)} file(s) under images/ differ from the recipes; run "
                              f"`trainimg render`{' and `trainimg lock`' if locks else ''}")
        click.echo(f"{len(files)} Dockerfiles and their locks up to date")
        return
    changed = write(files, root)
    click.echo(f"{len(files)} Dockerfiles rendered, {len(changed)} changed")


def _build_options(c: Ctx, base_image: str | None, ca_bundle: Path | None, wheelhouse: tuple[Path, ...],
                   allow_missing: tuple[str, ...], jobs: int, cache_from: tuple[str, ...],
                   installer: str = DEFAULT_INSTALLER) -> BuildOptions:
    from ..imagebuild.wheelhouse import default_ca_bundle, default_wheelhouses
    from ..recipe.grammar import is_reference

    if base_image is not None and not is_reference(base_image):
        raise UserInputError(f"{base_image!r} is not an image reference", where="--base-image")
    for ref in cache_from:
        if not is_reference(ref):
            raise UserInputError(f"{ref!r} is not an image reference", where="--cache-from")
    return BuildOptions(
        base_image=base_image,
        ca_bundle=ca_bundle if ca_bundle is not None else default_ca_bundle(c.env),
        wheelhouses=wheelhouse or default_wheelhouses(c.env),
        allow_missing=allow_missing,
        jobs=jobs,
        cache_from=cache_from,
        installer=installer,
    )


def build_flags(fn: Callback) -> Callback:
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
        click.option("--progress", type=click.Choice(PROGRESS_MODES), default=DEFAULT_PROGRESS, show_default=True),
        click.option("--jobs", type=click.IntRange(BUILD_JOBS.low, BUILD_JOBS.high), default=default(BuildOptions, "jobs"),
                     show_default=True,
                     help="Variants built at once, after the parents they share."),
        click.option("--installer", type=click.Choice(INSTALLERS), default=DEFAULT_INSTALLER, show_default=True,
                     help="What installs the variant's requirements.lock (hash-checked, no resolver)."),
        click.option("--cache-from", multiple=True, metavar="REF",
                     help="Registry image to reuse BuildKit's inline cache from (a previous run's push); "
                          "repeatable."),
    ]):
        fn = deco(fn)
    return fn


def _engine() -> DockerEngine:
    from ..engine.docker import DockerEngine

    return DockerEngine()


@click.command()
@click.argument("variants", nargs=-1)
@build_flags
@click.option("--json", "json_path", metavar="FILE", help="Write a JSON report per variant.")
@click.option("--locked", is_flag=True, help="Build each root variant on the base its lockfile entry records.")
@click.option("--lock", "lock_path", metavar="FILE", default=None,
              help="The lockfile --locked reads (default: images.lock).")
@click.option("--no-cache", is_flag=True, help="Run every step anew (BuildKit's layer cache unused): a cold build.")
@pass_ctx
def build(c: Ctx, variants: tuple[str, ...], base_image: str | None, ca_bundle: Path | None,
          wheelhouse: tuple[Path, ...], allow_missing: tuple[str, ...], progress: str, jobs: int,
          cache_from: tuple[str, ...], installer: str, json_path: str | None, locked: bool,
          lock_path: str | None, no_cache: bool) -> None:
    """Build variants (default: all) through the Docker engine."""
    import dataclasses

    from ..imagebuild.builder import Builder
    from ..progress import Progress

    if lock_path and not locked:
        raise UserInputError("--lock is read only with --locked", where="--lock")
    if locked and base_image:
        raise UserInputError("--locked builds on the recorded bases; drop --base-image", where="--locked")
    if no_cache and cache_from:
        raise UserInputError("--no-cache builds without any cache; drop --cache-from", where="--no-cache")
    opts = dataclasses.replace(_build_options(c, base_image, ca_bundle, wheelhouse, allow_missing, jobs, cache_from,
                                              installer), no_cache=no_cache)
    recipes, engine = c.recipes(), _engine()
    if locked:
        from ..publish.lock import DEFAULT_LOCK, locked_bases

        chosen = recipes.with_parents(recipes.select(list(variants)))
        opts = dataclasses.replace(opts, base_overrides=locked_bases(engine, lock_path or DEFAULT_LOCK, chosen))
    builder = Builder(recipes, engine, Progress(progress, c.env), c.env, c.root)
    results = builder.build(list(variants), opts)
    if json_path:
        emit_json([r.to_json() for r in results], json_path)


@click.command()
@click.argument("variants", nargs=-1)
@click.option("--out", "out", metavar="FILE", default="-", help="Write the bake file here (default: stdout).")
@click.option("--clean", is_flag=True, help="Remove the folder of files (secrets included) bake wrote, and exit.")
@pass_ctx
def bake(c: Ctx, variants: tuple[str, ...], out: str, clean: bool) -> None:
    """Write a `docker buildx bake` JSON file for VARIANTS (default: all), and the files it references."""
    from ..imagebuild import bakefolder as b

    if clean:
        if variants or out != "-":
            raise UserInputError("--clean takes no variants and no --out", where="--clean")
        removed = b.clean(c.env)
        click.echo(f"removed {removed}" if removed else "nothing to remove", err=True)
        return
    check_writable(out)  # before the locks are compiled and the folder written
    emit_json(b.write_bake(c.recipes(), list(variants), c.env, c.root, lambda line: click.echo(line, err=True)), out)
    click.echo(f"trainimg: context, Dockerfiles and secrets in {b.bake_dir(c.env)} (remove them with "
               f"`trainimg bake --clean`); build with `docker buildx bake -f {'-' if out == '-' else out}`",
               err=True)


