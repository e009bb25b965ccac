"""The `trainimg` command. Verbs and flags here are contracts that CI and outside checks call.

Exit codes: 0 fine, 1 a check failed, 2 bad input. Every error is one line on stderr, in the one scheme of
`errors.TrainimgError.lines` (``PLACE: reason``, else ``trainimg VERB: reason``); `validate` lists every mistake,
one line each. Tracebacks only with TRAINIMG_DEBUG=1. All errors are mapped to exit codes in `main`, nowhere else.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from ..errors import TrainimgError
from ..runtime.contract import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from . import audit, ci, fleet, gate, images, jobs, locks, registry, trust, upstream
from .context import CHECK_ONLY, CommandChecked, Ctx
from .group import TrainimgGroup
from .sbom import sbom_cmd
from .verify import verify_cmd


@click.group(cls=TrainimgGroup, context_settings={"help_option_names": ["-h", "--help"]}, invoke_without_command=True)
@click.version_option(package_name="trainimg", prog_name="trainimg", message="%(prog)s %(version)s")
@click.option("--recipes", "recipes", type=click.Path(path_type=Path), default=None,
              help="Recipes folder (default: $TRAINIMG_RECIPES or ./recipes); images/ lies beside it. May also be written "
                   "after the verb: `trainimg list --recipes DIR`.")
@click.pass_context
def cli(ctx: click.Context, recipes: Path | None) -> None:
    """trainimg: recipes -> Dockerfiles -> images -> conformance -> push.

    Every verb's `--help` says what it does, what it starts (containers, a registry) and gives examples.

    \b
    Examples:
      trainimg validate
      trainimg list --json
      trainimg build pytorch-2.13.0-cpu-py3.11 --base-image local/debian:bookworm
      trainimg release pytorch-2.13.0-cpu-py3.11 --registry localhost:5000
    """
    if ctx.invoked_subcommand is None:  # bare `trainimg` asked for nothing wrong: show what there is, exit 0
        click.echo(ctx.get_help())
        ctx.exit(0)
    env = dict(os.environ)
    ctx.obj = Ctx(recipes or Path(env.get("TRAINIMG_RECIPES", "recipes")), env, check_only=ctx.obj == CHECK_ONLY)


for _command in (images.list_cmd, images.validate, images.render, locks.lock, images.build, images.bake, gate.test_cmd,
                 gate.push_cmd, gate.release, gate.diff_cmd, registry.registry, jobs.cluster, jobs.spec, jobs.run,
                 jobs.tune, ci.ci, ci.matrix, sbom_cmd, fleet.promote, fleet.prune, verify_cmd, audit.audit_cmd,
                 trust.trust, upstream.compat, upstream.outdated_cmd, upstream.bump_cmd, upstream.mirror_cmd):
    cli.add_command(_command)


def main(argv: list[str] | None = None, *, check_only: bool = False) -> int:
    """Entry point: run the CLI, map every error to its exit code and one line on stderr.

    With `check_only` the verb runs up to its checkpoint (`Ctx.checked`), after its checks of the command line and
    before its first action, and stops there with exit 0; a command line it refuses exits as it always would (2
    and its one line). The documentation's checker calls this for every command the docs show."""
    debug = os.environ.get("TRAINIMG_DEBUG") == "1"
    try:
        # Without standalone mode click returns (not raises) the code of a click.exceptions.Exit.
        code = cli.main(args=argv, prog_name="trainimg", standalone_mode=False,
                        obj=CHECK_ONLY if check_only else None)
        if check_only:  # the verb ran to its end: it has no checkpoint, and it acted
            click.echo(f"trainimg: internal error: {' '.join(argv or [])!r} ran to its end in check-only mode: its "
                       "verb never calls Ctx.checked()", err=True)
            return EXIT_INTERNAL
        return code if isinstance(code, int) else 0
    except CommandChecked:
        return EXIT_OK
    except TrainimgError as err:
        if debug:
            raise
        for line in err.lines():
            click.echo(line, err=True)
        return err.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.UsageError as exc:
        # Point at the help of the verb that was misused: `trainimg spec --help` lists spec's options.
        path = exc.ctx.command_path if exc.ctx is not None else "trainimg"
        click.echo(f"{path}: {exc.format_message()} (see `{path} --help`)", err=True)
        return EXIT_USAGE
    except click.ClickException as exc:
        click.echo(f"trainimg: {exc.format_message()}", err=True)  # outside any verb (a file click could not open)
        return EXIT_USAGE
    except click.exceptions.Abort:
        click.echo("trainimg: interrupted", err=True)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        click.echo("trainimg: interrupted", err=True)
        return EXIT_INTERRUPTED
    except Exception as exc:  # the last line of defence: never a traceback, one actionable line
        if debug:
            raise
        click.echo(f"trainimg: internal error: {type(exc).__name__}: {exc}; rerun with TRAINIMG_DEBUG=1 "
                   "and report it", err=True)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
