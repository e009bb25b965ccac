"""DockerEngine builds when BuildKit hides the build's own error behind a lost session.

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
from trainimg.engine.base import BuildRequest
from trainimg.engine.buildkit import lost_session
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
