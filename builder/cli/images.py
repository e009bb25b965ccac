"""Verbs that turn recipes into files and images: list, validate, render, build, bake."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import CheckFailed, UserInputError, counted
from ..recipe.arches import ARCHES
from ..options import BUILD_JOBS, DEFAULT_INSTALLER, INSTALLERS, BuildOptions, default
from ..runtime.contract import DRIVER_MIN_LABEL, VARIANT_LABEL
from .audit import audit_flags, audit_options, run_audit
from .context import Callback, Ctx, check_writable, docker_engine, emit_json, json_option, pass_ctx, progress_option

if TYPE_CHECKING:
    from ..engine.docker import DockerEngine
    from ..recipe.loading import Variant


@click.command("list")
@json_option("A JSON array, one object per variant, with what each built image holds (reads the engine)")
@pass_ctx
def list_cmd(c: Ctx, json_path: str | None) -> None:
    """List the variants the recipes expand to: name, tag, architectures, base image.

    With --json it also asks the Docker engine which of them are built and what they hold.

    \b
    Examples:
      trainimg list
      trainimg list --json
      trainimg list --recipes team/recipes
    """
    from ..plan.stages import plans, static_labels
    from ..recipe.compat import load_compat

    c.checked()
    recipes = c.recipes()
    rows = []
    installed = _installed(recipes.variants) if json_path else {}
    dockerfiles: dict[str, dict[str, str]] = {}
    for plan in plans(recipes):
        dockerfiles.setdefault(plan.variant.name, {})[plan.arch] = plan.dockerfile_path()
    compat = load_compat()
    for v in recipes.variants:
        labels = dict(static_labels(v, compat))
        rows.append({
            "name": v.name, "tag": v.tag, "dockerfile": dockerfiles[v.name][v.arch[0]], "framework": v.framework,
            "base": v.base_image, "os": v.os, "extends": v.extends, "recipe": v.source, "gpu": v.gpu,
            "reduction_server": v.reduction_server, "versions": v.versions(), "extras": list(v.extras),
            "driver_min": labels.get(DRIVER_MIN_LABEL), "installed": installed.get(v.tag), "arch": list(v.arch),
            "dockerfiles": dockerfiles[v.name], "held": [h.to_json() for h in v.held],
        })
    if json_path:
        emit_json(rows, json_path)
        return
    for v in recipes.variants:
        click.echo(f"{v.name:<34} {v.tag:<44} {','.join(v.arch):<12} {v.base_image}")


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
    """Check recipes against the grammar and the compatibility data, reporting every mistake at once.

    PATHS are recipe files or folders of them (default: the whole recipes folder). Each mistake is one line,
    `file:line:key: reason`, sorted by file and line; a variant that extends one from another file is checked
    with its parent. Reads files only: no engine, no network.

    \b
    Examples:
      trainimg validate
      trainimg validate recipes/team.yaml
      trainimg validate recipes/team/ recipes/pytorch.yaml
    """
    from ..recipe.loading import given_files, recipe_files, shown_path

    c.checked()
    recipes = c.recipes(paths)
    files = given_files(paths) if paths else recipe_files(c.recipes_dir)
    shown = {shown_path(f, c.recipes_dir) for f in files}
    mine = [v for v in recipes.variants if v.source in shown]
    parents = len(recipes.variants) - len(mine)
    also = f" (and {counted(parents, 'parent')} they extend, from other files)" if parents else ""
    click.echo(f"{counted(len(mine), 'variant')} valid in {counted(len(shown), 'file')}{also}")


@click.command()
@click.option("--output", "out", type=click.Path(path_type=Path), default=None, metavar="DIR",
              help="Root to write images/ under (default: the repository root beside the recipes).")
@click.option("--check", is_flag=True, help="Render in memory; exit 1 listing files that differ from images/.")
@pass_ctx
def render(c: Ctx, out: Path | None, check: bool) -> None:
    """Render every variant's Dockerfile into images/<variant>/Dockerfile (files only: no engine).

    
    Examples:
      trainimg render
      trainimg render --check
      trainimg render --output /tmp/rendered
    """
    from ..plan.locktruth import state_line
    from ..plan.requirements import lock_states
    from ..recipe.compat import load_compat
    from ..render.dockerfile import HAND_WRITTEN, check as drift_of, render_all, write

    c.checked()
    recipes = c.recipes()
    files = render_all(recipes)
    root = out or c.root
    found = drift_of(files, root)
    kept = [d for d in found if d.kind == HAND_WRITTEN and d.path not in files]
    for d in kept:
        click.echo(f"{d.path}: kept (hand-written: no trainimg header, no recipe renders it)")
    # A not-lockable variant is no drift: its lock file says why, and build and release refuse it.
    locks = [s for s in lock_states(recipes.variants, load_compat(), root) if s.state not in ("fresh", "unlockable")]
    for s in locks:  # one line naming the recipe and its lock
        click.echo(state_line(s.path, s.state, s.variant, s.source, s.why))
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


def base_images(values: tuple[str, ...]) -> tuple[str | None, dict[str, str]]:
    """`--base-image REF` (every architecture) and `--base-image ARCH=REF` (one), repeatable: (REF, {ARCH: REF}).
    An image reference never holds `=`, so the two forms cannot be mistaken for each other."""
    from ..recipe.arches import ARCHES
    from ..recipe.grammar import is_reference

    bare: list[str] = []
    per_arch: dict[str, str] = {}
    for value in values:
        arch, eq, ref = value.partition("=")
        if eq and arch not in ARCHES:
            raise UserInputError(f"{value!r}: {arch!r} is not an architecture; use REF or ARCH=REF, ARCH one of "
                                 f"{', '.join(ARCHES)}", where="--base-image")
        ref = ref if eq else value
        if not is_reference(ref):
            raise UserInputError(f"{ref!r} is not an image reference", where="--base-image")
        if (arch in per_arch) if eq else bare:
            raise UserInputError(f"{value!r}: a base for {arch if eq else 'every architecture'} is given twice",
                                 where="--base-image")
        if eq:
            per_arch[arch] = ref
        else:
            bare.append(ref)
    return (bare[0] if bare else None), per_arch


def _build_options(c: Ctx, base_image: tuple[str, ...], ca_bundle: Path | None, wheelhouse: tuple[Path, ...],
                   allow_missing: tuple[str, ...], jobs: int, cache_from: tuple[str, ...],
                   installer: str = DEFAULT_INSTALLER, arches: tuple[str, ...] = ()) -> BuildOptions:
    from ..imagebuild.wheelhouse import default_ca_bundle, default_wheelhouses
    from ..recipe.grammar import is_reference

    bare, per_arch = base_images(base_image)
    for ref in cache_from:
        if not is_reference(ref):
            raise UserInputError(f"{ref!r} is not an image reference", where="--cache-from")
    return BuildOptions(
        base_image=bare,
        arch_bases=per_arch,
        ca_bundle=ca_bundle if ca_bundle is not None else default_ca_bundle(c.env),
        wheelhouses=wheelhouse or default_wheelhouses(c.env),
        allow_missing=allow_missing,
        jobs=jobs,
        cache_from=cache_from,
        installer=installer,
        arches=arches,
    )


arch_option = click.option(
    "--arch", "arches", multiple=True, type=click.Choice(list(ARCHES)), metavar="ARCH",
    help=f"Only this CPU architecture of the variants ({', '.join(ARCHES)}; default: every one each lists); "
         "repeatable. A variant not built for it is refused.")
base_image_option = click.option(
    "--base-image", multiple=True, metavar="REF|ARCH=REF",
    help="Replace the root FROM (mirrors, offline machines): REF for every architecture, ARCH=REF for one "
         "(arm64=local/debian:bookworm-arm64); repeatable. A base on the engine must be of its architecture.")


def build_flags(fn: Callback) -> Callback:
    """The build flags `build` and `release` share."""
    for deco in reversed([
        base_image_option,
        arch_option,
        click.option("--ca-bundle", type=click.Path(path_type=Path),
                     help="CA bundle for a TLS-intercepting proxy (default: $SSL_CERT_FILE or $PIP_CERT); "
                          "passed as a BuildKit secret, never in a layer."),
        click.option("--wheelhouse", multiple=True, type=click.Path(path_type=Path),
                     help="Folder of wheels or PEP 503 index folder (default: $PIP_FIND_LINKS); repeatable."),
        click.option("--allow-missing", multiple=True, metavar="COMPONENT",
                     help="Build without COMPONENT when it cannot be installed; recorded as absent."),
        progress_option("the build (BuildKit's steps, one line per step in plain mode)"),
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


@click.command()
@click.argument("variants", nargs=-1)
@build_flags
@json_option("A report per variant built (tag, image ID, versions read back, seconds)")
@click.option("--locked", is_flag=True, help="Build each root variant on the base its lockfile entry records.")
@click.option("--lock", "lock_path", metavar="FILE", default=None,
              help="The lockfile --locked reads (default: images.lock).")
@click.option("--no-cache", is_flag=True, help="Run every step anew (BuildKit's layer cache unused): a cold build.")
@audit_flags("build")
@pass_ctx
def build(c: Ctx, variants: tuple[str, ...], base_image: tuple[str, ...], arches: tuple[str, ...],
          ca_bundle: Path | None, wheelhouse: tuple[Path, ...], allow_missing: tuple[str, ...], progress: str,
          jobs: int, cache_from: tuple[str, ...], installer: str, json_path: str | None, locked: bool,
          lock_path: str | None, no_cache: bool, advisories: str | None, waivers: Path | None, max_age: int | None,
          skip_audit: bool) -> None:
    """Build VARIANTS (default: all) through the Docker engine, shared parents first, for every architecture each
    lists (another architecture's image is named <tag>-<arch> on the engine).

    Starts BuildKit builds on the engine and short-lived containers that read each image's versions back;
    reaches the package indexes (or --wheelhouse folders) and, with --cache-from or --locked, a registry. An
    architecture whose committed lock says it is not lockable here is left out, said on stderr.

    
    Examples:
      trainimg build pytorch-2.13.0-cpu-py3.11 --base-image local/debian:bookworm
      trainimg build jax-0.12.0.1-cpu-py3.13 --base-image local/debian:trixie --base-image arm64=local/debian:trixie-arm64
      trainimg build 'pytorch-*' --jobs 2 --progress plain --json build.json
      trainimg build --locked --lock images.lock
      trainimg build pytorch-2.13.0-cpu-py3.11 --no-cache
      trainimg build team-certifi --advisories advisories/ --waivers waivers.yaml

    With --advisories every pin is audited first (as `trainimg audit`) and nothing is built on a finding; the
    image's SBOM carries the audit's state and its waived findings (VEX). Without it the SBOM says not audited.
    """
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
                                              installer, arches), no_cache=no_cache)
    audit = audit_options("build", advisories, waivers, max_age, skip_audit)
    c.checked()
    recipes = c.recipes()
    if audit.advisories or audit.skip:
        from ..audit.gate import refuse

        result = run_audit(c, list(variants), audit, opts.wheelhouses)
        refuse(result)
        opts = dataclasses.replace(opts, audits={name: result.document(name) for name in
                                                 (v.name for v in recipes.with_parents(recipes.select(list(variants))))})
    engine = docker_engine()
    if locked:
        opts = _locked(c, engine, opts, list(variants), lock_path)
    builder = Builder(recipes, engine, Progress(progress, c.env), c.env, c.root)
    results = builder.build(list(variants), opts)
    if json_path:
        emit_json([r.to_json() for r in results], json_path)


def _locked(c: Ctx, engine: DockerEngine, opts: BuildOptions, variants: list[str], lock_path: str | None
            ) -> BuildOptions:
    """`build --locked`: each root variant's (and architecture's) base as its lockfile entry records it, and the
    audit each release recorded, so the SBOM layer is the released one."""
    import dataclasses

    from ..imagebuild.lockcompile import left_out
    from ..plan.requirements import lock_states
    from ..publish.lockedbases import locked_audits, locked_bases
    from ..publish.lockfile import DEFAULT_LOCK
    from ..recipe.compat import load_compat

    recipes = c.recipes()
    chosen = recipes.with_parents(recipes.select(variants))
    left = left_out(chosen, lock_states(chosen, load_compat(), c.root))
    bases = locked_bases(engine, lock_path or DEFAULT_LOCK, chosen, c.env,
                         lambda line: click.echo(f"trainimg: {line}", err=True), left)
    opts = dataclasses.replace(opts, base_overrides=bases)
    if not opts.audits:
        opts = dataclasses.replace(opts, audits=locked_audits(lock_path or DEFAULT_LOCK, chosen))
    return opts


@click.command()
@click.argument("variants", nargs=-1)
@click.option("--output", "out", metavar="FILE", default="-", help="Write the bake file here (default: stdout).")
@click.option("--clean", is_flag=True, help="Remove the folder of files (secrets included) bake wrote, and exit.")
@pass_ctx
def bake(c: Ctx, variants: tuple[str, ...], out: str, clean: bool) -> None:
    """Write a `docker buildx bake` JSON file for VARIANTS (default: all), and the files it references.

    Compiles missing locks (reaches the package indexes); builds nothing and starts no container.

    \b
    Examples:
      trainimg bake --output bake.json && docker buildx bake -f bake.json
      trainimg bake --clean
    """
    from ..imagebuild import bakefolder as b

    if clean:
        if variants or out != "-":
            raise UserInputError("--clean takes no variants and no --output", where="--clean")
        c.checked()
        removed = b.clean(c.env)
        click.echo(f"removed {removed}" if removed else "nothing to remove", err=True)
        return
    check_writable(out)  # before the locks are compiled and the folder written
    c.checked()
    emit_json(b.write_bake(c.recipes(), list(variants), c.env, c.root, lambda line: click.echo(line, err=True)), out)
    click.echo(f"trainimg: context, Dockerfiles and secrets in {b.bake_dir(c.env)} (remove them with "
               f"`trainimg bake --clean`); build with `docker buildx bake -f {'-' if out == '-' else out}`",
               err=True)


