"""The labels read back from a built image go into its config without a second BuildKit pass
(builder/imagebuild/labelling.py), checked against what consumes them: dockerd, which stores the config and names
the image by its digest, and BuildKit, whose own label pass the result must equal byte for byte (same image ID),
over the same layers, with the inline cache `--cache-from` reads.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from trainimg.engine.base import BuildRequest, Engine
from trainimg.engine.docker import DockerEngine
from trainimg.errors import EngineError
from trainimg.imagebuild.labelling import go_json, labelled, with_labels
from trainimg.registry.imageconfig import INLINE_CACHE_KEY

LOCAL_BASE = "local/debian:bookworm"
# Values Go's encoding/json and Python's json write differently unless told: a version range (`<`, `&`), text beyond
# ASCII, a backslash before `b`/`f`, the JavaScript line separator, a control character.
AWKWARD = {"trainimg.version.nccl": "2.21.5", "trainimg.test.range": ">=2.27.7,<3.0 && !=2.28.1",
           "trainimg.test.text": "naïve – ü ☃", "trainimg.test.slash": "C:\\bin\\f \\\\b",
           "trainimg.test.separator": "a\u2028b", "trainimg.test.control": "tab\there\x08\x0c\x1f"}


def test_go_json_writes_what_go_writes() -> None:
    """The escapes Go's json.Marshal makes (its HTML-safe ones, U+2028/9, \\u0008 and \\u000c), and those it
    leaves (non-ASCII as UTF-8, \\n \\r \\t short)."""
    assert go_json({"a": "<b>&", "c": "é\u2028\n\t\r\x08\x0c\x01\\b"}) == (
        '{"a":"\\u003cb\\u003e\\u0026","c":"é\\u2028\\n\\t\\r\\u0008\\u000c\\u0001\\\\b"}').encode()


def test_with_labels_changes_only_the_labels() -> None:
    config = json.dumps({"architecture": "amd64", "config": {"Labels": {"z": "1", "a": "old"}, "Env": ["A=1"]},
                         "history": [{"created_by": "RUN x"}], INLINE_CACHE_KEY: "e30="}).encode()
    out = json.loads(with_labels(config, {"b": "2", "a": "new"}))
    assert list(out["config"]["Labels"].items()) == [("a", "new"), ("b", "2"), ("z", "1")]
    assert {k: v for k, v in out.items() if k != "config"} == {k: v for k, v in json.loads(config).items()
                                                               if k != "config"}
    with pytest.raises(EngineError, match="no `config` object"):
        with_labels(b'{"rootfs": {}}', {"a": "b"})


@pytest.fixture
def small_image(docker_engine: str, tmp_path: Path) -> Iterator[tuple[DockerEngine, BuildRequest, str]]:
    """An image of a step of its own (a marker no other build has), built by BuildKit with its inline cache as
    `trainimg build` builds (engine/buildkit.py): the engine, the request and the image ID. Every image the test
    stores under the `trainimg-test/labelling` names goes after it."""
    run = uuid.uuid4().hex[:12]
    (tmp_path / "Dockerfile").write_text(f"FROM {LOCAL_BASE} AS image\nRUN echo {run} > /marker\nLABEL a=b\n",
                                         encoding="utf-8")
    engine = DockerEngine()
    req = BuildRequest(tmp_path / "Dockerfile", tmp_path, "image", tags=(f"trainimg-test/labelling:{run}-built",))
    built = engine.build(req).image_id
    try:
        yield engine, req, built
    finally:
        for found in engine.client.images.list(name="trainimg-test/labelling"):
            for tag in found.tags:
                if run in tag:
                    engine.remove_image(tag)


def test_labels_stored_without_buildkit_give_the_image_buildkits_label_pass_gives(
        small_image: tuple[DockerEngine, BuildRequest, str]) -> None:
    engine, req, built = small_image
    run = req.tags[0].split(":")[1].split("-")[0]
    by_buildkit = engine.build(BuildRequest(req.dockerfile, req.context, req.target, labels=AWKWARD,
                                            tags=(f"trainimg-test/labelling:{run}-buildkit",))).image_id
    ours = labelled(engine, built, AWKWARD, f"trainimg-test/labelling:{run}-stored")
    assert by_buildkit != built and ours == by_buildkit  # byte for byte the config of BuildKit's label pass
    stored, first = engine.image(ours), engine.image(built)
    assert stored is not None and first is not None
    assert stored.labels == {"a": "b", **AWKWARD} and stored.layers == first.layers
    config = engine.image_config(ours)
    assert hashlib.sha256(config).hexdigest() == ours.split(":")[1]
    assert json.loads(config)[INLINE_CACHE_KEY] == json.loads(engine.image_config(built))[INLINE_CACHE_KEY]


def test_the_image_stores_config_is_the_one_docker_save_holds(
        small_image: tuple[DockerEngine, BuildRequest, str]) -> None:
    """DockerEngine reads the config from dockerd's image store (a container's `docker cp` of the one file); the
    engine-neutral way reads `docker save`: the same bytes, whose digest is the image ID."""
    engine, _, built = small_image
    stored, saved = engine.image_config(built), Engine.image_config(engine, built)
    assert stored == saved and hashlib.sha256(stored).hexdigest() == built.split(":")[1]
    assert engine.client.containers.list(all=True, filters={"ancestor": built}) == []  # its reader is gone


def test_a_config_over_a_layer_the_engine_lacks_is_refused_in_one_line(
        small_image: tuple[DockerEngine, BuildRequest, str]) -> None:
    """Only the config is loaded: a config naming a layer the engine does not hold stores nothing."""
    engine, req, built = small_image
    config = json.loads(engine.image_config(built))
    config["rootfs"]["diff_ids"][-1] = f"sha256:{hashlib.sha256(uuid.uuid4().bytes).hexdigest()}"
    tag = f"{req.tags[0]}-lacking"
    with pytest.raises(EngineError) as err:
        engine.store_config(go_json(config), tag)
    assert "must hold every layer" in str(err.value) and len(str(err.value).splitlines()) == 1, str(err.value)
    assert engine.image(tag) is None


@pytest.mark.parametrize("path", ["/marker", "/etc/os-release"])  # a file, and a link (Debian's os-release)
def test_a_file_copied_out_of_an_image_reads_as_cat_reads_it(small_image: tuple[DockerEngine, BuildRequest, str],
                                                              path: str) -> None:
    """DockerEngine.read_file copies the file out of a container it never starts; what it gives is what a run of
    `cat` gives (the engine-neutral way), a link followed, and a missing file is cat's error."""
    engine, _, built = small_image
    assert engine.read_file(built, path) == Engine.read_file(engine, built, path) != ""
    with pytest.raises(EngineError, match="No such file or directory"):
        engine.read_file(built, "/no/such/file")
    assert engine.client.containers.list(all=True, filters={"ancestor": built}) == []
