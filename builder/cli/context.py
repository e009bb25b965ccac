"""What every verb shares: the context object (recipes folder, repository root, environment) and JSON output."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..errors import UserInputError

if TYPE_CHECKING:
    from ..recipe.variant import RecipeSet


class Ctx:
    """What every verb shares: the recipes folder, the repository root beside it, the environment."""

    def __init__(self, recipes: Path, env: Mapping[str, str]) -> None:
        self.recipes_dir = recipes
        self.root = recipes.resolve().parent
        self.env = env

    def recipes(self, paths: tuple[Path, ...] = ()) -> RecipeSet:
        from ..recipe.loading import load_recipes

        return load_recipes(self.recipes_dir, paths or None)


pass_ctx = click.make_pass_decorator(Ctx)
#: A verb's callback, as the shared flag groups (`build_flags`, `test_flags`, `registry_flags`) take and return it.
Callback = TypeVar("Callback", bound=Callable[..., Any])


def check_writable(path: str | None) -> None:
    """Refuse a report path that cannot be written before the work that fills it, not after (one line, exit 2)."""
    if path in (None, "-"):
        return
    target = Path(path)
    folder = next((p for p in (target.parent, *target.parent.parents) if p.exists()), Path("."))
    why = ("it is a folder" if target.is_dir() else f"{folder} is not a folder" if not folder.is_dir()
           else f"{folder} is not writable" if not os.access(folder, os.W_OK) else "")
    if why:
        raise UserInputError(f"cannot write {path}: {why}; choose a file you can write")


def emit_json(data: Any, path: str | None) -> None:
    """Write a JSON report to `path` ('-' is stdout)."""
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    if path in (None, "-"):
        click.echo(text, nl=False)
        return
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UserInputError(f"cannot write {path}: {exc.strerror or exc}; choose a file you can write") from None


