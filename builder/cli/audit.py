"""`trainimg audit`, and the audit flags `build` and `release` share: every pin against advisories, before build."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import UserInputError
from ..options import AUDIT_MAX_AGE, DEFAULT_MAX_AGE_DAYS, AuditOptions
from .context import Callback, Ctx, json_option, pass_ctx, write_reports

if TYPE_CHECKING:
    from ..audit.gate import AuditResult


def audit_flags(fn: Callback) -> Callback:
    """`--advisories`, `--waivers`, `--max-age`, `--skip-audit`: the audit `audit`, `build` and `release` run."""
    for deco in reversed([
        click.option("--advisories", metavar="DIR|URL", default=None,
                     help="OSV records to audit every pin against: a folder (OSV JSON, or YAML as the PyPA advisory "
                          "database keeps it) or an OSV-compatible service's URL (/v1/querybatch, /v1/vulns/ID)."),
        click.option("--waivers", type=click.Path(path_type=Path), default=None, metavar="FILE",
                     help="The committed waivers (YAML): advisory id or alias, package, version, reason, approved-by, "
                          "expires. An expired waiver fails; an unused one is reported."),
        click.option("--max-age", "max_age", type=int, default=DEFAULT_MAX_AGE_DAYS, show_default=True,
                     metavar="DAYS",
                     help=f"Refuse advisory data older than this ({AUDIT_MAX_AGE} days): a folder's newest record, a "
                          "service's stated date."),
        click.option("--skip-audit", "skip_audit", is_flag=True,
                     help="Build without the audit; written into the conformance report, the release record and "
                          "the SBOM."),
    ]):
        fn = deco(fn)
    return fn


def audit_options(advisories: str | None, waivers: Path | None, max_age: int, skip_audit: bool) -> AuditOptions:
    if waivers is not None and not waivers.is_file():
        raise UserInputError(f"{waivers} is not a file", where="--waivers")
    return AuditOptions(advisories=advisories, waivers=waivers, max_age_days=max_age, skip=skip_audit)


def run_audit(c: Ctx, names: list[str], opts: AuditOptions) -> AuditResult:
    """Audit `names` (and the variants they extend), printing each finding and unused waiver on stderr."""
    from ..imagebuild.audited import audit_variants

    result = audit_variants(c.recipes(), names, c.root, c.env, opts, lambda line: click.echo(line, err=True))
    for line in result.lines():
        click.echo(line, err=True)
    return result


@click.command("audit")
@click.argument("variants", nargs=-1, required=True)
@audit_flags
@json_option("The audit as a conformance report (an `advisories` check per variant)")
@click.option("--junit", "junit_path", metavar="FILE", help="Write the audit as JUnit XML.")
@pass_ctx
def audit_cmd(c: Ctx, variants: tuple[str, ...], advisories: str | None, waivers: Path | None, max_age: int,
              skip_audit: bool, json_path: str | None, junit_path: str | None) -> None:
    """Audit every pin of VARIANTS (their requirements.lock and extras) against known advisories.

    Reads the advisories (a folder, or the service at the URL) and the waivers; builds nothing and starts no
    container. Exit 0 clean, 1 a finding without a holding waiver or a source that could not be read or is too
    old, 2 bad input.

    \b
    Examples:
      trainimg audit pytorch-2.13.0-cpu-py3.11 --advisories ../advisories/vulns --waivers waivers.yaml
      trainimg audit 'pytorch-*' --advisories https://osv.example.internal --junit audit.xml
    """
    from ..audit.gate import refuse

    if skip_audit:
        raise UserInputError("`audit` is the audit: drop --skip-audit", where="--skip-audit")
    if not advisories:
        raise UserInputError("give --advisories DIR|URL", where="--advisories")
    recipes = c.recipes()
    names = [v.name for v in recipes.with_parents(recipes.select(list(variants)))]
    opts = audit_options(advisories, waivers, max_age, skip_audit)
    c.checked()
    result = run_audit(c, list(variants), opts)
    write_reports(result.suites(names), json_path, junit_path)
    refuse(result)
    checked = sum(result.pins.values())
    click.echo(f"trainimg: {len(names)} variant(s), {checked} pins against {result.source} (data of {result.date}): "
               f"no known vulnerability without a holding waiver", err=True)


def release_audit(opts: AuditOptions) -> AuditOptions:
    """`release` builds only after an audit or an explicit `--skip-audit`: never by omission."""
    if not opts.advisories and not opts.skip:
        raise UserInputError("give --advisories DIR|URL (every pin is audited before the build), or --skip-audit "
                             "to release without an audit (recorded in the report, the record and the SBOM)")
    return opts

