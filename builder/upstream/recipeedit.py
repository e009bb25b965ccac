"""One framework version in a recipe file, changed as text so the file keeps its comments and layout: the version
a variant comes from (`Variant.origin["version"]`, e.g. ``matrix[1].version``) is found on its line, and either
replaced (`move`) or given the new version beside it (`beside`: the same matrix group then makes both).

Only the version's own token is touched, on the line YAML says it is on; anything else (a version set for the
whole file when a new one beside it is asked for, a line holding it twice) is refused with the place and why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UserInputError
from ..recipe.yamlfile import LineList, LineMap, read_recipe_file, written

_PART = re.compile(r"^([^\[\]]+)(?:\[(\d+)\])?$")


@dataclass(frozen=True)
class Occurrence:
    """Where a version is written: the recipe file (as shown), its key path, the version."""

    source: str
    path: str  # version | matrix.version | matrix[1].version
    version: str

    def where(self, line: int) -> str:
        return f"{self.source}:{line}:{self.path}"


def _walk(data: Any, path: str) -> tuple[Any, int]:
    """The value at `path` and the line of its key."""
    node, line = data, 0
    for part in path.split("."):
        match = _PART.match(part)
        if match is None or not isinstance(node, LineMap) or match.group(1) not in node:
            raise UserInputError(f"no {path} in the recipe", where=path)
        key, index = match.group(1), match.group(2)
        line, node = node.lines[key], node[key]
        if index is not None:
            if not isinstance(node, LineList) or int(index) >= len(node):
                raise UserInputError(f"no {path} in the recipe", where=path)
            line, node = node.lines[int(index)], node[int(index)]
    return node, line


def version_line(path: Path, occ: Occurrence) -> tuple[int, bool]:
    """The 1-based line the version is written on, and whether it is an item of a list (a matrix axis)."""
    value, key_line = _walk(read_recipe_file(path, occ.source), occ.path)
    if isinstance(value, LineList):
        lines = [line for item, line in zip(value, value.lines) if written(item) == occ.version]
        if len(lines) != 1:
            raise UserInputError(f"{occ.version} is written {len(lines)} times there", where=occ.where(key_line))
        return lines[0], True
    if written(value) != occ.version:
        raise UserInputError(f"holds {written(value)}, not {occ.version}", where=occ.where(key_line))
    return key_line, False


def edit(path: Path, text: str, occ: Occurrence, new: str, beside: bool) -> str:
    """`text` (the file at `path`) with `occ`'s version moved to `new`, or `new` added beside it."""
    number, listed = version_line(path, occ)
    lines = text.splitlines(keepends=True)
    line = lines[number - 1]
    token = re.compile(rf"(?<![\w.])([\"']?){re.escape(occ.version)}\1(?![\w.])")
    found = list(token.finditer(line))
    if len(found) != 1:
        raise UserInputError(f"cannot tell which {occ.version} on the line to change ({len(found)} found)",
                             where=occ.where(number))
    match = found[0]
    quote = match.group(1) or '"'
    if not beside:
        lines[number - 1] = line[:match.start()] + f"{quote}{new}{quote}" + line[match.end():]
    elif not listed:
        raise UserInputError("the version is set for the whole file; a new one beside it needs a matrix list "
                             "(version: [\"A\", \"B\"]): move it, or write the list", where=occ.where(number))
    elif line.lstrip().startswith("-") and "[" not in line[:match.start()]:
        indent = line[:len(line) - len(line.lstrip())]
        lines.insert(number, f"{indent}- {quote}{new}{quote}\n")
    else:
        lines[number - 1] = line[:match.end()] + f", {quote}{new}{quote}" + line[match.end():]
    return "".join(lines)
