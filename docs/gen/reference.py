#!/usr/bin/env python3
"""Write the generated pages of the documentation site, or check that the committed ones are current.

    python3 docs/gen/reference.py            write every generated page under docs/ (and remove stale ones)
    python3 docs/gen/reference.py --check    regenerate in memory; exit 1 naming each page that differs

Why generated: a reference page copied by hand drifts from the code it describes (the shared-options table of the
old README disagreed with the helps). Every page here is made from the code's own declarations (click commands,
the recipe fields, the compatibility data, the platform modules, the contract, the report and lockfile writers)
or from the benchmark results data (benchmarks/results/bench/), and tests/test_docs_reference.py runs the check.

The generated pages are every file under docs/reference/ and docs/project/benchmarks.md; nothing else under
docs/ is touched. `make docs-reference` runs the first form.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DOCS = ROOT / "docs"
GENERATED_DIRS = ("reference",)  # folders under docs/ whose every file is generated
GENERATED_FILES = ("project/benchmarks.md",)  # single generated files elsewhere under docs/

sys.path.insert(0, str(HERE))  # the generator's modules, when run as a script or imported by the tests

import benchpage  # noqa: E402
import clipages  # noqa: E402
import formats  # noqa: E402
import nav  # noqa: E402
import runtimepages  # noqa: E402
import recipepages  # noqa: E402

#: The page makers, each giving {path under docs/: text}; the nav of the reference section is made from them.
MAKERS: tuple[Callable[[], dict[str, str]], ...] = (
    clipages.pages, recipepages.pages, runtimepages.pages, formats.pages, benchpage.pages,
)


def generate() -> dict[str, str]:
    """Every generated page by its path under docs/, the reference section's nav (SUMMARY.md) among them."""
    out: dict[str, str] = {}
    for make in MAKERS:
        out.update(make())
    out.update(nav.pages(out))
    return out


def generated_on_disk(docs: Path = DOCS) -> set[str]:
    """The generated files now under `docs` (paths relative to it)."""
    found = {p.relative_to(docs).as_posix() for d in GENERATED_DIRS if (docs / d).is_dir()
             for p in (docs / d).rglob("*") if p.is_file()}
    return found | {f for f in GENERATED_FILES if (docs / f).is_file()}


def drift(pages: dict[str, str], docs: Path = DOCS) -> list[str]:
    """`path: why` for each generated file that differs from `pages`, is missing, or should not exist."""
    problems = []
    for path in sorted(set(pages) | generated_on_disk(docs)):
        target = docs / path
        if path not in pages:
            problems.append(f"docs/{path}: not generated any more (remove it)")
        elif not target.is_file():
            problems.append(f"docs/{path}: missing")
        elif target.read_text(encoding="utf-8") != pages[path]:
            problems.append(f"docs/{path}: differs from a fresh generation")
    return problems


def write(pages: dict[str, str], docs: Path = DOCS) -> list[str]:
    """Write `pages` under `docs`, remove generated files no longer made; the paths changed."""
    changed = []
    for path in sorted(generated_on_disk(docs) - set(pages)):
        (docs / path).unlink()
        changed.append(path)
    for path, text in sorted(pages.items()):
        target = docs / path
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="compare with a fresh generation; write nothing")
    args = parser.parse_args(argv)
    pages = generate()
    if args.check:
        problems = drift(pages)
        for line in problems:
            print(line)
        if problems:
            print(f"docs: {len(problems)} generated page(s) out of date: run `make docs-reference`")
            return 1
        print(f"docs: {len(pages)} generated pages up to date")
        return 0
    changed = write(pages)
    print(f"docs: {len(pages)} generated pages, {len(changed)} changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
