"""The engine-free examples the pages show with their output (validate, list, spec, cluster, ci, trust policy,
matrix, ...) are run and print what the page shows (issue 55). A ```` ```console ```` block is `$ ` commands and
the lines each prints (`...` for any lines; a line ending in `...` for a line that starts so); a fenced block with
`title="PATH"` is a file the page writes first (tests/docscheck.py).

Each page runs in a sandbox checkout of its own, the engine out of reach (an example that needs it is marked
`<!-- check: engine -->` and runs in tests/test_docs_tutorials.py). Subprocesses of this checkout's trainimg, no
host tool: tier 1.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import docscheck

FIXTURE = docscheck.ROOT / "tests" / "data" / "docs" / "examples.md"
PAGES = [p for p in docscheck.pages() if any(not s.engine and s.kind == "command" for s in docscheck.page_steps(p))]


def run_page(path: Path, folder: Path) -> docscheck.Run:
    sandbox = docscheck.make_sandbox(folder)
    steps = [s for s in docscheck.page_steps(path) if not s.engine]
    return docscheck.run_steps(steps, sandbox, docscheck.sandbox_env(sandbox, engine=False))


@pytest.mark.parametrize("path", [*PAGES, FIXTURE], ids=[docscheck.shown(p) for p in [*PAGES, FIXTURE]])
def test_every_example_prints_what_its_page_shows(path: Path, tmp_path: Path) -> None:
    run = run_page(path, tmp_path / "checkout")
    assert run.ran, f"{path}: no example ran"
    assert not run.problems, "\n\n".join(run.problems)


def test_a_changed_output_a_failing_command_and_an_unmarked_engine_example_each_fail(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n```console\n$ trainimg validate\n8 variants valid in 2 files\n```\n\n"
                    "```console\n$ trainimg spec --platform vertex\n...\n```\n\n"
                    "```console\n$ trainimg prune --dry-run\n...\n```\n")
    run = run_page(page, tmp_path / "checkout")
    assert run.ran == 3 and len(run.problems) == 3, run.problems
    validate, spec, prune = run.problems
    assert validate.startswith(f"{page}:4: the output differs from the page") and " variants valid in 3 files" in (
        validate), validate
    assert spec.startswith(f"{page}:9: exit 2") and "--image" in spec, spec
    assert prune.startswith(f"{page}:14: exit 1") and "Docker engine" in prune, prune  # out of reach here


@pytest.mark.parametrize("shown, printed, same", [
    (["a", "b"], ["a", "b", ""], True),
    (["a", "b"], ["a", "c"], False),
    (["a", "..."], ["a", "b", "c"], True),
    (["...", "c"], ["a", "b", "c"], True),
    (["...", "c"], ["c"], True),
    (["a", "...", "d"], ["a", "b", "c"], False),
    (["row 1 ..."], ["row 1 with more"], True),
    (["row 1 ..."], ["row 2"], False),
    (["a"], ["a", "b"], False),
    ([], [], True),
])
def test_elision(shown: list[str], printed: list[str], same: bool) -> None:
    assert docscheck.matches(shown, printed) is same
