"""The group class of `trainimg` and its sub-groups (`ci`, `registry`): what a person types is read the way they meant
it, in one place.

- Global options anywhere: `--recipes DIR` belongs to `trainimg` itself, yet `trainimg list --recipes DIR` is what
  people type. Found after the verb, it is moved before it, unless it is the value of the verb's own option (`--env
  --recipes`), the verb has a `--recipes` of its own, or it comes after `--` (the program's words are never read).
- Old spellings: one idea has one spelling on every verb (`--output`, not `--out` here and `--output` there); the old
  ones in `OLD_SPELLINGS` keep working for the scripts that call them, with one warning per run on stderr, and are
  not in the help.
- A bare group (`trainimg ci`) prints its verbs and exits 0, as bare `trainimg` does: asking what there is is not a
  mistake.
- An error that passes a group is stamped with the command that failed, so the one line it prints can name it
  (`errors.TrainimgError.lines`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import click

from ..errors import TrainimgError

SEPARATOR = "--"  # after it every word is the program's (`program.ProgramCommand`) or an argument (click)
#: The options of `trainimg` itself that may also be written after the verb.
GLOBAL_OPTIONS = ("--recipes",)
#: command path -> {old spelling: the one spelling}; kept working, warned about once per run, hidden from the help.
OLD_SPELLINGS: dict[str, dict[str, str]] = {
    "trainimg render": {"--out": "--output"},
    "trainimg bake": {"--out": "--output"},
}
_PATH = "trainimg.command_path"  # ctx.meta key: the deepest command resolved so far
_WARNED = "trainimg.warned"  # ctx.meta key: old spellings already warned about in this run


def _takes_value(option: click.Parameter) -> bool:
    """Whether the word after this option is its value whatever it looks like (`--json [FILE]` takes only a word
    that does not start with `-`, so a `--recipes` after it is an option)."""
    return (isinstance(option, click.Option) and not option.is_flag and not option.count
            and not getattr(option, "_flag_needs_value", False))


def _value_options(command: click.Command) -> set[str]:
    """Every spelling of an option of `command` (and of its sub-commands) that takes the next word as its value."""
    names = {name for p in command.params if _takes_value(p) for name in (*p.opts, *p.secondary_opts)}
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            names |= _value_options(sub)
    return names


def _own_options(command: click.Command) -> set[str]:
    names = {name for p in command.params for name in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ()))}
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            names |= _own_options(sub)
    return names


def _verb(group: click.Group, args: list[str]) -> tuple[int, click.Command | None, str]:
    """Where the verb starts in `args` (after the root's own options), the leaf command and its path."""
    values = _value_options(click.Command("root", params=group.params))
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != SEPARATOR:
        i += 2 if args[i] in values else 1
    start, command, path = i, group, "trainimg"  # type: int, click.Command | None, str
    while isinstance(command, click.Group) and i < len(args):
        command = command.commands.get(args[i])
        path, i = (f"{path} {args[i]}", i + 1) if command is not None else (path, i)
    return start, (command if command is not group else None), path


def _tail(args: list[str], begin: int, takes_value: set[str]) -> Iterator[tuple[int, str]]:
    """(index, word) of the option words from `begin` up to `--`, skipping the values of options that take one."""
    i = begin
    while i < len(args) and args[i] != SEPARATOR:
        yield i, args[i]
        i += 2 if args[i] in takes_value else 1


def normalize(group: click.Group, ctx: click.Context, args: list[str]) -> list[str]:
    """`args` with global options moved before the verb and old spellings replaced (warned about once)."""
    start, command, path = _verb(group, args)
    if command is None:
        return args
    takes_value, own = _value_options(command), _own_options(command)
    out, moved = list(args), []  # type: list[str], list[str]
    warned = ctx.meta.setdefault(_WARNED, set())
    for i, word in reversed(list(_tail(args, start + 1, takes_value))):
        name, eq, _ = word.partition("=")
        new = OLD_SPELLINGS.get(path, {}).get(name)
        if new is not None:
            out[i] = new + eq + word[len(name) + len(eq):] if eq else new
            if name not in warned:
                warned.add(name)
                click.echo(f"{path}: {name} is now spelled {new}; the old spelling still works", err=True)
        elif name in GLOBAL_OPTIONS and name not in own:
            take = 1 if eq else 2
            if not eq and (i + 1 >= len(out) or out[i + 1].startswith("-")):
                raise click.UsageError(f"{name} needs a value, before or after the verb: `trainimg {name} DIR "
                                       f"{path.split(' ', 1)[1]} ...`", ctx=ctx)
            moved[:0] = out[i:i + take]
            del out[i:i + take]
    return out[:start] + moved + out[start:]


class TrainimgGroup(click.Group):
    """`trainimg` and its sub-groups: see the module's docstring."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args and not self.invoke_without_command and not ctx.resilient_parsing:
            click.echo(ctx.get_help())  # a bare group: what it holds, exit 0 (bare `trainimg` does the same)
            ctx.exit(0)
        if ctx.parent is None:
            args = normalize(self, ctx, args)
        return super().parse_args(ctx, args)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None,
                                                                                list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None:
            ctx.meta[_PATH] = f"{ctx.command_path} {command.name}"
        return name, command, rest

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TrainimgError as err:
            if err.command is None:
                err.command = ctx.meta.get(_PATH, ctx.command_path)
            raise
