"""The advisory audit of what a build installs: each chosen variant's lock as the build would put it in its context
(the committed lock, or one compiled for the build where a recipes folder of your own has none; a stale lock is
refused, as `build` refuses it), audited by builder/audit before anything is built.

`trainimg audit`, `build --advisories` and `release` all come here, so the three audit the same pins.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from ..audit.gate import AuditResult, audit, skipped
from ..options import AuditOptions, LockOptions
from ..recipe.compat import load_compat
from ..recipe.loading import RecipeSet
from .lockcompile import locks_into


def audit_variants(recipes: RecipeSet, names: list[str], root: Path, env: Mapping[str, str], opts: AuditOptions,
                   wheelhouses: tuple[Path, ...], say: Callable[[str], None] = lambda line: None) -> AuditResult:
    """Audit `names` (and the variants they extend) as `opts` says; `--skip-audit` returns the skipped result. A
    lock compiled here resolves from the build's `wheelhouses` (its --wheelhouse folders, else PIP_FIND_LINKS), so
    it holds the pins the build's own compile of it holds."""
    if opts.skip:
        return skipped()
    chosen = recipes.with_parents(recipes.select(names))
    with tempfile.TemporaryDirectory(prefix="trainimg-audit-") as tmp:
        locks_into(Path(tmp), recipes, chosen, root, LockOptions(wheelhouses=wheelhouses), env, say, load_compat())
        return audit(Path(tmp), chosen, opts)
