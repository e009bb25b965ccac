"""Verbs for CI at fleet scale: `ci github|gitlab` (the pipelines people start from) and `matrix` (what was
released, as a page). The generators are library code (`publish.pipelines`, `publish.matrix`); this module only
reads flags into the typed options and writes the text."""

from __future__ import annotations

import os
from pathlib import Path

import click

from ..errors import UserInputError
from ..options import OSV_API, default
from ..options.ci import CI_SYSTEMS, MATRIX_FORMATS, CiOptions, MatrixOptions
from .context import Callback, Ctx, pass_ctx, write_text
from .group import TrainimgGroup


def _checkout_relative(recipes_dir: Path) -> str:
    """The recipes folder as the jobs see it: relative to the current directory, the checkout root they start in."""
    rel = os.path.relpath(recipes_dir.resolve(), Path.cwd())
    if rel == ".." or rel.startswith(".." + os.sep):
        raise UserInputError(f"{recipes_dir} is outside the current directory; run `trainimg ci` from the "
                             "checkout's root, where the jobs start", where="--recipes")
    return Path(rel).as_posix()


def _words(ctx: click.Context) -> tuple[str, ...]:
    """The arguments that make this command again, read back from its parsed parameters (click's own table of
    them): what the scheduled bump job runs to rewrite the file after a bump."""
    words: list[str] = []
    for param in ctx.command.params:
        value = ctx.params.get(param.name or "")
        if isinstance(param, click.Argument):
            words += [str(v) for v in value or ()]
        elif isinstance(param, click.Option) and value not in (None, False, ()) and value != param.default:
            flag = param.opts[0]
            if param.is_flag:
                words.append(flag)
            else:
                words += [w for v in (value if param.multiple else (value,)) for w in (flag, str(v))]
    return tuple(words)


def ci_flags(fn: Callback) -> Callback:
    """The flags both pipelines take."""
    for deco in reversed([
        click.argument("variants", nargs=-1),
        click.option("--registry", required=True, metavar="HOST[:PORT][/PREFIX]",
                     help="Where stage jobs push and promote moves tags; also the build cache."),
        click.option("--base-image", metavar="REF", help="`release --base-image` in every stage job (a mirror)."),
        click.option("--runner", multiple=True, metavar="LABEL",
                     help="GitHub `runs-on` label (default: ubuntu-latest) or GitLab runner tag; repeatable."),
        click.option("--image", metavar="REF", help="Container image the jobs run in (it needs a Docker engine)."),
        click.option("--install", default=default(CiOptions, "install"), show_default=True, metavar="CMD",
                     help="Shell line that puts trainimg on each job's PATH."),
        click.option("--username-var", default=default(CiOptions, "username_var"), show_default=True,
                     metavar="NAME", help="CI secret/variable holding the registry user."),
        click.option("--password-var", default=default(CiOptions, "password_var"), show_default=True,
                     metavar="NAME", help="CI secret/variable holding the registry password or token."),
        click.option("--sign-key-var", metavar="NAME",
                     help="Sign in promote (`--sign-key`) with the key in this CI secret (GitHub: the key's text; "
                          "GitLab: a File variable); stage jobs never see it. Without it nothing is signed."),
        click.option("--sign-password-var", default=default(CiOptions, "sign_password_var"), show_default=True,
                     metavar="NAME", help="CI secret/variable holding the signing key's passphrase."),
        click.option("--branch", default=default(CiOptions, "branch"), show_default=True,
                     help="Release on pushes to this branch (and when started by hand)."),
        click.option("--output", type=click.Path(path_type=Path), default=None, metavar="FILE",
                     help="Write the file here (default: stdout)."),
        click.option("--arm64-runner", metavar="LABEL", default=None,
                     help="The runner label (GitHub `runs-on`, GitLab tag) of the arm64 stage jobs (default: the CI's "
                          "hosted arm64 runner: ubuntu-24.04-arm, saas-linux-medium-arm64)."),
        click.option("--emulate-arm64", is_flag=True,
                     help="Build arm64 in the amd64 stage jobs under QEMU instead (no arm64 runner)."),
        click.option("--one-machine", is_flag=True,
                     help="Every job runs on this machine (gitlab-ci-local, one shell runner), so a loopback "
                          "--registry is shared; refused without it."),
        click.option("--advisories", metavar="DIR|URL", default=None,
                     help="`release --advisories` in every stage job: the source every pin is audited against "
                          f"before the build (default: release's own, OSV's public API, {OSV_API})."),
        click.option("--skip-audit", "skip_audit", is_flag=True,
                     help="`release --skip-audit` in every stage job: release without the audit (runners that reach "
                          "no advisory source), in the file for review."),
        click.option("--schedule", metavar="CRON",
                     help="Also run on this schedule: rebuild what changed, and bump the recipes through a merge/pull "
                          "request (GitLab: set the schedule in the project; the file runs the bump job in it)."),
        click.option("--index-url", metavar="URL", help="The index the scheduled outdated and bump read (default: "
                                                         "$PIP_INDEX_URL, else PyPI)."),
        click.option("--token-var", metavar="NAME",
                     help="CI secret/variable with the token that pushes the bump's branch and opens the request "
                          "(default: GITHUB_TOKEN; GitLab: TRAINIMG_BOT_TOKEN)."),
    ]):
        fn = deco(fn)
    return fn


@click.group(cls=TrainimgGroup)
def ci() -> None:
    """Write a CI pipeline: a stage job per variant (or group sharing parents), then one promote job.

    Reads the recipes only: no engine, no registry.

    \b
    Examples:
      trainimg ci github --registry ghcr.io/team --output .github/workflows/images.yml
      trainimg ci gitlab --registry registry.gitlab.com/team --output .gitlab-ci.yml
    """


def _ci_command(system: str, what: str, where: str) -> click.Command:
    @ci_flags
    @pass_ctx
    def command(c: Ctx, variants: tuple[str, ...], registry: str, base_image: str | None, runner: tuple[str, ...],
                image: str | None, install: str, username_var: str, password_var: str, sign_key_var: str | None,
                sign_password_var: str, branch: str, output: Path | None, arm64_runner: str | None,
                emulate_arm64: bool, one_machine: bool, advisories: str | None, skip_audit: bool,
                schedule: str | None, index_url: str | None, token_var: str | None) -> None:
        from ..imagebuild.lockcompile import left_out
        from ..plan.requirements import lock_states
        from ..publish.pipelines import pipeline
        from ..recipe.compat import load_compat

        opts = CiOptions(system=system, registry=registry, variants=variants, base_image=base_image, runner=runner,
                         image=image, install=install, username_var=username_var, password_var=password_var,
                         sign_key_var=sign_key_var, sign_password_var=sign_password_var, branch=branch,
                         recipes=_checkout_relative(c.recipes_dir), one_machine=one_machine, advisories=advisories,
                         skip_audit=skip_audit, schedule=schedule, index_url=index_url, token_var=token_var,
                         arm64_runner=arm64_runner, emulate_arm64=emulate_arm64,
                         regenerate=_words(click.get_current_context()) if output and schedule else ())
        recipes = c.recipes()
        chosen = recipes.with_parents(recipes.select(list(variants)))
        left = left_out(chosen, lock_states(chosen, load_compat(), c.root))  # no job builds what no build makes
        text = pipeline(recipes, opts, left)
        c.checked()
        write_text(text, output)

    command.__doc__ = (f"Write {what} that releases VARIANTS (default: all) across runners.\n\n"
                       "Reads the recipes only: no engine, no registry.\n\n\b\nExamples:\n"
                       f"  trainimg ci {system} --registry ghcr.io/team --output {where}\n"
                       f"  trainimg ci {system} 'pytorch-*' --registry ghcr.io/team --runner gpu\n"
                       f"  trainimg ci {system} --registry ghcr.io/team --sign-key-var TRAINIMG_SIGN_KEY\n"
                       f"  trainimg ci {system} --registry ghcr.io/team --schedule '17 4 * * 1' --output {where}\n")
    return click.command(system)(command)


for _system, _what, _where in zip(CI_SYSTEMS, ("a GitHub Actions workflow", "a .gitlab-ci.yml"),
                                  (".github/workflows/images.yml", ".gitlab-ci.yml")):
    ci.add_command(_ci_command(_system, _what, _where))


@click.command("matrix")
@click.option("--lock", "lock_path", metavar="FILE", default=None,
              help="The lockfile of the release (default: images.lock).")
@click.option("--format", "fmt", type=click.Choice(MATRIX_FORMATS), default=default(MatrixOptions, "format"),
              show_default=True, help="Markdown (a README, a job summary) or a self-contained HTML page.")
@click.option("--output", type=click.Path(path_type=Path), default=None, metavar="FILE",
              help="Write the page here (default: stdout).")
@pass_ctx
def matrix(c: Ctx, lock_path: str | None, fmt: str, output: Path | None) -> None:
    """The support matrix: every released variant, its tags and digest, versions read back, size, conformance.

    Reads the lockfile only: no engine, no registry.

    \b
    Examples:
      trainimg matrix --format md >> README.md
      trainimg matrix --lock images.lock --format html --output site/matrix.html
    """
    from ..publish.matrix import render_matrix

    opts = MatrixOptions(lock_path=lock_path, format=fmt)
    text = render_matrix(opts.lock_path, opts.format)
    c.checked()
    write_text(text, output)
