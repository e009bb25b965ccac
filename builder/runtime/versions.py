"""Version arithmetic inside the image, where `packaging` may be absent: equality, minimums and recipe constraints.

A recipe constraint is a bare version (a pin) or comma-separated PEP 440 clauses (``>=2.27.7,<3.0``, ``==13.0.*``);
the host writes them with `packaging` (trainimg.recipe.compat) and the probe reads them back here, saying them the
same way in its messages. Standard library only.
"""

from __future__ import annotations

import re

_RELEASE = re.compile(r"^\s*v?(?:[0-9]+!)?([0-9]+(?:\.[0-9]+)*)(.*)$")


def parse_version(text: str) -> tuple[tuple[int, ...], str]:
    """A minimal PEP 440-ish split: ``'2.13.0+cpu'`` -> ((2, 13), ''), ``'0.1.0.dev6'`` -> ((0, 1), 'dev6').

    The release has trailing zeros stripped (2.13 == 2.13.0); the local label (+cpu, +cu130) is dropped; the rest
    (pre/post/dev tags) is kept lower-cased without separators so 2.13.0rc1 differs from 2.13.0.
    """
    text = str(text).strip().lower().split("+", 1)[0]
    match = _RELEASE.match(text)
    if not match:
        raise ValueError(f"not a version: {text!r}")
    release = [int(p) for p in match.group(1).split(".")]
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    suffix = re.sub(r"[-_.]", "", match.group(2))
    return tuple(release), suffix


def versions_equal(actual: str, expected: str) -> bool:
    """`actual` equals `expected` ignoring local labels and trailing zeros; ``expected`` may end in ``.*``."""
    expected = str(expected).strip()
    if expected.endswith(".*"):
        prefix, _ = parse_version(expected[:-2])
        release, _ = parse_version(actual)
        padded = release + (0,) * max(0, len(prefix) - len(release))
        return padded[: len(prefix)] == prefix
    return parse_version(actual) == parse_version(expected)


def version_at_least(actual: str, minimum: str) -> bool:
    """Release-tuple comparison (pre-release tags ignored): ``2.30.7 >= 2.7``."""
    a, b = parse_version(actual)[0], parse_version(minimum)[0]
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)) >= b + (0,) * (width - len(b))


_CLAUSE = re.compile(r"^\s*(==|!=|>=|<=|>|<|~=)?\s*([0-9][0-9a-zA-Z.+!-]*?)(\.\*)?\s*$")


def satisfies(actual: str, constraint: str, width: int | None = None) -> bool:
    """Does `actual` meet a recipe constraint? A bare version is a pin; otherwise comma-separated PEP 440 clauses
    (``>=2.27.7,<3.0``, ``==13.0.*``). Release tuples are compared (trailing zeros and local labels ignored);
    `width` keeps only that many components on both sides: cuDNN's runtime answers major.minor.patch of a
    four-part wheel version."""
    for clause in str(constraint).split(","):
        match = _CLAUSE.match(clause)
        if not match:
            raise ValueError(f"not a version constraint: {constraint!r}")
        op, version, star = match.group(1) or "==", match.group(2), match.group(3)
        have, want = parse_version(actual)[0][:width], parse_version(version)[0][:width]
        if star:
            n = len(version.split("."))
            equal = (have + (0,) * n)[:n] == (want + (0,) * n)[:n]
            ok = equal if op == "==" else not equal
        else:
            size = max(len(have), len(want))
            a, b = have + (0,) * (size - len(have)), want + (0,) * (size - len(want))
            ok = {"==": a == b, "!=": a != b, ">=": a >= b, "<=": a <= b, ">": a > b, "<": a < b,
                  "~=": a >= b and a[:max(1, len(want) - 1)] == b[:max(1, len(want) - 1)]}[op]
        if not ok:
            return False
    return True


def spoken(constraint: str) -> str:
    """``>=2.27.7,<3.0`` -> ``>= 2.27.7, < 3.0``; a pin stays as it is (the host says ranges the same way)."""
    parts = [c.strip() for c in str(constraint).split(",")]
    if len(parts) == 1 and parts[0][:1].isdigit():
        return parts[0]
    return ", ".join(re.sub(r"^(==|!=|>=|<=|>|<|~=)\s*", r"\1 ", p) for p in parts)


def major_minor(version: str | None) -> str | None:
    """``'13.0.1'`` -> ``'13.0'``; None stays None."""
    if not version:
        return None
    parts = str(version).split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 else f"{parts[0]}.0"
