#!/usr/bin/env python3
"""Import-layer gate for the trainimg package (the folder builder/): run by `make lint`.

Why: the folders are meant to read as the pipeline, and that only stays true if data flows one way. Each
top-level module or subpackage of builder/ sits in one layer, lowest first:

    runtime                                   the in-image runtime: standard library only, copied into images
    errors, state, progress, options,         small shared foundations (options: typed per-verb options;
    userfiles                                 userfiles: the JSON files users hand trainimg)
    recipe                                    recipes, grammar, rules, compatibility data
    plan                                      build stages and blocks
    audit                                     advisories against every pin: OSV records, waivers, the VEX
    render                                    Dockerfiles, bake files
    engine                                    the one door to the container engine
    registry                                  the registry client: references, credentials, the API, blob push,
                                              referrers, layer files, access log, the local registry
    trust                                     signing keys, signatures and provenance in cosign's format,
                                              verification by key, cluster admission policies
    imagebuild                                building images, compiling locks
    conformance                               suite, replicas, verdicts, reports, records
    publish                                   push, lockfile, diff, SBOMs and records beside images
    jobs                                      run, tune, cloud job specs
    pipeline                                  release(): build -> conformance -> publish
    cli, __main__, __init__                   the command line

Rules checked (each violation is printed as `file:line: message`; exit 1 if any):
1. a module never imports one in a higher layer (same layer is fine, cycles aside);
2. no import cycle among the package's modules (every import counts: one inside a function or under
   `if TYPE_CHECKING:` only hides a cycle, the two modules still cannot be understood apart);
3. the runtime imports nothing from the host package: at module level only the standard library and its own
   modules (it runs in images as `trainimg_runtime`); inside a function it may also import the frameworks it
   exercises in the image (FRAMEWORKS below);
4. inside the package, imports of the package itself are relative (mypy checks the folder, images rename it);
5. only the engine implementation (ENGINE_MODULE) imports the docker SDK: everything else takes `engine.base.Engine`.
A top-level module missing from LAYERS is a violation too: place it in the table when you add it.
Standard library only.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent / "builder"
PACKAGE = "trainimg"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("runtime",),
    ("errors", "state", "progress", "options", "userfiles"),
    ("recipe",),
    ("plan",),
    ("audit",),
    ("render",),
    ("engine",),
    ("registry",),
    ("trust",),
    ("imagebuild",),
    ("conformance",),
    ("publish",),
    ("jobs",),
    ("pipeline",),
    ("cli", "__main__", "__init__"),
)
ENGINE_MODULE = f"{PACKAGE}.engine.docker"
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}
# Imported by the runtime only inside the checks that exercise them, in an image that has them.
FRAMEWORKS = frozenset({"torch", "tensorflow", "jax", "numpy", "hypertune"})


@dataclass(frozen=True)
class Edge:
    """One import: `source` imports `target` (dotted names under PACKAGE) at `line`."""

    source: str
    target: str
    line: int
    in_function: bool


def module_name(path: Path, package_dir: Path) -> str:
    parts = list(path.relative_to(package_dir).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join([PACKAGE, *parts])


def is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def top(module: str) -> str:
    """The layer key of a module: its first component under the package (`trainimg` itself is `__init__`)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def walk_imports(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement, with whether it sits inside a function."""

    def visit(node: ast.AST, in_function: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, in_function
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            yield from visit(child, inner)

    yield from visit(tree, False)


def resolve(node: ast.ImportFrom, module: str, package: bool, known: set[str]) -> list[str]:
    """The package modules a relative `from ... import ...` reaches (a name that is a submodule counts)."""
    base_parts = module.split(".") if package else module.split(".")[:-1]
    if node.level > 1:
        base_parts = base_parts[: len(base_parts) - (node.level - 1)]
    base = ".".join(base_parts + ([node.module] if node.module else []))
    targets = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known]
    return targets or [base]


def edges_of(path: Path, package_dir: Path, known: set[str], problems: list[str]) -> list[Edge]:
    module = module_name(path, package_dir)
    rel = shown(path, package_dir)
    try:
        tree = ast.parse(path.read_text(), str(path))
    except SyntaxError as err:
        problems.append(f"{rel}:{err.lineno}: syntax error: {err.msg}")
        return []
    edges: list[Edge] = []
    for node, in_function in walk_imports(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            edges += [Edge(module, t, node.lineno, in_function) for t in resolve(node, module, is_package(path), known)]
            continue
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
        for name in names:
            if name.split(".")[0] == PACKAGE:
                problems.append(f"{rel}:{node.lineno}: absolute import of {name}: use a relative import")
            elif name.split(".")[0] == "docker" and module != ENGINE_MODULE:
                problems.append(f"{rel}:{node.lineno}: imports {name}: only {ENGINE_MODULE} talks to Docker; "
                                "take an engine.base.Engine")
            elif top(module) == "runtime":
                check_runtime_import(name, in_function, f"{rel}:{node.lineno}", problems)
    return edges


def check_runtime_import(name: str, in_function: bool, where: str, problems: list[str]) -> None:
    root = name.split(".")[0]
    if root in sys.stdlib_module_names or root == "__future__":
        return
    if in_function and root in FRAMEWORKS:
        return
    problems.append(f"{where}: the runtime imports {name}: it may use only the standard library and its own "
                    f"modules (frameworks only inside the function that exercises them)")


def shown(path: Path, package_dir: Path) -> str:
    """A file as printed: relative to the folder holding the package folder (so `builder/x.py`)."""
    return path.relative_to(package_dir.parent).as_posix()


def check_layers(edges: list[Edge], paths: dict[str, str], problems: list[str]) -> None:
    for e in edges:
        src, dst = top(e.source), top(e.target)
        where = f"{paths[e.source]}:{e.line}"
        if src == "runtime" and dst != "runtime":
            problems.append(f"{where}: the runtime imports {e.target} from the host package")
        elif src in RANK and dst in RANK and RANK[dst] > RANK[src]:
            problems.append(f"{where}: {e.source} ({src}, layer {RANK[src]}) imports {e.target} "
                            f"({dst}, layer {RANK[dst]}): lower layers never import higher ones")


def find_cycles(edges: list[Edge]) -> list[list[str]]:
    """Strongly connected components of more than one module (or a module importing itself), Tarjan's way."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.source, set()).add(e.target)
        graph.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph[node]:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return cycles


def check_cycles(edges: list[Edge], paths: dict[str, str], problems: list[str]) -> None:
    for component in find_cycles(edges):
        members = set(component)
        for e in edges:
            if e.source in members and e.target in members:
                problems.append(f"{paths[e.source]}:{e.line}: import cycle: {e.source} imports "
                                f"{e.target} (cycle: {' <-> '.join(component)})")


def main(argv: list[str]) -> int:
    """Check the package folder given as the one argument (default: builder/ beside .ci/)."""
    package_dir = Path(argv[0]).resolve() if argv else PACKAGE_DIR
    files = sorted(package_dir.rglob("*.py"))
    paths = {module_name(p, package_dir): shown(p, package_dir) for p in files}
    known = set(paths)
    problems: list[str] = []
    edges: list[Edge] = []
    for path in files:
        key = top(module_name(path, package_dir))
        if key not in RANK:
            problems.append(f"{shown(path, package_dir)}:1: {key} is in no layer: add it to LAYERS in "
                            f".ci/lint_layers.py")
        edges += edges_of(path, package_dir, known, problems)
    edges = [e for e in edges if e.target in known or top(e.target) in RANK]
    check_layers(edges, paths, problems)
    check_cycles(edges, paths, problems)
    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
