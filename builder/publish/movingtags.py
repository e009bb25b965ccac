"""Moving tags and the ordered push of a release.

Besides its immutable tag (``trainimg/pytorch:2.13.0-cpu-py3.11``) a released variant gets one
moving tag ``<repository>:<framework major.minor>-<cpu|cuXYZ>`` (``trainimg/pytorch:2.13-cpu``,
``trainimg/pytorch:2.14-cu130``). When several variants of one release map to the same moving tag (Python
versions of one CUDA build) the highest framework version wins, then the highest Python. Variants without a
framework version (``base-cpu-py3.11``) get no moving tag. A release pushes every immutable tag first
(`push_immutable`) and moves the moving tags last, after every other step succeeded (`copy_moving_tags`: all or
nothing), checking that each moving tag's registry digest equals its immutable tag's, so a moving tag never points
at anything not also reachable by an immutable tag.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from typing import Any

from ..engine.base import Engine
from ..errors import CheckFailed, TrainimgError
from ..imagebuild.builder import VariantBuild
from ..recipe.grammar import VARIANT_TAG_RE
from .indexpush import needs_index, push_architectures
from .push import PushResult, push
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


def planned_moves(target: RegistryTarget, digests: Mapping[str, str]) -> dict[str, PushResult]:
    """{local moving tag: the PushResult its copy will give} for the immutable tags in `digests` ({local tag:
    registry digest}): what a release records before it moves anything (`copy_moving_tags` makes it true)."""
    return {mt: PushResult(ref=target.ref(mt), digest=digests[tag], bytes_uploaded=0, attempts=1)
            for mt, tag in sorted(moving_tags(digests).items())}


def copy_moving_tags(api: RegistryAPI, target: RegistryTarget, digests: Mapping[str, str]) -> dict[str, PushResult]:
    """Point each moving tag of the immutable tags in `digests` ({local tag: registry digest}) at its winner by a
    registry manifest copy (no layer pulled or pushed); {local moving tag: PushResult}.

    All or nothing: what each moving tag names is read first, and when a copy fails (or the registry names a copy
    by another digest) the tags already moved are put back on what they named before, and CheckFailed says what
    failed; a tag that did not exist before cannot be taken back (Distribution deletes manifests, not tags), and
    the error names it."""
    winners = sorted(moving_tags(digests).items())
    before = {mt: api.remote_digest(target.repository(split_tag(mt)[0]), split_tag(mt)[1]) for mt, _ in winners}
    results: dict[str, PushResult] = {}
    for mt, tag in winners:
        name, moving = split_tag(mt)
        try:
            got = api.copy_manifest(target.repository(name), digests[tag], moving)
            if got != digests[tag]:
                raise CheckFailed(f"moving tag {target.ref(mt)} got digest {got} but {target.ref(tag)} is "
                                  f"{digests[tag]}: the registry rewrote the manifest; moving tags must name the "
                                  "released manifest")
        except TrainimgError as exc:
            raise CheckFailed(f"moving tag {target.ref(mt)} could not be set ({exc.message}); "
                              f"{_put_back(api, target, [*results, mt], before)}") from None
        results[mt] = PushResult(ref=target.ref(mt), digest=got, bytes_uploaded=0, attempts=1)
    return results


def _put_back(api: RegistryAPI, target: RegistryTarget, moved: Iterable[str], before: Mapping[str, str | None]
              ) -> str:
    """Point each moving tag in `moved` back at the digest it named `before`; one line saying what was done."""
    restored: list[str] = []
    stuck: list[str] = []
    for mt in moved:
        name, moving = split_tag(mt)
        repository = target.repository(name)
        try:
            now = api.remote_digest(repository, moving)
            previous = before[mt]
            if now != previous and previous is not None:
                api.copy_manifest(repository, previous, moving)
            (restored if api.remote_digest(repository, moving) == previous else stuck).append(target.ref(mt))
        except TrainimgError:
            stuck.append(target.ref(mt))
    said = [f"put back {', '.join(restored)}"] if restored else []
    if stuck:
        said.append(f"could not put back {', '.join(stuck)} (no earlier manifest to name, or the registry refused)")
    return "; ".join(said) if said else "no moving tag was moved"


def push_immutable(engine: Engine, builds: Iterable[VariantBuild], target: RegistryTarget,
                   credentials: dict[str, str] | None, gate: Callable[[str, str], Sequence[str] | None] | None = None, *,
                   on_pushed: Callable[[str, PushResult], None] | None = None, kept: Iterable[str] = (),
                   kept_manifests: Mapping[str, Mapping[str, str]] | None = None,
                   on_manifest: Callable[[str, PushResult], None] | None = None, index: bool = True,
                   indexed: Set[str] = frozenset(), **push_kwargs: Any) -> dict[str, PushResult]:
    """Push every build's immutable tag; {local tag: registry.PushResult} in push order. The moving tags are the
    caller's last step (`copy_moving_tags`), after everything else a release does has succeeded.

    `gate(image_id, tag)` runs before each push (records.require_pass with the env bound). `kept` are the
    immutable tags of the release's skipped variants: a layer one of them holds is mounted, not sent.
    `on_pushed(tag, result)` is called after each push (the SBOM beside it, progress lines).

    A variant built for more than amd64 goes as one index under its tag (publish/indexpush.py), keyed by that tag:
    each architecture's image first (`on_manifest(local tag, result)` after each), then the index, naming also the
    manifests of its architectures the release skipped as unchanged (`kept_manifests`: {tag: {arch: digest}}).
    With `index` False (a `--stage` job, which may hold one architecture of several) each architecture's image is
    pushed by digest only, keyed by its local tag: `promote` puts the index under the tag once every part is in.
    `indexed` names the tags of the variants built for several architectures, however few this release built.
    """
    builds = list(builds)
    results: dict[str, PushResult] = {}
    siblings = list(dict.fromkeys(b.variant_tag for b in builds)) + list(kept)
    groups: dict[str, list[VariantBuild]] = {}
    for b in builds:
        image = engine.image(b.tag)
        if image is None or image.id != b.image_id:
            raise CheckFailed(f"{b.tag} now points at {image.id[7:19] if image else 'nothing'}, not the released "
                              f"{b.image_id[7:19]}: did another build retag it? nothing more pushed")
        groups.setdefault(b.variant_tag, []).append(b)
    for tag, group in groups.items():
        partial = (kept_manifests or {}).get(tag, {})
        if tag in indexed or needs_index([*(b.arch for b in group), *partial]):
            results.update(push_architectures(engine, tag, [(b.tag, b.arch) for b in group], target, credentials,
                                              gate=gate, kept=partial, siblings=siblings, on_manifest=on_manifest,
                                              on_pushed=on_pushed, index=index, **push_kwargs))
            continue
        b = group[0]

        def gate_this(iid: str, local: str = b.tag) -> Sequence[str] | None:
            return gate(iid, local) if gate is not None else None

        res = push(engine, b.tag, target, b.tag, credentials=credentials, gate=gate_this if gate else None,
                   siblings=[t for t in siblings if t != b.tag], **push_kwargs)
        results[b.tag] = res
        if on_pushed:
            on_pushed(b.tag, res)
    return results
