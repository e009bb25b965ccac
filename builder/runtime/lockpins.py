"""The grammar of a requirements lock's pins (``name[extras]==version ; marker \\`` then ``--hash=sha256:...``
lines), read in one place.

Two readers need it: the host (`plan.requirements.pins`: do the lock's pins keep the recipe's constraints, does a
child's lock keep its parent's) and the in-image SBOM (`sbom`: the wheel hashes of each pinned version). They once
had a regular expression each and drifted: the host's missed a pin with extras (``torch[cuda]==2.14.1``) and read
an environment marker into the version (``1.0;python_version<"3.12"``). This one is the stricter reader the SBOM
had, and it is standard library only so the image can import it too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .manifest import distribution_key

# A name as PEP 508 allows it, optional extras, ``==`` and a version that ends at whitespace, a marker or a
# line continuation.
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")
HASH = re.compile(r"--hash=sha256:([0-9a-fA-F]{64})")
_CONTINUATION = re.compile(r"\\\s*\n")


@dataclass(frozen=True)
class Pin:
    """One locked distribution: its version and the sha256 of every wheel or sdist the lock allows (lower case)."""

    version: str
    hashes: tuple[str, ...]


def read_lock(text: str | None) -> dict[str, Pin]:
    """A lock's text -> PEP 503 normalised name -> `Pin`. Continuation lines are joined first (the hashes follow
    their pin), comments (``# via ...``) are dropped, and lines that are not a pin (options, URLs) are skipped."""
    found: dict[str, Pin] = {}
    for line in _CONTINUATION.sub(" ", text or "").splitlines():
        line = line.split("#", 1)[0].strip()
        match = PIN.match(line)
        if match:
            hashes = tuple(sorted({h.lower() for h in HASH.findall(line)}))
            found[distribution_key(match.group(1))] = Pin(match.group(2), hashes)
    return found


def pins(text: str | None) -> dict[str, str]:
    """Normalised distribution name -> pinned version, for every package of a lock."""
    return {name: pin.version for name, pin in read_lock(text).items()}
