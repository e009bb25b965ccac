"""The documentation's commands and examples, read out of its Markdown pages and checked against the real CLI
(tests/test_docs_commands.py, test_docs_examples.py, test_docs_tutorials.py). The conventions a page follows are
CONTRIBUTING's "Documentation" section; in short:

* Every `trainimg ...` command in a fenced block (any language; `\\` continuations joined, `$ ` prompts, comments,
  env assignments, pipes, `&&`, redirections understood) is parsed by the real CLI and run up to its verb's
  checkpoint (`cli.app.main(check_only=True)`, `Ctx.checked`): a command trainimg would refuse fails, naming
  file:line. In a block with `$ ` prompts only the prompted lines are commands (the rest is output).
* A placeholder is an uppercase word that is a metavar of the CLI (`IMAGE`, `VARIANT`, `FILE`, `REF`,
  `HOST[:PORT][/PREFIX]`, ...) or one of EXTRA_PLACEHOLDERS, or `...`, or `$NAME`: it is replaced by a sample
  value for the option or argument it fills (SAMPLES), so `trainimg test IMAGE --junit FILE` is checked as
  `trainimg test pytorch-2.13.0-cpu-py3.11 --junit report.xml`.
* A command written as usage syntax (holding a `[...]` group) is a synopsis, and inline code (`trainimg test`) a
  mention: only their verb and option names are checked.
* A ```` ```console ```` block is commands and their output: each `$ ` command is run (bash, in a sandbox: a copy of
  recipes/ and images/, the files of tests/data/docs/sandbox, a sample images.lock and key pair) and what it
  prints must match the lines under it; a line `...` stands for any lines, a line ending in `...` for any line
  that starts with what precedes it. A fenced block with `title="PATH"` is a file the page writes there first.
* `<!-- check: engine -->` on the line before a block runs it in the engine lane (a temp copy of the repository,
  a temp state folder, the Docker engine): a console block as above, any other block as one bash script.
* `<!-- check: refused -->` before a block says its commands are shown being refused: each must exit 2.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import click

from trainimg.runtime.contract import EXIT_USAGE

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SEED = ROOT / "tests" / "data" / "docs" / "sandbox"
SIGN_PASSWORD = "docs-sandbox-only"  # the sandbox key pair's passphrase (never a real key)
ENGINE_MARK = "engine"
REFUSED_MARK = "refused"

FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
MARK = re.compile(r"^\s*<!--\s*check:\s*(?P<marks>[\w\s-]+?)\s*-->\s*$")
INLINE = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")
ATTR = re.compile(r'(\w+)="([^"]*)"')
CONTROL = {"|", "||", "&&", ";", "&", "(", ")", ";;", "|&"}
#: Blocks in these languages hold no command to check (program output, data, code of another language).
NOT_SHELL = {"text", "txt", "output", "log", "json", "xml", "python", "py", "pycon", "jinja", "html", "css", "diff"}
#: Words after which `trainimg` starts a command (besides the start of a line, a control operator, `VAR=value`).
COMMAND_PREFIXES = {"run:", "script:", "-", "sudo", "exec", "then", "do", "else", "time", "RUN", "$", "env"}
EXTRA_PLACEHOLDERS = {"REGISTRY", "R", "VARIANT", "VARIANTS", "IMAGE", "REF", "FILE", "DIR", "LOCK_DIR", "KEY",
                      "PREFIX", "NAME", "VALUE"}
VARIANT = "pytorch-2.13.0-cpu-py3.11"
PUSHED = "registry.example/team/trainimg/pytorch:2.13.0-cpu-py3.11"
#: Sample values by option (or argument name), then by placeholder word: what a placeholder is replaced with.
SAMPLES = {
    "--waivers": "waivers.yaml", "--key": "release.pub", "--sign-key": "release.key", "--lock": "images.lock",
    "--structure-tests": "team-checks.yaml", "--junit": "report.xml", "--json": "report.json", "--output": "out.txt",
    "--registry": "registry.example/team", "--base-image": "local/debian:bookworm", "--cache-from": PUSHED,
    "--image": VARIANT, "--advisories": "advisories/", "--lock-dir": "lock.d", "lock_dir": "lock.d",
    "--output-key-prefix": "keys/release", "--summary": "bump.md", "--index-url": "https://pypi.org/simple/",
    "--security-archive": "debian=https://deb.debian.org/debian-security", "--env": "NAME=value",
    "--volume": "/tmp:/data", "--param": "lr=0.1,0.01", "--label": "team=vision", "--shm-size": "1g",
    "request": "torch==2.13.0",
    "VARIANT": VARIANT, "VARIANTS": VARIANT, "IMAGE": VARIANT, "VARIANT|REF": VARIANT, "IMAGE|VARIANT": VARIANT,
    "REF": PUSHED, "HOST[:PORT][/PREFIX]": "registry.example/team", "REGISTRY": "registry.example/team",
    "R": "registry.example/team", "REF|ARCH=REF": "local/debian:bookworm", "K=V": "NAME=value",
    "NAME=VALUE": "NAME=value", "KEY=VALUE": "team=vision", "SRC:DST": "/tmp:/data", "DAYS": "7",
    "FILE": "out.txt", "DIR": "folder", "PUB": "release.pub", "PREFIX": "keys/release", "SIZE": "1g",
}


# --- pages ---------------------------------------------------------------------------------------------------------

def pages() -> list[Path]:
    """README.md, CONTRIBUTING.md (the site includes it) and every Markdown page of the site (not the generator's
    folder)."""
    front = [p for p in (ROOT / "README.md", ROOT / "CONTRIBUTING.md") if p.is_file()]
    return [*front, *sorted(p for p in DOCS.rglob("*.md") if "gen" not in p.relative_to(DOCS).parts)]


def shown(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


@dataclass(frozen=True)
class Block:
    """A fenced code block: where it opens, its language and `title`, the marks before it, its lines."""

    path: Path
    line: int
    lang: str
    title: str | None
    marks: frozenset[str]
    lines: tuple[tuple[int, str], ...]  # (line number, text without the fence's indentation)

    @property
    def where(self) -> str:
        return f"{shown(self.path)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a page, at any indentation (lists, admonitions, tabs)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence, info = opening["indent"], opening["fence"], opening["info"].strip()
        body, j = [], i + 1
        while j < len(lines) and not re.match(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[j]):
            body.append((j + 1, lines[j][len(indent):] if lines[j].startswith(indent) else lines[j].lstrip()))
            j += 1
        before = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        mark = MARK.match(before)
        attrs = dict(ATTR.findall(info))
        lang = info.split()[0].lstrip("{.") if info and not info.startswith(("title=", "{ ")) else ""
        out.append(Block(path, i + 1, lang, attrs.get("title"), frozenset(mark["marks"].split()) if mark else
                         frozenset(), tuple(body)))
        i = j + 1
    return out


def prose_lines(path: Path) -> Iterator[tuple[int, str]]:
    """The lines of a page outside its fenced blocks."""
    inside = {n for b in blocks(path) for n in range(b.line, b.line + len(b.lines) + 2)}
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if number not in inside:
            yield number, text


# --- commands ------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Command:
    where: str  # file:line
    text: str  # the command line as written (continuations joined)
    words: tuple[str, ...]  # what follows `trainimg`
    names_only: bool  # a mention (inline code) or a synopsis (usage syntax): verb and option names only
    refused: bool = False  # in a block marked `<!-- check: refused -->`: the page shows trainimg refusing it


def logical_lines(lines: tuple[tuple[int, str], ...]) -> list[tuple[int, str]]:
    """Lines with their `\\` continuations joined, each with the number of its first line."""
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, text in lines:
        start, joined = pending if pending else (number, "")
        joined += text.rstrip()
        if joined.endswith("\\"):
            pending = (start, joined[:-1] + " ")
            continue
        pending = None
        out.append((start, joined))
    if pending:
        out.append(pending)
    return out


def split(text: str) -> list[str]:
    """Shell words and operators (`|`, `&&`, `>`, ...), comments dropped; unbalanced quotes: plain words."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:
        return text.split()


def trainimg_calls(text: str) -> list[tuple[str, ...]]:
    """The arguments of each `trainimg` a shell line runs (up to its first operator or redirection); a Makefile's
    `$(NAME)` reads as `$NAME`; `trainimg VERB: ...` is a line trainimg printed, not a command."""
    words = split(re.sub(r"\$[({]([A-Za-z_][A-Za-z0-9_]*)[)}]", r"$\1", text))
    calls = []
    for i, word in enumerate(words):
        if word != "trainimg":
            continue
        before = words[i - 1] if i else None
        if before is not None and before not in CONTROL and before not in COMMAND_PREFIXES and not re.match(
                r"^[A-Za-z_][A-Za-z0-9_]*=", before):
            continue
        args = []
        for arg in words[i + 1:]:
            if arg in CONTROL or re.fullmatch(r"[<>&|;()]+", arg):
                if args and args[-1].isdigit() and arg.startswith((">", "<")):
                    args.pop()  # `2>&1`: the 2 is the redirection's
                break
            args.append(arg)
        if not (args and args[0].endswith(":")):
            calls.append(tuple(args))
    return calls


def is_synopsis(text: str) -> bool:
    """Usage syntax (`[--lock FILE]`, `[VARIANT...]`) rather than a command."""
    return bool(re.search(r"\[[-A-Z.]", text))


def block_commands(block: Block) -> list[Command]:
    if block.lang.lower() in NOT_SHELL:
        return []
    prompted = any(text.startswith("$ ") for _, text in block.lines)
    chosen = _with_continuations(block.lines) if prompted else block.lines  # prompted: the rest is output
    out = []
    for number, text in logical_lines(chosen):
        if text.lstrip().startswith("#"):
            continue
        if is_synopsis(text):  # usage syntax: `|` is an alternative, not a pipe
            words = text.split()
            if "trainimg" in words:
                out.append(Command(f"{shown(block.path)}:{number}", text.strip(),
                                   tuple(words[words.index("trainimg") + 1:]), True))
            continue
        for words in trainimg_calls(text):
            out.append(Command(f"{shown(block.path)}:{number}", text.strip(), words, False,
                               REFUSED_MARK in block.marks))
    return out


def _with_continuations(lines: tuple[tuple[int, str], ...]) -> tuple[tuple[int, str], ...]:
    """The `$ ` lines of a console block without their prompt, each followed by its `\\` continuation lines."""
    out, going = [], False
    for number, text in lines:
        if text.startswith("$ "):
            out.append((number, text[2:]))
            going = text.rstrip().endswith("\\")
        elif going:
            out.append((number, text))
            going = text.rstrip().endswith("\\")
    return tuple(out)


def inline_commands(path: Path) -> list[Command]:
    """Inline code that starts with `trainimg ` (a mention of a verb and its flags)."""
    out = []
    for number, text in prose_lines(path):
        for _, code in INLINE.findall(text):
            code = code.replace("\\|", "|").strip()
            if code.startswith("trainimg ") and not code.split()[1].endswith(":"):  # not a quoted `trainimg X: ...`
                out.append(Command(f"{shown(path)}:{number}", code, tuple(split(code)[1:]), True))
    return out


def all_commands(files: list[Path] | None = None) -> list[Command]:
    return [c for path in (files or pages()) for c in
            [*(c for b in blocks(path) for c in block_commands(b)), *inline_commands(path)]]


# --- the CLI's judgement -------------------------------------------------------------------------------------------

def resolve(words: tuple[str, ...]) -> tuple[click.Command, list[str], int]:
    """The command `words` name (after the root's own options), its path and where its own words start."""
    from trainimg.cli.app import cli

    command: click.Command = cli
    path, i = ["trainimg"], 0
    takes_value = {o for p in cli.params if isinstance(p, click.Option) and not p.is_flag for o in p.opts}
    while i < len(words):
        word = words[i]
        if word.startswith("-") and isinstance(command, click.Group) and command is cli:
            i += 2 if word in takes_value else 1
            continue
        if isinstance(command, click.Group) and word in command.commands:
            command = command.commands[word]
            path.append(word)
            i += 1
            continue
        break
    return command, path, i


def option_names(command: click.Command) -> set[str]:
    from trainimg.cli.app import cli

    return {name for c in (command, cli) for p in c.params if isinstance(p, click.Option)
            for name in (*p.opts, *p.secondary_opts)} | {"--help", "-h"}


def check_names(words: tuple[str, ...]) -> str | None:
    """A mention or synopsis: its verb exists and each `--option` it names is one of that verb's (usage syntax's
    brackets and uppercase words, such as `[OPTIONS] COMMAND`, are not names)."""
    words = tuple(w for w in (word.strip("[]") for word in words) if w and w not in ("|", "..."))
    command, path, start = resolve(words)
    rest = words[start:]
    if rest and not rest[0].startswith("-") and isinstance(command, click.Group) and any(
            ch.islower() for ch in rest[0]):
        return f"{' '.join(path)} has no command {rest[0]!r}"
    known = option_names(command)
    for word in rest:
        if word == "--":
            break
        for name in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", word):
            if name not in known:
                close = difflib.get_close_matches(name, sorted(known), n=1)
                return f"{' '.join(path)} has no option {name}" + (f" (did you mean {close[0]}?)" if close else "")
    return None


def placeholders() -> set[str]:
    """The words a page may write for a value the reader supplies: the CLI's metavars and EXTRA_PLACEHOLDERS."""
    from trainimg.cli.app import cli

    found = set(EXTRA_PLACEHOLDERS)

    def visit(command: click.Command) -> None:
        ctx = click.Context(command)
        for p in command.params:
            if isinstance(p, click.Option) and p.metavar:
                found.add(p.metavar[1:-1] if re.fullmatch(r"\[[^][]*\]", p.metavar) else p.metavar)  # [FILE]
            elif isinstance(p, click.Argument):
                found.add(p.make_metavar(ctx).strip("[]."))
        for sub in getattr(command, "commands", {}).values():
            visit(sub)
    visit(cli)
    return {word for word in found if word and not any(ch.islower() for ch in word)}


def is_placeholder(word: str, known: set[str]) -> bool:
    return word in known or bool(re.fullmatch(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\$\(.*\)", word))


def sample(param: click.Parameter, word: str) -> str:
    """The value a placeholder `word` stands for where it fills `param`."""
    keys = [*(getattr(param, "opts", [])), param.name or "", word]
    for key in keys:
        if key in SAMPLES:
            return SAMPLES[key]
    if isinstance(param.type, click.Choice):
        return str(param.type.choices[0])
    if isinstance(param.type, (click.types.IntParamType, click.types.FloatParamType)):
        return "1"
    return word.lower().strip("$(){}") or "sample"


def fill(words: tuple[str, ...]) -> list[str]:
    """`words` with each placeholder replaced by a sample value for the option or argument it fills."""
    command, _, start = resolve(words)
    known = placeholders()
    out = list(words)
    options = {name: p for p in command.params if isinstance(p, click.Option) for name in (*p.opts, *p.secondary_opts)}
    arguments = [p for p in command.params if isinstance(p, click.Argument)]
    i, position = start, 0
    while i < len(out):
        word = out[i]
        if word == "--":
            break
        name, eq, value = word.partition("=")
        option = options.get(name if word.startswith("-") else "")
        if option is not None and eq:
            out[i] = f"{name}={sample(option, value)}" if is_placeholder(value, known) else word
        elif option is not None and not option.is_flag and i + 1 < len(out):
            if not (getattr(option, "_flag_needs_value", False) and out[i + 1].startswith("-")):
                if is_placeholder(out[i + 1], known):
                    out[i + 1] = sample(option, out[i + 1])
                i += 1
        elif not word.startswith("-") and arguments:
            argument = arguments[min(position, len(arguments) - 1)]
            if is_placeholder(word, known):
                out[i] = sample(argument, word)
            position += 0 if argument.nargs == -1 else 1
        i += 1
    return out


def check_only(words: list[str]) -> tuple[int, str]:
    """`trainimg WORDS` run up to its verb's checkpoint, in this process: (exit code, what it printed on stderr)."""
    from trainimg.cli.app import main

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(list(words), check_only=True)
    return code, err.getvalue().strip()


def judge(command: Command) -> str | None:
    """None when trainimg accepts `command`, else why not (one line)."""
    if command.names_only:
        return check_names(command.words)
    words = fill(command.words)
    code, said = check_only(words)
    if command.refused:
        return None if code == EXIT_USAGE else (f"shown as refused, but trainimg exits {code} (checked as: "
                                                f"trainimg {shlex.join(words)})")
    if code == 0:
        return None
    return f"exit {code}: {said.splitlines()[-1] if said else 'no message'} (checked as: trainimg {shlex.join(words)})"


# --- the sandbox examples run in ------------------------------------------------------------------------------------

def make_sandbox(folder: Path) -> Path:
    """recipes/ and images/ copied, the seed files, a sample images.lock and a key pair: the reader's checkout."""
    sys.path.insert(0, str(DOCS / "gen"))
    from formats import SAMPLE_VARIANT, sample_entry

    from trainimg.publish.lockfile import dumps_lock
    from trainimg.trust.keys import write_pair

    folder.mkdir(parents=True, exist_ok=True)
    for name in ("recipes", "images"):
        shutil.copytree(ROOT / name, folder / name)
    shutil.copytree(SEED, folder, dirs_exist_ok=True)
    (folder / "images.lock").write_text(dumps_lock({SAMPLE_VARIANT: sample_entry()}), encoding="utf-8")
    write_pair(folder / "release", SIGN_PASSWORD.encode())
    return folder


def repository_copy(folder: Path) -> Path:
    """The repository's tracked files (as a fresh clone has them) copied into `folder`."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, text=True, check=True)
    for name in filter(None, listed.stdout.split("\0")):
        source, target = ROOT / name, folder / name
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return folder


def sandbox_env(folder: Path, engine: bool) -> dict[str, str]:
    """The environment examples run in: this checkout's trainimg first on PATH, a state folder of their own, a
    terminal's unbuffered output, and without the engine unless `engine`."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("TRAINIMG_")}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               TRAINIMG_STATE_DIR=str(folder / ".trainimg-state"), PYTHONUNBUFFERED="1", COLUMNS="80",
               TERM="dumb", TRAINIMG_SIGN_PASSWORD=SIGN_PASSWORD, HOME=str(folder / ".home"))
    env["TRAINIMG_DOCKER_CLI"] = os.environ.get("TRAINIMG_DOCKER_CLI", "/usr/bin/docker")
    if not engine:
        env["DOCKER_HOST"] = "unix:///nonexistent/trainimg-docs-examples.sock"
    return env


# --- examples with their output ------------------------------------------------------------------------------------

@dataclass
class Step:
    """One thing a page does, in page order: write a file, run a command and compare its output, run a script."""

    where: str
    kind: str  # "file", "command" or "script"
    text: str  # the file's content, the command, the script
    path: str = ""  # a file's
    expected: list[str] | None = None  # a command's shown output
    engine: bool = False


def console_steps(block: Block) -> list[Step]:
    """Each `$ ` command of a console block with the output lines under it."""
    steps: list[Step] = []
    going = False
    for number, text in block.lines:
        if text.startswith("$ ") and not going:
            steps.append(Step(f"{shown(block.path)}:{number}", "command", text[2:].rstrip(), expected=[],
                              engine=ENGINE_MARK in block.marks))
            going = text.rstrip().endswith("\\")
        elif going:
            steps[-1].text = steps[-1].text[:-1].rstrip() + " " + text.strip()
            going = text.rstrip().endswith("\\")
        elif steps:
            assert steps[-1].expected is not None
            steps[-1].expected.append(text)
    return steps


def page_steps(path: Path) -> list[Step]:
    steps: list[Step] = []
    for block in blocks(path):
        if block.title and not block.title.startswith("/"):
            steps.append(Step(block.where, "file", "\n".join(t for _, t in block.lines) + "\n", path=block.title,
                              engine=ENGINE_MARK in block.marks))
        elif block.lang == "console":
            steps += console_steps(block)
        elif ENGINE_MARK in block.marks:
            steps.append(Step(block.where, "script", "\n".join(t for _, t in block.lines) + "\n", engine=True))
    return steps


def matches(expected: list[str], actual: list[str]) -> bool:
    """Whether `actual` is what `expected` shows: `...` alone is any lines (none too), `text...` a line starting
    with `text`; trailing blanks ignored."""
    want = [line.rstrip() for line in expected]
    got = [line.rstrip() for line in actual]
    while want and not want[-1]:
        want.pop()
    while got and not got[-1]:
        got.pop()

    def match(i: int, j: int) -> bool:
        if i == len(want):
            return j == len(got)
        if want[i].strip() == "...":
            return any(match(i + 1, k) for k in range(j, len(got) + 1))
        if j == len(got):
            return False
        line = want[i]
        same = got[j].startswith(line[:-3]) if line.endswith("...") else got[j] == line
        return same and match(i + 1, j + 1)
    return match(0, 0)


@dataclass
class Run:
    """What running a page's steps found: a problem per step that failed, in page order."""

    problems: list[str] = field(default_factory=list)
    ran: int = 0


def run_steps(steps: list[Step], folder: Path, env: Mapping[str, str], timeout: float = 600,
              stop_at_failure: bool = False) -> Run:
    """Run `steps` in `folder`, one bash per step, the shell's variables and directory carried from one to the
    next (a page's `export` and `cd` hold for its later steps; a file it shows is written where its shell is, as
    a reader who made a folder and went into it writes it there). `stop_at_failure`: as a reader stops at the
    first step that fails (a tutorial's later steps build on it), the rest are one problem saying so."""
    state, where = folder / ".docs-shell-state", folder / ".docs-shell-cwd"
    state.write_text(f"cd {shlex.quote(str(folder))}\n", encoding="utf-8")
    where.write_text(str(folder), encoding="utf-8")
    run = Run()
    for step in steps:
        if step.kind == "file":
            target = Path(where.read_text(encoding="utf-8")) / step.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(step.text, encoding="utf-8")
            continue
        errexit = "set -e\n" if step.kind == "script" else ""  # a script stops at its first failure
        script = (f". {shlex.quote(str(state))}\nset -o pipefail\n{errexit}{step.text}\n__rc=$?\n"
                  f"{{ export -p; printf 'cd %q\\n' \"$PWD\"; }} > {shlex.quote(str(state))}\n"
                  f"printf %s \"$PWD\" > {shlex.quote(str(where))}\nexit $__rc\n")
        done = subprocess.run(["bash", "-c", script], cwd=folder, env=dict(env), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout)
        run.ran += 1
        if done.returncode != 0:
            run.problems.append(f"{step.where}: exit {done.returncode}: {step.text.strip()[:200]}\n{done.stdout[-3000:]}")
        elif step.expected is not None and not matches(step.expected, done.stdout.splitlines()):
            diff = "\n".join(difflib.unified_diff(step.expected, done.stdout.splitlines(), "the page shows",
                                                  "the command printed", lineterm=""))
            run.problems.append(f"{step.where}: the output differs from the page ({step.text.strip()[:200]})\n{diff}")
        if run.problems and stop_at_failure:
            left = [s.where for s in steps[steps.index(step) + 1:] if s.kind != "file"]
            if left:
                run.problems.append(f"not run after that failure: {len(left)} later step(s), {', '.join(left)}")
            break
    return run
