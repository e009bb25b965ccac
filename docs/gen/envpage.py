"""The `TRAINIMG_*` environment variables: every one the code names, where, and what the code says of it.

Why a scan and not a list: no table of them exists in the code; each is named where it is read or set (the state
folder in `state`, the blob cache in `registry.blobcache`, the launcher's in `runtime.launch`). So the page is made
from the source itself: every string (or keyword) in builder/ that is such a name, and, for what it means, the first
sentence that mentions it in an option's help, a docstring or a comment, preferred in that order. A variable added
to the code is on the page at the next generation, and tests/test_docs_reference.py fails until it is.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from md import cell, code, header, prose, table
from sourcefacts import rst

import trainimg

PACKAGE = Path(trainimg.__file__).resolve().parent
NAME = re.compile(r"\bTRAINIMG_[A-Z0-9_]*[A-Z0-9]\b")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(*])")
KINDS = ("help", "docstring", "comment")  # where a description is taken from, preferred first
IMAGE_SIDE = "runtime"  # the in-image runtime's folder: its variables are the program's


@dataclass
class Variable:
    name: str
    modules: set[str] = field(default_factory=set)  # where the code names it (not in prose)
    said: list[tuple[int, str]] = field(default_factory=list)  # (rank, sentence): the lowest rank describes it


def _docstring(node: ast.AST) -> str | None:
    if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        value = body[0].value.value
        return value if isinstance(value, str) else None
    return None


@dataclass(frozen=True)
class Text:
    kind: str  # "code", or one of KINDS
    text: str
    line: int
    function_doc: str  # the docstring of the function the text is in ("" at module level)


def _texts(tree: ast.Module, source: str) -> Iterator[Text]:
    """Every string of a module (help texts, docstrings, code) and every comment, with its line."""
    docstrings = {id(n.body[0].value) for n in ast.walk(tree) if _docstring(n) is not None}  # type: ignore[attr-defined]
    helps = {id(k.value) for node in ast.walk(tree) if isinstance(node, ast.Call) for k in node.keywords
             if k.arg == "help"}

    def visit(node: ast.AST, doc: str) -> Iterator[Text]:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = _docstring(node) or ""
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            kind = "docstring" if id(node) in docstrings else "help" if id(node) in helps else "code"
            yield Text(kind, node.value, line, doc)
        elif isinstance(node, ast.JoinedStr):
            text = "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
            yield Text("help" if id(node) in helps else "code", text, line, doc)
            return  # its parts are this text
        elif isinstance(node, ast.keyword) and node.arg:
            yield Text("code", node.arg, line, doc)
        for child in ast.iter_child_nodes(node):
            yield from visit(child, doc)

    yield from visit(tree, "")
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield Text("comment", token.string.lstrip("#: "), token.start[0], "")


def _sentences(text: str, name: str) -> list[str]:
    """The sentences of `text` (reST code marks made Markdown) that mention `name`, list bullets removed."""
    return [s.lstrip("*- ") for s in SENTENCE_END.split(rst(" ".join(text.split()))) if name in s]


def _first_sentence(text: str) -> str:
    return SENTENCE_END.split(rst(" ".join(text.split())))[0] if text.strip() else ""


def scan(package: Path = PACKAGE) -> dict[str, Variable]:
    """Every `TRAINIMG_*` name in the package's Python source, by name, with what describes it, ranked: a comment on
    the line that names it (0); a help, docstring or comment of a module whose code names it (1-3), or of
    another module (4-6); the docstring of a function that names it (7)."""
    found: dict[str, Variable] = {}
    prose_of: list[tuple[str, Text]] = []
    for path in sorted(package.rglob("*.py")):
        module = path.relative_to(package.parent).as_posix()  # builder/state.py
        source = path.read_text(encoding="utf-8")
        texts = list(_texts(ast.parse(source), source))
        comments = {t.line: t.text for t in texts if t.kind == "comment"}
        for t in texts:
            if t.kind != "code":
                prose_of.append((module, t))
                continue
            for name in sorted(set(NAME.findall(t.text))):
                var = found.setdefault(name, Variable(name))
                var.modules.add(module)
                if t.line in comments and NAME.search(comments[t.line]) is None:
                    var.said.append((0, rst(comments[t.line])))
                if t.function_doc:
                    var.said.append((7, _first_sentence(t.function_doc)))
    for module, t in prose_of:
        for name in sorted(set(NAME.findall(t.text))):
            var = found.setdefault(name, Variable(name))
            rank = KINDS.index(t.kind) + (1 if module in var.modules else 4)
            var.said += [(rank, sentence) for sentence in _sentences(t.text, name)]
    return found


def description(var: Variable) -> str:
    return min(var.said, key=lambda said: said[0])[1] if var.said else ""


def page() -> str:
    variables = sorted(scan().values(), key=lambda v: v.name)
    image = [v for v in variables if v.modules and all(m.split("/")[1] == IMAGE_SIDE for m in v.modules)]
    host = [v for v in variables if v not in image]

    def rows(chosen: list[Variable]) -> list[list[str]]:
        return [[code(v.name), cell(description(v)) or "–",
                 ", ".join(code(m) for m in sorted(v.modules)) or "prose only"] for v in chosen]

    headers = ("Variable", "What the code says of it", "Named in")
    return "\n".join([
        header("a scan of builder/ for TRAINIMG_* names (docs/gen/envpage.py)"),
        "# Environment variables\n",
        prose("Every `TRAINIMG_*` variable the code names, with the first sentence of an option's help, a docstring "
              "or a comment that mentions it, and the modules whose code names it.") + "\n",
        "## Read or written by trainimg on the host\n", table(headers, rows(host)),
        "## Set in the image for your program (trainimg-launch)\n", table(headers, rows(image)),
    ])
