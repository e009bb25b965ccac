"""The tutorials' engine steps run as a reader would run them (issue 55): each page holding blocks marked
`<!-- check: engine -->` is run whole, in page order (its files, its engine-free examples, its engine blocks: a
console block's output compared as tests/test_docs_examples.py does, any other block run as one bash script that
must exit 0), in a temporary copy of the repository with a state folder of its own, against the Docker engine.

The tutorials are one reader's path: their pages run in the nav's order (mkdocs.yml) in one sandbox, each after
the ones before it, as extend-a-released-image.md builds `FROM` what first-gated-image.md released; a page stops at
its first failing step, as its reader would. What the reader's machine has, the sandbox's environment gives, never
the page's commands: a `docker` that runs BuildKit builds (the tutorials' prerequisite; this machine's first
`docker` on PATH has no buildx) and the suite's layer cache for pushes (`TRAINIMG_BLOB_CACHE`, a speed-up only).
This machine is behind a TLS-intercepting proxy, so the team image is built as extend-a-released-image.md's note
builds it on such a machine (the proxy's CA as a build secret; without a proxy it builds the same).
The tutorials' registry is `trainimg registry start`'s own, on localhost:5000 as the pages say: nothing else in
the suite binds that port (every other registry or server of the suite takes a port the kernel picks from its
ephemeral range, 32768 and up), a lock on the machine keeps two suite runs from running the tutorials at once,
and the registry is stopped when they end. The CPU PyTorch image the first tutorial builds is the `cpu_image`
fixture's build (same variant, same base), requested first so the page's build is a BuildKit cache hit.
tests/data/docs/engine-example.md is the mechanism's own page. Tier 3 (the engine).
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

import docscheck
from trainimg.registry.blobcache import BUDGET_ENV, CACHE_ENV

FIXTURE = docscheck.ROOT / "tests" / "data" / "docs" / "engine-example.md"
ENGINE_PAGES = [p for p in docscheck.pages() if any(s.engine for s in docscheck.page_steps(p))]


def tutorials_in_nav_order() -> list[Path]:
    """The pages of mkdocs.yml's Tutorials section, in the order a reader follows them."""
    nav = yaml.safe_load((docscheck.ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    section = next(entry["Tutorials"] for entry in nav if isinstance(entry, dict) and "Tutorials" in entry)
    return [docscheck.DOCS / (next(iter(e.values())) if isinstance(e, dict) else e) for e in section]


TUTORIALS = [p for p in tutorials_in_nav_order() if p in ENGINE_PAGES]
ALONE = [*(p for p in ENGINE_PAGES if p not in TUTORIALS), FIXTURE]  # engine pages that are no one's prerequisite
REGISTRY_PORT = 5000  # `trainimg registry start`'s default, which the tutorials use
MACHINE_LOCK = Path("/tmp/trainimg-docs-tutorials.lock")  # one suite run at a time runs the tutorials on a machine
SANDBOX_NAME = "docs-tutorials"  # the tutorials' temp folder: how a registry an earlier, killed run left is known


def reader_env(checkout: Path) -> dict[str, str]:
    """The sandbox's environment, plus what the reader's machine has: a BuildKit `docker` first on PATH (the
    engine CLI trainimg uses) and the suite's layer cache."""
    env = docscheck.sandbox_env(checkout, engine=True)
    tools = checkout.parent / "reader-bin"
    tools.mkdir(exist_ok=True)
    (tools / "docker").symlink_to(env["TRAINIMG_DOCKER_CLI"])
    env.update(PATH=f"{tools}{os.pathsep}{env['PATH']}", DOCKER_BUILDKIT="1")
    env.update({k: os.environ[k] for k in (CACHE_ENV, BUDGET_ENV) if k in os.environ})
    return env


def left_by_a_killed_run() -> list[int]:
    """The pids of tutorial registries an earlier run of this test left running (killed before its teardown):
    with the machine's lock held, no live run has one."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"docker-registry") and any(f"/{SANDBOX_NAME}".encode() in arg and arg.endswith(
                b"/.trainimg-state/registry/config.yml") for arg in argv[1:]):
            found.append(int(proc.name))
    return found


def port_taken(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def machine_lock() -> Iterator[None]:
    """The machine's tutorial lock, waited for (another suite run's tutorials take minutes), then port 5000 free:
    a registry an earlier killed run left there is stopped; anything else there fails the tutorials, named."""
    with open(MACHINE_LOCK, "a") as lock:
        deadline = time.monotonic() + 3600
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                assert time.monotonic() < deadline, f"{MACHINE_LOCK}: another run held it for an hour"
                time.sleep(5)
        for pid in left_by_a_killed_run():
            os.kill(pid, signal.SIGTERM)
        for _ in range(50):
            if not port_taken(REGISTRY_PORT):
                break
            time.sleep(0.2)
        assert not port_taken(REGISTRY_PORT), (
            f"127.0.0.1:{REGISTRY_PORT} is taken by a program other than this test: the tutorials start "
            f"`trainimg registry start` there, as their reader does")
        yield


@dataclass
class Reader:
    """One reader working through the tutorials in one checkout: each page's run, once."""

    checkout: Path
    env: dict[str, str]
    runs: dict[Path, docscheck.Run] = field(default_factory=dict)

    def through(self, page: Path) -> tuple[docscheck.Run, list[Path]]:
        """`page`'s run after every tutorial before it ran (once each); and those of them that failed."""
        for earlier in TUTORIALS[:TUTORIALS.index(page) + 1]:
            if earlier not in self.runs:
                self.runs[earlier] = docscheck.run_steps(docscheck.page_steps(earlier), self.checkout, self.env,
                                                         timeout=3600, stop_at_failure=True)
        return self.runs[page], [p for p in TUTORIALS[:TUTORIALS.index(page)] if self.runs[p].problems]


@pytest.fixture(scope="module")
def reader(machine_lock: None, cpu_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reader]:
    """The tutorials' sandbox. At the end their registry stops, the CPU variant's tag goes back to the image the
    suite built (the tutorials rebuild and release it, with other layers: a skipped audit in its SBOM), and the
    names only they gave (their registry's, their `docker build -t`) are removed, with the images only they held."""
    checkout = docscheck.repository_copy(tmp_path_factory.mktemp(SANDBOX_NAME) / "checkout")
    env = reader_env(checkout)
    docker = env["TRAINIMG_DOCKER_CLI"]
    before = images()
    try:
        yield Reader(checkout, env)
    finally:
        subprocess.run(["trainimg", "registry", "stop"], env=env, cwd=checkout, capture_output=True, timeout=120)
        if cpu_image in before:
            subprocess.run([docker, "tag", before[cpu_image], cpu_image], capture_output=True, timeout=120)
        made = [ref for ref in set(images()) - set(before) if ref.startswith(f"localhost:{REGISTRY_PORT}/")
                or ref in built_by_the_tutorials()]
        if made:
            subprocess.run([docker, "image", "rm", *made], capture_output=True, timeout=300)


def built_by_the_tutorials() -> set[str]:
    """The names the tutorials' `docker build -t NAME` commands give."""
    return {words[i + 1] for page in TUTORIALS for step in docscheck.page_steps(page) if step.kind != "file"
            for words in [docscheck.split(step.text)] for i, word in enumerate(words[:-1])
            if word == "-t" and "build" in words[:i]}


def images() -> dict[str, str]:
    """Every `repository:tag` on the engine, with its image ID."""
    listed = subprocess.run([os.environ.get("TRAINIMG_DOCKER_CLI", "/usr/bin/docker"), "image", "ls", "--no-trunc",
                             "--format", "{{.Repository}}:{{.Tag}} {{.ID}}"], capture_output=True, text=True,
                            check=True, timeout=120)
    return dict(line.split() for line in listed.stdout.splitlines() if ":<none> " not in line)


@pytest.mark.parametrize("path", TUTORIALS, ids=[docscheck.shown(p) for p in TUTORIALS])
def test_the_tutorials_run_in_order_as_one_reader(path: Path, reader: Reader) -> None:
    run, failed_before = reader.through(path)
    steps = docscheck.page_steps(path)
    after = f" (after {', '.join(docscheck.shown(p) for p in failed_before)} failed)" if failed_before else ""
    assert not run.problems, f"{docscheck.shown(path)}{after}:\n\n" + "\n\n".join(run.problems)
    assert run.ran == sum(s.kind != "file" for s in steps) and any(s.engine for s in steps), path


@pytest.mark.parametrize("path", ALONE, ids=[docscheck.shown(p) for p in ALONE])
def test_every_engine_step_of_a_page_runs(path: Path, tmp_path: Path, docker_engine: str) -> None:
    checkout = docscheck.repository_copy(tmp_path / "checkout")
    steps = docscheck.page_steps(path)
    run = docscheck.run_steps(steps, checkout, docscheck.sandbox_env(checkout, engine=True), timeout=3600)
    assert run.ran == sum(s.kind != "file" for s in steps) and any(s.engine for s in steps), path
    assert not run.problems, "\n\n".join(run.problems)


def test_an_engine_step_that_fails_fails_the_page(tmp_path: Path, docker_engine: str) -> None:
    page = tmp_path / "tutorial.md"
    page.write_text("# Tutorial\n\n<!-- check: engine -->\n```bash\ntrainimg prune --dry-run --label a=b\n"
                    "trainimg sbom no-such-image-anywhere:0\n```\n\n<!-- check: engine -->\n```console\n"
                    "$ trainimg prune --dry-run --label trainimg.docs-check=nothing-has-this\n3 image(s) trainimg made\n"
                    "```\n")
    checkout = docscheck.repository_copy(tmp_path / "checkout")
    run = docscheck.run_steps(docscheck.page_steps(page), checkout, docscheck.sandbox_env(checkout, engine=True))
    assert run.ran == 2 and len(run.problems) == 2, run.problems
    assert run.problems[0].startswith(f"{page}:4: exit ") and "trainimg sbom" in run.problems[0].splitlines()[1]
    assert run.problems[1].startswith(f"{page}:11: the output differs") and "+0 image(s)" in run.problems[1]
    stopped = docscheck.run_steps(docscheck.page_steps(page), checkout, docscheck.sandbox_env(checkout, engine=True),
                                  stop_at_failure=True)
    assert stopped.ran == 1 and stopped.problems[1] == f"not run after that failure: 1 later step(s), {page}:11"
