"""What every verb shares: the context object (recipes folder, repository root, environment), JSON output, and the
helpers several verbs call (the engine, an IMAGE|VARIANT argument, registry credentials).

These are public names here, not private helpers of one verb's module imported by others, so a verb module
depends on this one and never on another verb's."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..errors import UserInputError
from ..progress import DEFAULT_PROGRESS, PROGRESS_MODES
from ..runtime.report import Suite

if TYPE_CHECKING:
    from ..engine.docker import DockerEngine
    from ..trust.signer import Signer
    from ..registry.references import RegistryTarget
    from ..recipe.variant import RecipeSet


class CommandChecked(Exception):
    """Raised by `Ctx.checked` in check-only mode: the command line passed every check of its verb. Not an error:
    `app.main` turns it into exit 0."""


#: What `app.main(check_only=True)` hands the root command as its object: the `Ctx` it makes is in check-only mode.
CHECK_ONLY = "check-only"


class Ctx:
    """What every verb shares: the recipes folder, the repository root beside it, the environment."""

    def __init__(self, recipes: Path, env: Mapping[str, str], *, check_only: bool = False) -> None:
        self.recipes_dir = recipes
        self.root = recipes.resolve().parent
        self.env = env
        self.check_only = check_only

    def checked(self) -> None:
        """The verb has checked its command line (flags, values, their combinations, the files it names) and acts
        from here on: builds, starts, reaches an engine or a network, reads a key or stdin, writes. Every verb
        calls this once, before its first action. In check-only mode (`app.main(check_only=True)`: the
        documentation's command checker) the run stops here, so a command line is judged by the verb's own
        checks without running it."""
        if self.check_only:
            raise CommandChecked()

    def recipes(self, paths: tuple[Path, ...] = ()) -> RecipeSet:
        from ..recipe.loading import load_recipes

        return load_recipes(self.recipes_dir, paths or None)


pass_ctx = click.make_pass_decorator(Ctx)
#: A verb's callback, as the shared flag groups (`build_flags`, `test_flags`, `registry_flags`) take and return it.
Callback = TypeVar("Callback", bound=Callable[..., Any])

#: `--json` is one idea everywhere: alone (or `--json -`) it prints the JSON on stdout, `--json FILE` writes FILE.
STDOUT = "-"


def json_option(what: str) -> Callable[[Callback], Callback]:
    """The `--json [FILE]` option of every verb that has a JSON form; `what` names the document."""
    return click.option("--json", "json_path", is_flag=False, flag_value=STDOUT, default=None, metavar="[FILE]",
                        help=f"{what} as JSON: on stdout with `--json` alone (or `--json -`), else into FILE.")


def progress_option(runs: str) -> Callable[[Callback], Callback]:
    """`--progress`, described with what the verb runs (`runs`), so its help says what happens behind it."""
    return click.option("--progress", type=click.Choice(PROGRESS_MODES), default=DEFAULT_PROGRESS, show_default=True,
                        help=f"How {runs} is shown on stderr: auto (rich on a terminal, plain lines otherwise), "
                             "plain, or quiet.")


def docker_engine() -> DockerEngine:
    """The Docker engine every verb that builds, starts containers or reads images talks to."""
    from ..engine.docker import DockerEngine

    return DockerEngine()


def image_ref(c: Ctx, ref: str) -> tuple[str, str | None]:
    """IMAGE|VARIANT: a variant name of the recipes gives its tag; anything else is an image reference."""
    from ..recipe.loading import RecipeError

    try:
        recipes = c.recipes()
    except RecipeError:
        recipes = None
    if recipes and ref in recipes.by_name:
        return recipes.by_name[ref].tag, ref
    return ref, None


def variant_images(c: Ctx, ref: str) -> list[tuple[str, str | None, str]]:
    """IMAGE|VARIANT as the engine's images: (local tag, report name, architecture) for each architecture a
    variant's build makes (`arches.local_tag`, `arch_key`; not one its committed lock says is not lockable here),
    or the reference itself ("" architecture: whatever the image is)."""
    from ..imagebuild.lockcompile import left_out
    from ..plan.requirements import lock_states
    from ..recipe.arches import arch_key, local_tag
    from ..recipe.compat import load_compat

    tag, name = image_ref(c, ref)
    if name is None:
        return [(tag, None, "")]
    recipes = c.recipes()
    chosen = recipes.with_parents([recipes.by_name[name]])
    left = left_out(chosen, lock_states(chosen, load_compat(), c.root))
    v = recipes.by_name[name]
    return [(local_tag(v.tag, a), arch_key(name, a), a) for a in v.arch if (name, a) not in left]


def credentials(registry: RegistryTarget, username: str | None, password_stdin: bool,
                env: Mapping[str, str]) -> dict[str, str] | None:
    """The registry credentials of `--username`/`--password-stdin`, else those stored for the registry."""
    from ..registry.credentials import resolve_credentials

    password = None
    if password_stdin:
        password = sys.stdin.readline().rstrip("\n")
        if not password:
            raise UserInputError("no password on standard input", where="--password-stdin")
    elif username:
        password = env.get("TRAINIMG_REGISTRY_PASSWORD")
        if not password:
            raise UserInputError("--username needs the password in TRAINIMG_REGISTRY_PASSWORD or on "
                                 "--password-stdin", where="--username")
    return resolve_credentials(registry, username, password, env=env)


def signer(c: Ctx, key: Path | None, on_line: Callable[[str], None]) -> Signer | None:
    """The `--sign-key` key, opened now with its passphrase from the environment (a wrong one fails before
    anything is built or pushed); None without the flag: nothing is signed."""
    if key is None:
        return None
    from ..trust.keys import load_signing_key
    from ..trust.signer import Signer

    return Signer(load_signing_key(key, c.env), c.env, on_line)


#: `--sign-key`, the same on release, push and promote.
sign_key_option = click.option(
    "--sign-key", type=click.Path(path_type=Path), default=None, metavar="FILE",
    help="Sign each pushed image by digest for its repository, with its SLSA provenance, before any tag moves: a "
         "cosign private key (`trainimg trust keygen`, `cosign generate-key-pair`), its passphrase in "
         "TRAINIMG_SIGN_PASSWORD or COSIGN_PASSWORD.")


def note(text: str, progress: str = DEFAULT_PROGRESS) -> None:
    """A line on stderr saying what the verb did behind the user's back (a container, a registry), once it worked:
    a failure stays the one line that names its cause. `--progress quiet` silences it."""
    if progress != "quiet":
        click.echo(f"trainimg: {text}", err=True)


def check_writable(path: str | None) -> None:
    """Refuse a report path that cannot be written before the work that fills it, not after (one line, exit 2)."""
    if path in (None, STDOUT):
        return
    target = Path(path)
    folder = next((p for p in (target.parent, *target.parent.parents) if p.exists()), Path("."))
    why = ("it is a folder" if target.is_dir() else f"{folder} is not a folder" if not folder.is_dir()
           else f"{folder} is not writable" if not os.access(folder, os.W_OK) else "")
    if why:
        raise UserInputError(f"cannot write {path}: {why}; choose a file you can write")


def emit_json(data: Any, path: str | None) -> None:
    """Write a JSON report to `path` ('-' or None is stdout)."""
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    if path in (None, STDOUT):
        click.echo(text, nl=False)
        return
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UserInputError(f"cannot write {path}: {exc.strerror or exc}; choose a file you can write") from None


def write_reports(suites: list[Suite], json_path: str | None, junit_path: str | None) -> None:
    """The conformance reports of `suites`: JSON (stdout or a file) and JUnit, where the flags ask for them."""
    from ..runtime.report import ReportPathError, json_report, write_json, write_junit

    try:
        if json_path == STDOUT:
            click.echo(json_report(suites), nl=False)
        elif json_path:
            write_json(suites, json_path)
        if junit_path:
            write_junit(suites, junit_path)
    except ReportPathError as err:
        raise UserInputError(str(err)) from None


def write_text(text: str, output: Path | None) -> None:
    """`text` to `output`, or to stdout without one."""
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UserInputError(f"cannot write {output}: {exc.strerror or exc}; choose a file you can write",
                             where="--output") from None
    click.echo(f"wrote {output}", err=True)
