"""One progress/log policy for every verb: `auto` is plain lines off a terminal, only `quiet` is silent."""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path

import pytest

from trainimg.engine.docker import DockerEngine
from trainimg.progress import PROGRESS_MODES, Progress, log_printer, resolve_mode

IMAGE = "trainimg/pytorch:2.13.0-cpu-py3.11"
_LINES = 25


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("mode", "env", "stream", "want"), [
    ("auto", {}, io.StringIO(), "plain"),
    ("auto", {"CI": "1"}, io.StringIO(), "plain"),
    ("auto", {}, _Tty(), "rich"),
    ("auto", {"CI": "true"}, _Tty(), "plain"),
    ("plain", {}, _Tty(), "plain"),
    ("quiet", {}, io.StringIO(), "quiet"),
])
def test_policy(mode: str, env: dict[str, str], stream: io.StringIO, want: str) -> None:
    assert resolve_mode(mode, env, stream) == want


def test_every_logged_line_is_kept_off_a_terminal_and_only_quiet_drops_them() -> None:
    assert set(PROGRESS_MODES) == {"auto", "plain", "quiet"}
    for mode, kept in (("auto", True), ("plain", True), ("quiet", False)):
        out = io.StringIO()
        progress = Progress(mode, {}, out)
        progress.log("chief-0", "step 1 loss=0.5")
        progress.log("worker-0", "#3 not a build step")
        assert out.getvalue().splitlines() == (["[chief-0] step 1 loss=0.5", "[worker-0] #3 not a build step"]
                                               if kept else [])
    assert log_printer("quiet", {}) is None


def test_run_redirected_to_a_file_keeps_every_replica_line(cpu_image: str, tmp_path: Path) -> None:
    if DockerEngine().image(IMAGE) is None:
        pytest.fail(f"{IMAGE} is not on this engine: build it with `trainimg build pytorch-2.13.0-cpu-py3.11`")
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "GITHUB_ACTIONS", "JENKINS_URL")}
    script = f'for i in $(seq 1 {_LINES}); do echo "line $TRAINIMG_ROLE-$TRAINIMG_NODE_RANK $i"; done'
    log = tmp_path / "job.log"
    with log.open("w") as f:
        proc = subprocess.run(["trainimg", "run", IMAGE, "--platform", "vertex", "--replicas", "3", "--timeout",
                               "120", "--", "sh", "-c", script], stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              env=env, timeout=300)
    text = log.read_text()
    assert proc.returncode == 0, text
    for replica in ("chief-0", "worker-1", "worker-2"):
        got = [line for line in text.splitlines() if f"line {replica} " in line]
        assert len(got) == _LINES, (replica, text[-2000:])


def test_auto_on_a_terminal_is_rich_and_shows_every_line() -> None:
    """`auto` resolved to rich on a terminal used to leave rich unset and fail on the first task."""
    stream = _Tty()
    progress = Progress("auto", {}, stream)
    progress.start("build")
    progress.log("build", "hello from the container")
    progress.done("build", "built the image")
    out = stream.getvalue()
    assert progress.mode == "rich"
    assert "[build] hello from the container" in out and "built the image" in out
