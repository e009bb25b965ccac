"""`trainimg audit`, and the audit flags of `build` and `release`: every pin against advisories, before a build."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import CheckFailed, UserInputError
from ..options import AUDIT_MAX_AGE, DEFAULT_MAX_AGE_DAYS, OSV_API, AuditOptions
from .context import Callback, Ctx, json_option, pass_ctx, write_reports

if TYPE_CHECKING:
    from ..audit.gate import AuditResult


# What each verb that audits offers: (a default source without --advisories, --skip-audit). `audit` is the audit, so it
# cannot skip it; `build` audits only when asked; `release` never builds unaudited by omission.
AUDIT_VERBS = {"audit": (True, False), "build": (False, True), "release": (True, True)}


def audit_flags(verb: str) -> Callable[[Callback], Callback]:
    """The audit flags `verb` takes (AUDIT_VERBS): `--advisories`, `--waivers`, `--max-age`, and `--skip-audit`
    where the verb can go without the audit. Each help says what the verb does without the flag."""
    defaulted, skippable = AUDIT_VERBS[verb]
    without = (f"default: OSV's public API, {OSV_API}" if defaulted else
               "without it nothing is audited and the SBOM says so")
    flags = [
        click.option("--advisories", metavar="DIR|URL", default=None,
                     help="OSV records to audit every pin against: a folder (OSV JSON, or YAML as the PyPA advisory "
                          "database keeps it) or an OSV-compatible service's URL (/v1/querybatch, /v1/vulns/ID); "
                          f"{without}."),
        click.option("--waivers", type=click.Path(path_type=Path), default=None, metavar="FILE",
                     help="The committed waivers (YAML): advisory id or alias, package, version, reason, approved-by, "
                          "expires. An expired waiver fails; an unused one is reported."),
        click.option("--max-age", "max_age", type=int, default=None, metavar="DAYS",
                     help=f"Refuse advisory data older than this ({AUDIT_MAX_AGE} days; default "
                          f"{DEFAULT_MAX_AGE_DAYS}): a folder's newest record, a service's stated date."),
    ]
    if skippable:
        recorded = "the conformance report, the release record and the SBOM" if verb == "release" else "the SBOM"
        flags.append(click.option("--skip-audit", "skip_audit", is_flag=True,
                                  help=f"{verb.capitalize()} without the audit, on purpose; written into {recorded}."))

    def decorate(fn: Callback) -> Callback:
        for deco in reversed(flags):
            fn = deco(fn)
        return fn

    return decorate


def audit_options(verb: str, advisories: str | None, waivers: Path | None, max_age: int | None,
                  skip_audit: bool = False, os_fixes: bool = False) -> AuditOptions:
    """The audit `verb` runs; an audit flag given where no audit runs (`--skip-audit`, or `build` without
    `--advisories`) is refused, never dropped (`--waivers` also serves `release --os-fixes`)."""
    if waivers is not None and not waivers.is_file():
        raise UserInputError(f"{waivers} is not a file", where="--waivers")
    opts = AuditOptions(advisories=advisories, default=OSV_API if AUDIT_VERBS[verb][0] else None, waivers=waivers,
                        max_age_days=DEFAULT_MAX_AGE_DAYS if max_age is None else max_age, skip=skip_audit)
    if opts.source is None:
        why = "--skip-audit skips the audit" if skip_audit else f"{verb} audits only with --advisories"
        if max_age is not None:
            raise UserInputError(f"{why}: no advisory data to date", where="--max-age")
        if waivers is not None and not os_fixes:
            raise UserInputError(f"{why}: no finding to waive", where="--waivers")
    return opts


@contextmanager
def default_source_choices(verb: str) -> Iterator[None]:
    """A default source that did not answer fails `verb` (exit 1, before anything is built) with its choices:
    another source, or, where the verb offers it, going without the audit on purpose. Never a pass."""
    from ..audit.gate import DefaultUnanswered

    try:
        yield
    except DefaultUnanswered as err:
        skip = f", or --skip-audit to {verb} without an audit (recorded)" if AUDIT_VERBS[verb][1] else ""
        raise CheckFailed(f"{err.message}: give --advisories DIR|URL to audit against another source{skip}") \
            from None


def run_audit(c: Ctx, names: list[str], opts: AuditOptions, wheelhouses: tuple[Path, ...]) -> AuditResult:
    """Audit `names` (and the variants they extend), printing each finding and unused waiver on stderr; a lock
    compiled for the audit resolves from `wheelhouses`, as the build's does."""
    from ..imagebuild.audited import audit_variants

    result = audit_variants(c.recipes(), names, c.root, c.env, opts, wheelhouses,
                            lambda line: click.echo(line, err=True))
    for line in result.lines():
        click.echo(line, err=True)
    return result


@click.command("audit")
@click.argument("variants", nargs=-1, required=True)
@audit_flags("audit")
@json_option("The audit as a conformance report (an `advisories` check per variant)")
@click.option("--junit", "junit_path", metavar="FILE", help="Write the audit as JUnit XML.")
@pass_ctx
def audit_cmd(c: Ctx, variants: tuple[str, ...], advisories: str | None, waivers: Path | None, max_age: int | None,
              json_path: str | None, junit_path: str | None) -> None:
    """Audit every pin of VARIANTS (their requirements.lock and extras) against known advisories.

    Reads the advisories (OSV's public API, or the folder or service --advisories names) and the waivers; builds
    nothing and starts no container. Exit 0 clean, 1 a finding without a holding waiver or a source that could not
    be read or is too old, 2 bad input.

    \b
    Examples:
      trainimg audit pytorch-2.13.0-cpu-py3.11
      trainimg audit pytorch-2.13.0-cpu-py3.11 --advisories ../advisories/vulns --waivers waivers.yaml
      trainimg audit 'pytorch-*' --advisories https://osv.example.internal --junit audit.xml
    """
    from ..audit.gate import refuse
    from ..imagebuild.wheelhouse import default_wheelhouses

    recipes = c.recipes()
    names = [v.name for v in recipes.with_parents(recipes.select(list(variants)))]
    opts = audit_options("audit", advisories, waivers, max_age)
    c.checked()
    with default_source_choices("audit"):
        result = run_audit(c, list(variants), opts, default_wheelhouses(c.env))
    write_reports(result.suites(names), json_path, junit_path)
    refuse(result)
    checked = sum(result.pins.values())
    click.echo(f"trainimg: {len(names)} variant(s), {checked} pins against {result.source} (data of {result.date}): "
               f"no known vulnerability without a holding waiver", err=True)
