"""The support matrix people read: `trainimg matrix [--lock FILE] --format md|html`.

Why from the lockfile: it is what was released, not what the recipes ask for. Every entry holds the pushed tags
and digests, the versions read back from the image after the build (framework, the CUDA runtime it holds, cuDNN,
NCCL: `imagebuild.builder.installed_versions`), the image size, the conformance summary and when it was made, so the
page shows what a user pulling the tag gets, with the NVIDIA driver its CUDA needs (`recipe.drivers`). The HTML page is self-contained (inline style, no script, no
external asset) so it can be published as a CI artifact or a static page as is.

The page is read on a laptop and on a phone: a digest shows its first 12 hex digits in a read-only field that holds
the whole digest (hover shows it, select-all and copy takes it), references may break after `/` and `:`, variant
names never break; below 720 px each variant is a card of label: value lines. tests/test_matrix_page.py checks in
headless Chromium at 1280 and 390 px that no element is wider than the window.
"""

from __future__ import annotations

import html
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import UserInputError
from ..recipe.drivers import floor_for
from .lockfile import DEFAULT_LOCK, LockEntry, read_lock

MISSING = "—"
COLUMNS = ("variant", "arch", "tags", "digest", "framework", "CUDA", "driver", "cuDNN", "NCCL", "Python", "size",
           "conformance", "released")
# The page shows the architecture under the variant's name (a column of its own would not fit a 1280 px window).
HTML_COLUMNS = tuple(c for c in COLUMNS if c != "arch")
TITLE = "trainimg support matrix"
SHORT_DIGEST = len("sha256:") + 12  # what a digest shows of itself, as `docker images` shows IDs
STYLE = """
body { font-family: system-ui, sans-serif; margin: 1rem; color: #1b1f24; }
table { border-collapse: collapse; font-size: 0.85rem; width: 100%; }
th, td { border: 1px solid #d0d7de; padding: 0.3rem 0.35rem; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
code { font-size: 0.78rem; }
td.variant code { white-space: nowrap; }
span.arch { font-size: 0.75rem; color: #57606a; }
td.tags code, td.released { overflow-wrap: break-word; }
input.digest { font: 0.78rem monospace; border: 0; background: transparent; padding: 0; width: 19ch; }
tr.passed td.conformance { color: #1a7f37; }
tr.failed td.conformance { color: #cf222e; font-weight: bold; }
@media (max-width: 720px) {
  table, tbody, tr, td { display: block; width: auto; }
  thead { display: none; }
  tr { border: 1px solid #d0d7de; margin: 0 0 0.75rem; }
  td { border: 0; border-top: 1px solid #eaeef2; }
  td::before { content: attr(data-label) ": "; font-weight: 600; }
  td.variant code, td.tags code { white-space: normal; overflow-wrap: anywhere; }
}
"""


@dataclass(frozen=True)
class MatrixRow:
    """One released variant as the page shows it: strings, MISSING where the lockfile has nothing."""

    variant: str
    arch: str  # the CPU architecture (a variant of several has a row each: the tags name one index of them)
    tags: tuple[str, ...]  # every pushed reference, the immutable tag first
    digest: str  # the image a node of that architecture runs: its manifest (in the index the tags name)
    versions: tuple[str, ...]  # framework, CUDA runtime, the driver it needs, cuDNN, NCCL, Python, as read back
    size: str
    conformance: str
    passed: bool
    released: str

    def cells(self) -> tuple[str, ...]:
        """The row's plain-text cells, in COLUMNS order (tags joined by a space)."""
        return (self.variant, self.arch, " ".join(self.tags), self.digest, *self.versions, self.size,
                self.conformance, self.released)


def _conformance(summary: Mapping[str, Any]) -> str:
    if not summary:
        return MISSING
    counts = summary.get("counts", {})
    verdict = "passed" if summary.get("passed") else "FAILED " + ", ".join(summary.get("failed", []))
    replicas = f" ×{summary['replicas']}" if summary.get("replicas") else ""
    where = f" on {summary['platform']}{replicas}" if summary.get("platform") else ""
    tally = ", ".join(f"{counts[k]} {k}" for k in ("passed", "failed", "skipped", "warning") if counts.get(k))
    return f"{verdict} ({tally}){where}" if tally else verdict + where


def _size(size: int | None) -> str:
    return MISSING if size is None else f"{size / 1e6:,.0f} MB"


def matrix_row(entry: LockEntry) -> MatrixRow:
    """The page's row for one lockfile entry."""
    version = entry.tag.rpartition(":")[2]
    immutable = sorted(ref for ref in entry.pushed if ref.endswith(f":{version}"))
    tags = (*immutable, *sorted(ref for ref in entry.pushed if ref not in immutable)) or (entry.tag,)
    digest = entry.manifest or entry.pushed.get(tags[0]) or MISSING
    v = entry.versions
    cuda = v.get("cuda")
    driver = f">= {floor_for(cuda).driver}" if cuda else None  # the CUDA read back, through recipe/drivers.py's table
    versions = tuple(value or MISSING for value in (v.get("framework"), cuda, driver, v.get("cudnn"), v.get("nccl"),
                                                    v.get("python")))
    return MatrixRow(entry.variant, entry.arch, tags, digest, versions,
                     _size(entry.size), _conformance(entry.conformance), bool(entry.conformance.get("passed")),
                     entry.released or MISSING)


def matrix_rows(lock_path: str | os.PathLike[str] | None) -> list[MatrixRow]:
    """Every entry of the lockfile, by variant name; an empty or missing lockfile is the user's to fix."""
    path = lock_path or DEFAULT_LOCK
    entries = read_lock(path)
    if not entries:
        raise UserInputError("no released variant recorded: run `trainimg release --lock FILE` or `trainimg "
                             "promote` first, or name the lockfile with --lock", where=str(path))
    return [matrix_row(entries[name]) for name in sorted(entries)]


def _md_cell(text: str, code: bool = False) -> str:
    text = text.replace("|", "\\|")
    return f"`{text}`" if code and text != MISSING else text


def render_markdown(rows: list[MatrixRow]) -> str:
    """A GitHub-flavoured Markdown table, one row per variant (for the README or a job summary)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        tags = "<br>".join(_md_cell(t, code=True) for t in row.tags)
        cells = [_md_cell(row.variant, code=True), _md_cell(row.arch), tags, _md_cell(row.digest, code=True),
                 *(_md_cell(c) for c in (*row.versions, row.size, row.conformance, row.released))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _breakable(text: str) -> str:
    """`text` escaped, with a break opportunity after each `/` and `:` (a long reference wraps where it reads)."""
    return html.escape(text).replace("/", "/<wbr>").replace(":", ":<wbr>")


def _digest_cell(digest: str) -> str:
    """The digest's first 12 hex digits in a read-only field holding the whole digest: hover shows it (title),
    selecting and copying takes it; no script."""
    if digest == MISSING:
        return f'<td class="digest" data-label="digest">{MISSING}</td>'
    full = html.escape(digest)
    return (f'<td class="digest" data-label="digest"><input class="digest" readonly value="{full}" title="{full}" '
            f'aria-label="digest {full}" size="{SHORT_DIGEST}"></td>')


def _html_row(row: MatrixRow) -> str:
    esc = html.escape
    tags = "<br>".join(f"<code>{_breakable(t)}</code>" for t in row.tags)
    plain = "".join(f'<td class="{c.lower()}" data-label="{esc(c)}">'
                    f'{_breakable(text) if c == "released" else esc(text)}</td>'
                    for c, text in zip(COLUMNS[4:], (*row.versions, row.size, row.conformance, row.released)))
    return (f'<tr data-variant="{esc(row.variant)}" data-arch="{esc(row.arch)}" '
            f'class="{"passed" if row.passed else "failed"}">'
            f'<td class="variant" data-label="variant"><code>{esc(row.variant)}</code><br>'
            f'<span class="arch" title="CPU architecture">{esc(row.arch)}</span></td>'
            f'<td class="tags" data-label="tags">{tags}</td>{_digest_cell(row.digest)}{plain}</tr>')


def render_html(rows: list[MatrixRow], source: str) -> str:
    """A self-contained HTML page: one `<tr data-variant=NAME>` per variant, every text escaped."""
    esc = html.escape
    head = "".join(f"<th>{esc(c)}</th>" for c in HTML_COLUMNS)
    return (f'<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n<title>{TITLE}</title>\n'
            f"<style>{STYLE}</style>\n</head>\n<body>\n<h1>{TITLE}</h1>\n"
            f"<p>{len(rows)} released variant(s), from <code>{esc(source)}</code>: versions as read back from each "
            "image after its build. A digest shows its start; hover or copy it for the whole.</p>\n"
            f'<table id="matrix">\n<thead><tr>{head}</tr></thead>\n<tbody>\n'
            + "\n".join(_html_row(row) for row in rows) + "\n</tbody>\n</table>\n</body>\n</html>\n")


def render_matrix(lock_path: str | None, fmt: str) -> str:
    """The page in `fmt` (`md` or `html`) for the lockfile at `lock_path` (None: images.lock)."""
    rows = matrix_rows(lock_path)
    return render_html(rows, str(lock_path or DEFAULT_LOCK)) if fmt == "html" else render_markdown(rows)
