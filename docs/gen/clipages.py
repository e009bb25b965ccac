"""One reference page per command of `trainimg` (verbs, groups and their verbs), from the click declarations.

Why from click and not a plugin: the pages must say what `trainimg VERB --help` says (usage, description, every
option with its value, default and help, the examples) and nothing else, and `spec`'s flags are built per platform
at run time from the platforms' own declarations (`jobs.specflags.groups`), which a generic click-to-Markdown
plugin flattens into one list.
"""

from __future__ import annotations

import inspect
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass

import click

from md import anchor, cell, code, fenced, header, prose, table
from trainimg.cli.app import cli
from trainimg.jobs.flagdecl import COMMON
from trainimg.jobs.specflags import PLATFORM_FLAGS, groups
from trainimg.cli.speccmd import PLATFORM, SpecCommand

WIDE = 1000  # no wrapping: the usage line as one line
EXAMPLES = "Examples:"


@dataclass(frozen=True)
class Command:
    """A command of the app: its words after `trainimg`, the click object, its context (for usage and defaults)."""

    words: tuple[str, ...]
    command: click.Command
    ctx: click.Context

    @property
    def path(self) -> str:
        return " ".join(("trainimg", *self.words))

    @property
    def page(self) -> str:
        """Where its page lies under docs/: a group's is the index of its folder."""
        if isinstance(self.command, click.Group):
            return "reference/cli/" + "/".join(self.words) + "/index.md" if self.words else "reference/cli/index.md"
        return "reference/cli/" + "/".join(self.words) + ".md"


def commands(command: click.Command = cli, words: tuple[str, ...] = (),
             parent: click.Context | None = None) -> Iterator[Command]:
    """Every command of the app, parents first, sub-commands by name."""
    ctx = click.Context(command, parent=parent, info_name=words[-1] if words else "trainimg", terminal_width=WIDE,
                        max_content_width=WIDE)
    yield Command(words, command, ctx)
    if isinstance(command, click.Group):
        for name in sorted(command.commands):
            yield from commands(command.commands[name], (*words, name), ctx)


def relative(source: str, target: str) -> str:
    """The link from page `source` to page `target` (both paths under docs/), as Markdown links are written."""
    return posixpath.relpath(target, posixpath.dirname(source))


@dataclass(frozen=True)
class Help:
    """A help text cut as click shows it: the first sentence line, paragraphs, the examples, what follows them."""

    lead: str
    paragraphs: list[str]
    examples: list[str]
    after: list[str]


def parse_help(text: str) -> Help:
    """Paragraphs split on blank lines; `\\b` (click's keep-as-is marker) dropped; the `Examples:` paragraph's lines
    are the examples, one command each."""
    paragraphs = [p.replace("\b", "").strip("\n") for p in inspect.cleandoc(text).split("\n\n")]
    paragraphs = [p for p in paragraphs if p.strip()]
    at = next((i for i, p in enumerate(paragraphs) if p.strip().startswith(EXAMPLES)), len(paragraphs))
    examples = [line.strip() for line in paragraphs[at].splitlines()[1:] if line.strip()] if at < len(paragraphs) else []
    joined = [" ".join(p.split()) for p in paragraphs]
    return Help(lead=joined[0] if joined else "", paragraphs=joined[1:at], examples=examples,
                after=joined[at + 1:])


def value_of(param: click.Parameter, ctx: click.Context) -> str:
    """What an option takes, in words: its choices, its metavar, or its type; "flag" for a switch."""
    if isinstance(param, click.Option) and param.is_flag and not getattr(param, "_flag_needs_value", False):
        return "flag" + (f" (`{param.secondary_opts[0]}` turns it off)" if param.secondary_opts else "")
    if isinstance(param.type, click.Choice):
        text = "one of " + ", ".join(code(str(c)) for c in param.type.choices)
    elif isinstance(param, click.Option) and param.metavar:
        text = code(param.metavar)
    else:
        text = param.type.name.replace("_", " ")
    if getattr(param, "multiple", False):
        text += ", repeatable"
    return text


def default_of(param: click.Option, ctx: click.Context) -> str:
    """The default as `--help` shows it (and a range), or –."""
    extra = param.get_help_extra(ctx)
    parts = [code(str(extra["default"]))] if "default" in extra else []
    if "range" in extra:
        parts.append(code(str(extra["range"])))
    return " ".join(parts) or "–"


def option_rows(params: list[click.Parameter], ctx: click.Context) -> list[list[str]]:
    rows = []
    for param in params:
        if not isinstance(param, click.Option) or param.hidden or "--help" in param.opts:
            continue
        names = " / ".join(code(name) for name in (*param.opts, *param.secondary_opts))
        required = "**required.** " if param.required else ""
        help_text = (param.help or "").replace("  [required]", "")
        if param.help and param.help.endswith("  [required]"):
            required = "**required for its platforms.** "
        rows.append([anchor(option_id(param)) + names, value_of(param, ctx), default_of(param, ctx),
                     required + cell(help_text)])
    return rows


def option_id(param: click.Parameter) -> str:
    """The anchor of an option's row: `option-base-image` for `--base-image` (a link's target: page#option-...)."""
    return "option-" + param.opts[0].lstrip("-")


OPTION_HEADERS = ("Option", "Takes", "Default", "Description")


def options_section(item: Command) -> str:
    """The options table; `spec`'s split as its help splits them: every platform's, then each group's."""
    params = item.command.get_params(item.ctx)
    if not isinstance(item.command, SpecCommand):
        rows = option_rows(params, item.ctx)
        return "## Options\n\n" + (table(OPTION_HEADERS, rows) if rows else "None besides `--help`.\n")
    by_key = {p.name: p for p in params}
    keyed = {flag.key for _, flags in groups() for flag in flags}
    shared = [by_key[PLATFORM.name], *(by_key[f.key] for f in COMMON)]
    shared += [p for p in params if p.name not in keyed and p not in shared]
    out = ["## Options of every platform\n", table(OPTION_HEADERS, option_rows(shared, item.ctx))]
    out.append("## Options of each platform\n\nEach platform reads the flags of the groups that name it; a flag of "
               "another platform is refused, naming the platforms that take it.\n")
    for platforms, flags in groups():
        out.append(f"### {', '.join(platforms)}\n")
        out.append(table(OPTION_HEADERS, option_rows([by_key[f.key] for f in flags], item.ctx)))
    out.append("## Flags by platform\n")
    out.append(table(("Platform", "Reads, besides every platform's options"), [
        [code(platform), ", ".join(f"[{code(f.name)}](#{option_id(by_key[f.key])})" for f in declared)]
        for platform, declared in PLATFORM_FLAGS.items()]))
    return "\n".join(out)


def arguments_section(item: Command) -> str:
    rows = [[code(p.make_metavar(item.ctx)), "yes" if p.required else "no",
             ("one or more" if p.required else "any number") if p.nargs == -1 else str(p.nargs)]
            for p in item.command.get_params(item.ctx) if isinstance(p, click.Argument)]
    return "## Arguments\n\n" + table(("Argument", "Required", "How many"), rows) if rows else ""


def usage(item: Command) -> str:
    pieces = item.command.collect_usage_pieces(item.ctx)
    return fenced(" ".join([item.ctx.command_path, *pieces]), "text")


def page(item: Command, every: list[Command]) -> str:
    """The Markdown page of one command."""
    h = parse_help(item.command.help or "")
    out = [header(f"the click declarations of `{item.path}`"), f"# {item.path}\n", prose(h.lead) + "\n", usage(item)]
    out += [prose(p) + "\n" for p in h.paragraphs]
    if isinstance(item.command, click.Group):
        out.append(verbs_section(item, every))
    out += [arguments_section(item), options_section(item)]
    if h.examples:
        out.append("## Examples\n\n" + fenced("\n".join(h.examples), "bash"))
    out += [prose(p) + "\n" for p in h.after]
    return "\n".join(part for part in out if part)


def verbs_section(item: Command, every: list[Command]) -> str:
    """A group's verbs, each with the first line of its help and a link to its page."""
    rows = [[f"[{code(sub.path)}]({relative(item.page, sub.page)})",
             cell(parse_help(sub.command.help or "").lead)]
            for sub in every if sub.words[:-1] == item.words and len(sub.words) == len(item.words) + 1]
    return "## Commands\n\n" + table(("Command", "What it does"), rows)


def pages() -> dict[str, str]:
    """Every command's page, by its path under docs/."""
    every = list(commands())
    return {item.page: page(item, every) for item in every}
