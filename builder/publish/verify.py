"""`trainimg verify VARIANT --registry R`: is the pushed image what this checkout's recipe and lock build?

Digests first: trainimg's client pushes the image config with fixed times (registry/imageconfig.py), so a rebuild of
the same inputs has the config digest the registry's manifest names; when it does, the image is the same (every
layer's diff ID is in that config) and no layer is compared. Otherwise (an image pushed by the engine, with the
build's clock in its config, or a different image) the variant is compared layer by layer. The variant is rebuilt
from this checkout with no layer cache (layers are reproducible: plan/reproducible.py), and its layers
(`RootFS.Layers`, uncompressed digests) are compared one by one with the `rootfs.diff_ids` of the image config the
registry holds under the variant's tag. A layer that differs is explained file by file (layerfiles.py): the
registry's layer blob is streamed and read beside the rebuild's from `docker save`. Compression is left out of the
comparison: the same layer gzipped by another engine or tool has another blob digest, the same diff ID.

An eStargz push (`--compression estargz`) names other diff IDs: each is the digest of the tar its blob unpacks to,
the layer's entries reordered (the gate's prefetched files first) with a landmark and the TOC among them. Such a
layer is the rebuild's when the rebuild's layer, hashed in the TOC's order with those entries, gives that diff ID
and the TOC records the rebuild's files (registry/estargzread.py): only the TOC and the footer are fetched, by range
requests, not the blob. Then the config is compared naming those diff IDs, as the push wrote it. A layer that
differs is explained from its TOC, file by file, the TOC and the landmark left out; from the whole blob when its TOC
cannot be read (and that is said).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, cast

from ..engine.base import Engine
from ..errors import RegistryError
from ..recipe.arches import DEFAULT_ARCH
from ..registry.blobpush import saved_config
from ..registry.imageconfig import image_config
from ..registry.imageindex import platform_manifest
from ..registry.estargz import OWN_ENTRIES, TOC_DIGEST
from ..registry.estargzread import read_toc, reordered
from ..registry.layerfiles import Entry, differences, entries, saved_layer_entries, saved_layers
from ..registry.layerformats import IMAGE_MANIFESTS, plain_layer
from ..registry.references import split_tag
from ..registry.registryapi import RegistryAPI, sha256_digest


@dataclass
class LayerReport:
    index: int
    rebuilt: str | None  # the rebuild's diff ID (None: the registry's image has more layers)
    registry: str | None
    files: list[str] = field(default_factory=list)  # one line per differing file


@dataclass
class Verdict:
    ref: str
    layers: int
    differing: list[LayerReport]
    config: str = ""  # the config digest the rebuild and the registry share ("" when they differ)
    estargz: int = 0  # layers found to be the rebuild's as eStargz, from their TOCs

    @property
    def identical(self) -> bool:
        return not self.differing


@dataclass(frozen=True)
class RemoteImage:
    """What the registry's image manifest and config say of an image."""

    diff_ids: list[str]
    blobs: list[str]  # each layer's blob digest
    media_types: list[str]  # each layer's media type
    config: str  # the config's digest
    sizes: list[int]  # each layer blob's size
    toc_digests: list[str]  # each layer's eStargz TOC digest (its descriptor's annotation; "" when it has none)


def registry_image(api: RegistryAPI, repository: str, tag: str, arch: str = DEFAULT_ARCH) -> RemoteImage:
    """The image manifest `repository:tag` holds for `arch` in the registry (the tag's own manifest, or its index's
    entry for `arch`), read with its config."""
    got = api.manifest_json(repository, tag)
    if got is None:
        raise RegistryError(f"registry {api.target.host} has no {repository}:{tag}: push or release it first")
    found = platform_manifest(api, repository, got, arch)
    if found is None:
        raise RegistryError(f"registry {api.target.host} holds no {arch} image under {repository}:{tag}")
    body, media_type, _ = found
    manifest = json.loads(body)
    if media_type not in IMAGE_MANIFESTS or "config" not in manifest:
        raise RegistryError(f"registry {api.target.host} serves {repository}:{tag} as {media_type or 'no type'}, "
                            "not one image manifest")
    config = json.loads(api.blob(repository, manifest["config"]["digest"]))
    layers = manifest["layers"]
    return RemoteImage(list(config["rootfs"]["diff_ids"]), [layer["digest"] for layer in layers],
                       [str(layer.get("mediaType", "")) for layer in layers], str(manifest["config"]["digest"]),
                       [int(layer.get("size") or 0) for layer in layers],
                       [str((layer.get("annotations") or {}).get(TOC_DIGEST, "")) for layer in layers])


def compare(engine: Engine, api: RegistryAPI, local_ref: str, variant_tag: str, arch: str = DEFAULT_ARCH
            ) -> Verdict:
    """Compare the local image `local_ref` with the registry's `arch` image of `variant_tag`: the config digest
    first, then, when it differs, layer by layer (an eStargz layer by its TOC)."""
    name, tag = split_tag(variant_tag)
    repository = api.target.repository(name)
    remote = registry_image(api, repository, tag, arch)
    info = engine.image(local_ref)
    if info is None:
        raise RegistryError(f"no local image {local_ref} to compare")
    shown = f"{api.target.host}/{repository}:{tag}" + ("" if arch == DEFAULT_ARCH else f" ({arch})")
    config = saved_config(engine, local_ref)
    if sha256_digest(image_config(config)) == remote.config:
        return Verdict(shown, len(remote.diff_ids), [], remote.config)
    local_ids, remote_ids = list(info.layers), remote.diff_ids
    count = max(len(local_ids), len(remote_ids))
    differing = [LayerReport(i, _at(local_ids, i), _at(remote_ids, i)) for i in range(count)
                 if _at(local_ids, i) != _at(remote_ids, i)]
    if not differing:
        return Verdict(shown, count, [])
    with tempfile.TemporaryDirectory(prefix="trainimg-verify-") as tmp:
        saved = Path(tmp) / "image.tar"
        engine.save(local_ref, saved)
        left = [report for report in differing if not _explained(api, repository, remote, saved, report)]
    estargz = len(differing) - len(left)
    if left or not estargz:
        return Verdict(shown, count, left, estargz=estargz)
    # Every layer the rebuild's: the config the push wrote names the eStargz tars' diff IDs (blobpush.py).
    same = sha256_digest(image_config(config, remote_ids)) == remote.config
    return Verdict(shown, count, [], remote.config if same else "", estargz)


def _at(items: list[str], index: int) -> str | None:
    return items[index] if index < len(items) else None


def _explained(api: RegistryAPI, repository: str, remote: RemoteImage, saved: Path, report: LayerReport) -> bool:
    """Fill `report.files` with the files that differ between the two layers; True when the registry's layer is an
    eStargz of the rebuild's (the report is then dropped)."""
    i = report.index
    toc_digest = remote.toc_digests[i] if report.registry else ""
    toc, unread = None, ""
    if toc_digest:
        try:
            toc = read_toc(lambda start, end: api.blob_range(repository, remote.blobs[i], start, end),
                           remote.sizes[i], toc_digest, f"eStargz layer {remote.blobs[i]}")
        except RegistryError as exc:
            unread = f"its TOC was not read, so the whole layer was: {exc.message}"
    if toc is None:
        ours = saved_layer_entries(saved, i) if report.rebuilt else {}
        theirs = _registry_entries(api, repository, remote, i) if report.registry else {}
        report.files = ([unread] if unread else []) + differences(ours, theirs)
        return False
    if not report.rebuilt:
        report.files = differences({}, toc.files())
        return False
    with saved_layers(saved) as (names, outer):
        fh = outer.extractfile(names[i])
        assert fh is not None
        rebuilt = reordered(fh, toc)
    files = differences(rebuilt.files, toc.files()) + rebuilt.chunks
    if rebuilt.diff_id == report.registry and not files:
        return True
    report.files = files or ["its files are the rebuild's (size, mode, owner, time, xattrs, content), its tar is "
                             "not: header bytes those leave out (owner names, pax records) or another writer's "
                             "TOC or landmark entries"]
    return False


def _registry_entries(api: RegistryAPI, repository: str, remote: RemoteImage, index: int) -> dict[str, Entry]:
    """The files of the registry's layer, its blob streamed (an eStargz's TOC and landmark are not its files)."""
    skip = frozenset(OWN_ENTRIES) if remote.toc_digests[index] else frozenset()
    with api.open_blob(repository, remote.blobs[index]) as resp:  # plain_layer unwraps gzip (every member) and zstd
        return entries(plain_layer(cast(IO[bytes], resp.raw), remote.media_types[index]), skip)


def report_lines(verdict: Verdict) -> list[str]:
    """What `verify` prints: one line per differing layer, then its differing files indented."""
    held = (f"; {verdict.estargz} eStargz layers hold the rebuild's entries byte for byte, their order, TOC and "
            "landmark aside (read from their TOCs)") if verdict.estargz else ""
    if verdict.config and verdict.estargz:
        return [f"{verdict.ref}: identical, {verdict.layers} of {verdict.layers} layers: the rebuild's config, naming "
                f"the eStargz tars' diff IDs, is the registry's, {verdict.config}{held}"]
    if verdict.config:
        return [f"{verdict.ref}: identical, {verdict.layers} of {verdict.layers} layers: the rebuild's config is the "
                f"registry's, {verdict.config} (one digest for one input)"]
    if verdict.identical:
        return [f"{verdict.ref}: identical, {verdict.layers} of {verdict.layers} layers (the configs differ: the "
                f"registry's was not pushed with fixed times, or labels differ){held}"]
    lines = [f"{verdict.ref}: {len(verdict.differing)} of {verdict.layers} layers differ from the rebuild"]
    for r in verdict.differing:
        lines.append(f"layer {r.index + 1}: rebuild {r.rebuilt or 'none'}, registry {r.registry or 'none'}")
        lines += [f"  {line}" for line in r.files]
    return lines
