"""No litter: a build leaves no nameless image behind, and `trainimg prune` removes what trainimg made, by label.

Why a no-op rebuild used to add `<none>` images: every variant's build stores two images (BuildKit's, then the same
layers with the labels read back from it: labelling.py), and the 20.10 engine keeps each, named or not; shared
parent stages are stored the same way; and when the variant's tag moves to a new image, the old one keeps nothing
naming it. So the builder names every image it stores from the moment the engine stores it (a `trainimg-pass/`
tag unique to this process: another process's cleanup only ever takes images nothing names, so it cannot take
one this builder is still reading), takes those names off when the variant is tagged, and removes the image the
tag moved away from when trainimg made it (its labels say so) and nothing else names or uses it. `docker rmi`
without force keeps an image a container uses or another image is built on.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..engine.base import Engine, ImageInfo
from ..runtime.contract import MANAGED_LABEL, VARIANT_LABEL

PASS_REPOSITORY = "trainimg-pass"  # the names a build holds on the images it stores until the variant is tagged


def pass_tag(what: str) -> str:
    """A name for one stored build result, unique to this process and call (`what`: a variant or stage name)."""
    return f"{PASS_REPOSITORY}/{what}:{os.getpid()}-{uuid.uuid4().hex[:12]}"


def made_by_trainimg(labels: Mapping[str, str]) -> bool:
    """trainimg's mark: the ownership label every labelled build sets, or the variant label its Dockerfiles set."""
    return MANAGED_LABEL in labels or VARIANT_LABEL in labels


def release_names(engine: Engine, tags: Iterable[str]) -> None:
    """Take this build's `trainimg-pass/` names off; an image left with no name and no user goes with it."""
    for tag in tags:
        engine.remove_image(tag)


def remove_superseded(engine: Engine, old: ImageInfo | None, new_id: str) -> bool:
    """After a variant's tag moved from `old` to `new_id`: remove `old` if trainimg made it and nothing names or
    uses it now. True when it was removed."""
    if old is None or old.id == new_id or not made_by_trainimg(old.labels):
        return False
    now = engine.image(old.id)
    if now is None or now.tags:
        return False
    return engine.remove_image(old.id)


@dataclass(frozen=True)
class Prunable:
    """One image `trainimg prune` removes: its id, its names (none: dangling) and its size."""

    id: str
    tags: tuple[str, ...]
    size: int


def prunable(engine: Engine, labels: Mapping[str, str]) -> list[Prunable]:
    """Every image trainimg made (its mark: MANAGED_LABEL or VARIANT_LABEL) that also carries each of `labels`
    (``--label KEY=VALUE``: a team's recipe labels narrow it), sorted by id."""
    found: dict[str, ImageInfo] = {}
    for mark in (MANAGED_LABEL, VARIANT_LABEL):
        for info in engine.labelled_images(mark):
            if all(info.labels.get(k) == v for k, v in labels.items()):
                found[info.id] = info
    return [Prunable(i.id, i.tags, i.size) for _, i in sorted(found.items())]


def prune(engine: Engine, images: Iterable[Prunable]) -> tuple[list[Prunable], list[Prunable]]:
    """Remove `images` (names first, then the image); returns (removed, kept: a container uses it or another
    image is built on it)."""
    removed: list[Prunable] = []
    kept: list[Prunable] = []
    for image in images:
        for tag in image.tags:
            engine.remove_image(tag)
        gone = engine.image(image.id) is None or engine.remove_image(image.id)
        (removed if gone else kept).append(image)
    return removed, kept
