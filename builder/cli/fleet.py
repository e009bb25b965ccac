"""Verbs for CI at fleet scale: promote (the final job after `release --stage`) and prune (no litter)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import click

from ..errors import CheckFailed, UserInputError
from ..options import PromoteOptions, PruneOptions
from .context import Ctx, credentials, docker_engine, pass_ctx, sign_key_option, signer
from .gate import registry_flags


@click.command()
@click.argument("lock_dir", type=click.Path(path_type=Path))
@click.argument("variants", nargs=-1)
@registry_flags
@click.option("--lock", "lock_path", metavar="FILE", default=None,
              help="The lockfile the promoted variants are merged into (default: images.lock).")
@sign_key_option
@pass_ctx
def promote(c: Ctx, lock_dir: Path, variants: tuple[str, ...], registry: str, username: str | None,
            password_stdin: bool, lock_path: str | None, sign_key: Path | None) -> None:
    """Move the tags of what `release --stage` jobs staged in LOCK_DIR, only if every part is in and passed.

    VARIANTS (default: every variant of the recipes, each with its parents) are the parts expected. Reaches the
    registry (reads each staged manifest, signs each with --sign-key, then pushes the moving tags); starts no
    container.

    
    Examples:
      trainimg promote lock.d --registry ghcr.io/team --lock images.lock
      trainimg promote lock.d 'pytorch-*' --registry localhost:5000
      trainimg promote lock.d --registry ghcr.io/team --sign-key release.key
    """
    from ..imagebuild.lockcompile import left_out
    from ..plan.requirements import lock_states
    from ..publish.lockfile import DEFAULT_LOCK
    from ..recipe.compat import load_compat
    from ..publish.promote import check_parts, promote as run_promote
    from ..publish.push import reachable_target
    from ..publish.signing import Signed, entry_image, sign_all
    from ..registry.references import RegistryTarget, split_tag
    from ..registry.registryapi import RegistryAPI

    opts = PromoteOptions(lock_dir=lock_dir, variants=variants, lock_path=lock_path, sign_key=sign_key)
    target = RegistryTarget.parse(registry)
    c.checked()
    sign = signer(c, opts.sign_key, click.echo)
    recipes = c.recipes()
    api = RegistryAPI(reachable_target(docker_engine(), target), credentials(target, username, password_stdin, c.env))
    chosen = recipes.with_parents(recipes.select(list(opts.variants)))
    left = left_out(chosen, lock_states(chosen, load_compat(), c.root))  # not built anywhere: no part expected
    entries, problems = check_parts(recipes, opts.lock_dir, opts.variants, api, target, left)
    for line in problems:
        click.echo(f"trainimg promote: {line}", err=True)
    if problems:
        raise CheckFailed(f"nothing promoted: {len(problems)} problem(s) in {opts.lock_dir}")
    if sign is not None:  # every promoted image signed before a tag moves: a failure moves nothing
        sign_all(sign, api, [entry_image(target, e) for e in entries.values()])

    def sign_indexes(indexes: Mapping[str, str]) -> None:  # a variant of several architectures: its index too
        if sign is not None:
            sign_all(sign, api, [Signed(target.repository(split_tag(tag)[0]), digest) for tag, digest in indexes.items()])

    written = run_promote(entries, api, target, opts.lock_path or DEFAULT_LOCK, on_indexed=sign_indexes)
    for e in written.values():
        click.echo(f"promoted {e.key}: {', '.join(sorted(e.pushed))}")
    click.echo(f"locked {len(written)} variant(s) in {opts.lock_path or DEFAULT_LOCK}")


@click.command()
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE",
              help="Only images that also carry this label (a recipe's `labels:`); repeatable.")
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@pass_ctx
def prune(c: Ctx, labels: tuple[str, ...], dry_run: bool) -> None:
    """Remove the images trainimg made (by its labels), named or not, and nothing else.

    Talks to the Docker engine only; an image a container uses or another image is built on is kept.

    \b
    Examples:
      trainimg prune --dry-run
      trainimg prune --label team=vision
    """
    from ..imagebuild.litter import prunable, prune as run_prune

    pairs = {}
    for text in labels:
        key, eq, value = text.partition("=")
        if not eq:
            raise UserInputError(f"{text!r}: use KEY=VALUE", where="--label")
        pairs[key] = value
    opts = PruneOptions(labels=pairs, dry_run=dry_run)
    c.checked()
    engine = docker_engine()
    found = prunable(engine, opts.labels)
    if opts.dry_run:
        for image in found:
            click.echo(f"would remove {image.id[7:19]} {' '.join(image.tags) or '<none>'} ({image.size / 1e6:.0f} MB)")
        click.echo(f"{len(found)} image(s) trainimg made")
        return
    removed, kept = run_prune(engine, found)
    for image in removed:
        click.echo(f"removed {image.id[7:19]} {' '.join(image.tags) or '<none>'}")
    for image in kept:
        click.echo(f"kept {image.id[7:19]}: a container uses it or another image is built on it")
    click.echo(f"removed {len(removed)} image(s), {sum(i.size for i in removed) / 1e6:.0f} MB")
