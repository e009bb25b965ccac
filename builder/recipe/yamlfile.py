"""Reading one recipe file into data that remembers where each key and list item was written.

Every mapping key and list item keeps its line, so an error can say ``recipes/x.yaml:12:matrix.cuda``. And what
plain YAML would accept silently is refused or made visible here:
- a key written twice: YAML keeps the last and drops the first without a word; here it is an error at the second;
- an unquoted number: ``3.10`` is the float 3.1, so floats keep the text as written (`WrittenFloat`) and the field
  checks can tell ``13.0`` (reads back as written) from ``3.10`` (does not: "quote it");
- bytes that are not UTF-8, and a path that cannot be read (a symlink loop): one line naming the file, not a
  traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from ..errors import RecipeError

_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE = "tag:yaml.org,2002:merge"


class WrittenFloat(float):
    """A float that remembers how it was written (``3.10``), since its value alone (3.1) loses the digits."""

    text: str

    def __new__(cls, value: float, text: str) -> WrittenFloat:
        obj = super().__new__(cls, value)
        obj.text = text
        return obj


class LineMap(dict[Any, Any]):
    """A YAML mapping; `lines` maps each key written in it to its 1-based line."""

    lines: dict[Any, int]


class LineList(list[Any]):
    """A YAML sequence; `lines[i]` is the 1-based line of item i."""

    lines: list[int]


class _DuplicateKey(Exception):
    def __init__(self, key: Any, line: int, first: int) -> None:
        super().__init__(key)
        self.key, self.line, self.first = key, line, first


class _Loader(_BaseLoader):
    """The safe loader, with the three constructors below."""


def _mapping(loader: Any, node: yaml.MappingNode) -> Iterator[LineMap]:
    data = LineMap()
    data.lines = {}
    yield data  # yielded first, as PyYAML's own constructors do, so that aliases to this mapping resolve
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == _MERGE or not isinstance(key_node, yaml.ScalarNode):
            continue  # `<<: *base` may be overridden on purpose; a non-scalar key fails validation anyway
        key = loader.construct_object(key_node)
        line = key_node.start_mark.line + 1
        if key in seen:
            raise _DuplicateKey(key, line, seen[key])
        seen[key] = line
    data.update(loader.construct_mapping(node))
    data.lines = seen


def _sequence(loader: Any, node: yaml.SequenceNode) -> Iterator[LineList]:
    data = LineList()
    data.lines = [item.start_mark.line + 1 for item in node.value]
    yield data
    data.extend(loader.construct_sequence(node))


def _float(loader: Any, node: yaml.ScalarNode) -> WrittenFloat:
    return WrittenFloat(loader.construct_yaml_float(node), str(node.value))


_Loader.add_constructor("tag:yaml.org,2002:map", _mapping)
_Loader.add_constructor("tag:yaml.org,2002:seq", _sequence)
_Loader.add_constructor("tag:yaml.org,2002:float", _float)


def printable_key(key: Any) -> str:
    """A key as it may appear in the one-line `file:key` of an error: unprintable keys are shown quoted."""
    return key if isinstance(key, str) and key.isprintable() else repr(key)


def read_recipe_file(path: Path, shown: str) -> Any:
    """Parse one recipe file; anything that keeps it from being read as intended is one `RecipeError`."""
    try:
        raw = path.read_bytes()
    except OSError as exc:  # missing, unreadable, a folder, a symlink loop
        raise RecipeError(f"cannot read: {exc.strerror or exc}", where=shown) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise RecipeError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x}); save the file as UTF-8",
                          where=f"{shown}:{line}") from None
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except _DuplicateKey as dup:
        raise RecipeError(f"duplicate key (first at line {dup.first}); YAML would keep only the last and drop the "
                          f"first silently: remove one", where=f"{shown}:{dup.line}:{printable_key(dup.key)}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{shown}:{mark.line + 1}" if mark else shown
        raise RecipeError(f"not valid YAML: {getattr(exc, 'problem', None) or exc}", where=where) from None


def written(value: Any) -> Any:
    """A scalar as its author wrote it, so that ``cuda: 13.0`` and ``cuda: "13.0"`` compare equal."""
    if isinstance(value, WrittenFloat):
        return value.text
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value
