"""DockerEngine builds when BuildKit hides the build's own error behind a lost session, and when it cannot read a
`--cache-from` image (it builds on, saying so only in its log).

BuildKit shares identical steps between concurrent builds; when the client session a shared step reads from goes
away, a build can fail with ``rpc error: code = Internal desc = unexpected EOF`` instead of its step's error.
That cannot be staged on demand on a real engine, so the first build here goes through a client that ends the
way such a build ends; the second attempt is the real docker CLI and real BuildKit.
"""

from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path

import pytest
from conftest_registry import RegistryLogin
from trainimg.engine.base import BuildRequest
from trainimg.engine.buildkit import lost_session, unread_caches
from trainimg.engine.docker import DockerEngine
from trainimg.errors import EngineError

LOCAL_BASE = "local/debian:bookworm"
EOF_LINE = ("failed to solve with frontend dockerfile.v0: failed to solve with frontend gateway.v0: rpc error: "
            "code = Internal desc = unexpected EOF")


def test_lost_session_is_told_apart_from_a_failing_step() -> None:
    assert "unexpected EOF" in lost_session(["#5 [image 2/2] RUN pip install six==0.0.999", EOF_LINE])
    step = ["#5 [image 2/2] RUN pip install six==0.0.999", "#5 1.2 ERROR: No matching distribution",
            "#5 ERROR: executor failed running [/bin/sh -c pip install six==0.0.999]: exit code: 1", EOF_LINE]
    assert lost_session(step) == ""
    assert lost_session(["#5 DONE 0.1s"]) == ""


def test_a_build_that_lost_its_session_is_built_again_and_shows_its_own_error(docker_engine: str,
                                                                              tmp_path: Path) -> None:
    marker = uuid.uuid4().hex[:8]
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    dockerfile = ctx / "Dockerfile"
    dockerfile.write_text(f"FROM {LOCAL_BASE} AS image\n"
                          f"RUN echo 'no such distribution: six==0.0.999-{marker}' >&2; exit 1\n")
    cli = tmp_path / "docker"
    first = tmp_path / "first-done"
    cli.write_text("#!/bin/sh\n"
                   f"if [ ! -e {first} ]; then touch {first}; echo '#1 [internal] load build definition'; "
                   f"echo '{EOF_LINE}'; exit 1; fi\n"
                   f"exec {os.environ.get('TRAINIMG_DOCKER_CLI', '/usr/bin/docker')} \"$@\"\n")
    cli.chmod(cli.stat().st_mode | stat.S_IEXEC)
    engine = DockerEngine()
    engine.__dict__["cli"] = str(cli)
    lines: list[str] = []
    with pytest.raises(EngineError) as err:
        engine.build(BuildRequest(dockerfile, ctx, "image"), lines.append)
    assert first.exists() and any("building once more" in line for line in lines)
    assert f"six==0.0.999-{marker}" in str(err.value), str(err.value)


def test_unread_caches_pairs_each_failed_import_with_its_image() -> None:
    """Lines as BuildKit 0.8 prints them (a release on a runner without `docker login`): each import step's error is
    named with the image it read; an import that worked, and another step's error, are not."""
    log = ["#4 importing cache manifest from 127.0.0.1:5000/t/a:2.13-cpu",
           "#5 importing cache manifest from 127.0.0.1:5000/t/a:2.13-cpu.buildcache",
           "#5 ERROR: pulling from host 127.0.0.1:5000 failed with status code [manifests 2.13-cpu.buildcache]: "
           "401 Unauthorized",
           "#4 DONE 0.1s",
           "#9 [image 2/2] RUN false",
           "#9 ERROR: executor failed running [/bin/sh -c false]: exit code: 1"]
    assert unread_caches(log) == ("127.0.0.1:5000/t/a:2.13-cpu.buildcache: pulling from host 127.0.0.1:5000 failed "
                                  "with status code [manifests 2.13-cpu.buildcache]: 401 Unauthorized",)
    assert unread_caches(log[:1] + log[3:5]) == ()


def test_a_cache_the_engine_cannot_read_is_named_and_the_build_goes_on(docker_engine: str, registry: RegistryLogin,
                                                                       tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The compose registry asks for its login, and the docker client here has none (an empty DOCKER_CONFIG): BuildKit
    builds without the cache, and the result names the image it could not read and the registry's 401."""
    (tmp_path / "docker").mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(f"FROM {LOCAL_BASE} AS image\nRUN echo {uuid.uuid4().hex} > /marker\n")
    ref = f"{registry.host}/trainimg-test/nologin:{uuid.uuid4().hex[:8]}"
    result = DockerEngine().build(BuildRequest(ctx / "Dockerfile", ctx, "image", cache_from=(ref,)))
    try:
        assert [why.split(": ", 1)[0] for why in result.unread_caches] == [ref], result.unread_caches
        assert "401 Unauthorized" in result.unread_caches[0], result.unread_caches
    finally:
        DockerEngine().remove_image(result.image_id)
