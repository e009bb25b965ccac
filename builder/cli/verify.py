"""`trainimg verify`, two checks of a pushed image:

- `verify VARIANT --registry R`: rebuild from this checkout, no cache, and compare with the registry. Exit 0 when
  every layer is identical (an eStargz layer: the rebuild's entries, reordered, beside its TOC and landmark);
  1 naming each differing layer and its differing files (path, size, mode, owner, time, xattrs, content digest).
  The rebuild takes the build flags a machine needs (`--base-image` for a mirror, `--allow-missing`, wheel folders)
  and is tagged like any build of the variant.
- `verify REF --key PUB`: is the image REF names signed by that key, for its digest and its repository (trust/)?
  Exit 0 when it is; 1 naming what is missing or wrong. Nothing is built.

Exit 2 for bad input, such as a build flag given with `--key` (nothing would read it).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from ..errors import CheckFailed, UserInputError
from ..options import DEFAULT_INSTALLER, INSTALLERS, BuildOptions
from .context import Ctx, credentials, docker_engine, pass_ctx, progress_option
from .images import _build_options, base_image_option


@click.command("verify")
@click.argument("variant", metavar="VARIANT|REF")
@click.option("--key", type=click.Path(path_type=Path), metavar="PUB",
              help="Check REF's signature and provenance against this public key (cosign's .pub) instead of "
                   "rebuilding: REF is HOST[:PORT]/REPO:TAG or ...@sha256:..., as pushed.")
@click.option("--registry", metavar="HOST[:PORT][/PREFIX]",
              help="The registry holding the variant's image under its tag (the rebuild-and-compare; required "
                   "without --key).")
@click.option("--username", help="Registry user; the password comes from TRAINIMG_REGISTRY_PASSWORD.")
@click.option("--password-stdin", is_flag=True, help="Read the registry password from standard input.")
@base_image_option
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
def verify_cmd(c: Ctx, variant: str, key: Path | None, registry: str | None, username: str | None,
               password_stdin: bool, base_image: tuple[str, ...], ca_bundle: Path | None,
               wheelhouse: tuple[Path, ...],
               allow_missing: tuple[str, ...], installer: str, progress: str, locked: bool,
               lock_path: str | None) -> None:
    """Rebuild VARIANT without cache and compare it with its image in the registry, layer by layer (each
    architecture's with its manifest in the tag's index); or, with --key, check that the image REF names is signed
    by that key for its digest and repository.

    Rebuild: reaches the registry (the pushed manifest and config; a layer's blob only where it differs, an eStargz
    layer's table of contents instead, by range requests: its TOC and landmark are not files of the image), builds on
    the engine without its cache and starts short-lived containers that read the rebuild's versions back; exit 1
    names each differing layer and the files that differ in it. --key: reaches the registry only (the manifest, its
    .sig and .att images); prints the image, the signature and the provenance, one line each; exit 1 names what is
    missing or wrong.

    \b
    Examples:
      trainimg verify pytorch-2.13.0-cpu-py3.11 --registry localhost:5000 --base-image local/debian:bookworm
      echo "$TOKEN" | trainimg verify pytorch-2.15.0-cu132-py3.11 --registry ghcr.io/team --username bot --password-stdin
      trainimg verify pytorch-2.15.0-cu132-py3.11 --registry ghcr.io/team --locked --lock images.lock
      trainimg verify ghcr.io/team/trainimg/pytorch:2.13-cpu --key release.pub
    """
    if key is not None:
        verify_signed(c, variant, key, username, password_stdin)
        return
    if registry is None:
        raise UserInputError("give --registry R (rebuild and compare VARIANT) or --key PUB (check REF's signature)")
    if lock_path and not locked:
        raise UserInputError("--lock is read only with --locked", where="--lock")
    if locked and base_image:
        raise UserInputError("--locked rebuilds on the recorded base; drop --base-image", where="--locked")
    opts = dataclasses.replace(_build_options(c, base_image, ca_bundle, wheelhouse, allow_missing, 1, (), installer),
                               no_cache=True)
    from ..publish.lockfile import DEFAULT_LOCK

    verify_rebuilt(c, variant, registry, credentials, opts, progress, (lock_path or DEFAULT_LOCK) if locked else None,
                   username=username, password_stdin=password_stdin)


def verify_rebuilt(c: Ctx, variant: str, registry: str, creds: Any, opts: BuildOptions, progress: str,
                   lock_path: str | None, *, username: str | None, password_stdin: bool) -> None:
    """`verify VARIANT --registry R` (see the module doc): the no-cache rebuild, on the locked bases when
    `lock_path` is given, compared layer by layer; CheckFailed naming the layers that differ."""
    from ..imagebuild.builder import Builder
    from ..progress import Progress
    from ..publish.push import reachable_target
    from ..publish.verify import compare, registry_image, report_lines
    from ..registry.references import RegistryTarget, split_tag
    from ..registry.registryapi import RegistryAPI

    recipes = c.recipes()
    chosen = recipes.select([variant])
    if len(chosen) != 1:
        raise UserInputError(f"{variant!r} names {len(chosen)} variants; name one", where="variant")
    v = chosen[0]
    target = RegistryTarget.parse(registry)
    c.checked()
    engine = docker_engine()
    api = RegistryAPI(reachable_target(engine, target), creds(target, username, password_stdin, c.env))
    name, tag = split_tag(v.tag)
    registry_image(api, target.repository(name), tag, v.arch[0])  # before a long build: anything to compare?
    opts = dataclasses.replace(opts, audits={p.name: pushed_audit(api, p.tag) for p in recipes.with_parents([v])})
    if lock_path is not None:
        from ..imagebuild.lockcompile import left_out
        from ..plan.requirements import lock_states
        from ..publish.lockedbases import locked_bases
        from ..recipe.compat import load_compat

        parents = recipes.with_parents([v])
        bases = locked_bases(engine, lock_path, parents, c.env, lambda line: click.echo(f"trainimg: {line}", err=True),
                             left_out(parents, lock_states(parents, load_compat(), c.root)))
        opts = dataclasses.replace(opts, base_overrides=bases)
    built = Builder(recipes, engine, Progress(progress, c.env), c.env, c.root).build([v.name], opts)
    differing = []
    for result in (b for b in built if b.name == v.name):
        verdict = compare(engine, api, result.image_id, v.tag, result.arch)
        for line in report_lines(verdict):
            click.echo(line)
        if not verdict.identical:
            differing.append(f"{len(verdict.differing)} of {verdict.layers} layers in {verdict.ref} differ")
    if differing:
        raise CheckFailed(f"{v.name}: {'; '.join(differing)} from this checkout's rebuild")


def pushed_audit(api: Any, tag: str) -> str:
    """The audit document the build of the pushed `tag` mounted, read back from the SBOM beside it (the rebuild's
    SBOM layer is then that one); an image with no SBOM beside it is rebuilt as not audited, which the layer
    comparison then judges; stdout says so beside the comparison (stderr keeps its one line: the failed check)."""
    from ..audit.vex import document_of_sbom, document_text
    from ..publish.sbom import parse_sbom, registry_sbom
    from ..runtime.contract import NOT_AUDITED

    try:
        return document_of_sbom(parse_sbom(registry_sbom(api, tag), api.target.ref(tag)))
    except CheckFailed as exc:
        click.echo(f"{exc.message}: rebuilt as not audited")
        return document_text({"state": NOT_AUDITED})


#: What `verify REF --key` reads; every other option of the verb is the rebuild's, refused beside `--key`.
KEY_OPTIONS = ("key", "username", "password_stdin")


def _given(name: str) -> bool:
    """Whether the option `name` was typed (or set from the environment), even at its default."""
    source = click.get_current_context().get_parameter_source(name)
    return source not in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)


def verify_signed(c: Ctx, text: str, key_path: Path, username: str | None, password_stdin: bool) -> None:
    """`verify REF --key PUB` (see the module doc): one line per finding on stdout, CheckFailed when it fails."""
    rebuild_flags = [p.opts[0] for p in click.get_current_context().command.params if isinstance(p, click.Option)
                     and p.name not in KEY_OPTIONS and _given(p.name or "")]
    if rebuild_flags:
        raise UserInputError("for the rebuild (verify VARIANT --registry R); with --key nothing is built and REF "
                             "names its registry", where=", ".join(rebuild_flags))
    from ..publish.push import reachable_target
    from ..registry.references import PushedRef
    from ..registry.registryapi import RegistryAPI
    from ..trust.keys import load_public_key
    from ..trust.verifier import verify

    ref = PushedRef.parse(text, "REF")
    c.checked()
    public = load_public_key(key_path)
    api = RegistryAPI(reachable_target(docker_engine(), ref.target),  # the engine's insecure-registries: http
                      credentials(ref.target, username, password_stdin, c.env))
    verdict = verify(api, ref, public)
    for line in verdict.lines:
        click.echo(line)
    if not verdict.ok:
        raise CheckFailed(f"{verdict.ref}: " + "; ".join(verdict.problems))
