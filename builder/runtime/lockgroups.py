"""The lock split into layer groups: which distributions of `requirements.lock` each install step installs.

Docker identifies a layer by its chain (itself and every layer below it): when one layer changes, every layer above
it is pulled again. So the install is split by how often things change, the most stable and biggest first: the CUDA
libraries the framework's wheels bring, cuDNN, then NCCL (its own pin), then the framework and its other
dependencies, then hypertune, then the recipe's own `extras` (a team moves its pins more often than anything else:
moving one then runs only the top step, not the framework's). `LAYER_GROUPS` is the one rule; the build runs this
file in the stage that slices the lock (`python lockgroups.py GROUP LOCK OUT [EXTRA...]`, standard library only,
before trainimg's runtime is in the image) and the host imports the same table for tests and benchmarks. Every
requirement keeps its `--hash` lines, so each group is installed with the lock's hash checking.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Collection

# (group, name patterns) in layer order, lowest first. A pattern is a distribution name (normalised: lower case,
# `-`) or a prefix ending in `*`; a name goes to the group of its longest matching pattern, else to EXTRAS when the
# recipe's extras name it, else to FRAMEWORK.
FRAMEWORK = "framework"
EXTRAS = "extras"
LAYER_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("cuda", ("nvidia-*", "cuda-*")),  # cuBLAS, cuFFT, cuSPARSE, ... and the CUDA Python bindings the wheels pin
    # cuDNN apart: with the rest of the CUDA libraries it made one layer of 64 % of a GPU image (2.0 of 3.1 GB
    # compressed, pytorch-2.14.1-cu130-py3.11), over the half a layer may hold.
    ("cudnn", ("nvidia-cudnn-*",)),
    ("nccl", ("nvidia-nccl-*",)),  # NCCL: pinned by the recipe, changes apart from the CUDA libraries
    (FRAMEWORK, ()),  # the framework and every other dependency
    ("hypertune", ("cloudml-hypertune",)),  # tiny
    # The recipe's extras that no pattern above claims (an extra's `nvidia-*` pin stays with its libraries): on top.
    # Its names come from the recipe, so a variant without extras has no such step (`plan.blocks.install_groups`).
    (EXTRAS, ()),
)
GROUP_NAMES = tuple(name for name, _ in LAYER_GROUPS)
GPU_ONLY = ("cuda", "cudnn", "nccl")  # groups a CPU variant's own lock does not fill

_REQ = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*(==|===|@|>=|<=|~=|!=|<|>)")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def group_of(name: str, extras: Collection[str] = ()) -> str:
    """The layer group of a distribution: its longest matching pattern's, else EXTRAS when it is one of the recipe's
    `extras` (distribution names), else FRAMEWORK."""
    key, best, length = normalise(name), FRAMEWORK, -1
    for group, patterns in LAYER_GROUPS:
        for pattern in patterns:
            hit = key.startswith(pattern[:-1]) if pattern.endswith("*") else key == pattern
            if hit and len(pattern) > length:
                best, length = group, len(pattern)
    if best == FRAMEWORK and key in {normalise(e) for e in extras}:
        return EXTRAS
    return best


def entries(lock: str) -> list[tuple[str, str]]:
    """(distribution name, its requirement text with hash and comment lines) for each requirement of a lock."""
    out: list[tuple[str, str]] = []
    for line in lock.splitlines(keepends=True):
        m = _REQ.match(line)
        if m:
            out.append((m.group(1), line))
        elif out and (line.startswith((" ", "\t"))):
            out[-1] = (out[-1][0], out[-1][1] + line)
    return out


def select(lock: str, group: str, extras: Collection[str] = ()) -> str:
    """The requirements of `lock` in `group` (`extras`: the recipe's, by name), hash lines kept, comment lines not
    (a `# via` line names other distributions, and the slice is what its install step's cache key reads); empty
    when the group holds none."""
    if group not in GROUP_NAMES:
        raise ValueError(f"unknown layer group {group!r}; groups: {', '.join(GROUP_NAMES)}")
    return "".join(line for name, text in entries(lock) if group_of(name, extras) == group
                   for line in text.splitlines(keepends=True) if not line.lstrip().startswith("#"))


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print("usage: lockgroups.py GROUP LOCK OUT [EXTRA...]", file=sys.stderr)
        return 2
    group, lock, out, *extras = argv
    with open(lock, encoding="utf-8") as fh:
        text = select(fh.read(), group, extras)
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
