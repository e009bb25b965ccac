"""Render plans into Dockerfiles under images/, deterministically, and check the committed ones for drift."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..plan.blocks import environment
from ..recipe.compat import Compat, load_compat
from ..plan.stages import Plan, make_plan
from ..recipe.loading import RecipeSet


@dataclass(frozen=True)
class Drift:
    path: str
    kind: str  # "differs", "missing" or "extra"


def plans(recipes: RecipeSet, compat: Compat | None = None) -> list[Plan]:
    compat = compat or load_compat()
    return [make_plan(v, compat, recipes.by_name.get(v.extends or "")) for v in recipes.variants]


def dockerfile(plan: Plan) -> str:
    """The Dockerfile text of one plan. Same plan, same bytes: nothing here reads the clock or the machine."""
    v = plan.variant
    return environment().get_template("Dockerfile.j2").render(
        source=v.source, name=v.name, dockerfile=plan.dockerfile_path(), args=plan.args, stages=plan.stages
    )


def render_all(recipes: RecipeSet, compat: Compat | None = None) -> dict[str, str]:
    """Every file under images/ the recipes produce, keyed by path relative to the repository root."""
    return {p.dockerfile_path(): dockerfile(p) for p in plans(recipes, compat)}


def write(files: dict[str, str], root: Path) -> list[str]:
    """Write `files` under `root`, remove Dockerfiles no recipe produces; return the paths that changed."""
    changed = []
    for drift in check(files, root):
        target = root / drift.path
        if drift.kind == "extra":
            target.unlink()
            if target.parent != root / "images" and not any(target.parent.iterdir()):
                target.parent.rmdir()
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(files[drift.path], encoding="utf-8")
        changed.append(drift.path)
    return changed


def check(files: dict[str, str], root: Path) -> list[Drift]:
    """What differs between `files` and what is on disk under root/images."""
    out = []
    for rel, text in sorted(files.items()):
        path = root / rel
        if not path.exists():
            out.append(Drift(rel, "missing"))
        elif path.read_text(encoding="utf-8") != text:
            out.append(Drift(rel, "differs"))
    images = root / "images"
    if images.is_dir():
        for path in sorted(images.glob("*/Dockerfile")):
            rel = str(path.relative_to(root))
            if rel not in files:
                out.append(Drift(rel, "extra"))
    return out
