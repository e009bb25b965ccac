"""The tutorials' engine steps run as a reader would run them (issue 55): each page holding blocks marked
`<!-- check: engine -->` is run whole, in page order (its files, its engine-free examples, its engine blocks: a
console block's output compared as tests/test_docs_examples.py does, any other block run as one bash script that
must exit 0), in a temporary copy of the repository with a state folder of its own, against the Docker engine.
tests/data/docs/engine-example.md is the mechanism's own page. Tier 3 (the engine).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import docscheck

FIXTURE = docscheck.ROOT / "tests" / "data" / "docs" / "engine-example.md"
PAGES = [p for p in docscheck.pages() if any(s.engine for s in docscheck.page_steps(p))]


@pytest.mark.parametrize("path", [*PAGES, FIXTURE], ids=[docscheck.shown(p) for p in [*PAGES, FIXTURE]])
def test_every_engine_step_of_a_page_runs(path: Path, tmp_path: Path, docker_engine: str) -> None:
    checkout = docscheck.repository_copy(tmp_path / "checkout")
    steps = docscheck.page_steps(path)
    run = docscheck.run_steps(steps, checkout, docscheck.sandbox_env(checkout, engine=True), timeout=3600)
    assert run.ran == sum(s.kind != "file" for s in steps) and any(s.engine for s in steps), path
    assert not run.problems, "\n\n".join(run.problems)


def test_an_engine_step_that_fails_fails_the_page(tmp_path: Path, docker_engine: str) -> None:
    page = tmp_path / "tutorial.md"
    page.write_text("# Tutorial\n\n<!-- check: engine -->\n```bash\ntrainimg prune --dry-run --label a=b\n"
                    "trainimg sbom no-such-image-anywhere:0\n```\n\n<!-- check: engine -->\n```console\n"
                    "$ trainimg prune --dry-run --label trainimg.docs-check=nothing-has-this\n3 image(s) trainimg made\n"
                    "```\n")
    checkout = docscheck.repository_copy(tmp_path / "checkout")
    run = docscheck.run_steps(docscheck.page_steps(page), checkout, docscheck.sandbox_env(checkout, engine=True))
    assert run.ran == 2 and len(run.problems) == 2, run.problems
    assert run.problems[0].startswith(f"{page}:4: exit ") and "trainimg sbom" in run.problems[0].splitlines()[1]
    assert run.problems[1].startswith(f"{page}:11: the output differs") and "+0 image(s)" in run.problems[1]
