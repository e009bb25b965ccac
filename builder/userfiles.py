"""Reading the JSON files users hand trainimg (a docker config, a release lockfile).

Both are optional (a missing file means "nothing recorded yet") and both are edited by people and other tools, so
every way they can be broken is one UserInputError naming the file and saying how to fix it, never a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import UserInputError


def read_json_object(path: Path, what: str, fix: str) -> dict[str, Any] | None:
    """The JSON object in `path`, None when the file does not exist. `what` names the file in the error ("the
    lockfile"), `fix` says what to do about a broken one ("fix or remove it"). An empty file is an empty object
    (the docker CLI writes one)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserInputError(f"cannot read {what}: {exc}", where=str(path)) from None
    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise UserInputError(f"not valid JSON (line {exc.lineno}: {exc.msg}); {fix}", where=str(path)) from None
    if not isinstance(data, dict):
        raise UserInputError(f"{what} is not a JSON object; {fix}", where=str(path))
    return data
