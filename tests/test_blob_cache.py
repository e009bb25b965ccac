"""The blob cache's own rules (registry/blobcache.py): a kept blob is given back only while its bytes hash to the
digest it was kept under, per compression; the least recently used go first past the budget; a budget that is not
a number is one line. The pushes that use it run against the real registry in tests/test_layers.py."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from trainimg.errors import UserInputError
from trainimg.options.compression import Compression
from trainimg.registry.blobcache import BUDGET_ENV, CACHE_ENV, BlobCache

GZIP, ZSTD = Compression.parse("gzip"), Compression.parse("zstd")


def packed(folder: Path, body: bytes) -> tuple[Path, str]:
    """A compressed layer's file as a push leaves it, and its digest."""
    path = folder / f"{hashlib.sha256(body).hexdigest()[:8]}.tar.gz"
    path.write_bytes(body)
    return path, f"sha256:{hashlib.sha256(body).hexdigest()}"


def layer(n: int) -> str:
    return f"sha256:{n:064x}"


def test_a_kept_blob_is_found_by_layer_and_compression_and_moved_in(tmp_path: Path) -> None:
    cache = BlobCache(tmp_path / "cache", 1 << 20)
    path, digest = packed(tmp_path, b"layer one")
    cache.keep(layer(1), GZIP, path, digest, 9)
    assert not path.exists()  # moved, not copied
    found = cache.find(layer(1), GZIP)
    assert found is not None and (found.digest, found.size) == (digest, 9)
    assert found.path.read_bytes() == b"layer one"
    assert cache.find(layer(1), ZSTD) is None and cache.find(layer(2), GZIP) is None


def test_a_damaged_or_missing_blob_is_as_good_as_none(tmp_path: Path) -> None:
    cache = BlobCache(tmp_path / "cache", 1 << 20)
    path, digest = packed(tmp_path, b"layer one")
    cache.keep(layer(1), GZIP, path, digest, 9)
    found = cache.find(layer(1), GZIP)
    assert found is not None
    found.path.write_bytes(b"layer One")  # same size, other bytes
    assert cache.find(layer(1), GZIP) is None
    found.path.unlink()
    assert cache.find(layer(1), GZIP) is None
    entry = next((tmp_path / "cache" / "layers").rglob("*.json"))
    entry.write_text('{"digest": "../../../etc/passwd", "size": 9}')  # never a path outside the cache
    assert cache.find(layer(1), GZIP) is None
    entry.write_text("not json")
    assert cache.find(layer(1), GZIP) is None


def test_the_least_recently_used_go_first_past_the_budget(tmp_path: Path) -> None:
    cache = BlobCache(tmp_path / "cache", 25)
    for n in range(3):
        path, digest = packed(tmp_path, bytes([n]) * 10)
        cache.keep(layer(n), GZIP, path, digest, 10)
        found = cache.find(layer(n), GZIP)
        assert found is not None
        os.utime(found.path, (1000 + n, 1000 + n))  # kept in order, a second apart
    assert cache.find(layer(0), GZIP) is None  # 30 bytes > 25: the oldest went when the third came
    first = cache.find(layer(1), GZIP)  # used now: the newest
    assert first is not None
    path, digest = packed(tmp_path, b"\x03" * 10)
    cache.keep(layer(3), GZIP, path, digest, 10)
    assert [cache.find(layer(n), GZIP) is not None for n in range(4)] == [False, True, False, True]
    path, digest = packed(tmp_path, b"\x04" * 26)
    cache.keep(layer(4), GZIP, path, digest, 26)  # over the budget alone: not kept, nothing else goes
    assert cache.find(layer(4), GZIP) is None and cache.find(layer(3), GZIP) is not None


def test_where_and_how_much_come_from_the_environment(tmp_path: Path) -> None:
    assert BlobCache.from_env({}, tmp_path) == BlobCache(tmp_path / "pushed" / "blobs", 8 << 30)
    given = {CACHE_ENV: str(tmp_path / "ci-cache"), BUDGET_ENV: "0.5"}
    assert BlobCache.from_env(given, tmp_path) == BlobCache(tmp_path / "ci-cache", 1 << 29)
    assert BlobCache.from_env({BUDGET_ENV: "0"}, tmp_path).budget == 0


@pytest.mark.parametrize("value", ["eight", "-1", "nan", "inf", "1e400x"])
def test_a_budget_that_is_not_a_size_is_one_line(tmp_path: Path, value: str) -> None:
    with pytest.raises(UserInputError) as err:
        BlobCache.from_env({BUDGET_ENV: value}, tmp_path)
    assert str(err.value).count("\n") == 0 and BUDGET_ENV in str(err.value) and value in str(err.value)


def test_a_config_is_given_back_only_as_the_image_it_names(tmp_path: Path) -> None:
    """Configs beside the blobs (a push from a state that never saw the image then needs no `docker save`): found by
    image ID only while the bytes hash to it, never kept under another ID, and through the layer memory of any state
    that has this cache."""
    from trainimg.registry.layermemory import LayerMemory

    cache = BlobCache(tmp_path / "cache", 1 << 20)
    config = b'{"architecture":"amd64","rootfs":{"type":"layers","diff_ids":[]}}'
    image_id = f"sha256:{hashlib.sha256(config).hexdigest()}"
    cache.keep_config(layer(9), config)  # not this config's ID: not kept
    assert cache.config(layer(9)) is None
    LayerMemory(tmp_path / "state-a" / "pushed", cache).keep_config(image_id, config)
    assert cache.config(image_id) == config
    fresh = LayerMemory(tmp_path / "state-b" / "pushed", cache)  # a runner whose state starts empty
    assert fresh.config(image_id) == config and LayerMemory.under(tmp_path / "state-c").config(image_id) is None
    next((tmp_path / "cache" / "configs").iterdir()).write_bytes(config.replace(b"amd64", b"arm64"))
    assert cache.config(image_id) is None and fresh.config(image_id) is None
    assert BlobCache(tmp_path / "none", 0).keep_config(image_id, config) is None
    assert not (tmp_path / "none").exists()  # a budget of 0 keeps nothing
