"""The documentation site's generated pages and its build (issue 55): every page under docs/reference/ and
docs/project/benchmarks.md equals a fresh generation from the code (docs/gen/reference.py), the site has a page per
verb `trainimg --help` lists, and `mkdocs build --strict` passes (a broken link or anchor, or a page left out of the
nav, fails it).

In process, except the two mkdocs builds (this checkout's Python, no host tool): tier 1.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "docs" / "gen"))
import reference  # noqa: E402

from trainimg.cli.app import main  # noqa: E402
from trainimg.jobs.specflags import PLATFORM_FLAGS  # noqa: E402

MKDOCS_ENV = {"NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    return reference.generate()


def test_generated_pages_equal_a_fresh_generation(generated: dict[str, str]) -> None:
    problems = reference.drift(generated)
    assert not problems, "generated pages out of date (run `make docs-reference`):\n" + "\n".join(problems)


def test_drift_names_each_edited_missing_or_stale_page(generated: dict[str, str], tmp_path: Path) -> None:
    """The check itself: an edited generated page, a removed one and one no longer generated are each named."""
    docs = tmp_path / "docs"
    reference.write(generated, docs)
    assert reference.drift(generated, docs) == []
    edited = docs / "reference" / "cli" / "build.md"
    edited.write_text(edited.read_text().replace("--no-cache", "--no-cash"))
    (docs / "reference" / "exit-codes.md").unlink()
    (docs / "reference" / "cli" / "gone.md").write_text("# trainimg gone\n")
    assert reference.drift(generated, docs) == [
        "docs/reference/cli/build.md: differs from a fresh generation",
        "docs/reference/cli/gone.md: not generated any more (remove it)",
        "docs/reference/exit-codes.md: missing",
    ]
    assert sorted(reference.write(generated, docs)) == ["reference/cli/build.md", "reference/cli/gone.md",
                                                         "reference/exit-codes.md"]
    assert reference.drift(generated, docs) == []


def test_every_verb_trainimg_help_lists_has_its_page(capsys: pytest.CaptureFixture[str],
                                                     generated: dict[str, str]) -> None:
    assert main(["--help"]) == 0
    listed = re.findall(r"^  (\w[\w-]*) ", capsys.readouterr().out.split("Commands:", 1)[1], re.MULTILINE)
    assert len(listed) >= 20, listed
    for verb in listed:
        page = next((p for p in (f"reference/cli/{verb}.md", f"reference/cli/{verb}/index.md") if p in generated),
                    None)
        assert page is not None, f"no reference page for `trainimg {verb}`"
        assert generated[page].count(f"# trainimg {verb}\n") == 1


def test_spec_page_lists_every_platform_flag_under_its_platforms(generated: dict[str, str]) -> None:
    """`spec`'s options are made per platform at run time: its page has each platform's flags from their own
    declarations (jobs/<platform>.py FLAGS), under a heading that names the platform."""
    page = generated["reference/cli/spec.md"]
    sections = dict(re.findall(r"^### (.+)\n\n((?:.+\n)+)", page, re.MULTILINE))
    for platform, flags in PLATFORM_FLAGS.items():
        for flag in flags:
            assert any(platform in heading.split(", ") and f"`{flag.name}`" in body
                       for heading, body in sections.items()), f"{platform}: {flag.name}"


def test_every_trainimg_variable_in_the_code_is_on_the_environment_page(generated: dict[str, str]) -> None:
    """Every `TRAINIMG_*` name in builder/ (a plain text search, not the generator's parse) has a row."""
    names = {m for path in (ROOT / "builder").rglob("*.py")
             for m in re.findall(r"\bTRAINIMG_[A-Z0-9_]*[A-Z0-9]\b", path.read_text())}
    rows = set(re.findall(r"^\| `(TRAINIMG_\w+)` \|", generated["reference/environment.md"], re.MULTILINE))
    assert names and names == rows, (sorted(names - rows), sorted(rows - names))


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site)], cwd=config.parent, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **MKDOCS_ENV})


def test_the_site_builds_strict(tmp_path: Path) -> None:
    built = mkdocs_build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert built.returncode == 0, built.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "cli" / "build" / "index.html").is_file()


def site_copy(folder: Path) -> Path:
    """What the site is built from (mkdocs.yml, docs/, the files its pages include), copied into `folder`."""
    for name in ("docs", "recipes"):
        shutil.copytree(ROOT / name, folder / name)
    for path in [ROOT / "mkdocs.yml", *ROOT.glob("*.md")]:
        shutil.copy2(path, folder / path.name)
    return folder


def test_a_page_left_out_of_the_nav_or_a_dead_anchor_fails_the_build(tmp_path: Path) -> None:
    source = site_copy(tmp_path / "src")
    (source / "docs" / "stray.md").write_text("# A page nobody listed\n")
    built = mkdocs_build(source / "mkdocs.yml", tmp_path / "site")
    assert built.returncode != 0 and "stray.md" in built.stderr, built.stderr[-2000:]
    (source / "docs" / "stray.md").unlink()
    index = source / "docs" / "reference" / "index.md"
    index.write_text(index.read_text() + "\n[jobs](cli/build.md#option-jobs) [gone](cli/build.md#option-gone)\n")
    built = mkdocs_build(source / "mkdocs.yml", tmp_path / "site")
    assert built.returncode != 0 and "#option-gone" in built.stderr and "#option-jobs" not in built.stderr, (
        built.stderr[-2000:])
