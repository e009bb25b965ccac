"""The build plan: a variant's stages (base -> python -> comms -> framework -> image), args and parent keys.

Stages are content-addressed: a stage's key hashes its text and its parent's key, so two variants whose
python or comms stages render to the same text share that parent, and the builder builds it once per run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from . import blocks
from .blocks import Block
from .installer import CA_SECRET, DEFAULT_INSTALLER, INSTALLER_STAGE, LOCKS_STAGE, PIP_CONF_SECRET, UV, UV_CONF_SECRET
from ..recipe.arches import DEFAULT_ARCH, arch_dir, arch_key, local_tag
from ..recipe.compat import Compat
from ..recipe.compat import load_compat
from ..recipe.drivers import floor_for
from ..recipe.loading import RecipeSet, Variant
from ..runtime.contract import (
    DRIVER_MIN_LABEL,
    FRAMEWORK_LABEL,
    NCCL_MINIMUM_LABEL,
    OCI_BASE_NAME,
    OCI_TITLE,
    RECIPE_LABEL,
    RECIPE_VERSION_PREFIX,
    REDUCTION_SERVER_LABEL,
    VARIANT_LABEL,
)

BASE_ARG = "BASE_IMAGE"
PARENT_ARG = "PARENT_IMAGE"
FINAL_STAGE = "image"
# The stage an extending variant's image builds on; a bake target's named context replaces it by this name.
PARENT_STAGE = "parent"


@dataclass(frozen=True)
class Stage:
    name: str
    parent: str  # another stage's name, or ${BASE_IMAGE} / ${PARENT_IMAGE}
    blocks: tuple[Block, ...]
    key: str  # content hash of this stage and everything below it

    @property
    def text(self) -> str:
        return "\n".join(b.text for b in self.blocks)

    @property
    def needs(self) -> tuple[str, ...]:
        """The stages of its Dockerfile this stage is built from: its FROM stage, then those its steps mount."""
        below = () if self.parent.startswith("$") else (self.parent,)
        return below + tuple(m for b in self.blocks for m in b.mounts if m not in below)


@dataclass(frozen=True)
class Plan:
    """A variant's stages for one CPU architecture (recipe/arches.py); each architecture has its own Dockerfile."""

    variant: Variant
    args: tuple[tuple[str, str], ...]  # the Dockerfile's global ARGs and their defaults
    stages: tuple[Stage, ...]
    arch: str = DEFAULT_ARCH

    @property
    def key(self) -> str:
        """The variant's name, and ``@<arch>`` off amd64: what builds, reports and lock entries are keyed by."""
        return arch_key(self.variant.name, self.arch)

    @property
    def local_tag(self) -> str:
        """The engine's name for this architecture's image (the variant's tag on amd64)."""
        return local_tag(self.variant.tag, self.arch)

    @property
    def components(self) -> tuple[str, ...]:
        """Components a build may be allowed to miss (--allow-missing)."""
        return tuple(c for s in self.stages for b in s.blocks for c in b.components)

    @property
    def parents(self) -> tuple[Stage, ...]:
        """Stages worth building once and sharing: everything between the root and the final stage."""
        return tuple(s for s in self.stages if s.name not in ("base", PARENT_STAGE, FINAL_STAGE))

    def dockerfile_path(self) -> str:
        return dockerfile_path(self.variant.name, self.arch)


def dockerfile_path(variant: str, arch: str = DEFAULT_ARCH) -> str:
    """Where a variant's rendered Dockerfile of `arch` lives, relative to the repository root (another
    architecture's in its own folder: recipe/arches.py)."""
    return "/".join(p for p in ("images", variant, arch_dir(arch), "Dockerfile") if p)


def static_labels(v: Variant, compat: Compat) -> list[tuple[str, str]]:
    """Labels known before the build; versions read back from the image are added by the builder after it.

    A GPU variant carries the NCCL floor of the compatibility data, so the in-image probe checks the floor that
    was true when the image was rendered."""
    pairs = [
        (OCI_TITLE, v.tag),
        (OCI_BASE_NAME, v.base_image),
        (VARIANT_LABEL, v.name),
        (RECIPE_LABEL, v.source),
        (FRAMEWORK_LABEL, v.framework),
        (REDUCTION_SERVER_LABEL, "wanted" if v.reduction_server else "none"),
    ]
    pairs += [(f"{RECIPE_VERSION_PREFIX}{k}", val) for k, val in v.versions().items() if val is not None]
    if v.gpu:
        pairs.append((NCCL_MINIMUM_LABEL, compat.nccl.minimum))
        pairs.append((DRIVER_MIN_LABEL, floor_for(str(v.cuda)).driver))
    return pairs + list(v.labels)


def make_plan(v: Variant, compat: Compat, parent: Variant | None = None, installer: str = DEFAULT_INSTALLER,
              arch: str = DEFAULT_ARCH) -> Plan:
    """Compose the blocks of `v` into stages for `arch`. Extending variants add one stage on `parent`'s image of
    the same architecture (and, with uv, the stage uv comes from). Every Python package comes from the variant's
    lock for `arch`, hash-checked, one step per layer group (runtime/lockgroups.py)."""
    tool = [(INSTALLER_STAGE, "python", [blocks.installer_stage(arch)])] if installer == UV else []
    if v.extends:
        if parent is None or parent.name != v.extends:
            raise ValueError(f"make_plan needs the parent variant {v.extends!r} of {v.name!r}")
        args = ((PARENT_ARG, local_tag(parent.tag, arch)),)
        image_blocks = ([blocks.packages(v, compat, installer, arch)] if v.extras else []) + [
            blocks.labels(static_labels(v, compat)), blocks.sbom(v), *_env(v)]
        tool = ([(INSTALLER_STAGE, PARENT_STAGE, [blocks.installer_stage(arch)])] if installer == UV and v.extras
                else [])
        on_parent = [(PARENT_STAGE, f"${{{PARENT_ARG}}}", [blocks.parent(PARENT_STAGE)]), *tool,
                     (FINAL_STAGE, PARENT_STAGE, image_blocks)]
        return Plan(v, args, _chain(on_parent, args, arch), arch)

    args = ((BASE_ARG, v.base_image),)
    spec: list[tuple[str, str, list[Block]]] = [
        ("base", f"${{{BASE_ARG}}}", [blocks.base()]),
        ("python", "base", [blocks.python(v)]),
        *tool,
        (LOCKS_STAGE, "python", [blocks.locks_stage(v, arch)]),
    ]
    # Layers in the order things change (README, Layers): the OS and Python, the lock's groups (CUDA libraries,
    # NCCL, the framework, hypertune), the Reduction Server, trainimg's runtime, labels and the SBOM.
    last = "python"
    install = [blocks.packages(v, compat, installer, arch)]
    if v.framework != "none":
        spec.append(("framework", last, install))
        last, install = "framework", []
    if v.reduction_server:
        spec.append(("comms", last, [blocks.reduction_server()]))
        last = "comms"
    driver = [blocks.driver(v.cuda)] if v.cuda else []
    spec.append((FINAL_STAGE, last, install + [blocks.runtime(v), blocks.labels(static_labels(v, compat)),
                                               blocks.sbom(v), *_env(v), *driver]))
    return Plan(v, args, _chain(spec, args, arch), arch)


def plans(recipes: RecipeSet, variants: Iterable[Variant] | None = None, *, compat: Compat | None = None,
          installer: str = DEFAULT_INSTALLER, arches: Iterable[str] | None = None) -> list[Plan]:
    """The plan of each of `variants` (default: every variant of `recipes`) for each architecture it lists (only
    those of `arches`, when given), an extending one on its parent: the one place plans are made, for render, bake,
    build and `list` alike. A variant's plans are together, amd64's first."""
    compat = compat or load_compat()
    chosen = recipes.variants if variants is None else variants
    wanted = None if arches is None else set(arches)
    return [make_plan(v, compat, recipes.by_name.get(v.extends or ""), installer, arch) for v in chosen
            for arch in v.arch if wanted is None or arch in wanted]


__all__ = ["CA_SECRET", "PIP_CONF_SECRET", "UV_CONF_SECRET", "Plan", "Stage", "make_plan", "plans"]


def _env(v: Variant) -> list[Block]:
    return [blocks.image_env(v.env)] if v.env else []


def _chain(spec: list[tuple[str, str, list[Block]]], args: tuple[tuple[str, str], ...], arch: str
           ) -> tuple[Stage, ...]:
    """The stages, each keyed by its text and everything below it; another architecture's keys hash it in too, so
    the same text built for arm64 is never taken for amd64's (amd64's keys are what they always were)."""
    stages: list[Stage] = []
    keys: dict[str, str] = {}
    root = repr(args) if arch == DEFAULT_ARCH else f"{arch}\n{args!r}"
    for name, parent, blist in spec:
        below = keys.get(parent) or hashlib.sha256(root.encode()).hexdigest()
        text = "\n".join(b.text for b in blist)
        key = hashlib.sha256(f"{below}\n{name}\n{text}".encode()).hexdigest()
        keys[name] = key
        stages.append(Stage(name, parent, tuple(blist), key))
    return tuple(stages)
