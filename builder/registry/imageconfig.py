"""The image config trainimg's client pushes: one input, one config, one manifest digest.

Every layer of a trainimg image is reproducible (plan/reproducible.py), but Docker 20.10's BuildKit (0.8) stamps
the image config with the build's clock: `created`, each `history` entry's `created`, and the `createdAt` of each
record of the inline cache metadata (`moby.buildkit.cache.v0`, base64 JSON that `--cache-from` reads back). BuildKit
0.11 replaces the first two with `SOURCE_DATE_EPOCH` (moby/buildkit PR #2918); 0.8 has nothing. So the config is
pushed with every one of those times set to `FIXED_TIME`, the time every file of every layer already carries
(`LAYER_EPOCH`): two builds of the same inputs then push the same config and, their layers being the same blobs,
the same manifest digest. Nothing else of the config changes; the inline cache keeps every record and link
(BuildKit reads `createdAt` only to prefer the newest of equal records). The local image ID (the digest of the
engine's own config) is then not the registry's config digest: what was gated is the local image, what is pushed is
its config with these times fixed (`image_config` says how from one to the other, for a check that wants it).

The inline cache itself is not a function of the inputs: BuildKit exports every cache key its store links to the
same result, those of earlier builds and of other variants sharing a stage included (two `--no-cache` builds of
one variant here: 26 records, then 32, then 33). So the image config is pushed without it (`image_config`), and
the cache goes beside the image as a manifest of its own (the same layers, the config with the cache:
`cache_config`) under the tag `<tag>.buildcache` (`cache_tag`), where BuildKit's `--cache-from` reads inline
cache from any image manifest; `with_build_caches` adds that reference beside each `--cache-from` image (BuildKit
passes over one that is not there).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from ..plan.reproducible import LAYER_EPOCH

FIXED_TIME = datetime.fromtimestamp(LAYER_EPOCH, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
INLINE_CACHE_KEY = "moby.buildkit.cache.v0"  # BuildKit's inline cache metadata in the image config
CACHE_TAG_SUFFIX = ".buildcache"  # `<tag>.buildcache`: the build cache pushed beside the image `<tag>`


def image_config(config: bytes, diff_ids: Sequence[str] | None = None) -> bytes:
    """The config pushed for the image: fixed times, no inline cache (one input, one digest); `diff_ids` in place of
    its own when the pushed layers unpack to other tars (eStargz: registry/estargz.py)."""
    data = _with_diff_ids(_config(config), diff_ids)
    data.pop(INLINE_CACHE_KEY, None)
    return _compact(_fix_times(data))


def cache_config(config: bytes, diff_ids: Sequence[str] | None = None) -> bytes | None:
    """The config of the build cache's manifest: fixed times, with the inline cache (and `diff_ids`, as
    `image_config`); None when it has none."""
    data = _with_diff_ids(_config(config), diff_ids)
    return _compact(_fix_times(data)) if INLINE_CACHE_KEY in data else None


def cache_tag(tag: str) -> str:
    """The tag the build cache of the image `tag` is pushed under."""
    return f"{tag}{CACHE_TAG_SUFFIX}"


def with_build_caches(refs: tuple[str, ...]) -> tuple[str, ...]:
    """Each `--cache-from` image reference, then its build cache's (`cache_tag`) when it names a tag: an image the
    engine pushed carries its cache inline, one the client pushed has it beside."""
    out: list[str] = []
    for ref in refs:
        out.append(ref)
        last = ref.rsplit("/", 1)[-1]
        if "@" not in ref and ":" in last and not last.endswith(CACHE_TAG_SUFFIX):
            out.append(cache_tag(ref))
    return tuple(dict.fromkeys(out))


def _config(config: bytes) -> dict[str, Any]:
    """An image config's bytes parsed, once per call of this module's functions."""
    data = json.loads(config)
    if not isinstance(data, dict):
        raise ValueError("an image config is a JSON object")
    return data


def _with_diff_ids(data: dict[str, Any], diff_ids: Sequence[str] | None) -> dict[str, Any]:
    """`data` naming `diff_ids` as its layers, in place (one for each of its own, or a ValueError)."""
    if diff_ids is not None:
        rootfs = data.get("rootfs")
        if not isinstance(rootfs, dict) or len(rootfs.get("diff_ids") or []) != len(diff_ids):
            raise ValueError("the pushed layers are not the image config's")
        rootfs["diff_ids"] = list(diff_ids)
    return data


def _fix_times(data: dict[str, Any]) -> dict[str, Any]:
    """`data` (a parsed config) with its build-clock times set to `FIXED_TIME`, in place: serialised compactly in
    its own key order, the same bytes for every build of the same inputs."""
    if "created" in data:
        data["created"] = FIXED_TIME
    for entry in data.get("history") or []:
        if isinstance(entry, dict) and "created" in entry:
            entry["created"] = FIXED_TIME
    if isinstance(data.get(INLINE_CACHE_KEY), str):
        data[INLINE_CACHE_KEY] = _fixed_cache(data[INLINE_CACHE_KEY])
    return data


def _fixed_cache(encoded: str) -> str:
    """The inline cache metadata (base64 of JSON: records, each with its layers' `createdAt`) with fixed times."""
    records = json.loads(base64.b64decode(encoded))
    for record in records if isinstance(records, list) else records.get("records", []):
        for layer in record.get("layers") or [] if isinstance(record, dict) else []:
            if isinstance(layer, dict) and "createdAt" in layer:
                layer["createdAt"] = FIXED_TIME
    if isinstance(records, dict):  # later BuildKits: {"layers": [... "annotations": {"createdAt"}], "records": [...]}
        for layer in records.get("layers") or []:
            if isinstance(layer.get("annotations"), dict) and "createdAt" in layer["annotations"]:
                layer["annotations"]["createdAt"] = FIXED_TIME
    return base64.b64encode(_compact(records)).decode("ascii")


def _compact(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()
