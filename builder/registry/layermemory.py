"""What this machine's pushes left in registries: each layer's blob per compression, where it went, each config.

Docker keeps the same for its own pushes (moby `distribution/metadata`, v2metadata-by-diffid): a layer it pushed
once is looked up in the destination, or mounted from a repository of the same registry that received it, instead
of being compressed and sent again. trainimg's client asks the registry's manifests too (blobpush.known_layers:
the tag, the release's siblings), but those say nothing about a new repository, a team's copy, or the next job of
a runner that keeps its state. Here a push writes, per layer (diff ID) and compression, the blob it became and the
repositories of each registry it went to, and each image's config by image ID. The next push of those layers asks
the registry first (HEAD in the destination, else a cross-repository mount) and compresses only what no repository
holds any more; a push whose every layer is held reads the config from here and never runs `docker save` (13 s for
the 1.1 GB CPU image here; a config read back hashes to the image ID, or it is not used).

It is a cache: a registry's answer decides, and an entry that cannot be read is as good as none. It lives in the
state folder (state.py), so an ephemeral runner starts without one, as it starts without Docker's.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..options.compression import Compression
from ..state import state_dir
from .blobcache import BlobCache
from .layerformats import LayerBlob
from .registryapi import sha256_digest

_REPOSITORIES_KEPT = 4  # per registry and layer: the latest repositories it went to (the mount's candidates)


@dataclass(frozen=True)
class Remembered:
    """A layer's blob in one compression, and the repositories of one registry it was pushed or found in; for an
    eStargz also the diff ID and annotations its config and descriptor need (layerformats.LayerBlob)."""

    digest: str
    size: int
    repositories: tuple[str, ...]
    config_diff_id: str = ""
    annotations: tuple[tuple[str, str], ...] = ()

    def layer(self) -> LayerBlob:
        return LayerBlob(self.digest, self.size, self.config_diff_id, self.annotations)


@dataclass(frozen=True)
class LayerMemory:
    """The files under `root` (`<state>/pushed`): `layers/<compression>/<diff hex>.json`, `configs/<id hex>.json`."""

    root: Path
    blobs: BlobCache | None = None  # the compressed layers themselves (blobcache.py)

    @classmethod
    def under(cls, state: Path) -> LayerMemory:
        return cls(state / "pushed")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> LayerMemory:
        """The memory in the environment's state folder (state.py), with the blob cache the environment names."""
        state = state_dir(env)
        return cls(state / "pushed", BlobCache.from_env(env, state))

    def recall(self, diff_id: str, compression: Compression, host: str) -> Remembered | None:
        """The blob layer `diff_id` became in `compression`, with the repositories of `host` that received it."""
        entry = self._read_json(self._layer_path(diff_id, compression))
        if not entry:
            return None
        try:
            blob = LayerBlob.from_json(entry)
            return Remembered(blob.digest, blob.size, tuple(entry["held"].get(host, ())), blob.config_diff_id,
                              blob.annotations)
        except (KeyError, TypeError, ValueError, AttributeError):
            return None

    def remember(self, diff_id: str, compression: Compression, digest: str, size: int, host: str,
                 repository: str, *, config_diff_id: str = "", annotations: tuple[tuple[str, str], ...] = ()
                 ) -> None:
        """Layer `diff_id` is blob `digest` (`size` bytes; an eStargz's diff ID and annotations) in `repository` of
        `host` now."""
        path = self._layer_path(diff_id, compression)
        entry = self._read_json(path)
        held = entry.get("held") if isinstance(entry, dict) and entry.get("digest") == digest else None
        held = held if isinstance(held, dict) else {}
        repositories = [repository, *(r for r in held.get(host, ()) if r != repository)][:_REPOSITORIES_KEPT]
        kept = LayerBlob(digest, size, config_diff_id, annotations).to_json()
        self._write(path, json.dumps({**kept, "held": {**held, host: repositories}}, sort_keys=True).encode())

    def config(self, image_id: str) -> bytes | None:
        """The exact config bytes of image `image_id`, when kept (here, else in the blob cache) and they hash to it."""
        try:
            data = (self.root / "configs" / f"{image_id.removeprefix('sha256:')}.json").read_bytes()
        except OSError:
            data = b""
        if sha256_digest(data) == image_id:
            return data
        return self.blobs.config(image_id) if self.blobs is not None else None

    def keep_config(self, image_id: str, config: bytes) -> None:
        if sha256_digest(config) == image_id:
            self._write(self.root / "configs" / f"{image_id.removeprefix('sha256:')}.json", config)
            if self.blobs is not None:
                self.blobs.keep_config(image_id, config)

    def _layer_path(self, diff_id: str, compression: Compression) -> Path:
        return self.root / "layers" / compression.key / f"{diff_id.removeprefix('sha256:')}.json"

    @staticmethod
    def _read_json(path: Path) -> dict[str, Any]:
        try:
            data = json.loads(path.read_bytes())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    @staticmethod
    def _write(path: Path, data: bytes) -> None:
        """Whole or not at all: a push beside this one reads the old file or the new, never half of one."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as fh:
            fh.write(data)
        os.replace(fh.name, path)
