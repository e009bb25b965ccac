"""The build plan as a `docker buildx bake` file, so BuildKit builders (remote, clustered) build the same matrix.

Each shared parent stage becomes its own target, and each variant names it in `contexts` under the stage's
name, so bake builds it once and every child builds on it: the scale-out path, without a home-made build farm.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..recipe.compat import load_compat
from ..plan.stages import BASE_ARG, CA_SECRET, FINAL_STAGE, PARENT_ARG, PIP_CONF_SECRET, plans
from ..recipe.loading import RecipeSet
from ..runtime.contract import VARIANT_LABEL


def bake_file(recipes: RecipeSet, root: Path) -> dict[str, Any]:
    compat = load_compat()
    all_plans = plans(recipes, compat=compat)
    secrets = [f"id={PIP_CONF_SECRET},src=pip.conf", f"id={CA_SECRET},env=SSL_CERT_FILE"]
    targets: dict[str, Any] = {}
    owners: dict[str, str] = {}
    for plan in all_plans:
        v = plan.variant
        contexts: dict[str, str] = {}
        for stage in plan.parents:
            parent_target = f"{stage.name}-{stage.key[:12]}"
            if parent_target not in targets:
                owners[parent_target] = v.name
                targets[parent_target] = {
                    "context": ".", "dockerfile": plan.dockerfile_path(), "target": stage.name,
                    "args": {BASE_ARG: v.base_image}, "secret": secrets,
                }
            contexts[stage.name] = f"target:{parent_target}"
        args = {PARENT_ARG: f"target:{v.extends}"} if v.extends else {BASE_ARG: v.base_image}
        target: dict[str, Any] = {
            "context": ".", "dockerfile": plan.dockerfile_path(), "target": FINAL_STAGE,
            "tags": [v.tag], "args": {k: val for k, val in args.items() if not val.startswith("target:")},
            "secret": secrets, "labels": {VARIANT_LABEL: v.name},
        }
        if v.extends:
            contexts[PARENT_ARG] = f"target:{v.extends}"
        if contexts:
            target["contexts"] = contexts
        targets[v.name] = target
    return {
        "group": {"default": {"targets": [p.variant.name for p in all_plans]}},
        "target": targets,
    }
