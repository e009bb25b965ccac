#!/usr/bin/env python3
"""Size gate for the trainimg package (the folder builder/): run by `make lint`.

Why: a module a reader cannot hold in their head, or a function that does five things, is where copies and
defects hide. Limits: no module over MODULE_LIMIT lines and no function (or method) over FUNCTION_LIMIT lines.

How lines are counted: a module's lines are its physical lines, less its data tables; a function's lines run
from its `def` to its last line (a nested function counts inside its parent too).
A data table is a module-level assignment (`NAME = ...` or `NAME: type = ...`) whose value is only literals:
constants, names and dict/list/tuple/set displays of them, optionally passed to one of DATA_WRAPPERS
(e.g. `frozenset({...})`). Tables are data, not logic, and belong beside the code that reads them.
No string counts as a table (a long string is usually a program in disguise).

Explicit exceptions go in EXCEPTIONS with a reason (ideally it stays empty). Each violation is printed as
`file:line: message`; exit 1 if any. Standard library only.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent / "builder"
MODULE_LIMIT = 400
FUNCTION_LIMIT = 60
DATA_WRAPPERS = frozenset({"frozenset", "tuple", "dict", "set", "MappingProxyType"})
# "builder/path.py" (the module) or "builder/path.py:qualified.name" (a function) -> why it may stay over.
EXCEPTIONS: dict[str, str] = {}

_LITERAL_NODES = (ast.Constant, ast.Name, ast.Load, ast.Dict, ast.List, ast.Tuple, ast.Set, ast.Attribute,
                  ast.UnaryOp, ast.USub)


def is_table(value: ast.expr | None) -> bool:
    """True for a display of literals (see the module docstring), possibly wrapped in one DATA_WRAPPERS call."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in DATA_WRAPPERS:
        if len(value.args) != 1 or value.keywords:
            return False
        value = value.args[0]
    if not isinstance(value, (ast.Dict, ast.List, ast.Tuple, ast.Set)):
        return False
    return all(isinstance(node, _LITERAL_NODES) for node in ast.walk(value))


def table_lines(tree: ast.Module) -> int:
    total = 0
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and is_table(node.value):
            total += (node.end_lineno or node.lineno) - node.lineno + 1
    return total


def functions(tree: ast.AST, prefix: str = "") -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function and method with its qualified name (Class.method, outer.inner)."""
    found: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.append((prefix + node.name, node))
            found += functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            found += functions(node, f"{prefix}{node.name}.")
        else:
            found += functions(node, prefix)
    return found


def check(path: Path, package_dir: Path, problems: list[str], used: set[str]) -> None:
    rel = path.relative_to(package_dir.parent).as_posix()
    text = path.read_text()
    try:
        tree = ast.parse(text, rel)
    except SyntaxError as err:
        problems.append(f"{rel}:{err.lineno}: syntax error: {err.msg}")
        return
    physical = len(text.splitlines())
    counted = physical - table_lines(tree)
    if counted > MODULE_LIMIT:
        if rel in EXCEPTIONS:
            used.add(rel)
        else:
            tables = f" ({physical} less {physical - counted} in data tables)" if counted != physical else ""
            problems.append(f"{rel}:1: module has {counted} lines{tables}, over the limit of {MODULE_LIMIT}: split it")
    for name, node in functions(tree):
        length = (node.end_lineno or node.lineno) - node.lineno + 1
        if length <= FUNCTION_LIMIT:
            continue
        key = f"{rel}:{name}"
        if key in EXCEPTIONS:
            used.add(key)
        else:
            problems.append(f"{rel}:{node.lineno}: function {name} has {length} lines, "
                            f"over the limit of {FUNCTION_LIMIT}: split it")


def stats(package_dir: Path) -> str:
    """The figures a before/after table needs: modules, lines per module, the longest function."""
    sizes: list[tuple[int, str]] = []
    longest = (0, "")
    for path in sorted(package_dir.rglob("*.py")):
        rel = path.relative_to(package_dir.parent).as_posix()
        text = path.read_text()
        sizes.append((len(text.splitlines()), rel))
        for name, node in functions(ast.parse(text, rel)):
            longest = max(longest, ((node.end_lineno or node.lineno) - node.lineno + 1, f"{rel}:{name}"))
    lines = sorted(n for n, _ in sizes)
    return (f"modules: {len(sizes)}; lines: {sum(lines)} (median {lines[len(lines) // 2]}, largest "
            f"{max(sizes)[0]} in {max(sizes)[1]}); longest function: {longest[0]} lines ({longest[1]})")


def main(argv: list[str]) -> int:
    """Check the package folder given as the argument (default: builder/ beside .ci/); `--stats` prints figures."""
    if argv[:1] == ["--stats"]:
        print(stats(Path(argv[1]).resolve() if argv[1:] else PACKAGE_DIR))
        return 0
    package_dir = Path(argv[0]).resolve() if argv else PACKAGE_DIR
    problems: list[str] = []
    used: set[str] = set()
    for path in sorted(package_dir.rglob("*.py")):
        check(path, package_dir, problems, used)
    for key in sorted(set(EXCEPTIONS) - used):
        problems.append(f".ci/lint_sizes.py:1: exception {key} is no longer needed: remove it from EXCEPTIONS")
    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
