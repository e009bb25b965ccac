"""The generated `.gitlab-ci.yml`, RUN by a real GitLab CI engine on this machine: gitlab-ci-local with the shell
executor (`--shell-isolation`: each job in its own copy of the checkout, artifacts handed on as GitLab does) against
the compose registry (htpasswd), the credentials coming in as CI variables.

Each case is a git checkout holding its own recipes and the pipeline `trainimg ci gitlab` wrote. To keep the run to
minutes, the heavy step (the framework install) is served by BuildKit's cache: the root `pytorch-2.13.0-cpu-py3.11`
is the shipped CPU entry under a test repository with the shipped committed lock (so its install step is the
session's CPU build, `cpu_image`), and `glci-b` (a copy under another name) is built once by the pass case and
reused by the fail case.

* pass: two stage jobs (`pytorch-2.13.0-cpu-py3.11`, `glci-b`) build, test and push their immutable tags; promote
  moves each moving tag onto its immutable tag's digest and writes images.lock; the support matrix the promote job
  wrote is loaded in headless Chromium (a screenshot under reports/, a row per variant in the rendered DOM). Then
  the same pipeline again on a runner that starts empty (the `ephemeral_runner` fixture: none of its images on the
  engine, no record, no login): every job passes, every variant is skipped, no job asks the engine for one of its
  images, and every moving tag stays on its immutable tag's digest (issue 41);
* fail: the root's job also releases `glci-broken`, which `extends` it with tests/brokenimages.py's breaker wheel
  (its image fails the all-reduce): that job fails and pushes nothing, `glci-b`'s job passes and pushes its
  immutable tag, promote runs (it is the gate) and refuses naming `glci-broken`, and the registry holds no moving
  tag.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
from brokenimages import BREAKER, breaker_wheel
from chromium import render_in_chromium
from conftest import LOCAL_BASE, ROOT, cpu_recipe
from conftest_registry import RegistryLogin
from registryread import remote_digest

from trainimg.options import DEFAULT_LOCK_DIR
from trainimg.publish.lockfile import DEFAULT_LOCK, read_lock
from trainimg.publish.movingtags import moving_tag
from trainimg.publish.pipelines import MATRIX_FILES
from trainimg.publish.skip import read_decisions
from trainimg.registry.references import RegistryTarget

RUN = uuid.uuid4().hex[:8]
VERSION = "2.13.0-cpu-py3.11"
WHEELS = Path("/opt/wheels")
GITLAB_CI_LOCAL = shutil.which("gitlab-ci-local")
JOB_RESULT = re.compile(r"^\s*(PASS|FAIL|WARN)\s+(\S+)", re.MULTILINE)
JOB_PREFIX = re.compile(r"^\S+ +> ", re.MULTILINE)  # gitlab-ci-local's `job-name > ` before each line a job prints


ROOT_VARIANT = "pytorch-2.13.0-cpu-py3.11"
SHIPPED_LOCK = ROOT / "images" / ROOT_VARIANT / "requirements.lock"


def root_recipe(repository: str) -> str:
    """The shipped CPU PyTorch entry (recipes/pytorch.yaml) under a test repository: same variant name, same stages."""
    return (f"framework: pytorch\nname: {ROOT_VARIANT}\nrepository: {repository}\nlabels:\n  maintainer: trainimg\n"
            'matrix:\n  - version: ["2.13.0"]\n    os: [debian12]\n    python: ["3.11"]\n')


class Checkout:
    """A git checkout with its recipes and the generated pipeline, run by gitlab-ci-local."""

    def __init__(self, folder: Path, case: str, registry: RegistryLogin, env: dict[str, str]) -> None:
        self.folder = folder
        self.repos = {ROOT_VARIANT: f"trainimg-test/glci-{case}-{RUN}", "glci-b": f"trainimg-test/glci-{case}-b-{RUN}"}
        recipes = {"pytorch.yaml": root_recipe(self.repos[ROOT_VARIANT]),
                   "glci-b.yaml": cpu_recipe("glci-b", self.repos["glci-b"])}
        if case == "fail":
            self.repos["glci-broken"] = f"trainimg-test/glci-{case}-broken-{RUN}"
            recipes["glci-broken.yaml"] = (f"extends: {ROOT_VARIANT}\nname: glci-broken\n"
                                           f"repository: {self.repos['glci-broken']}\nextras: [\"{BREAKER}==1.0\"]\n")
        (folder / "recipes").mkdir(parents=True)
        for file, text in recipes.items():
            (folder / "recipes" / file).write_text(text)
        lock = folder / "images" / ROOT_VARIANT / SHIPPED_LOCK.name
        lock.parent.mkdir(parents=True)
        shutil.copyfile(SHIPPED_LOCK, lock)
        wheelhouse = folder.parent / f"{folder.name}-wheels"
        breaker_wheel(wheelhouse)
        self.registry = registry
        self.target = RegistryTarget.parse(registry.host)
        self.creds = {"username": registry.username, "password": registry.password}
        # What the CI's variables and the runner's environment give each job (masked variables, in GitLab).
        self.env = {**env, "TRAINIMG_REGISTRY_USER": registry.username, "TRAINIMG_REGISTRY_PASSWORD": registry.password,
                    "DOCKER_CONFIG": str(folder.parent / f"{folder.name}-docker"),
                    "PIP_FIND_LINKS": " ".join([*([str(WHEELS)] if WHEELS.is_dir() else []), str(wheelhouse)])}
        self.seconds = 0.0

    def tag(self, name: str) -> str:
        return f"{self.repos[name]}:{VERSION}"

    def generate(self) -> str:
        # --one-machine: gitlab-ci-local runs every job here, where the test registry's loopback address is shared;
        # --skip-audit: no advisory source answers here (the audit is tests/test_audit.py's).
        r = subprocess.run(["trainimg", "ci", "gitlab", "--registry", self.registry.host, "--one-machine",
                            "--skip-audit", "--base-image", LOCAL_BASE,
                            "--install", "trainimg --version", "--output", ".gitlab-ci.yml"],
                           cwd=self.folder, env=self.env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        git = ["git", "-c", "user.email=ci@trainimg.test", "-c", "user.name=trainimg-test"]
        for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"], [*git, "commit", "-q", "-m", "ci"]):
            subprocess.run(cmd, cwd=self.folder, check=True, timeout=60)
        return (self.folder / ".gitlab-ci.yml").read_text()

    def run(self, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
        """The whole pipeline, two jobs at a time (on `env`'s runner, default this checkout's); the job results
        gitlab-ci-local printed, by job."""
        assert GITLAB_CI_LOCAL is not None
        start = time.monotonic()
        args = [GITLAB_CI_LOCAL, "--shell-isolation", "--json-schema-validation", "--concurrency", "2", "--no-color"]
        r = subprocess.run(args, cwd=self.folder, env={**self.env, **(env or {})}, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=900)  # jobs' stderr lines come on stderr
        self.seconds = time.monotonic() - start
        (self.folder.parent / f"{self.folder.name}.log").write_text(r.stdout)
        return r, {job: result for result, job in JOB_RESULT.findall(r.stdout)}

    def digest(self, ref_tag: str) -> str | None:
        return remote_digest(self.target, ref_tag, self.creds)


@pytest.fixture(scope="module")
def checkouts(tmp_path_factory: pytest.TempPathFactory, registry: RegistryLogin, state_env: dict[str, str],
              cpu_image: str, client: docker.DockerClient) -> Iterator[dict[str, Checkout]]:
    if GITLAB_CI_LOCAL is None:
        pytest.fail("gitlab-ci-local is not installed (.ci/setup-host installs it with npm)")
    base = tmp_path_factory.mktemp("gitlab-ci-local")
    made = {case: Checkout(base / case, case, registry, state_env) for case in ("pass", "fail")}
    yield made
    # Remove exactly the local tags these pipelines made (variant, moving and registry-qualified tags).
    mine = {name for c in made.values() for name in c.repos.values()}
    mine |= {f"{c.target.host}/{name}" for c in made.values() for name in c.repos.values()}
    for image in client.api.images():  # one listing call: inspecting each image races other tests' removals
        for t in image.get("RepoTags") or []:
            if t.rpartition(":")[0] in mine:
                try:
                    client.api.remove_image(t, force=True)
                except docker.errors.NotFound:
                    pass


def test_pass_stage_jobs_then_promote_moves_every_tag(checkouts: dict[str, Checkout], tmp_path: Path,
                                                      ephemeral_runner: Any) -> None:
    c = checkouts["pass"]
    pipeline = c.generate()
    assert pipeline.count("\nstage-") == 2 and "\npromote:" in pipeline
    r, jobs = c.run()
    print(f"gitlab-ci-local pass case: {len(jobs)} jobs {jobs} in {c.seconds:.0f} s")
    assert r.returncode == 0, r.stdout[-8000:]
    assert jobs == {f"stage-{ROOT_VARIANT}": "PASS", "stage-glci-b": "PASS", "promote": "PASS"}, jobs
    lock = read_lock(c.folder / DEFAULT_LOCK)  # the promote job's artifact
    assert sorted(lock) == sorted(c.repos)
    for name in c.repos:
        tag = c.tag(name)
        immutable, moving = c.digest(tag), c.digest(moving_tag(tag) or "")
        assert immutable is not None and moving == immutable, (name, immutable, moving)
        assert lock[name].pushed[c.target.ref(tag)] == immutable
        assert lock[name].conformance["passed"] is True
    page = c.folder / MATRIX_FILES["html"]
    dom = render_in_chromium(page, ROOT / "reports" / "matrix.png", tmp_path / "profile")
    rows = re.findall(r'<tr data-variant="([^"]+)"', dom)
    assert rows == sorted(c.repos), rows
    for name in rows:
        assert lock[name].pushed[c.target.ref(c.tag(name))] in dom

    # The same pipeline on a runner that starts empty: nothing to do, and it passes.
    digests = {name: c.digest(c.tag(name)) for name in c.repos}
    runner = ephemeral_runner(c.repos.values(), c.env)
    r, jobs = c.run(runner.env)
    print(f"gitlab-ci-local pass case, again on an empty runner: {jobs} in {c.seconds:.0f} s")
    assert r.returncode == 0, r.stdout[-8000:]
    assert jobs == {f"stage-{ROOT_VARIANT}": "PASS", "stage-glci-b": "PASS", "promote": "PASS"}, jobs
    decisions = read_decisions(JOB_PREFIX.sub("", r.stdout))
    assert sorted(decisions) == sorted(c.repos) and all(skip for skip, _ in decisions.values()), decisions
    for name in c.repos:
        tag = c.tag(name)
        assert c.digest(tag) == c.digest(moving_tag(tag) or "") == digests[name], name
    asked = runner.recorder.requests
    assert [line for line in asked if any(repo in line for repo in c.repos.values())] == [], asked


def test_fail_one_variant_fails_and_promote_moves_nothing(checkouts: dict[str, Checkout]) -> None:
    c = checkouts["fail"]
    pipeline = c.generate()
    assert pipeline.count("\nstage-") == 2  # glci-broken rides in its parent's job
    r, jobs = c.run()
    print(f"gitlab-ci-local fail case: {len(jobs)} jobs {jobs} in {c.seconds:.0f} s")
    assert r.returncode != 0
    assert jobs == {f"stage-{ROOT_VARIANT}": "FAIL", "stage-glci-b": "PASS", "promote": "FAIL"}, r.stdout[-6000:]
    assert "allreduce_vertex_x2" in r.stdout  # the broken image failed the all-reduce, as built
    promote = "\n".join(line for line in r.stdout.splitlines() if line.startswith("promote "))
    assert "promote: glci-broken: failed conformance (allreduce_vertex_x2)" in promote, promote
    assert "nothing promoted" in promote, promote
    good = c.tag("glci-b")
    assert c.digest(good) is not None  # staged: the immutable tag only
    for name in c.repos:
        assert c.digest(moving_tag(c.tag(name)) or "") is None, name  # promote moved nothing
    assert c.digest(c.tag(ROOT_VARIANT)) is None and c.digest(c.tag("glci-broken")) is None  # its job pushed nothing
    assert not (c.folder / DEFAULT_LOCK).exists()
    assert (c.folder / DEFAULT_LOCK_DIR / "glci-b.json").is_file()  # the good part was handed on
