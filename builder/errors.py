"""One error hierarchy for trainimg, mapped to exit codes in one place (the CLI's top-level handler).

Every error carries a message a person can act on. The one line it prints follows one scheme (`TrainimgError.line`):
- ``PLACE: reason`` when the error has a place the user fixes, its `where`: a recipe's ``file:line:key`` (editors and
  compilers' ``file:line:`` habit), a flag (``--lock``), an environment variable (``CLUSTER_SPEC``), an argument;
- ``trainimg VERB: reason`` otherwise, VERB the command that failed (as click's usage errors print it).
`where` is never a verb's name used as a prefix: a verb is what the handler adds. Nothing below the CLI prints or
exits by itself.
"""

from __future__ import annotations

from .runtime.contract import EXIT_FAILED, EXIT_USAGE


def counted(n: int, noun: str) -> str:
    """``1 file``, ``2 files``: counts in messages read as sentences."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


class TrainimgError(Exception):
    """Base of every error trainimg raises on purpose; `exit_code` is what the CLI exits with."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, *, where: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.where = where

    #: The command that failed (``trainimg build``), set by the CLI's group as the error passes it.
    command: str | None = None

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message

    def lines(self, command: str = "trainimg") -> list[str]:
        """What the CLI prints on stderr: one line, ``where: reason`` or ``COMMAND: reason``."""
        text = self.message.replace("\n", " ")
        return [f"{self.where}: {text}" if self.where else f"{self.command or command}: {text}"]


class UserInputError(TrainimgError):
    """Bad input: a recipe, an env var, a CLI argument. Exit 2; nothing was built or changed."""

    exit_code = EXIT_USAGE


class RecipeError(UserInputError):
    """A recipe that cannot be built; `where` is ``file:line:key`` (``file:key`` where YAML gives no line)."""

    def sort_key(self) -> tuple[str, int, str]:
        """File, then line (0 where YAML gave none), then the rest: the order `validate` reports mistakes in."""
        file, _, rest = (self.where or "").partition(":")
        line, _, key = rest.partition(":")
        return (file, int(line), key) if line.isdigit() else (file, 0, rest)


class RecipeErrors(RecipeError):
    """Every mistake found in the recipes at once, one `RecipeError` each, reported one line each in file and line
    order, then a count; a person fixes them all in one edit instead of one per run."""

    def __init__(self, errors: list[RecipeError]) -> None:
        unique = {(e.where, e.message): e for e in errors}  # a matrix repeats a shared key's mistake per variant
        self.errors = sorted(unique.values(), key=RecipeError.sort_key)
        files = {e.sort_key()[0] for e in self.errors}
        super().__init__(f"{counted(len(self.errors), 'mistake')} in {counted(len(files), 'file')}")

    def lines(self, command: str = "trainimg") -> list[str]:
        return [line for e in self.errors for line in e.lines(command)] + [f"{self.command or command}: {self.message}"]

    @staticmethod
    def raise_any(errors: list[RecipeError]) -> None:
        """Raise nothing for no mistake, the mistake itself for one (one line, as ever), all of them for several."""
        every = [e for err in errors for e in (err.errors if isinstance(err, RecipeErrors) else [err])]
        flat = list({(e.where, e.message): e for e in every}.values())
        if len(flat) == 1:
            raise flat[0]
        if flat:
            raise RecipeErrors(flat)


class CheckFailed(TrainimgError):
    """A check ran and failed (drift, conformance, a digest mismatch). Exit 1."""

    exit_code = EXIT_FAILED


class EngineError(TrainimgError):
    """The Docker engine refused or failed an operation (build step, run, inspect). Exit 1."""

    exit_code = EXIT_FAILED


class RegistryError(TrainimgError):
    """A registry answered with an error or could not be reached. Exit 1."""

    exit_code = EXIT_FAILED
