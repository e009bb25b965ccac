"""`trainimg sbom`: the SBOM of an image, from the image itself or from beside it in a registry."""

from __future__ import annotations

import sys

import click

from .context import Ctx, pass_ctx
from .gate import _credentials, _resolve_image
from .images import _engine


@click.command("sbom")
@click.argument("image")
@click.option("--registry", metavar="HOST[:PORT][/PREFIX]",
              help="Read the SBOM pushed beside the image there (referrers API, else the sha256-<hex> tag) instead "
                   "of the local image's file.")
@click.option("--username", help="Registry user; the password comes from TRAINIMG_REGISTRY_PASSWORD.")
@click.option("--password-stdin", is_flag=True, help="Read the registry password from standard input.")
@pass_ctx
def sbom_cmd(c: Ctx, image: str, registry: str | None, username: str | None, password_stdin: bool) -> None:
    """Print the CycloneDX 1.6 SBOM of IMAGE (or a VARIANT's image), exactly as the build wrote it."""
    from ..publish.push import reachable_target
    from ..publish.references import RegistryTarget
    from ..publish.registryapi import RegistryAPI
    from ..publish.sbom import local_sbom, registry_sbom

    ref = _resolve_image(c, image)[0]
    if registry is None:
        data = local_sbom(_engine(), ref)
    else:
        target = RegistryTarget.parse(registry)
        creds = _credentials(target, username, password_stdin, c.env)
        data = registry_sbom(RegistryAPI(reachable_target(_engine(), target), creds), ref)
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
