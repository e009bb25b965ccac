"""One tag, every architecture: a variant built for more than amd64 is pushed as each architecture's image manifest
(by digest, through trainimg's registry client), then one OCI image index naming them under the variant's tag.

Why the client: the engine pushes a tag, and one tag holds one image there; an index is a manifest the registry
API takes directly (registry/imageindex.py). Each architecture's image is gated before it leaves (the release's
rule: a passed record for that exact image ID), its layers go as any client push's do (only those the registry
lacks; registry/blobpush.py), and the index goes last, after every manifest it names is in: a node pulling the tag
never meets an index naming a manifest that is not there. An architecture the release skipped as unchanged keeps
its manifest (`kept`): the index names it again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from ..engine.base import Engine
from ..errors import RegistryError
from ..options import CLIENT_UPLOAD
from ..recipe.arches import ARCHES
from ..registry.imageconfig import cache_tag
from ..registry.imageindex import INDEX_TYPE, Platformed, index_body
from ..registry.references import RegistryTarget, split_tag
from ..registry.registryapi import RegistryAPI
from .push import PushResult, push, reachable_target


def needs_index(arches: Iterable[str]) -> bool:
    """Whether a variant released for `arches` is pushed as an index (anything but amd64 alone: that stays one
    image manifest under the tag, as every release before architectures). No architecture at all (an image
    reference, not a variant: `push IMAGE`) is one image as it is, never an index."""
    named = tuple(arches)
    return bool(named) and named != ("amd64",)


def push_index(engine: Engine, tag: str, images: list[tuple[str, str]], target: RegistryTarget,
               credentials: dict[str, str] | None, *, gate: Callable[[str, str], Sequence[str] | None] | None = None,
               kept: Mapping[str, str] | None = None, siblings: Iterable[str] = (),
               on_manifest: Callable[[str, PushResult], None] | None = None, **push_kwargs: object) -> PushResult:
    """Push each of `images` ((local tag, architecture)) by digest (gated first), then the index of them and of
    `kept` ({arch: manifest digest}) under `tag`; the result's `manifests` names each architecture's manifest.
    `on_manifest(local tag, result)` hears each architecture's push (the SBOM and the record go beside it)."""
    api = RegistryAPI(reachable_target(engine, target), credentials)
    repository = target.repository(split_tag(tag)[0])
    manifests = dict(kept or {})
    caches: dict[str, str] = {}
    sent = 0
    for local, arch in images:
        one = push_manifest(engine, local, arch, tag, target, credentials, gate, siblings, **push_kwargs)
        manifests[arch] = one.digest
        caches.update({arch: one.cache} if one.cache else {})
        sent += one.bytes_uploaded
        if on_manifest is not None:
            on_manifest(local, one)
    result = put_index(api, repository, tag, manifests, sent)
    if caches:  # the build caches of the architectures pushed now, as one index beside (imageconfig.cache_tag)
        put_index(api, repository, cache_tag(tag), caches)
    return result


def push_architectures(engine: Engine, tag: str, images: list[tuple[str, str]], target: RegistryTarget,
                       credentials: dict[str, str] | None, *, gate: Callable[[str, str], Sequence[str] | None] | None = None,
                       kept: Mapping[str, str] | None = None, siblings: Iterable[str] = (),
                       on_manifest: Callable[[str, PushResult], None] | None = None,
                       on_pushed: Callable[[str, PushResult], None] | None = None, index: bool = True,
                       **push_kwargs: object) -> dict[str, PushResult]:
    """A release's push of one variant of several architectures: the index under `tag` ({tag: its result}), or,
    with `index` False (a `--stage` job), each architecture's image by digest ({local tag: its result}) for
    `promote` to put together."""
    if index:
        res = push_index(engine, tag, images, target, credentials, gate=gate, kept=kept, siblings=siblings,
                         on_manifest=on_manifest, **push_kwargs)
        if on_pushed:
            on_pushed(tag, res)
        return {tag: res}
    out = {}
    for local, arch in images:
        out[local] = push_manifest(engine, local, arch, tag, target, credentials, gate, siblings, **push_kwargs)
        if on_manifest:
            on_manifest(local, out[local])
    return out


def push_manifest(engine: Engine, local: str, arch: str, tag: str, target: RegistryTarget,
                  credentials: dict[str, str] | None, gate: Callable[[str, str], Sequence[str] | None] | None,
                  siblings: Iterable[str], **push_kwargs: object) -> PushResult:
    """One architecture's image `local`, gated, pushed by digest into the repository of `tag` (no tag); the
    result's `manifests` names it under `arch`, and `ref` is ``host/repository`` (it has no tag)."""
    def gated(image_id: str) -> Sequence[str] | None:
        return gate(image_id, local) if gate is not None else None

    res = push(engine, local, target, tag, credentials=credentials, gate=gated, untagged=True,
               siblings=[s for s in siblings if s != tag], **push_kwargs)  # type: ignore[arg-type]
    repository = target.repository(split_tag(tag)[0])
    return PushResult(ref=f"{target.host}/{repository}", digest=res.digest,
                      bytes_uploaded=res.bytes_uploaded, attempts=res.attempts, upload=CLIENT_UPLOAD,
                      manifests={arch: res.digest}, cache=res.cache)


def put_index(api: RegistryAPI, repository: str, tag: str, manifests: Mapping[str, str], sent: int = 0
              ) -> PushResult:
    """The index of `manifests` ({arch: digest}, each in `repository` already) under `tag`, checked back."""
    target = api.target
    tag_part = split_tag(tag)[1]
    described = []
    unnamed = sorted(repr(a) for a in set(manifests) - set(ARCHES))
    if unnamed or not manifests:  # an index that names nothing is a tag no node can pull
        raise RegistryError(f"no index pushed for {tag}: it would name {', '.join(unnamed) or 'no image'}, not an "
                            f"architecture of {', '.join(ARCHES)}")
    for arch in (a for a in ARCHES if a in manifests):
        got = api.manifest_json(repository, manifests[arch])
        if got is None:
            raise RegistryError(f"registry {target.host} lacks the {arch} manifest {manifests[arch]} of {tag}")
        described.append(Platformed(arch, manifests[arch], len(got[0]), got[1]))
    digest = api.put_manifest(repository, tag_part, index_body(described), INDEX_TYPE)
    missing = api.missing_blobs(repository, tag_part)
    if missing:
        raise RegistryError(f"registry {target.host} lacks {len(missing)} manifest(s) the index of {tag} names, "
                            f"e.g. {missing[0]}")
    return PushResult(ref=target.ref(tag), digest=digest, bytes_uploaded=sent, attempts=1, upload=CLIENT_UPLOAD,
                      manifests=dict(manifests), index=True)
