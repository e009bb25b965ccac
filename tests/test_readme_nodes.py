"""The documentation's `spec` synopsis and its node tables, generated from the declarations and tables they show.

* Every ``trainimg spec --platform P ...`` command the README and the pages under docs/ write (the synopsis, the
  examples) uses only flags that P declares (`jobs.specflags`), for each platform a ``P|Q`` alternative names: the
  README's old `spec` line offered ``--reduction-servers`` to ``aiplatform``, which `spec` refuses.
* The synopsis block (one line per platform, in docs/how-to/job-specs.md) and the three node tables (each
  platform's /dev/shm, a node's NCCL and network variables, the driver per CUDA major, in
  docs/explanation/image-and-node.md) are rendered here from the same data the code reads and must be the page's
  text between their markers; ``TRAINIMG_UPDATE_README=1`` rewrites them.

In-process.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from trainimg.jobs.flagdecl import COMMON, Flag
from trainimg.jobs.specflags import PLATFORM_FLAGS, SPEC_PLATFORMS
from trainimg.recipe.drivers import driver_table, require_cuda
from trainimg.recipe.nodeenv import node_env_table
from trainimg.runtime.contract import PLATFORMS
from trainimg.runtime.platforms import BY_NAME
from trainimg.runtime.shm import show, size_for

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
UPDATE = os.environ.get("TRAINIMG_UPDATE_README") == "1"
_COMMAND = re.compile(r"trainimg spec --platform ((?:[a-z]+(?:\\?\|)?)+)(.*?)(?:`|$)", re.M)


def usage(flag: Flag) -> str:
    """A flag as the synopsis writes it: its value's choices or name, required bare, optional in brackets."""
    if flag.kind is bool:
        text = flag.name if flag.negation is None else f"{flag.name}|{flag.negation}"
    else:
        text = f"{flag.name} {'|'.join(flag.choices) if flag.choices else flag.usage.split(' ', 1)[1]}"
    text = text if flag.required else f"[{text}]"
    return text + ("..." if flag.multiple else "")


def synopsis() -> str:
    lines = []
    for platform in SPEC_PLATFORMS:
        flags = " ".join(usage(f) for f in (*COMMON, *PLATFORM_FLAGS[platform]) if f.name not in ("--conformance",
                                                                                                  "--args"))
        lines.append(f"trainimg spec --platform {platform} {flags} [--conformance | [--args A]... -- CMD...]")
    return "```\n" + "\n".join(lines) + "\n```"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def node_tables() -> str:
    shm_rows = []
    for name in PLATFORMS:
        row = BY_NAME[name].SHM
        writes = ("— (spec writes no job for it)" if name not in SPEC_PLATFORMS else "—" if row.setting is None
                  else f"{show(size_for(2))} for 2 local ranks, {show(size_for(8))} for 8")
        shm_rows.append(f"| `{name}` | {_cell(row.default_said)} | {_cell(row.setting or 'no way: spec says so')} "
                        f"| {writes} | {_cell(row.source)} |")
    env = node_env_table()
    env_rows = [f"| `{name}` | {_cell(v.names)} | {v.source} |" for name, v in env.variables.items()]
    drivers = driver_table()
    driver_rows = [f"| {major}.x | {row.driver} ({row.branch}) | `{require_cuda(major)}` |"
                   for major, row in drivers.majors.items()]
    return "\n".join([
        "Shared memory per platform (each platform module's `SHM`; NCCL's floor: `--shm-size=1g --ulimit memlock=-1`, "
        "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting/runtime_and_mpi_issues.html):",
        "",
        "| platform | `/dev/shm` by default | how a job sets it | what `spec` writes | source |",
        "|---|---|---|---|---|", *shm_rows, "",
        f"A node's variables, refused in an image (`builder/recipe/data/node_env.yaml`; {env.source}, "
        "\"System configuration\"):",
        "",
        "| variable | names | source |", "|---|---|---|", *env_rows, "",
        f"The driver per CUDA major (`builder/recipe/data/drivers.yaml`; {drivers.source}, {drivers.release_notes}):",
        "",
        "| CUDA | minimum driver | `NVIDIA_REQUIRE_CUDA` |", "|---|---|---|", *driver_rows,
    ])


BLOCKS = {"spec-synopsis": (DOCS / "how-to" / "job-specs.md", synopsis),
          "node-tables": (DOCS / "explanation" / "image-and-node.md", node_tables)}


@pytest.mark.parametrize("marker", sorted(BLOCKS))
def test_generated_blocks_are_the_pages(marker: str) -> None:
    page, render = BLOCKS[marker]
    text = page.read_text(encoding="utf-8")
    start, end = f"<!-- {marker}:start -->\n", f"<!-- {marker}:end -->"
    assert start in text and end in text, marker
    head, rest = text.split(start, 1)
    body, tail = rest.split(end, 1)
    want = render() + "\n"
    if UPDATE:
        page.write_text(head + start + want + end + tail, encoding="utf-8")
        return
    assert body == want, f"{page}'s {marker} block differs: run with TRAINIMG_UPDATE_README=1 and review it"


def documentation() -> list[Path]:
    """The README and every page under docs/."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def commands() -> list[tuple[str, set[str]]]:
    """(platform, flags) of every `trainimg spec --platform ...` the documentation writes, continuation lines
    joined."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in documentation()).replace("\\\n", " ")
    found = []
    for match in _COMMAND.finditer(text):
        flags = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", match.group(2).split(" -- ", 1)[0]))
        for platform in re.split(r"\\?\|", match.group(1)):
            found.append((platform, flags))
    return found


def test_every_spec_command_in_the_documentation_uses_its_platforms_flags() -> None:
    found = commands()
    assert {platform for platform, _ in found} >= set(SPEC_PLATFORMS), found
    for platform, flags in found:
        declared = {name for f in (*COMMON, *PLATFORM_FLAGS[platform]) for name in (f.name, f.negation) if name}
        assert flags <= declared, (platform, sorted(flags - declared))
