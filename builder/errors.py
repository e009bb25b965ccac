"""One error hierarchy for trainimg, mapped to exit codes in one place (the CLI's top-level handler).

Every error carries a message a person can act on. `where` names the file and key (``recipes/x.yaml:matrix.cuda``)
so the one printed line reads ``where: reason``; nothing below the CLI prints or exits by itself.
"""

from __future__ import annotations

from .runtime.contract import EXIT_FAILED, EXIT_USAGE


class TrainimgError(Exception):
    """Base of every error trainimg raises on purpose; `exit_code` is what the CLI exits with."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, *, where: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.where = where

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


class UserInputError(TrainimgError):
    """Bad input: a recipe, an env var, a CLI argument. Exit 2; nothing was built or changed."""

    exit_code = EXIT_USAGE


class RecipeError(UserInputError):
    """A recipe that cannot be built; `where` is ``file:line:key`` (``file:key`` where YAML gives no line)."""


class CheckFailed(TrainimgError):
    """A check ran and failed (drift, conformance, a digest mismatch). Exit 1."""

    exit_code = EXIT_FAILED


class EngineError(TrainimgError):
    """The Docker engine refused or failed an operation (build step, run, inspect). Exit 1."""

    exit_code = EXIT_FAILED


class RegistryError(TrainimgError):
    """A registry answered with an error or could not be reached. Exit 1."""

    exit_code = EXIT_FAILED
