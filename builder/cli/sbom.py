"""`trainimg sbom`: the SBOM of an image, from the image itself or from beside it in a registry."""

from __future__ import annotations

import sys

import click

from .context import Ctx, credentials, docker_engine, image_ref, note, pass_ctx, progress_option


@click.command("sbom")
@click.argument("image")
@click.option("--registry", metavar="HOST[:PORT][/PREFIX]",
              help="Read the SBOM pushed beside the image there (referrers API, else the sha256-<hex> tag) instead "
                   "of the local image's file.")
@click.option("--username", help="Registry user; the password comes from TRAINIMG_REGISTRY_PASSWORD.")
@click.option("--password-stdin", is_flag=True, help="Read the registry password from standard input.")
@progress_option("what sbom starts or reaches (a container of the image, or the registry)")
@pass_ctx
def sbom_cmd(c: Ctx, image: str, registry: str | None, username: str | None, password_stdin: bool,
             progress: str) -> None:
    """Print the CycloneDX 1.6 SBOM of IMAGE (or a VARIANT's image), exactly as the build wrote it.

    Without --registry it starts a short-lived container of the image (no network) to read the file; with
    --registry it reaches that registry instead and starts nothing.

    \b
    Examples:
      trainimg sbom pytorch-2.13.0-cpu-py3.11 > sbom.json
      trainimg sbom pytorch-2.13.0-cpu-py3.11 --registry localhost:5000
    """
    from ..publish.push import reachable_target
    from ..registry.references import RegistryTarget
    from ..registry.registryapi import RegistryAPI
    from ..publish.sbom import local_sbom, registry_sbom

    ref = image_ref(c, image)[0]
    target = None if registry is None else RegistryTarget.parse(registry)
    c.checked()
    if target is None:
        data = local_sbom(docker_engine(), ref)
        note(f"sbom: read the SBOM of {ref} in a short-lived container", progress)
    else:
        creds = credentials(target, username, password_stdin, c.env)
        data = registry_sbom(RegistryAPI(reachable_target(docker_engine(), target), creds), ref)
        note(f"sbom: read the SBOM of {ref} from {registry}", progress)
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
