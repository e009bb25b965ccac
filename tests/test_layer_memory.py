"""The layer memory's own rules (registry/layermemory.py): what it answers is only ever a candidate the registry
then confirms, so what matters here is that it never answers wrong: per compression and per registry, the latest
repositories first, a config only when its bytes hash to the image ID, a damaged entry as none. The pushes that use
it run against the real registry in tests/test_layers.py."""

from __future__ import annotations

import hashlib
from pathlib import Path

from trainimg.options.compression import Compression
from trainimg.registry.layermemory import LayerMemory, Remembered

GZIP, ZSTD = Compression.parse("gzip"), Compression.parse("zstd")
LAYER = "sha256:" + "1" * 64


def test_a_layer_is_remembered_per_compression_and_registry(tmp_path: Path) -> None:
    memory = LayerMemory.under(tmp_path)
    memory.remember(LAYER, GZIP, "sha256:" + "a" * 64, 10, "reg:5000", "team/one")
    assert memory.recall(LAYER, GZIP, "reg:5000") == Remembered("sha256:" + "a" * 64, 10, ("team/one",))
    assert memory.recall(LAYER, GZIP, "other:5000") == Remembered("sha256:" + "a" * 64, 10, ())
    assert memory.recall(LAYER, ZSTD, "reg:5000") is None
    assert memory.recall("sha256:" + "2" * 64, GZIP, "reg:5000") is None


def test_the_latest_repositories_come_first_and_few_are_kept(tmp_path: Path) -> None:
    memory = LayerMemory.under(tmp_path)
    for name in ("a", "b", "c", "d", "e", "b"):
        memory.remember(LAYER, GZIP, "sha256:" + "a" * 64, 10, "reg:5000", name)
    memory.remember(LAYER, GZIP, "sha256:" + "a" * 64, 10, "far:443", "x")
    got = memory.recall(LAYER, GZIP, "reg:5000")
    assert got is not None and got.repositories == ("b", "e", "d", "c")


def test_a_new_blob_for_a_layer_forgets_where_the_old_one_was(tmp_path: Path) -> None:
    """A layer compressed anew (another zlib, say) is another blob: the repositories of the old one do not hold it."""
    memory = LayerMemory.under(tmp_path)
    memory.remember(LAYER, GZIP, "sha256:" + "a" * 64, 10, "reg:5000", "old")
    memory.remember(LAYER, GZIP, "sha256:" + "b" * 64, 11, "reg:5000", "new")
    assert memory.recall(LAYER, GZIP, "reg:5000") == Remembered("sha256:" + "b" * 64, 11, ("new",))


def test_a_damaged_entry_is_none_and_is_written_over(tmp_path: Path) -> None:
    memory = LayerMemory.under(tmp_path)
    memory.remember(LAYER, GZIP, "sha256:" + "a" * 64, 10, "reg:5000", "one")
    (entry,) = (tmp_path / "pushed" / "layers").rglob("*.json")
    for damage in (b"{not json", b"[]", b'{"digest": "sha256:x"}', b'{"digest": "d", "size": "x", "held": {}}'):
        entry.write_bytes(damage)
        assert memory.recall(LAYER, GZIP, "reg:5000") is None
    memory.remember(LAYER, GZIP, "sha256:" + "a" * 64, 10, "reg:5000", "two")
    assert memory.recall(LAYER, GZIP, "reg:5000") == Remembered("sha256:" + "a" * 64, 10, ("two",))


def test_a_config_is_given_back_only_when_it_hashes_to_the_image_id(tmp_path: Path) -> None:
    memory = LayerMemory.under(tmp_path)
    config = b'{"architecture":"amd64","rootfs":{"type":"layers","diff_ids":[]}}'
    image_id = "sha256:" + hashlib.sha256(config).hexdigest()
    memory.keep_config("sha256:" + "0" * 64, config)  # not its ID: not kept
    assert memory.config("sha256:" + "0" * 64) is None
    memory.keep_config(image_id, config)
    assert memory.config(image_id) == config
    (kept,) = (tmp_path / "pushed" / "configs").iterdir()
    kept.write_bytes(config.replace(b"amd64", b"arm64"))
    assert memory.config(image_id) is None
