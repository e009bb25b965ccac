"""The schedule side of `trainimg ci github|gitlab --schedule CRON`, checked by its real consumers: both pipelines
of an option matrix pass their engine's vendored schema (check-jsonschema), every trainimg line the bump job runs
parses with this trainimg's CLI, bad values are one line and exit 2, and gitlab-ci-local RUNS the generated bump
job of a checkout one JAX release behind up to the merge request API call: outdated finds it, bump moves the
recipe and locks it (uv, from PyPI), the commit is pushed on a branch of its own (to a local bare repository standing
for the project), the request body is GitLab's, and the only thing that fails is the call to the API, which does
not answer here (CI_API_V4_URL points at a closed port).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Iterator
from itertools import product
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from localindex import LocalIndex

from trainimg.cli.app import cli, main
from trainimg.publish.schedule import BRANCH, WORK

SCHEMAS = {"github": "vendor.github-workflows", "gitlab": "vendor.gitlab-ci"}
CRON = "17 4 * * 1"
OPTIONS = ((), ("--token-var", "BOT_TOKEN", "--index-url", "https://mirror.example/simple/"),
           ("--runner", "gpu", "--image", "ghcr.io/acme/ci:1", "--branch", "release/v2"))
JAX_BEHIND = 'framework: jax\nrepository: trainimg-test/glb\nmatrix:\n  - version: ["0.10.1"]\n' \
             '    os: [debian12]\n    python: ["3.11"]\n'


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("schedule")
    shutil.copytree(ROOT / "recipes", root / "recipes")
    return root


def generate(folder: Path, system: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["trainimg", "ci", system, "--registry", "registry.example.com/ml", "--schedule", CRON,
                           *flags], cwd=folder, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("system", sorted(SCHEMAS))
def test_scheduled_pipelines_pass_their_engines_schema(system: str, checkout: Path, tmp_path: Path,
                                                       host_tool: Callable[[str], str]) -> None:
    files = []
    for i, flags in enumerate(OPTIONS):
        r = generate(checkout, system, *flags)
        assert r.returncode == 0, r.stderr
        files.append(tmp_path / f"{system}-{i}.yml")
        files[-1].write_text(r.stdout)
    r = subprocess.run([host_tool("check-jsonschema"), "--builtin-schema", SCHEMAS[system], *map(str, files)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = yaml.safe_load(files[0].read_text())
    if system == "github":
        assert doc["on"]["schedule"] == [{"cron": CRON}] and "bump" in doc["jobs"]
    else:
        assert {"if": '$CI_PIPELINE_SOURCE == "schedule"'} in doc["workflow"]["rules"] and doc["stages"][0] == "bump"


def trainimg_commands(text: str) -> Iterator[list[str]]:
    """Each trainimg command in a shell script, as the shell splits it (quotes kept, `;`, `||`, `&&` between)."""
    for line in text.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";|&<>")
        lexer.whitespace_split = True
        words: list[str] = []
        for token in [*lexer, ";"]:
            if set(token) <= set(";|&<>"):
                if words[:1] == ["trainimg"]:
                    yield words
                words = []
            else:
                words.append(token)


@pytest.mark.parametrize(("system", "flags"), list(product(sorted(SCHEMAS), OPTIONS)))
def test_the_bump_job_runs_verbs_this_trainimg_accepts(system: str, flags: tuple[str, ...], checkout: Path) -> None:
    r = generate(checkout, system, *flags)
    assert r.returncode == 0, r.stderr
    doc = yaml.safe_load(r.stdout)
    job = doc["jobs"]["bump"] if system == "github" else doc["bump"]
    script = "\n".join(s.get("run", "") for s in job["steps"]) if system == "github" else "\n".join(job["script"])
    verbs = set()
    for args in trainimg_commands(script):
        cli.commands[args[1]].make_context(args[1], args[2:])  # click refuses an unknown flag or a bad value
        verbs.add(args[1])
        assert ("--index-url" in args) == ("--index-url" in flags)
    assert verbs == {"outdated", "bump"}
    token = "BOT_TOKEN" if "--token-var" in flags else {"github": "GITHUB_TOKEN", "gitlab": "TRAINIMG_BOT_TOKEN"}[system]
    assert token in json.dumps(job) and "mirror.example" not in json.dumps(job).replace("--index-url https://mirror", "")


@pytest.mark.parametrize(("flags", "where"), [
    (("--schedule", "daily"), "--schedule"), (("--schedule", "1 2 3 4"), "--schedule"),
    (("--token-var", "BOT"), "--token-var"), (("--index-url", "https://m.example/simple/"), "--index-url"),
    (("--schedule", CRON, "--index-url", "ftp://m.example/simple/"), "--index-url"),
    (("--schedule", CRON, "--token-var", "not-a-name"), "--token-var"),
])
def test_bad_schedule_input_is_one_line_exit_2(flags: tuple[str, ...], where: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["--recipes", str(ROOT / "recipes"), "ci", "gitlab", "--registry", "r.example.com", *flags])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith(where), err


def test_gitlab_ci_local_runs_the_bump_job_up_to_the_merge_request_api(tmp_path: Path,
                                                                        host_tool: Callable[[str], str]) -> None:
    gitlab_ci_local = host_tool("gitlab-ci-local")
    repo, remote = tmp_path / "repo", tmp_path / "project.git"
    (repo / "recipes").mkdir(parents=True)
    (repo / "recipes" / "jax.yaml").write_text(JAX_BEHIND)
    for args in (["lock", "glb-0.10.1-cpu-py3.11"], ["render"]):
        r = subprocess.run(["trainimg", *args], cwd=repo, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
    git = ["git", "-c", "user.email=ci@trainimg.test", "-c", "user.name=trainimg-test"]
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True, timeout=60)
    with LocalIndex() as index:
        r = subprocess.run(["trainimg", "ci", "gitlab", "--registry", "127.0.0.1:5999", "--one-machine",
                            "--schedule", CRON, "--index-url", index.url, "--install", "trainimg --version",
                            "--output", ".gitlab-ci.yml"], cwd=repo, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"], [*git, "commit", "-q", "-m", "ci"]):
            subprocess.run(cmd, cwd=repo, check=True, timeout=60)
        variables = {"CI_PIPELINE_SOURCE": "schedule", "BUMP_REMOTE": str(remote), "TRAINIMG_BOT_TOKEN": "t0ken",
                     "CI_API_V4_URL": "http://127.0.0.1:9/api/v4"}
        r = subprocess.run([gitlab_ci_local, "bump", "--shell-isolation", "--no-color",
                            *[a for k, v in variables.items() for a in ("--variable", f"{k}={v}")]],
                           cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    log = r.stdout
    assert r.returncode != 0 and re.search(r"FAIL\s+bump", log), log[-4000:]
    failed = log[log.rindex("FAIL  bump"):]
    assert "curl: (7) Failed to connect to 127.0.0.1 port 9" in failed, failed  # the API call, and nothing else
    title = "trainimg bump: jax 0.10.1 -> 0.10.2 (recipes/jax.yaml)"
    branches = subprocess.run(["git", "branch", "--list", f"{BRANCH}*"], cwd=remote, capture_output=True, text=True,
                              check=True).stdout.split()
    assert len(branches) == 1, branches
    subject = subprocess.run(["git", "log", "-1", "--format=%s", branches[0]], cwd=remote, capture_output=True,
                             text=True, check=True).stdout.strip()
    assert subject == title
    tree = subprocess.run(["git", "ls-tree", "-r", "--name-only", branches[0]], cwd=remote, capture_output=True,
                          text=True, check=True).stdout.split()
    assert "images/glb-0.10.2-cpu-py3.11/requirements.lock" in tree and not any(WORK in p for p in tree), tree
    pipeline = subprocess.run(["git", "show", f"{branches[0]}:.gitlab-ci.yml"], cwd=remote, capture_output=True,
                              text=True, check=True).stdout  # written again by the job: the renamed variant's jobs
    assert "glb-0.10.2-cpu-py3.11" in pipeline and "glb-0.10.1-cpu-py3.11" not in pipeline
    request = json.loads((repo / ".gitlab-ci-local" / "builds" / "bump" / WORK / "request.json").read_text())
    assert request["title"] == title and request["source_branch"] == branches[0]
    assert request["target_branch"] and request["remove_source_branch"] is True
    assert "| 0.10.1 -> 0.10.2 |" in request["description"]


WORKFLOW = ROOT / ".github" / "workflows" / "trainimg.yml"


def regenerate_words(text: str) -> list[str]:
    """The `trainimg ci ...` command the bump job of a generated pipeline runs to write the file again."""
    doc = yaml.safe_load(text)
    job = doc["jobs"]["bump"] if "jobs" in doc else doc["bump"]
    script = "\n".join(s.get("run", "") for s in job["steps"]) if "steps" in job else "\n".join(job["script"])
    (words,) = [args for args in trainimg_commands(script) if args[1:2] == ["ci"]]
    return words


@pytest.mark.parametrize("system", sorted(SCHEMAS))
def test_the_bump_job_writes_the_pipeline_again_with_the_words_that_wrote_it(system: str, checkout: Path) -> None:
    out = ".github/workflows/x.yml" if system == "github" else ".gitlab-ci.yml"
    r = generate(checkout, system, "--output", out, "--token-var", "BOT")
    assert r.returncode == 0, r.stderr
    text = (checkout / out).read_text()
    words = regenerate_words(text)
    ci = cli.commands["ci"].commands[system]  # type: ignore[attr-defined]
    ci.make_context(system, words[3:])  # click refuses an unknown flag or a bad value
    again = subprocess.run(words, cwd=checkout, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert (checkout / out).read_text() == text  # the same words, the same file
    with pytest.raises(ValueError):  # written to stdout: nothing names the file, no job writes it again
        regenerate_words(generate(checkout, system).stdout)


def test_the_committed_workflow_is_what_its_own_words_write(tmp_path: Path) -> None:
    """This repository's own scheduled pipeline (.github/workflows/trainimg.yml) is current: its bump job's `trainimg
    ci` words, run on a copy of the checkout, write it byte for byte (a recipe change it missed fails here)."""
    for folder in ("recipes", "images"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    (tmp_path / WORKFLOW.relative_to(ROOT)).parent.mkdir(parents=True)
    words = regenerate_words(WORKFLOW.read_text())
    r = subprocess.run(words, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / WORKFLOW.relative_to(ROOT)).read_text() == WORKFLOW.read_text()
    assert "--schedule" in words and "--output" in words
