"""When the images' bases stop being maintained or vanish: the OS end-of-life dates and NVIDIA's tag deletion rule
(`data/bases.yaml`, each date with its source), turned into `outdated` items for the bases the recipes use.

Why: an image built on an OS past its security support never gets another fix, and a `nvidia/cuda` tag NVIDIA
deleted breaks every build and `verify` of the images on it (`trainimg mirror` keeps a copy). The warning comes
`warn_days` before the date, and stays after it.
"""

from __future__ import annotations

import calendar
import datetime
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources

import yaml
from packaging.version import Version
from pydantic import BaseModel, ConfigDict

from ..recipe.compat import Compat
from ..recipe.variant import Variant
from .items import Item, held_by, hold_json
from .simpleapi import SimpleIndex


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class OsLife(_Frozen):
    name: str
    security_end: datetime.date  # regular security support ends
    lts_end: datetime.date | None = None  # long-term support (Debian LTS, Ubuntu Pro) ends
    source: str


class CudaPolicy(_Frozen):
    delete_after_months: int
    source: str
    updates_from: str  # the PyPI project whose versions are CUDA's update releases (cuda-toolkit)


class Bases(_Frozen):
    operating_systems: dict[str, OsLife]
    cuda_images: CudaPolicy


@cache
def load_bases() -> Bases:
    text = resources.files(__package__).joinpath("data/bases.yaml").read_text(encoding="utf-8")
    return Bases.model_validate(yaml.safe_load(text))


def add_months(day: datetime.date, months: int) -> datetime.date:
    """`day` plus whole months, clamped to the month's last day (2026-08-31 + 6 months = 2027-02-28)."""
    month = day.month - 1 + months
    year, month = day.year + month // 12, month % 12 + 1
    return day.replace(year=year, month=month, day=min(day.day, calendar.monthrange(year, month)[1]))


def near(day: datetime.date, today: datetime.date, warn_days: int) -> bool:
    return (day - today).days <= warn_days


def eol_items(variants: Sequence[Variant], today: datetime.date, warn_days: int) -> list[Item]:
    """An item per OS the variants use whose security support ends within `warn_days` (or has ended); the
    variants whose recipe holds their `os` (until the OS's long-term support ends, at the latest) in one of its
    own, with the reason."""
    used: dict[str, list[Variant]] = {}
    for v in variants:
        used.setdefault(v.os, []).append(v)
    items = []
    for os_name, on in sorted(used.items()):
        life = load_bases().operating_systems.get(os_name)
        if life is None or not near(life.security_end, today, warn_days):
            continue
        ended = life.security_end <= today
        after = f" (long-term support until {life.lts_end})" if life.lts_end else ""
        for hold, names in held_by(on, "os", today, life.lts_end).items():
            items.append(Item(kind="base-eol", name=os_name, current=life.name,
                              newest=f"security support {'ended' if ended else 'ends'} {life.security_end}{after}",
                              date=str(life.security_end), source=life.source, where=tuple(names),
                              action="move these variants to a supported OS", warning=hold is None,
                              held=hold_json(hold, life.lts_end)))
    return items


def cuda_items(compat: Compat, lines_used: Mapping[str, Sequence[str]], index: SimpleIndex, today: datetime.date,
               warn_days: int) -> list[Item]:
    """An item per CUDA line the variants' bases carry with a newer update release out: by NVIDIA's policy the
    older update's tags are deleted `delete_after_months` after it (a warning once that is within `warn_days`)."""
    policy = load_bases().cuda_images
    if not lines_used:
        return []
    page = index.project(policy.updates_from)
    items = []
    for line, variants in sorted(lines_used.items(), key=lambda kv: Version(kv[0])):
        image = compat.cuda.get(line)
        if image is None:
            continue
        current = Version(image.image_version)
        newer = [v for v in page.stable() if f"{v.major}.{v.minor}" == line and v > current]
        if not newer:
            continue
        newest = max(newer)
        released = page.released(newest)
        deleted = add_months(released, policy.delete_after_months) if released else None
        said = f"; NVIDIA deletes the {current} tags from {deleted} ({policy.source})" if deleted else ""
        shown = ".".join(str(n) for n in newest.release[:3])
        items.append(Item(kind="cuda", name=f"CUDA {line}", current=str(current), newest=shown,
                          date=str(released) if released else None, source=page.url, where=tuple(variants),
                          action=f"move compat.yaml's cuda {line} image_version to {shown} once nvidia/cuda:{shown} "
                                 f"tags are out (not checked: Docker Hub does not answer here){said}",
                          warning=deleted is not None and near(deleted, today, warn_days)))
    return items
