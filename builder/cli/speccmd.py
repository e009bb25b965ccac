"""`trainimg spec`'s command class: its options built from the platforms' flag declarations (`jobs.specflags`),
its help grouped by the platforms that read each flag, and the flags the user actually typed.

Why a command class: the options are not written out as decorators, so no platform can forget to refuse another's
flag; and click has no option groups, so the help sections are rendered here.
"""

from __future__ import annotations

from typing import Any

import click
from click.core import ParameterSource

from ..jobs.flagdecl import COMMON, Flag
from ..jobs.specflags import SPEC_PLATFORMS, groups
from .program import ProgramCommand

PLATFORM = click.Option(["--platform"], type=click.Choice(SPEC_PLATFORMS), required=True,
                        help="Whose job to write: the flags under its name below are its own; any other platform's "
                             "flag is refused.")


def option(flag: Flag, *, common: bool) -> click.Option:
    """The click option for `flag`; only a common flag can be required by click (a platform's is by its module)."""
    decls = [flag.name if flag.negation is None else f"{flag.name}/{flag.negation}", flag.key]
    kwargs: dict[str, Any] = {"help": flag.help + ("  [required]" if flag.required and not common else ""),
                              "required": flag.required and common, "multiple": flag.multiple}
    if flag.metavar is not None:
        kwargs["metavar"] = flag.metavar
    if flag.kind is bool:
        kwargs.update(is_flag=True, default=bool(flag.default), show_default=flag.negation is not None)
    else:
        kwargs["type"] = click.Choice(flag.choices) if flag.choices else flag.kind
        if flag.multiple or flag.default is not None:  # click >= 8.2 takes an explicit None for a value given:
            kwargs["default"] = () if flag.multiple else flag.default  # a required flag would pass unset
        kwargs["show_default"] = flag.default is not None
    return click.Option(decls, **kwargs)


class SpecCommand(ProgramCommand):
    """`spec`: --platform and the common flags, then each group of platform flags under the platforms' names."""

    def __init__(self, name: str | None, **kwargs: Any) -> None:
        params = [PLATFORM, *(option(flag, common=True) for flag in COMMON),
                  *(option(flag, common=False) for _, flags in groups() for flag in flags)]
        super().__init__(name, params=[*params, *kwargs.pop("params", [])], **kwargs)

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        by_name = {param.name: param for param in self.get_params(ctx)}
        shared = [PLATFORM.name, *(flag.key for flag in COMMON)]
        rest = [name for name in by_name if name not in shared and all(
            name != flag.key for _, flags in groups() for flag in flags)]
        sections = [("Options (every platform)", [*shared, *rest])]
        sections += [(f"{', '.join(platforms)}", [flag.key for flag in flags]) for platforms, flags in groups()]
        for title, names in sections:
            rows = [record for name in names if (record := by_name[name].get_help_record(ctx)) is not None]
            with formatter.section(title):
                formatter.write_dl(rows)


def given(ctx: click.Context) -> set[str]:
    """The options typed on the command line (or set from the environment), even at their default value."""
    return {name for name in ctx.params
            if ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)}
