"""The compressed layers this machine made, kept within a byte budget: a layer is compressed once per compression,
whichever registry, repository or runner state it goes to next.

Compressing is most of a first push (the CPU image's 954 MB torch layer: 21 s of gzip on this machine's two cores;
a GPU image's 9 GB: minutes), and the same layers go to several registries: a release and its mirror, a staging
registry then production, each job of a pipeline whose runner keeps a cache folder but not its state. The layer
memory (layermemory.py) spares what a registry already holds; this spares the compression for a registry that
holds nothing yet. Like a package manager's cache it is content-addressed and may go at any time: a blob is found
by its layer's diff ID and compression, used only when its bytes hash to the digest it was kept under, and the
registry checks that digest again when it takes the upload. The least recently used blobs go first when the
folder passes its budget.

Where: `TRAINIMG_BLOB_CACHE` (a folder: a CI cache path survives where the state folder does not), else
`<state>/pushed/blobs`; the budget: `TRAINIMG_BLOB_CACHE_MAX_GB` (default 8, 0 keeps nothing).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserInputError
from ..options.compression import Compression
from ..recipe.grammar import DIGEST_RE
from .layerformats import LayerBlob
from .registryapi import sha256_digest

CACHE_ENV = "TRAINIMG_BLOB_CACHE"
BUDGET_ENV = "TRAINIMG_BLOB_CACHE_MAX_GB"
DEFAULT_BUDGET_GB = 8.0


@dataclass(frozen=True)
class CachedBlob:
    """A kept blob: its file, digest and size, and what else its manifest descriptor and config need (an eStargz's
    diff ID and annotations: layerformats.LayerBlob)."""

    path: Path
    digest: str
    size: int
    config_diff_id: str = ""
    annotations: tuple[tuple[str, str], ...] = ()

    def layer(self) -> LayerBlob:
        return LayerBlob(self.digest, self.size, self.config_diff_id, self.annotations)


@dataclass(frozen=True)
class BlobCache:
    """`root/blobs/<digest hex>` (the bytes), `root/layers/<algorithm>-<level>/<diff hex>.json` (which blob) and
    `root/configs/<image id hex>.json` (an image's config as the engine saved it: with every layer here, a push from
    a state that never saw the image needs no `docker save`, 13 s for the CPU image)."""

    root: Path
    budget: int  # bytes

    @classmethod
    def from_env(cls, env: Mapping[str, str], state: Path) -> BlobCache:
        """The cache the environment names (module docstring); a budget that is not a number is refused."""
        raw = env.get(BUDGET_ENV, "").strip()
        try:
            gigabytes = float(raw) if raw else DEFAULT_BUDGET_GB
        except ValueError:
            gigabytes = -1.0
        if not (gigabytes >= 0 and math.isfinite(gigabytes)):
            raise UserInputError(f"{BUDGET_ENV}={raw!r}: give the blob cache's budget in GB, a number >= 0")
        root = Path(env[CACHE_ENV]) if env.get(CACHE_ENV) else state / "pushed" / "blobs"
        return cls(root, int(gigabytes * (1 << 30)))

    def find(self, diff_id: str, compression: Compression) -> CachedBlob | None:
        """The kept blob of layer `diff_id` in `compression`, when its bytes still hash to its digest."""
        try:
            blob = LayerBlob.from_json(json.loads(self._entry(diff_id, compression).read_bytes()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        digest, size = blob.digest, blob.size
        if not DIGEST_RE.match(digest):
            return None
        path = self._blob(digest)
        try:
            if path.stat().st_size != size or _file_digest(path) != digest:
                return None
            os.utime(path)  # used now: the last to go
        except OSError:
            return None
        return CachedBlob(path, digest, size, blob.config_diff_id, blob.annotations)

    def keep(self, diff_id: str, compression: Compression, packed: Path, digest: str, size: int, *,
             config_diff_id: str = "", annotations: tuple[tuple[str, str], ...] = ()) -> None:
        """Take `packed` (layer `diff_id` compressed, `digest`, `size` bytes; an eStargz's diff ID and annotations)
        into the cache: moved, not copied; then the least recently used blobs go until the cache is within its
        budget. A blob over the budget is not kept."""
        if size > self.budget:
            return
        blobs = self.root / "blobs"
        blobs.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=blobs, prefix=".in-", delete=False) as fh:
            part = Path(fh.name)
        shutil.move(packed, part)  # a rename on one filesystem
        os.replace(part, self._blob(digest))
        entry = self._entry(diff_id, compression)
        entry.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=entry.parent, delete=False) as fh:
            fh.write(json.dumps(LayerBlob(digest, size, config_diff_id, annotations).to_json()).encode())
        os.replace(fh.name, entry)
        self._shrink()

    def config(self, image_id: str) -> bytes | None:
        """The exact config bytes of image `image_id`, when kept and they hash to it."""
        path = self._config(image_id)
        try:
            data = path.read_bytes()
            os.utime(path)
        except OSError:
            return None
        return data if sha256_digest(data) == image_id else None

    def keep_config(self, image_id: str, config: bytes) -> None:
        """Keep `config` under `image_id` when it is that image's (it hashes to the ID) and the budget allows any."""
        if self.budget <= 0 or sha256_digest(config) != image_id:
            return
        path = self._config(image_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".in-", delete=False) as fh:
            fh.write(config)
        os.replace(fh.name, path)

    def _shrink(self) -> None:
        kept = []
        for path in [*(self.root / "blobs").iterdir(), *self._configs()]:
            try:
                st = path.stat()
            except OSError:
                continue  # another push removed it meanwhile
            if not path.name.startswith("."):
                kept.append((st.st_mtime, st.st_size, path))
        total = sum(size for _, size, _ in kept)
        for _, size, path in sorted(kept):
            if total <= self.budget:
                break
            path.unlink(missing_ok=True)
            total -= size

    def _configs(self) -> list[Path]:
        folder = self.root / "configs"
        return list(folder.iterdir()) if folder.is_dir() else []

    def _config(self, image_id: str) -> Path:
        return self.root / "configs" / f"{image_id.removeprefix('sha256:')}.json"

    def _blob(self, digest: str) -> Path:
        return self.root / "blobs" / digest.removeprefix("sha256:")

    def _entry(self, diff_id: str, compression: Compression) -> Path:
        return self.root / "layers" / compression.key / f"{diff_id.removeprefix('sha256:')}.json"


def _file_digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            sha.update(chunk)
    return f"sha256:{sha.hexdigest()}"
