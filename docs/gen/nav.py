"""The reference section's navigation (docs/reference/SUMMARY.md, read by mkdocs-literate-nav) and its index page,
made from the generated pages themselves: a new verb's page is in the nav at the next generation, with nothing
to edit by hand.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping

from md import header

SECTION = "reference/"
#: The reference pages besides the command line, in the order the nav lists them.
ORDER = ("recipe.md", "compatibility.md", "platforms.md", "checks.md", "image-contract.md", "exit-codes.md",
         "environment.md", "report-format.md", "lockfile.md")
CLI = "cli/"


def title(text: str) -> str:
    found = re.search(r"^# (.+)$", text, re.MULTILINE)
    if found is None:
        raise ValueError("a generated page without a `# ` title")
    return found.group(1).strip()


def _cli_lines(pages: Mapping[str, str]) -> list[str]:
    """The command pages nested as the commands are: `trainimg`, its verbs and groups by name, a group's verbs
    under it."""
    cli = sorted(p[len(SECTION):] for p in pages if p.startswith(SECTION + CLI))
    top = sorted((p for p in cli if p != f"{CLI}index.md" and (posixpath.dirname(p) == CLI.rstrip("/")
                                                               or p.endswith("/index.md"))),
                 key=lambda p: p.removesuffix("/index.md").removesuffix(".md"))
    lines = [f"* [Command line]({CLI}index.md)"]
    for path in top:
        lines.append(f"    * [{title(pages[SECTION + path])}]({path})")
        if path.endswith("/index.md"):
            folder = posixpath.dirname(path)
            lines += [f"        * [{title(pages[SECTION + sub])}]({sub})" for sub in cli
                      if posixpath.dirname(sub) == folder and sub != path]
    return lines


def pages(made: Mapping[str, str]) -> dict[str, str]:
    others = [name for name in ORDER if SECTION + name in made]
    missing = sorted(p for p in made if p.startswith(SECTION) and not p.startswith(SECTION + CLI)
                     and p[len(SECTION):] not in ORDER)
    if missing:
        raise ValueError(f"generated pages not in nav.ORDER: {', '.join(missing)}")
    summary = ["* [Overview](index.md)", *_cli_lines(made),
               *(f"* [{title(made[SECTION + name])}]({name})" for name in others)]
    index = [header("the generated pages (docs/gen/nav.py)"), "# Reference\n",
             "Every page of this section is generated from the code it describes (`make docs-reference`), and CI "
             "fails when one differs from a fresh generation.\n",
             f"- [Command line]({CLI}index.md): every verb of `trainimg`, its options and examples"]
    index += [f"- [{title(made[SECTION + name])}]({name})" for name in others]
    return {SECTION + "SUMMARY.md": "\n".join(summary) + "\n", SECTION + "index.md": "\n".join(index) + "\n"}
