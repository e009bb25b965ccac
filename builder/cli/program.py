"""Verbs that start the user's program (`spec`, `run`, `tune`) take it after `--`, and only there.

Taking unknown options as part of the program let a typo become the job (`--acclerator T4:1` turned into the
command of a CPU-only job) and let trainimg steal the program's own flags (`python x.py --replicas 3`). Here the
first `--` splits the line: before it every word is trainimg's, so an unknown option is a usage error naming it
(with click's "did you mean"), and after it every word goes to the program untouched.
"""

from __future__ import annotations

from typing import Any

import click

SEPARATOR = "--"


class ProgramCommand(click.Command):
    """A command whose words after `--` are the program, passed to the callback as the `command` tuple."""

    def __init__(self, name: str | None, *, program_required: bool = True,
                 context_settings: dict[str, Any] | None = None, **kwargs: Any) -> None:
        settings = dict(context_settings or {})
        settings["allow_extra_args"] = True  # stray words are reported below, with the fix
        super().__init__(name, context_settings=settings, **kwargs)
        self.program_required = program_required

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Parse trainimg's options before the first `--`; keep what follows it as the program."""
        cut = args.index(SEPARATOR) if SEPARATOR in args else len(args)
        ours, program = args[:cut], args[cut + 1:]
        rest = super().parse_args(ctx, ours)
        if ctx.args:
            raise click.UsageError(f"unexpected {' '.join(ctx.args)!r}: the program goes after `--`, "
                                   f"e.g. {ctx.command_path} ... -- python train.py", ctx=ctx)
        if self.program_required and not program:
            raise click.UsageError("missing the program: end the line with `-- CMD [ARGS...]`", ctx=ctx)
        ctx.params["command"] = tuple(program)
        return rest

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        piece = "-- CMD [ARGS]..." if self.program_required else "[-- CMD [ARGS]...]"
        return [*super().collect_usage_pieces(ctx), piece]
