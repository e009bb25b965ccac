"""The build plan as a `docker buildx bake` file that BuildKit builds as it stands (the files it names are
written by `build.bakefolder`).

A stage two or more chosen variants share becomes one target, and each consumer names it in `contexts` under the
stage's name; an extending variant's `parent` stage is replaced the same way by its parent variant's target.
Another architecture's image is a target of its own (`<variant>-<arch>`, its own Dockerfile, `platforms`
``linux/arm64``, tagged ``<tag>-<arch>``): `docker buildx imagetools create --tag TAG TAG TAG-arm64` then puts both
under one tag as an index (trainimg's `push` and `release` do that themselves).
BuildKit looks a named context up by the stage *name* before anything else (frontend/dockerfile/dockerfile2llb/
convert.go, `if st.Name != "" { s, img, err := namedContext(ctx, st.Name, ...)`), so the key matches literally;
a key meant for `FROM ${ARG}` would be compared with the expanded, normalised image name instead and miss.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..plan.stages import FINAL_STAGE, PARENT_STAGE, Plan, Stage
from ..recipe.arches import DEFAULT_ARCH, arch_of


@dataclass(frozen=True)
class BakeInputs:
    """Where the files a bake file names are, and the labels each variant's target sets."""

    context: Path
    dockerfiles: Mapping[str, Path]  # `Plan.key` (the variant, @arch off amd64) -> its rendered Dockerfile
    secrets: tuple[str, ...]  # buildx `secret` entries: "id=...,src=..."
    labels: Mapping[str, Mapping[str, str]]  # variant name -> labels known before the build


def bake_file(plans: list[Plan], inputs: BakeInputs) -> dict[str, Any]:
    """Targets for `plans` (each variant, and each stage two or more of them share), `default` and one group
    per framework."""
    shared = {k for k, n in Counter(s.key for p in plans for s in p.parents).items() if n > 1}
    targets: dict[str, Any] = {}
    for plan in plans:
        common: dict[str, Any] = {"context": str(inputs.context), "dockerfile": str(inputs.dockerfiles[plan.key]),
                                  "secret": list(inputs.secrets)}
        if plan.arch != DEFAULT_ARCH:
            common["platforms"] = [arch_of(plan.arch).platform]
        contexts = _shared_targets(plan, shared, targets, common)
        v = plan.variant
        target: dict[str, Any] = {**common, "target": FINAL_STAGE, "tags": [plan.local_tag], "args": dict(plan.args),
                                  "labels": dict(inputs.labels[v.name])}
        if v.extends:
            contexts = {**contexts, PARENT_STAGE: f"target:{target_name(v.extends, plan.arch)}"}
        if contexts:
            target["contexts"] = contexts
        targets[target_name(v.name, plan.arch)] = target
    groups: dict[str, Any] = {"default": {"targets": [target_name(p.variant.name, p.arch) for p in plans]}}
    for plan in plans:
        groups.setdefault(plan.variant.framework, {"targets": []})["targets"].append(
            target_name(plan.variant.name, plan.arch))
    return {"group": groups, "target": targets}


def target_name(variant: str, arch: str) -> str:
    """A variant's target: its name for amd64, ``<variant>-<arch>`` for another architecture."""
    return variant if arch == DEFAULT_ARCH else f"{variant}-{arch}"


def parent_target(stage: Stage) -> str:
    """A shared stage's target name: its stage name and content key, so equal stages are one target."""
    return f"{stage.name}-{stage.key[:12]}"


def _shared_targets(plan: Plan, shared: set[str], targets: dict[str, Any], common: Mapping[str, Any]
                    ) -> dict[str, str]:
    """Add a target for each shared parent stage of `plan` not yet made; return the final stage's `contexts`."""
    for stage in plan.parents:  # in Dockerfile order: what a stage needs is made before it
        name = parent_target(stage)
        if stage.key in shared and name not in targets:
            targets[name] = {**common, "target": stage.name, "args": dict(plan.args)}
            if contexts := _contexts(plan, stage, shared):
                targets[name]["contexts"] = contexts
    return _contexts(plan, plan.stages[-1], shared)


def _contexts(plan: Plan, stage: Stage, shared: set[str]) -> dict[str, str]:
    """The nearest shared stages `stage` is built from (its FROM chain and the stages its steps mount, such as
    uv's): each such target brings the stages under it through its own `contexts`."""
    by_name = {s.name: s for s in plan.stages}
    out: dict[str, str] = {}
    for name in stage.needs:
        below = by_name[name]
        if below.key in shared:
            out[name] = f"target:{parent_target(below)}"
        else:
            out.update(_contexts(plan, below, shared))
    return out
