"""`trainimg lock`: compile each variant's requirements.lock (every wheel, pinned with its hashes) with uv."""

from __future__ import annotations

from pathlib import Path

import click

from ..options import LockOptions
from .context import Ctx, pass_ctx


@click.command()
@click.argument("variants", nargs=-1)
@click.option("--upgrade", is_flag=True, help="Re-resolve every package to the newest version that fits.")
@click.option("--upgrade-package", "upgrade_packages", multiple=True, metavar="P",
              help="Let only package P move (repeatable); every other pin of the lock is kept.")
@click.option("--wheelhouse", multiple=True, type=click.Path(path_type=Path),
              help="Folder of wheels or PEP 503 index folder, as the build serves it (default: $PIP_FIND_LINKS); "
                   "repeatable.")
@pass_ctx
def lock(c: Ctx, variants: tuple[str, ...], upgrade: bool, upgrade_packages: tuple[str, ...],
         wheelhouse: tuple[Path, ...]) -> None:
    """Write images/<variant>/requirements.lock for VARIANTS (default: all), every wheel pinned by hash.

    Resolved with uv for each variant's Python and platform from the package indexes and wheel folders the
    build uses (reaches the indexes; starts no container). Existing pins are kept unless upgraded.

    \b
    Examples:
      trainimg lock
      trainimg lock pytorch-2.13.0-cpu-py3.11 --upgrade-package numpy
    """
    from ..imagebuild.lockcompile import lock_variants
    from ..imagebuild.wheelhouse import default_wheelhouses

    opts = LockOptions(wheelhouses=wheelhouse or default_wheelhouses(c.env), upgrade=upgrade,
                       upgrade_packages=upgrade_packages)
    c.checked()
    written = lock_variants(c.recipes(), list(variants), c.root, opts, c.env, click.echo)
    click.echo(f"{len(written)} locks written")
