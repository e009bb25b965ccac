"""A variant (one buildable image, every field resolved) and the set of them a recipes folder expands to.

Everything after loading (plan, render, build, test, push) reads these, never the YAML: what they hold was
validated once, in `loading`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from difflib import get_close_matches
from typing import Literal

from ..errors import RecipeError
from ..runtime.frameworks import FrameworkName
from .arches import DEFAULT_ARCHES
from .fields import Hold


@dataclass(frozen=True)
class Variant:
    """One buildable image, fully resolved: every field validated, defaults applied."""

    name: str
    repository: str
    framework: FrameworkName | Literal["none"]
    version: str | None
    cuda: str | None
    os: str
    flavour: str
    cudnn_image: bool
    python: str
    nccl: str | None
    cudnn: str | None
    reduction_server: bool
    hypertune: str | None
    extras: tuple[str, ...]
    labels: tuple[tuple[str, str], ...]
    extends: str | None
    base_image: str
    source: str  # the recipe file, relative to the recipes folder's parent
    arch: tuple[str, ...] = DEFAULT_ARCHES  # the CPU architectures its image is built for (recipe/arches.py)
    env: tuple[tuple[str, str], ...] = ()  # image environment the recipe sets (an extending variant: its own)
    held: tuple[Hold, ...] = ()  # what `outdated` shows as held, with why (recipe/fields.py `held`); children inherit it
    origin: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def gpu(self) -> bool:
        return self.cuda is not None

    @property
    def tag(self) -> str:
        """``trainimg/pytorch:2.13.0-cu128-py3.12``: the image reference without registry."""
        return f"{self.repository}:{self.tag_version}"

    @property
    def tag_version(self) -> str:
        accel = "cu" + self.cuda.replace(".", "") if self.cuda else "cpu"
        head = self.version if self.version else "base"
        return f"{head}-{accel}-py{self.python}"

    def hold(self, kind: str) -> Hold | None:
        """The variant's hold of `kind` (recipe/fields.py `held` HOLD_KINDS), None when it holds none."""
        return next((h for h in self.held if h.kind == kind), None)

    def versions(self) -> dict[str, str | None]:
        return {
            "cuda": self.cuda,
            "cudnn": self.cudnn,
            "nccl": self.nccl,
            "python": self.python,
            "framework": self.version,
            "hypertune": self.hypertune,
        }


class RecipeSet:
    """All variants of a recipes folder, in a stable order (file name, then matrix order)."""

    def __init__(self, variants: list[Variant]) -> None:
        self.variants = variants
        self.by_name = {v.name: v for v in variants}

    def select(self, patterns: Iterable[str]) -> list[Variant]:
        """Variants named by exact name or shell glob; an unknown name is a user error with a suggestion."""
        from fnmatch import fnmatchcase

        patterns = list(patterns)
        if not patterns:
            return list(self.variants)
        chosen: list[Variant] = []
        for pat in patterns:
            hits = [v for v in self.variants if fnmatchcase(v.name, pat) or v.tag == pat]
            if not hits:
                close = get_close_matches(pat, list(self.by_name), n=1)
                hint = f"; did you mean {close[0]}?" if close else "; run `trainimg list` to see them"
                raise RecipeError(f"no variant named {pat!r}{hint}")
            chosen.extend(h for h in hits if h not in chosen)
        return chosen

    def with_parents(self, chosen: list[Variant]) -> list[Variant]:
        """`chosen` plus every variant they extend, parents first (the order builds must run in)."""
        ordered: list[Variant] = []

        def visit(v: Variant) -> None:
            if v.extends:
                visit(self.by_name[v.extends])
            if v not in ordered:
                ordered.append(v)

        for v in chosen:
            visit(v)
        return ordered
