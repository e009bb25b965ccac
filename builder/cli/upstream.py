"""Verbs that keep images current without a person watching: `outdated` (what is newer upstream), `compat add`
(a release's compatibility entry derived from its wheels) and `bump` (recipes moved through the gate). The work is
library code (`upstream/`); this module reads flags into the typed options and prints."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import CheckFailed, UserInputError
from ..options import default
from ..options.upstream import BUMP_MODES, BumpOptions, CompatAddOptions, OutdatedOptions
from ..options import index_url as chosen_index
from .context import Ctx, check_writable, credentials, docker_engine, emit_json, json_option, pass_ctx, write_text
from ..recipe.compat import compat_file
from .group import TrainimgGroup

INDEX_HELP = "The simple index (PEP 691 JSON) releases are read from (default: $PIP_INDEX_URL, else PyPI)."


@click.group(cls=TrainimgGroup)
def compat() -> None:
    """The compatibility data (builder/recipe/data/compat.yaml).

    \b
    Examples:
      trainimg compat add torch==2.15.0
      trainimg compat add jax==0.12.0.1 --dry-run
    """


@compat.command("add")
@click.argument("request", metavar="FRAMEWORK==VERSION")
@click.option("--index-url", help=INDEX_HELP)
@click.option("--dry-run", is_flag=True, help="Print the derived entry beside compat.yaml's; write nothing.")
@click.option("--no-archs", is_flag=True,
              help="Do not read the GPU architectures (torch states them 16 MB into libtorch_cuda.so).")
@pass_ctx
def compat_add(c: Ctx, request: str, index_url: str | None, dry_run: bool, no_archs: bool) -> None:
    """Derive the compat.yaml entry of FRAMEWORK==VERSION from the release's own wheels, and write it.

    Reads the index (the release's files, each wheel's METADATA and a build-info member by HTTP range requests,
    never a whole wheel); starts nothing. Every value is printed with its source (index page, or wheel and file);
    a value the wheels here cannot give is said and left out (kept from the entry before for a line compat.yaml
    has). Nothing is written when the derivation agrees with compat.yaml.

    \b
    Examples:
      trainimg compat add torch==2.15.0
      trainimg compat add tensorflow==2.21.0 --dry-run
      trainimg compat add jax==0.12.0.1 --index-url https://mirror.example/simple/
    """
    from ..recipe.compat import load_compat
    from ..upstream.compatfile import write_entry
    from ..upstream.derive import compare, derive, parse_request, report
    from ..upstream.simpleapi import SimpleIndex

    opts = CompatAddOptions(index_url=chosen_index(index_url, c.env), dry_run=dry_run, archs=not no_archs)
    compat_data = load_compat()
    framework, version = parse_request(request, compat_data)
    c.checked()
    index = SimpleIndex(opts.index_url)
    d = derive(index, framework, version, archs=opts.archs)
    agreements = compare(d, compat_data)
    for line in report(d, agreements):
        click.echo(line)
    click.echo(f"trainimg: read {index.http.fetched / 1e6:.1f} MB from {opts.index_url} and its files", err=True)
    if not any(a.state in ("differs", "new") for a in agreements):
        click.echo(f"{framework} {version}: the wheels agree with compat.yaml; nothing written")
        return
    if opts.dry_run:
        click.echo(f"{framework} {version}: would write {sum(a.state in ('differs', 'new') for a in agreements)} "
                   "value(s) (--dry-run: nothing written)")
        return
    path = compat_file()
    written = write_entry(path, d, compat_data)
    click.echo(f"wrote {path}: {framework} {version}"
               + (f", {len(written.archs)} gpu_archs entry" if written.archs else "")
               + (f", {len(written.machines)} architectures entry" if written.machines else ""))
    load_compat.cache_clear()



@click.command("outdated")
@json_option("The items found: a list, each with its kind, name, current and newest version, date and source")
@click.option("--index-url", help=INDEX_HELP)
@click.option("--lock", "lock_path", metavar="FILE", default=None,
              help="The lockfile whose pushed images' OS packages are checked (default: images.lock; none: skipped).")
@click.option("--warn-days", type=int, default=default(OutdatedOptions, "warn_days"), show_default=True,
              help="Warn this many days before a base's end of life or a CUDA tag's deletion date.")
@click.option("--security-archive", "archives", multiple=True, metavar="OS=URL",
              help="The Packages index of OS's security suite ({codename} and {arch} filled in), e.g. a mirror; "
                   "repeatable.")
@pass_ctx
def outdated_cmd(c: Ctx, json_path: str | None, index_url: str | None, lock_path: str | None, warn_days: int,
                 archives: tuple[str, ...]) -> None:
    """What is newer upstream than the recipes, their locks and compat.yaml; bases near their end of life.

    Reads the package index (one page per project), the released images' SBOMs beside them in their registry
    (images.lock's pushes, by digest) and their OS's security archive; starts nothing. Exit 0 when nothing is new,
    1 when something is (each item with its source and date), 2 for bad input; an index that cannot be read fails
    naming it (exit 1), never "nothing new". An item the recipes hold back (a variant's `held`: reason, source,
    until) is shown as held with its reason, and only held items left is exit 0.

    \b
    Examples:
      trainimg outdated
      trainimg outdated --json outdated.json
      trainimg outdated --index-url https://mirror.example/simple/ --warn-days 30
    """
    import datetime
    import time

    from ..publish.lockfile import DEFAULT_LOCK
    from ..recipe.compat import load_compat
    from ..upstream.ossecurity import SECURITY_ARCHIVES, SecurityArchive, released_sboms
    from ..upstream.outdated import outdated
    from ..upstream.simpleapi import SimpleIndex

    opts = OutdatedOptions(index_url=chosen_index(index_url, c.env), lock_path=lock_path, warn_days=warn_days)
    check_writable(json_path)
    archives_given = _pairs(archives, "--security-archive")
    c.checked()
    start = time.monotonic()
    index = SimpleIndex(opts.index_url)
    lock = Path(opts.lock_path or DEFAULT_LOCK)
    released = released_sboms(lock, c.env) if lock.is_file() else []
    if not lock.is_file():
        click.echo(f"trainimg: no {lock}: the OS packages of released images were not checked", err=True)
    archive = SecurityArchive(index.http, {**SECURITY_ARCHIVES, **archives_given})
    items = outdated(c.recipes(), load_compat(), c.root, index, datetime.date.today(), opts.warn_days, released,
                     archive)
    if json_path:
        emit_json([i.to_json() for i in items], json_path)
    else:
        for item in items:
            click.echo(item.line())
            for line in item.detail:
                click.echo(f"  {line}")
    held = sum(1 for i in items if i.held)
    click.echo(f"trainimg outdated: {len(items)} item(s), {held} held by the recipes; read "
               f"{index.http.fetched / 1e6:.1f} MB from {opts.index_url} and the archives in "
               f"{time.monotonic() - start:.1f} s", err=True)
    if len(items) > held:
        click.get_current_context().exit(1)


def _pairs(values: tuple[str, ...], flag: str) -> dict[str, str]:
    out = {}
    for value in values:
        key, sep, url = value.partition("=")
        if not sep or not key or not url.startswith(("http://", "https://")):
            raise UserInputError(f"{value!r}: give OS=URL, e.g. debian=https://mirror.example/...", where=flag)
        out[key] = url
    return out


@click.command("bump")
@click.argument("variants", nargs=-1)
@click.option("--mode", type=click.Choice(BUMP_MODES), default=default(BumpOptions, "mode"), show_default=True,
              help="move: the newer version replaces the old; beside: a new variant beside the old one.")
@click.option("--index-url", help=INDEX_HELP)
@click.option("--wheelhouse", multiple=True, type=click.Path(path_type=Path),
              help="Folder of wheels the new locks resolve from too, as the build serves it (default: "
                   "$PIP_FIND_LINKS); repeatable.")
@click.option("--summary", type=click.Path(path_type=Path), default=None, metavar="FILE",
              help="Also write the merge request's description (Markdown, its first line the title) here.")
@json_option("The steps: per recipe version, what it moved to, the variants, the locks, what was refused")
@pass_ctx
def bump_cmd(c: Ctx, variants: tuple[str, ...], mode: str, index_url: str | None, wheelhouse: tuple[Path, ...],
             summary: Path | None, json_path: str | None) -> None:
    """Move the recipes of VARIANTS (default: all) to the newest release the gate accepts.

    Reads the index (releases; the wheels' metadata by range requests where compat.yaml lacks a release, which it
    then writes), edits the recipe files, renders images/, and locks each new variant with uv (reaches the
    indexes the build uses); starts no container. Per recipe version, all or nothing: a change that does not
    validate, render or lock is rolled back and said. Exit 1 when a change was rolled back.

    \b
    Examples:
      trainimg bump
      trainimg bump 'jax-*' --mode beside --summary bump.md
    """
    import datetime

    from ..imagebuild.wheelhouse import default_wheelhouses
    from ..options import LockOptions
    from ..upstream.bump import Bumper, step_json, summary as summary_of

    opts = BumpOptions(variants=variants, mode=mode, index_url=chosen_index(index_url, c.env),
                       lock=LockOptions(wheelhouses=wheelhouse or default_wheelhouses(c.env)), summary=summary)
    check_writable(json_path)
    c.checked()
    today = datetime.date.today()
    steps = Bumper(c.recipes_dir, compat_file(), opts, c.env, lambda line: click.echo(line, err=True), today).run()
    text = summary_of(steps, opts.index_url, today)
    if opts.summary is not None:
        write_text(text, opts.summary)
    if json_path:
        emit_json([step_json(s) for s in steps], json_path)
    else:
        click.echo(text, nl=False)
    failed = [s for s in steps if s.failed]
    if failed:
        raise CheckFailed(f"{len(failed)} change(s) rolled back: {failed[0].failed}")


@click.command("mirror")
@click.argument("variants", nargs=-1)
@click.option("--registry", required=True, metavar="HOST[:PORT][/PREFIX]",
              help="The team's registry the bases are copied into (under PREFIX/<upstream host>/<repository>).")
@click.option("--lock", "lock_path", metavar="FILE", default=None,
              help="The lockfile whose bases are copied, and where each copy is recorded (default: images.lock).")
@click.option("--username", help="Registry user; the password comes from TRAINIMG_REGISTRY_PASSWORD.")
@click.option("--password-stdin", is_flag=True, help="Read the registry password from standard input.")
@pass_ctx
def mirror_cmd(c: Ctx, variants: tuple[str, ...], registry: str, lock_path: str | None, username: str | None,
               password_stdin: bool) -> None:
    """Copy each base the lockfile records (of VARIANTS, default all) into your registry, by digest.

    Reaches the upstream registries (manifests; a blob only where your registry lacks it) and yours; a base only
    the engine holds is pushed from the engine. Each copy is recorded in the lockfile (`base_mirror`), where
    `build --locked` and `verify --locked` find it when the upstream tag is gone.

    \b
    Examples:
      trainimg mirror --registry registry.example/team/bases
      trainimg mirror pytorch-2.15.0-cu132-py3.11 --registry localhost:5000/bases --lock images.lock
    """
    from ..publish.lockfile import DEFAULT_LOCK
    from ..registry.references import RegistryTarget
    from ..upstream.mirror import Mirror

    target = RegistryTarget.parse(registry)
    lock = lock_path or DEFAULT_LOCK
    if not Path(lock).is_file():
        raise UserInputError(f"no {lock}: release the variants first (their bases are recorded there)",
                             where="--lock")
    c.checked()
    mirror = Mirror(docker_engine(), target, credentials(target, username, password_stdin, c.env), c.env,
                    click.echo)
    copied = mirror.run(lock, variants)
    click.echo(f"{len(copied)} base(s) mirrored into {target}; recorded in {lock}")
