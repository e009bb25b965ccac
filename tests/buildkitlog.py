"""BuildKit 0.8's plain progress (`--progress plain`) read step by step, as the tests judge a build by it.

Each step is a number, `#N`, on every line it prints: its title first (`#N [image 2/8] RUN ...`, `#N importing
cache manifest from REF`), then its output, then how it ended (`#N DONE 0.2s`, `#N CACHED`, `#N ERROR: ...`).
trainimg's own plain log puts the variant before each of BuildKit's lines (`[cpu] #N ...`).
"""

from __future__ import annotations

import re

STEP = r"^(?:\[\S+\] )?#(\d+)"


def titles(log: str) -> dict[str, str]:
    """Each step's number -> its first line (its title)."""
    first: dict[str, str] = {}
    for number, rest in re.findall(rf"{STEP} (.*)$", log, re.M):
        first.setdefault(number, rest)
    return first


def ended(log: str, how: str) -> list[str]:
    """The numbers of the steps with a line `#N <how>` (a regular expression: `CACHED$`, `ERROR`, `DONE [0-9.]+s$`)."""
    return re.findall(rf"{STEP} {how}", log, re.M)
