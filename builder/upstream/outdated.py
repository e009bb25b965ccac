"""`trainimg outdated`: what is newer upstream than what the recipes pin, the locks hold or compat.yaml knows.

Read from the package index (PEP 691), one page per project: framework releases (final releases only), releases
compat.yaml has no entry for, the NCCL, cuDNN and CUDA runtime wheels a build accepts beyond what its lock pins,
cloudml-hypertune and uv; then NVIDIA's CUDA update releases (their tag deletion dates), the bases' end-of-life
dates (`bases`) and the OS packages of released images with fixes pending in the security archive (`ossecurity`).
Every item names its source; an index that cannot be read is an error naming it (exit 1), never "nothing new".
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from packaging.version import Version

from ..plan.installer import UV_VERSION
from ..plan.requirements import lock_path, pins
from ..recipe.compat import Compat, constraint_spec, is_pin
from ..recipe.variant import RecipeSet, Variant
from .bases import cuda_items, eol_items
from .items import KINDS, Item, held_by, hold_json
from .ossecurity import SecurityArchive, security_item
from .simpleapi import Project, SimpleIndex

_RUNTIME = ("nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime")  # the CUDA runtime wheels a lock may hold


def roots(recipes: RecipeSet) -> list[Variant]:
    """The variants with a framework of their own (those that `extends` one inherit it)."""
    return [v for v in recipes.variants if not v.extends and v.framework != "none" and v.version]


def _date(page: Project, version: Version) -> str | None:
    released = page.released(version)
    return str(released) if released else None


def framework_items(recipes: RecipeSet, compat: Compat, index: SimpleIndex, today: datetime.date) -> list[Item]:
    """A release newer than what a recipe pins (per recipe file and version, with the variants it makes; those
    held back by their recipe in an item of their own, with the reason)."""
    groups: dict[tuple[str, str, str], list[Variant]] = {}
    for v in roots(recipes):
        groups.setdefault((v.source, v.framework, v.version or ""), []).append(v)
    items = []
    for (source, framework, version), variants in sorted(groups.items()):
        page = index.project(compat.frameworks[framework].pip_name)  # type: ignore[index]
        newest = page.newest()
        if newest is None or newest <= Version(version):
            continue
        for hold, names in held_by(variants, "framework", today).items():
            items.append(Item(kind="framework", name=page.name, current=version, newest=str(newest),
                              date=_date(page, newest), source=page.url, where=(source, *names),
                              action=f"trainimg bump {' '.join(names)}", held=hold_json(hold)))
    return items


def compat_items(compat: Compat, index: SimpleIndex) -> list[Item]:
    """A release compat.yaml has no entry for: a newer patch of a line it holds, or a new line."""
    items = []
    for framework, fw in compat.frameworks.items():
        page = index.project(fw.pip_name)
        lines = {(Version(r.version).major, Version(r.version).minor): Version(r.version) for r in fw.releases}
        newer: dict[tuple[int, int], Version] = {}
        for v in page.stable():
            if v > lines.get((v.major, v.minor), Version("0")) and (v.major, v.minor) >= min(lines):
                newer[(v.major, v.minor)] = max(v, newer.get((v.major, v.minor), v))
        for key, v in sorted(newer.items()):
            known = lines.get(key)
            items.append(Item(kind="compat", name=page.name, current=str(known) if known else None, newest=str(v),
                              date=_date(page, v), source=page.url, where=(f"compat.yaml {framework}",),
                              action=f"trainimg compat add {fw.pip_name}=={v}"))
    return items


def _accepted(v: Variant, compat: Compat) -> list[tuple[str, str]]:
    """(distribution, constraint) for the NCCL, cuDNN and CUDA runtime wheels of `v`'s build that its recipe and
    compat data leave a range for (a pin, the recipe's or the build's, leaves nothing to move)."""
    if v.cuda is None or v.framework == "none":
        return []
    _, wheels = compat.build(v.framework, v.version, v.cuda)  # type: ignore[arg-type]
    out = [(wheels.nccl_wheel, v.nccl or ""), (wheels.cudnn_wheel, v.cudnn or wheels.cudnn)]
    if not wheels.cuda_lines.startswith("=="):
        major = Version(wheels.cuda_lines.split(",")[0].lstrip(">=")).major
        out += [(name, f"<{major + 1}") for name in _RUNTIME]
    return [(name, spec) for name, spec in out if spec and not is_pin(spec)]


def wheel_items(recipes: RecipeSet, compat: Compat, root: Path, index: SimpleIndex) -> list[Item]:
    """A newer NCCL, cuDNN or CUDA runtime wheel than a variant's lock pins, inside what its build accepts."""
    found: dict[tuple[str, str, str], list[str]] = {}
    sources: dict[str, str] = {}
    for v in roots(recipes):
        path = lock_path(root, v.name)
        locked = pins(path.read_text(encoding="utf-8")) if path.is_file() else {}
        for name, spec in _accepted(v, compat):
            if name not in locked:
                continue
            page = index.project(name)
            fits = [w for w in page.stable() if w in constraint_spec(spec)]
            if fits and max(fits) > Version(locked[name]):
                found.setdefault((name, locked[name], str(max(fits))), []).append(v.name)
                sources[name] = page.url
    items = []
    for (name, current, newest), names in sorted(found.items()):
        date = _date(index.project(name), Version(newest))
        items.append(Item(kind="wheel", name=name, current=current, newest=newest, date=date, source=sources[name],
                          where=tuple(f"images/{n}/requirements.lock" for n in names),
                          action=f"trainimg lock {' '.join(names)} --upgrade-package {name}"))
    return items


def tool_items(compat: Compat, index: SimpleIndex) -> list[Item]:
    """cloudml-hypertune (whose releases are all .dev: every release counts) and uv, the build's installer."""
    items = []
    hypertune = index.project("cloudml-hypertune")
    newest = hypertune.newest(stable=False)
    known = max(Version(h) for h in compat.hypertune)
    if newest is not None and newest > known:
        items.append(Item(kind="hypertune", name=hypertune.name, current=str(known), newest=str(newest),
                          date=_date(hypertune, newest), source=hypertune.url, where=("compat.yaml hypertune",),
                          action="add it to compat.yaml's hypertune list"))
    uv = index.project("uv")
    newest = uv.newest()
    if newest is not None and newest > Version(UV_VERSION):
        items.append(Item(kind="uv", name=uv.name, current=UV_VERSION, newest=str(newest), date=_date(uv, newest),
                          source=uv.url, where=("builder/plan/installer.py UV_VERSION", "pyproject.toml"),
                          action="move UV_VERSION and pyproject's uv pin together (lock and build use one uv)"))
    return items


def _by(variants: Iterable[Variant], key: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for v in variants:
        value = getattr(v, key)
        if value:
            out.setdefault(str(value), []).append(v.name)
    return out


def os_items(released: list[tuple[str, str, dict[str, Any]]], archive: SecurityArchive) -> list[Item]:
    """The released images (variant, image, SBOM) with OS packages fixed in their security archive."""
    return [item for variant, image, sbom in released
            if (item := security_item(variant, image, sbom, archive)) is not None]


def outdated(recipes: RecipeSet, compat: Compat, root: Path, index: SimpleIndex, today: datetime.date,
             warn_days: int, released: list[tuple[str, str, dict[str, Any]]], archive: SecurityArchive
             ) -> list[Item]:
    """Everything newer upstream (and every base near its end, and every released image with OS fixes pending),
    in `items.KINDS` order."""
    items = [*framework_items(recipes, compat, index, today), *compat_items(compat, index),
             *wheel_items(recipes, compat, root, index), *tool_items(compat, index),
             *cuda_items(compat, _by(recipes.variants, "cuda"), index, today, warn_days),
             *eol_items(recipes.variants, today, warn_days), *os_items(released, archive)]
    return sorted(items, key=lambda i: KINDS.index(i.kind))
