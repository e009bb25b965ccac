"""One input, one digest; zstd for fleets that take it (issue 47), in process: the config trainimg's client pushes
(fixed times, the inline cache beside it), `--compression`'s grammar and its one-line refusals, and both compressions
writing the same blob for the same layer. The engine tests are tests/test_zstd.py and tests/test_layers.py."""

from __future__ import annotations

import base64
import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest
import zstandard
from conftest import trainimg

from trainimg.errors import UserInputError
from trainimg.options import CLIENT_UPLOAD, DEFAULT_UPLOAD, ENGINE_UPLOAD, check_transport
from trainimg.options.compression import DEFAULT_COMPRESSION, ESTARGZ, GZIP, ZSTD, Compression
from trainimg.plan.reproducible import LAYER_EPOCH
from trainimg.registry.imageconfig import (FIXED_TIME, INLINE_CACHE_KEY, cache_config, cache_tag,
                                           image_config, with_build_caches)
from trainimg.registry.layerformats import OCI_ZSTD_LAYER, compress_layer, plain_layer


def _config(clock: str, records: int) -> bytes:
    """An image config as BuildKit 0.8 writes one: the build's clock in `created`, history and the inline cache."""
    cache = [{"digest": f"sha256:{i:064x}", "layers": [{"layer": 0, "createdAt": clock}]} for i in range(records)]
    return json.dumps({
        "architecture": "amd64", "config": {"Labels": {"a": "b"}}, "created": clock,
        "history": [{"created": clock, "created_by": "RUN a && b"}, {"created": clock, "empty_layer": True}],
        INLINE_CACHE_KEY: base64.b64encode(json.dumps(cache).encode()).decode(), "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "1" * 64]}}).encode()


def test_two_builds_clocks_give_one_image_config() -> None:
    """The build's clock and the engine's cache history (records of other builds) leave the image config; nothing
    else of it changes."""
    first, second = _config("2026-11-28T17:09:54.290029881Z", 26), _config("2026-11-28T17:12:40.1Z", 33)
    assert image_config(first) == image_config(second)
    pushed = json.loads(image_config(first))
    assert INLINE_CACHE_KEY not in pushed and pushed["created"] == FIXED_TIME == "1980-01-01T00:00:00Z"
    assert {h["created"] for h in pushed["history"]} == {FIXED_TIME}
    assert pushed["history"][0]["created_by"] == "RUN a && b" and pushed["config"] == {"Labels": {"a": "b"}}
    assert FIXED_TIME.startswith("1980-01-01") and LAYER_EPOCH == 315532800  # the time the layers' files carry


def test_the_build_cache_goes_beside_with_its_records_and_fixed_times() -> None:
    beside = cache_config(_config("2026-11-28T17:09:54Z", 3))
    assert beside is not None
    records = json.loads(base64.b64decode(json.loads(beside)[INLINE_CACHE_KEY]))
    assert len(records) == 3 and {r["layers"][0]["createdAt"] for r in records} == {FIXED_TIME}
    assert cache_config(image_config(beside)) is None  # an image without inline cache has none beside it
    assert cache_config(beside) == beside  # fixed is fixed


def test_each_cache_source_is_followed_by_its_build_cache() -> None:
    assert cache_tag("t/a:1.0-cpu") == "t/a:1.0-cpu.buildcache"
    assert with_build_caches(("h:5000/t/a:1", "h:5000/t/b@sha256:" + "0" * 64, "h:5000/t/c")) == (
        "h:5000/t/a:1", "h:5000/t/a:1.buildcache", "h:5000/t/b@sha256:" + "0" * 64, "h:5000/t/c")


@pytest.mark.parametrize("text, algorithm, level", [("gzip", GZIP, 6), ("zstd", ZSTD, 3), ("zstd:19", ZSTD, 19),
                                                    (" ZSTD:1 ", ZSTD, 1), ("estargz", ESTARGZ, 6)])
def test_compression_grammar(text: str, algorithm: str, level: int) -> None:
    c = Compression.parse(text)
    assert (c.algorithm, c.level) == (algorithm, level) and Compression.parse(str(c)) == c


@pytest.mark.parametrize("text", ["zstd:0", "zstd:20", "zstd:x", "zstd:", "gzip:9", "lz4", "", "estargz:9"])
def test_bad_compression_is_a_user_error_naming_the_flag(text: str) -> None:
    with pytest.raises(UserInputError) as info:
        Compression.parse(text)
    assert info.value.where == "--compression"


def test_zstd_goes_through_the_client() -> None:
    assert DEFAULT_UPLOAD == CLIENT_UPLOAD and DEFAULT_COMPRESSION == Compression()
    check_transport(CLIENT_UPLOAD, Compression.parse("zstd"))
    with pytest.raises(UserInputError, match="gzip only"):
        check_transport(ENGINE_UPLOAD, Compression.parse("zstd:3"))


@pytest.mark.parametrize("verb", ["push", "release"])
@pytest.mark.parametrize("flag, words", [("zstd:25", "use 1 to 19"),
                                         ("brotli", "use gzip, zstd, zstd:LEVEL (LEVEL 1 to 19) or estargz")])
def test_a_bad_compression_is_one_line_exit_2(verb: str, flag: str, words: str) -> None:
    extra = ("--skip-audit",) if verb == "release" else ()
    r = trainimg(verb, "pytorch-2.13.0-cpu-py3.11", "--registry", "localhost:5000", "--compression", flag, *extra,
                 timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and r.stderr.startswith("--compression: "), r.stderr
    assert words in r.stderr


def _layer() -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for i in range(3):
            data = bytes(range(256)) * 4000 * (i + 1)
            info = tarfile.TarInfo(f"opt/f{i}")
            info.size, info.mtime = len(data), LAYER_EPOCH
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.mark.parametrize("how", ["gzip", "zstd", "zstd:19"])
def test_a_layer_compresses_to_one_blob(how: str, tmp_path: Path) -> None:
    layer = _layer()
    blobs = {compress_layer(io.BytesIO(layer), tmp_path / f"{i}.blob", Compression.parse(how)) for i in range(2)}
    assert len(blobs) == 1
    data = (tmp_path / "0.blob").read_bytes()
    if how == "gzip":
        assert gzip.decompress(data) == layer
        return
    params = zstandard.get_frame_parameters(data)
    # nothing in the frame but the data: no size, checksum or dictionary ID that could vary
    assert data[:4] == b"\x28\xb5\x2f\xfd" and not params.has_checksum and \
        params.content_size == zstandard.CONTENTSIZE_UNKNOWN and params.dict_id == 0
    assert plain_layer(io.BytesIO(data), OCI_ZSTD_LAYER).read() == layer
