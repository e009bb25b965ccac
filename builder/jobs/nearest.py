"""The did-you-mean clause of a refusal: the known names closest to a mistyped one.

Why one helper: every table that refuses an unknown name (machine types, instance types, VM sizes) should answer a
typo the same way, with the names it most likely meant (difflib's ratio, as `recipe.variant` does for variants).
"""

from __future__ import annotations

from collections.abc import Iterable
from difflib import get_close_matches


def did_you_mean(name: str, known: Iterable[str], *, fallback: Iterable[str] = (), n: int = 3) -> str:
    """``did you mean A, B or C?``, the closest of `known` (compared without regard to case); else ``e.g. ...``
    with the first of `fallback`, else ''."""
    names = list(known)
    by_lower = {k.lower(): k for k in names}
    close = [by_lower[c] for c in get_close_matches(name.lower(), list(by_lower), n=n, cutoff=0.5)]
    if close:
        head = ", ".join(close[:-1])
        return f"did you mean {head + ' or ' if head else ''}{close[-1]}?"
    examples = list(fallback)[:n]
    return f"e.g. {', '.join(examples)}" if examples else ""
