"""The built documentation site, opened in headless Chromium as a reader's browser opens it (issue 55): served on
localhost, every page is loaded (its scripts run: the theme, the search), every internal link and anchor in its DOM
and every entry of the search index lead to a page and an element that exist, and no page logs a console error
(a script that throws, a stylesheet or script that does not load).

Chromium is a host tool (tests/chromium.py's `DevTools`): tier 2.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlsplit

import pytest

from chromium import DevTools
from conftest import ROOT

MKDOCS_ENV = {"NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
#: What each page gives back: the ids an anchor can name, and every URL it links to or loads.
COLLECT = """JSON.stringify({
  ids: [...document.querySelectorAll('[id]')].map(e => e.id)
       .concat([...document.querySelectorAll('a[name]')].map(e => e.name)),
  links: [...document.querySelectorAll('a[href]')].map(e => e.href),
  loads: [...document.querySelectorAll('link[href]')].map(e => e.href)
         .concat([...document.querySelectorAll('script[src], img[src]')].map(e => e.src)),
})"""


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("docs-site") / "site"
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)], cwd=ROOT,
                           capture_output=True, text=True, timeout=300, env={**os.environ, **MKDOCS_ENV})
    assert built.returncode == 0, built.stderr[-3000:]
    return folder


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def page_urls(site: Path, base: str) -> dict[str, Path]:
    """URL of each page of the site -> its file (folder/index.html is served as folder/)."""
    out = {}
    for path in sorted(site.rglob("*.html")):
        rel = path.relative_to(site).as_posix()
        if rel == "404.html":
            continue
        out[base + rel.removesuffix("index.html")] = path
    return out


def target_file(site: Path, base: str, url: str) -> Path | None:
    """The file a same-site URL names, or None when the site has no such file."""
    rel = unquote(urlsplit(url).path).lstrip("/")
    candidate = site / rel
    if candidate.is_dir():
        candidate = candidate / "index.html"
    return candidate if candidate.is_file() else None


def test_every_link_and_anchor_resolves_and_no_page_logs_an_error(site: Path, served: str, tmp_path: Path) -> None:
    pages = page_urls(site, served)
    assert len(pages) >= 40, sorted(pages)
    found: dict[str, dict[str, list[str]]] = {}
    problems: list[str] = []
    with DevTools(tmp_path / "profile") as browser:
        for url in pages:
            browser.open(url)
            found[url] = json.loads(browser.evaluate(COLLECT))
            problems += [f"{url}: {error}" for error in browser.console_errors()]
    ids = {url: set(facts["ids"]) for url, facts in found.items()}
    for url, facts in found.items():
        for link in [*facts["links"], *facts["loads"]]:
            target, fragment = urldefrag(link)
            if not target.startswith(served):
                continue  # another site: not this one's to check (and out of reach here)
            if target_file(site, served, target) is None:
                problems.append(f"{url}: {link}: no such page or file")
            elif fragment and target in ids and unquote(fragment) not in ids[target]:
                problems.append(f"{url}: {link}: no element #{fragment} on that page")
    index = json.loads((site / "search" / "search_index.json").read_text())
    for entry in index["docs"]:
        target, fragment = urldefrag(served + entry["location"])
        if target not in ids:
            problems.append(f"search index: {entry['location']}: no such page")
        elif fragment and unquote(fragment) not in ids[target]:
            problems.append(f"search index: {entry['location']}: no element #{fragment}")
    assert not problems, "\n".join(problems)


def test_a_dead_anchor_and_a_script_error_are_found(site: Path, served: str, tmp_path: Path) -> None:
    """The check's own eyes: a page with a link to a missing anchor and a throwing script, served beside the site."""
    bad = site / "zz-check" / "index.html"
    bad.parent.mkdir()
    bad.write_text('<html><body><h1 id="here">x</h1><a href="../reference/cli/build/#option-nope">x</a>'
                   '<script>console.error("broken"); missing_function();</script></body></html>')
    try:
        with DevTools(tmp_path / "profile") as browser:
            browser.open(served + "zz-check/")
            facts = json.loads(browser.evaluate(COLLECT))
            errors = browser.console_errors()
            browser.open(served + "reference/cli/build/")
            build_ids = set(json.loads(browser.evaluate(COLLECT))["ids"])
    finally:
        bad.unlink()
        bad.parent.rmdir()
    assert "here" in facts["ids"] and "option-jobs" in build_ids and "option-nope" not in build_ids
    assert served + "reference/cli/build/#option-nope" in facts["links"]
    assert any("broken" in e for e in errors) and any("missing_function" in e for e in errors), errors
