"""The support matrix people read: `trainimg matrix [--lock FILE] --format md|html`.

Why from the lockfile: it is what was released, not what the recipes ask for. Every entry holds the pushed tags
and digests, the versions read back from the image after the build (framework, the CUDA runtime it holds, cuDNN,
NCCL: `imagebuild.builder.installed_versions`), the image size, the conformance summary and when it was made, so the
page shows what a user pulling the tag gets. The HTML page is self-contained (inline style, no script, no
external asset) so it can be published as a CI artifact or a static page as is.
"""

from __future__ import annotations

import html
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import UserInputError
from .lockfile import DEFAULT_LOCK, LockEntry, read_lock

MISSING = "—"
COLUMNS = ("variant", "tags", "digest", "framework", "CUDA", "cuDNN", "NCCL", "Python", "size", "conformance",
           "released")
TITLE = "trainimg support matrix"
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem; color: #1b1f24; }
table { border-collapse: collapse; font-size: 0.9rem; }
th, td { border: 1px solid #d0d7de; padding: 0.35rem 0.6rem; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
code { font-size: 0.8rem; }
td.digest { max-width: 24ch; word-break: break-all; }
td.tags code { white-space: nowrap; }
tr.passed td.conformance { color: #1a7f37; }
tr.failed td.conformance { color: #cf222e; font-weight: bold; }
"""


@dataclass(frozen=True)
class MatrixRow:
    """One released variant as the page shows it: strings, MISSING where the lockfile has nothing."""

    variant: str
    tags: tuple[str, ...]  # every pushed reference, the immutable tag first
    digest: str
    versions: tuple[str, ...]  # framework, CUDA runtime, cuDNN, NCCL, Python, as read back
    size: str
    conformance: str
    passed: bool
    released: str

    def cells(self) -> tuple[str, ...]:
        """The row's plain-text cells, in COLUMNS order (tags joined by a space)."""
        return (self.variant, " ".join(self.tags), self.digest, *self.versions, self.size, self.conformance,
                self.released)


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
    digest = entry.pushed.get(tags[0]) or MISSING
    v = entry.versions
    versions = tuple(v.get(k) or MISSING for k in ("framework", "cuda", "cudnn", "nccl", "python"))
    return MatrixRow(entry.variant, tags, digest, versions,
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
        cells = [_md_cell(row.variant, code=True), tags, _md_cell(row.digest, code=True),
                 *(_md_cell(c) for c in (*row.versions, row.size, row.conformance, row.released))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render_html(rows: list[MatrixRow], source: str) -> str:
    """A self-contained HTML page: one `<tr data-variant=NAME>` per variant, every text escaped."""
    esc = html.escape
    head = "".join(f"<th>{esc(c)}</th>" for c in COLUMNS)
    body = []
    for row in rows:
        tags = "<br>".join(f"<code>{esc(t)}</code>" for t in row.tags)
        plain = "".join(f'<td class="{c.lower()}">{esc(text)}</td>'
                        for c, text in zip(COLUMNS[3:], (*row.versions, row.size, row.conformance, row.released)))
        body.append(f'<tr data-variant="{esc(row.variant)}" class="{"passed" if row.passed else "failed"}">'
                    f'<td><code>{esc(row.variant)}</code></td><td class="tags">{tags}</td>'
                    f'<td class="digest"><code>{esc(row.digest)}</code></td>{plain}</tr>')
    return (f'<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{TITLE}</title>\n'
            f"<style>{STYLE}</style>\n</head>\n<body>\n<h1>{TITLE}</h1>\n"
            f"<p>{len(rows)} released variant(s), from <code>{esc(source)}</code>: versions as read back from each "
            "image after its build.</p>\n"
            f'<table id="matrix">\n<thead><tr>{head}</tr></thead>\n<tbody>\n' + "\n".join(body)
            + "\n</tbody>\n</table>\n</body>\n</html>\n")


def render_matrix(lock_path: str | None, fmt: str) -> str:
    """The page in `fmt` (`md` or `html`) for the lockfile at `lock_path` (None: images.lock)."""
    rows = matrix_rows(lock_path)
    return render_html(rows, str(lock_path or DEFAULT_LOCK)) if fmt == "html" else render_markdown(rows)
