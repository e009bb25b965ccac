"""Moving tags and the ordered push of a release.

Besides its immutable tag (``trainimg/pytorch:2.13.0-cpu-py3.11``) a released variant gets one
moving tag ``<repository>:<framework major.minor>-<cpu|cuXYZ>`` (``trainimg/pytorch:2.13-cpu``,
``trainimg/pytorch:2.14-cu130``). When several variants of one release map to the same moving tag (Python
versions of one CUDA build) the highest framework version wins, then the highest Python. Variants without a
framework version (``base-cpu-py3.11``) get no moving tag. `push_release` pushes every immutable tag first and the
moving tags last, and checks that each moving tag's registry digest equals its immutable tag's, so a moving tag
never points at anything not also reachable by an immutable tag.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..engine.base import Engine
from ..errors import CheckFailed
from ..imagebuild.builder import VariantBuild
from ..recipe.grammar import VARIANT_TAG_RE
from .indexpush import needs_index, push_architectures
from .push import PushResult, push, reachable_target
from ..registry.references import RegistryTarget, split_tag
from ..registry.registryapi import RegistryAPI


def moving_tag(tag: str) -> str | None:
    """`<repository>:<major.minor>-<cpu|cuXYZ>` for an immutable variant tag, or None (no framework version)."""
    repo, _, version = tag.rpartition(":")
    m = VARIANT_TAG_RE.match(version)
    if not repo or not m:
        return None
    return f"{repo}:{m.group(1)}.{m.group(2)}-{m.group(4)}"


def _version_key(tag: str) -> tuple[int, ...]:
    m = VARIANT_TAG_RE.match(tag.rpartition(":")[2])
    assert m is not None
    patch = tuple(int(x) for x in m.group(3).split(".") if x)
    return (int(m.group(1)), int(m.group(2)), *patch, -1, int(m.group(5)), int(m.group(6)))


def moving_of(candidate: str, tag: str) -> bool:
    """Whether `candidate` is the moving tag of the immutable `tag`."""
    return candidate != tag and moving_tag(tag) == candidate


def moving_tags(tags: Iterable[str]) -> dict[str, str]:
    """{moving tag: the immutable tag it points at} for a release's immutable tags (ties: see the module doc)."""
    best: dict[str, str] = {}
    for tag in tags:
        mt = moving_tag(tag)
        if mt and (mt not in best or _version_key(tag) > _version_key(best[mt])):
            best[mt] = tag
    return best


def copy_moving_tags(api: RegistryAPI, target: RegistryTarget, digests: Mapping[str, str]) -> dict[str, PushResult]:
    """Point each moving tag of the immutable tags in `digests` ({local tag: registry digest}) at its winner by a
    registry manifest copy (no layer pulled or pushed); {local moving tag: PushResult}. A copy the registry names
    by another digest is CheckFailed (nothing further is moved)."""
    results = {}
    for mt, tag in sorted(moving_tags(digests).items()):
        name, moving = split_tag(mt)
        got = api.copy_manifest(target.repository(name), digests[tag], moving)
        if got != digests[tag]:
            raise CheckFailed(f"moving tag {target.ref(mt)} got digest {got} but {target.ref(tag)} is "
                              f"{digests[tag]}: the registry rewrote the manifest; moving tags must name the "
                              "released manifest")
        results[mt] = PushResult(ref=target.ref(mt), digest=got, bytes_uploaded=0, attempts=1)
    return results


def push_release(engine: Engine, builds: Iterable[VariantBuild], target: RegistryTarget,
                 credentials: dict[str, str] | None, gate: Callable[[str, str], None] | None = None, *,
                 on_pushed: Callable[[str, PushResult], None] | None = None, kept: Mapping[str, str] | None = None,
                 moving: bool = True, kept_manifests: Mapping[str, Mapping[str, str]] | None = None,
                 on_manifest: Callable[[str, PushResult], None] | None = None, index: bool = True,
                 **push_kwargs: Any) -> dict[str, PushResult]:
    """Push every build's immutable tag, then set the moving tags; {local tag: registry.PushResult} in push order.

    A variant built for more than amd64 goes as one index under its tag (publish/indexpush.py), keyed by that tag:
    each architecture's image first (`on_manifest(local tag, result)` after each), then the index, naming also the
    manifests of its architectures the release skipped as unchanged (`kept_manifests`: {tag: {arch: digest}}).
    With `index` False (a `--stage` job, which may hold one architecture of several) each architecture's image is
    pushed by digest only, keyed by its local tag: `promote` puts the index under the tag once every part is in.

    `builds` are the release's builds; `gate(image_id, tag)` runs before each
    push (records.require_pass with the env bound). `kept` ({immutable tag: registry digest}) are the variants of
    the release skipped as unchanged: they compete for the moving tags like the builds. The moving tags are set by
    a registry manifest copy (`copy_moving_tags`); `moving=False` (a `--stage` job) sets none.
    `on_pushed(tag, result)` is called after each push (for progress lines).
    """
    builds = list(builds)
    results: dict[str, PushResult] = {}
    siblings = list(dict.fromkeys(b.variant_tag for b in builds)) + list(kept or ())  # mounted, not sent

    def one(local: str, image_id: str) -> PushResult:
        image = engine.image(local)
        if image is None or image.id != image_id:
            raise CheckFailed(f"{local} now points at {image.id[7:19] if image else 'nothing'}, not the released {image_id[7:19]}: "
                              "did another build retag it? nothing more pushed")
        def gate_this(iid: str) -> None:
            if gate is not None:
                gate(iid, local)

        res = push(engine, local, target, local, credentials=credentials, gate=gate_this if gate else None,
                   siblings=[t for t in siblings if t != local], **push_kwargs)
        results[local] = res
        if on_pushed:
            on_pushed(local, res)
        return res

    groups: dict[str, list[VariantBuild]] = {}
    for b in builds:
        groups.setdefault(b.variant_tag, []).append(b)
    for tag, group in groups.items():
        partial = (kept_manifests or {}).get(tag, {})
        if not needs_index([*(b.arch for b in group), *partial]):
            one(group[0].tag, group[0].image_id)
            continue
        results.update(push_architectures(engine, tag, [(b.tag, b.arch) for b in group], target, credentials,
                                          gate=gate, kept=partial, siblings=siblings, on_manifest=on_manifest,
                                          on_pushed=on_pushed, index=index, **push_kwargs))
    if moving:
        digests = {**(kept or {}), **{tag: res.digest for tag, res in results.items()}}
        api = RegistryAPI(reachable_target(engine, target), credentials)
        for mt, res in copy_moving_tags(api, target, digests).items():
            results[mt] = res
            if on_pushed:
                on_pushed(mt, res)
    return results
