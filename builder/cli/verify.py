"""`trainimg verify VARIANT --registry R`: rebuild from this checkout, no cache, and compare with the registry.

Exit 0 when every layer is identical; 1 naming each differing layer and its differing files (path, size, mode,
time, content digest); 2 for bad input. The rebuild takes the build flags a machine needs (`--base-image` for a
mirror, `--allow-missing`, wheel folders) and is tagged like any build of the variant.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from ..errors import CheckFailed, UserInputError
from ..options import DEFAULT_INSTALLER, INSTALLERS
from .context import Ctx, credentials, docker_engine, pass_ctx, progress_option
from .images import _build_options


@click.command("verify")
@click.argument("variant")
@click.option("--registry", required=True, metavar="HOST[:PORT][/PREFIX]",
              help="The registry holding the variant's image under its tag.")
@click.option("--username", help="Registry user; the password comes from TRAINIMG_REGISTRY_PASSWORD.")
@click.option("--password-stdin", is_flag=True, help="Read the registry password from standard input.")
@click.option("--base-image", help="Replace the root FROM (mirrors, offline machines), as the release did.")
@click.option("--ca-bundle", type=click.Path(path_type=Path), help="CA bundle for a TLS-intercepting proxy.")
@click.option("--wheelhouse", multiple=True, type=click.Path(path_type=Path), help="Folder of wheels; repeatable.")
@click.option("--allow-missing", multiple=True, metavar="COMPONENT", help="Build without COMPONENT, as the release did.")
@click.option("--installer", type=click.Choice(INSTALLERS), default=DEFAULT_INSTALLER, show_default=True,
              help="The installer the release used (uv, or pip).")
@progress_option("the no-cache rebuild")
@click.option("--locked", is_flag=True,
              help="Rebuild on the base the lockfile recorded (its mirror when the upstream is gone).")
@click.option("--lock", "lock_path", metavar="FILE", default=None, help="The lockfile --locked reads (default: "
                                                                        "images.lock).")
@pass_ctx
def verify_cmd(c: Ctx, variant: str, registry: str, username: str | None, password_stdin: bool,
               base_image: str | None, ca_bundle: Path | None, wheelhouse: tuple[Path, ...],
               allow_missing: tuple[str, ...], installer: str, progress: str, locked: bool,
               lock_path: str | None) -> None:
    """Rebuild VARIANT without cache and compare it with its image in the registry, layer by layer.

    Reaches the registry (the pushed manifest and config; a layer's blob only where it differs), builds on the engine
    without its cache and starts short-lived containers that read the rebuild's versions back. Exit 1 names each
    differing layer and the files that differ in it.

    \b
    Examples:
      trainimg verify pytorch-2.13.0-cpu-py3.11 --registry localhost:5000 --base-image local/debian:bookworm
      echo "$TOKEN" | trainimg verify pytorch-2.14.1-cu130-py3.11 --registry ghcr.io/team --username bot --password-stdin
      trainimg verify pytorch-2.14.1-cu130-py3.11 --registry ghcr.io/team --locked --lock images.lock
    """
    from ..imagebuild.builder import Builder
    from ..progress import Progress
    from ..publish.push import reachable_target
    from ..registry.references import RegistryTarget, split_tag
    from ..registry.registryapi import RegistryAPI
    from ..publish.verify import compare, registry_image, report_lines

    recipes = c.recipes()
    chosen = recipes.select([variant])
    if len(chosen) != 1:
        raise UserInputError(f"{variant!r} names {len(chosen)} variants; name one", where="variant")
    v = chosen[0]
    target = RegistryTarget.parse(registry)
    engine = docker_engine()
    api = RegistryAPI(reachable_target(engine, target), credentials(target, username, password_stdin, c.env))
    name, tag = split_tag(v.tag)
    registry_image(api, target.repository(name), tag)  # before a long build: is there anything to compare?
    if lock_path and not locked:
        raise UserInputError("--lock is read only with --locked", where="--lock")
    if locked and base_image:
        raise UserInputError("--locked rebuilds on the recorded base; drop --base-image", where="--locked")
    opts = dataclasses.replace(_build_options(c, base_image, ca_bundle, wheelhouse, allow_missing, 1, (), installer),
                               no_cache=True)
    if locked:
        from ..publish.lockedbases import locked_bases
        from ..publish.lockfile import DEFAULT_LOCK

        bases = locked_bases(engine, lock_path or DEFAULT_LOCK, recipes.with_parents([v]), c.env,
                             lambda line: click.echo(f"trainimg: {line}", err=True))
        opts = dataclasses.replace(opts, base_overrides=bases)
    built = Builder(recipes, engine, Progress(progress, c.env), c.env, c.root).build([v.name], opts)
    result = next(b for b in built if b.name == v.name)
    verdict = compare(engine, api, result.image_id, v.tag)
    for line in report_lines(verdict):
        click.echo(line)
    if not verdict.identical:
        raise CheckFailed(f"{v.name}: {len(verdict.differing)} of {verdict.layers} layers in {verdict.ref} differ "
                          "from this checkout's rebuild")
