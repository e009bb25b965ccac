"""Facts read out of the code's own source: module constants with the comment beside them and the section comment
above them, a dataclass's fields with their comments, the first paragraph of a docstring.

Why from the source: the comments beside a constant or a field are where this project says what it means (the
contract's labels, the lockfile's fields); reading them here keeps one description, the one in the code.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import re
import tokenize
from dataclasses import dataclass
from types import ModuleType
from typing import Any

_SECTION = re.compile(r"^#\s*--+\s*(.+?)\s*-*\s*$")


@dataclass(frozen=True)
class Constant:
    name: str
    value: Any
    comment: str  # the comment on its line, else the `#:` lines right above it
    section: str  # the last `# -- title ---` comment above it


def _comments(source: str) -> dict[int, str]:
    """Line number -> the comment on it (without `#`)."""
    out = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            out[token.start[0]] = token.string
    return out


def _said(comments: dict[int, str], first: int, last: int) -> str:
    """The comment of a statement on lines first..last: on its last line, else the `#:` block above it."""
    if last in comments and not comments[last].lstrip("#").strip().startswith("--"):
        return comments[last].lstrip("#").strip()
    above: list[str] = []
    line = first - 1
    while line in comments and comments[line].startswith("#:"):
        above.insert(0, comments[line][2:].strip())
        line -= 1
    return " ".join(above)


def constants(module: ModuleType) -> list[Constant]:
    """Every module-level `NAME = value` of `module`, in source order, with its comment and section."""
    source = inspect.getsource(module)
    comments = _comments(source)
    sections = sorted((line, m.group(1)) for line, text in comments.items() if (m := _SECTION.match(text)))
    out = []
    for node in ast.parse(source).body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if len(targets) != 1:
            continue
        elements = targets[0].elts if isinstance(targets[0], ast.Tuple) else [targets[0]]  # `A, B = "a", "b"`
        names = [t.id for t in elements if isinstance(t, ast.Name) and hasattr(module, t.id)]
        section = next((title for line, title in reversed(sections) if line < node.lineno), "")
        said = _said(comments, node.lineno, node.end_lineno or node.lineno)
        out += [Constant(name, getattr(module, name), said, section) for name in names]
    return out


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    default: str  # "" for a required field
    comment: str


def fields(cls: type) -> list[Field]:
    """A dataclass's fields in order, their annotation as written, default and comment (beside it or above it)."""
    source = inspect.getsource(cls)
    comments = _comments(source)
    by_name = {f.name: f for f in dataclasses.fields(cls)}
    out = []
    for node in ast.parse(source).body[0].body:  # type: ignore[attr-defined]
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        name = node.target.id
        if name not in by_name:
            continue
        comment = _field_comment(comments, node.lineno, node.end_lineno or node.lineno)
        default = "" if node.value is None else ast.unparse(node.value)
        if default.startswith("field("):
            default = _factory(by_name[name])
        out.append(Field(name, ast.unparse(node.annotation), default, comment))
    return out


def _factory(f: dataclasses.Field[Any]) -> str:
    if f.default_factory is not dataclasses.MISSING:
        return repr(f.default_factory())
    return repr(f.default)


def _field_comment(comments: dict[int, str], first: int, last: int) -> str:
    if last in comments:
        return comments[last].lstrip("#:").strip()
    above: list[str] = []
    line = first - 1
    while line in comments:
        above.insert(0, comments[line].lstrip("#:").strip())
        line -= 1
    return " ".join(above)


def rst(text: str) -> str:
    """A docstring's reStructuredText as Markdown: ``code`` and `name` become `code`."""
    return re.sub(r"``(.+?)``", r"`\1`", text)


def paragraphs(obj: Any) -> list[str]:
    """The docstring of `obj` as paragraphs, each on one line, in Markdown."""
    doc = inspect.getdoc(obj) or ""
    return [rst(" ".join(p.split())) for p in doc.split("\n\n") if p.strip()]


def first_paragraph(obj: Any) -> str:
    found = paragraphs(obj)
    return found[0] if found else ""
