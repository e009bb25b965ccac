"""`trainimg ci github|gitlab` and `trainimg matrix`, checked by their real consumers.

* Every pipeline of a generated matrix of options, over the shipped recipes and a recipes folder with a variant
  that `extends` another, passes the schema its CI engine is checked against: SchemaStore's GitHub workflow schema
  and GitLab's own CI schema, as vendored by `check-jsonschema` (`--builtin-schema vendor.github-workflows`,
  `vendor.gitlab-ci`); a mutated file is refused by the same call (the consumer is strict).
* gitlab-ci-local (the engine tests/test_ci_gitlab_local.py runs the pipeline with) lists the jobs of a
  generated `.gitlab-ci.yml` with its own schema validation on: a stage job per root variant, promote needing all.
* Every trainimg command line a pipeline runs parses with the real CLI (click's parser, no call).
* The matrix page: Markdown and a self-contained HTML page, rendered in headless Chromium (a screenshot under
  reports/, the DOM read back), every text escaped.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from collections.abc import Callable, Iterator
from itertools import product
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from conftest import ROOT, trainimg

from trainimg.cli.app import cli
from trainimg.publish.lockfile import LockEntry, write_lock

CHILD = "citest-child"
CHILD_RECIPE = f"extends: pytorch-2.13.0-cpu-py3.11\nname: {CHILD}\nrepository: trainimg-test/{CHILD}\n" \
               "labels:\n  team: ci\n"
REGISTRIES = ("registry.example.com/ml", "10.20.30.40:5005")  # a name with a path; an address with a port
SCHEMAS = {"github": "vendor.github-workflows", "gitlab": "vendor.gitlab-ci"}


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkout: the shipped recipes plus a child that extends the CPU PyTorch variant."""
    root = tmp_path_factory.mktemp("ci-checkout")
    shutil.copytree(ROOT / "recipes", root / "recipes")
    (root / "recipes" / "child.yaml").write_text(CHILD_RECIPE, encoding="utf-8")
    return root


def ci(folder: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["trainimg", "ci", *args], cwd=folder, capture_output=True, text=True, timeout=120,
                          env=env)


def option_matrix() -> Iterator[tuple[str, ...]]:
    """Flag sets covering each option's forms: runners (none, one, two), a job image, a base image, a subset of
    variants, other secret names, another branch, both registry forms."""
    runners: tuple[tuple[str, ...], ...] = (
        (), ("--runner", "gpu-a100"), ("--runner", "self-hosted", "--runner", "gpu"))
    extra: tuple[tuple[str, ...], ...] = (
        (), ("--image", "ghcr.io/acme/ci-runner:2026.11", "--base-image", "mirror.example/nvidia/cuda:13.0.0-base"),
        ("pytorch-*", CHILD, "--username-var", "REG_USER", "--password-var", "REG_TOKEN", "--branch", "release/v2",
         "--sign-key-var", "RELEASE_KEY", "--sign-password-var", "RELEASE_KEY_PASSPHRASE"),
    )
    for registry, run, more in product(REGISTRIES, runners, extra):
        yield ("--registry", registry, *run, *more)


def generate_all(checkout: Path, folder: Path, system: str) -> list[Path]:
    """The option matrix's pipelines, written by the CLI in this process (the subprocess path is tested above)."""
    files = []
    for i, flags in enumerate(option_matrix()):
        out = folder / f"{system}-{i}.yml"
        r = CliRunner().invoke(cli, ["ci", system, *flags, "--output", str(out)], catch_exceptions=False)
        assert r.exit_code == 0, (flags, r.output)
        files.append(out)
    return files


@pytest.mark.parametrize("system", sorted(SCHEMAS))
def test_every_generated_pipeline_passes_its_engines_schema(system: str, checkout: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            host_tool: Callable[[str], str]) -> None:
    monkeypatch.chdir(checkout)  # the jobs start at the checkout's root: `trainimg ci` runs there
    files = generate_all(checkout, tmp_path, system)
    r = subprocess.run([host_tool("check-jsonschema"), "--builtin-schema", SCHEMAS[system], *map(str, files)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    print(f"{system}: {len(files)} pipelines of the option matrix pass {SCHEMAS[system]}")
    # The same consumer refuses a file with a job key its engine does not know: the check is not vacuous.
    doc = yaml.safe_load(files[0].read_text())
    jobs = doc["jobs"] if system == "github" else doc
    job = next(v for k, v in jobs.items() if k.startswith("stage-"))
    job["script-after"] = ["true"]
    bad = tmp_path / "mutated.yml"
    bad.write_text(yaml.safe_dump(doc))
    r = subprocess.run([host_tool("check-jsonschema"), "--builtin-schema", SCHEMAS[system], str(bad)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "script-after" in r.stdout + r.stderr, r.stdout + r.stderr


def stage_scripts(system: str, doc: dict[str, Any]) -> dict[str, list[str]]:
    """{stage job: its trainimg release lines} of a generated pipeline."""
    if system == "gitlab":
        return {k: v["script"] for k, v in doc.items() if k.startswith("stage-")}
    return {k: [s["run"] for s in v["steps"] if "run" in s and s["run"].startswith("trainimg ")]
            for k, v in doc["jobs"].items() if k.startswith("stage-")}


def listed_variants(checkout: Path) -> list[dict[str, Any]]:
    r = subprocess.run(["trainimg", "list", "--json"], cwd=checkout, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    variants: list[dict[str, Any]] = json.loads(r.stdout)
    return variants


def expected_jobs(variants: list[dict[str, Any]]) -> int:
    """A stage job per root variant and architecture its group is built for (the child rides with its parent)."""
    arches: dict[str, set[str]] = {}
    by_name = {v["name"]: v for v in variants}
    for v in variants:
        root = v
        while root["extends"]:
            root = by_name[root["extends"]]
        arches.setdefault(root["name"], set()).update(v["arch"])
    return sum(len(a) for a in arches.values())


@pytest.mark.parametrize("system", sorted(SCHEMAS))
def test_a_job_per_root_variant_then_promote_needing_all(system: str, checkout: Path) -> None:
    registry = REGISTRIES[0]
    r = ci(checkout, system, "--registry", registry)
    assert r.returncode == 0, r.stderr
    doc = yaml.safe_load(r.stdout)
    scripts = stage_scripts(system, doc)
    released: dict[tuple[str, str], str] = {}
    for job, lines in scripts.items():
        assert len(lines) == 1, lines
        args = shlex.split(lines[0])
        assert args[:2] == ["trainimg", "release"] and "--stage" in args, args
        names = args[2:args.index("--stage")]
        arch = args[args.index("--arch") + 1] if "--arch" in args else "amd64"
        for name in names:
            assert (name, arch) not in released, (name, arch)
            released[name, arch] = job
        cache = [args[i + 1] for i, a in enumerate(args) if a == "--cache-from"]
        assert len(cache) == len(names), args
    variants = listed_variants(checkout)
    # every variant and architecture, each in exactly one job
    assert sorted(released) == sorted((v["name"], a) for v in variants for a in v["arch"])
    for v in variants:
        assert f"--cache-from {registry}/{v['tag']}" in " ".join(scripts[released[v["name"], "amd64"]])
    # the child rides with its parent: one job releases both, parent first
    parent_job = released["pytorch-2.13.0-cpu-py3.11", "amd64"]
    assert released[CHILD, "amd64"] == parent_job
    assert len(scripts) == expected_jobs(variants)
    promote = doc["promote"] if system == "gitlab" else doc["jobs"]["promote"]
    needs = [n["job"] for n in promote["needs"]] if system == "gitlab" else promote["needs"]
    assert sorted(needs) == sorted(scripts)
    print(f"{system}: {len(scripts)} stage jobs + 1 promote for {len(variants)} variants")


def test_credentials_are_only_named_never_written(checkout: Path) -> None:
    env = {**os.environ, "TRAINIMG_REGISTRY_PASSWORD": "s3cret-value", "REG_TOKEN": "s3cret-value"}
    for system in SCHEMAS:
        r = ci(checkout, system, "--registry", REGISTRIES[0], "--password-var", "REG_TOKEN", env=env)
        assert r.returncode == 0, r.stderr
        assert "s3cret-value" not in r.stdout
        assert '"$REG_TOKEN" | docker login registry.example.com' in r.stdout
    gh = yaml.safe_load(ci(checkout, "github", "--registry", REGISTRIES[0]).stdout)
    for job in gh["jobs"].values():  # only the login step sees the secrets
        with_secrets = [s for s in job["steps"] if "secrets." in json.dumps(s)]
        assert [s["name"] for s in with_secrets] == ["log in to registry.example.com"], with_secrets


@pytest.mark.parametrize("password_var", ["TRAINIMG_SIGN_PASSWORD", "RELEASE_KEY_PASSPHRASE"])
def test_only_promote_signs_with_the_key_from_the_cis_secrets(checkout: Path, password_var: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The key and its passphrase reach the promote step alone, by the secrets' names; no stage job (which runs
    the builds) sees them, and without --sign-key-var nothing signs."""
    flags = ("--registry", REGISTRIES[0], "--sign-key-var", "RELEASE_KEY", "--sign-password-var", password_var)

    def written(system: str, *args: str) -> Any:  # in process: a subprocess per pipeline costs seconds here
        r = CliRunner().invoke(cli, ["--recipes", str(checkout / "recipes"), "ci", system, *args],
                               catch_exceptions=False)
        assert r.exit_code == 0, r.output
        return yaml.safe_load(r.stdout)

    monkeypatch.chdir(checkout)  # the jobs start at the checkout's root: `trainimg ci` runs there
    gh = written("github", *flags)
    for name, job in gh["jobs"].items():
        named = [s.get("name") for s in job["steps"]
                 if "secrets.RELEASE_KEY" in json.dumps(s) or f"secrets.{password_var}" in json.dumps(s)]
        assert named == ([] if name != "promote" else ["the signing key, from the CI's secrets",
                                                       "move the tags if every variant passed"]), (name, named)
    steps = {s.get("name"): s for s in gh["jobs"]["promote"]["steps"]}
    assert steps["the signing key, from the CI's secrets"]["env"] == {"TRAINIMG_SIGN_KEY": "${{ secrets.RELEASE_KEY }}"}
    assert steps["move the tags if every variant passed"]["env"] == {
        "TRAINIMG_SIGN_PASSWORD": f"${{{{ secrets.{password_var} }}}}"}
    assert steps["move the tags if every variant passed"]["run"].endswith('--sign-key "$RUNNER_TEMP/trainimg-sign.key"')
    assert steps["remove the signing key"]["if"] == "${{ always() }}"
    gl = written("gitlab", *flags)
    script = gl["promote"]["script"]
    assert [line for line in script if "RELEASE_KEY" in line or "SIGN" in line] == [
        *([f'export TRAINIMG_SIGN_PASSWORD="${password_var}"'] if password_var != "TRAINIMG_SIGN_PASSWORD" else []),
        f'trainimg promote lock.d/ --registry {REGISTRIES[0]} --sign-key "$RELEASE_KEY"']
    assert not [k for k, v in gl.items() if k.startswith("stage-") and "sign" in json.dumps(v)]
    for system in SCHEMAS:  # without the flag nothing signs
        assert "--sign-key" not in json.dumps(written(system, "--registry", REGISTRIES[0]))


def shell_lines(system: str, doc: dict[str, Any]) -> list[str]:
    """Every shell line a generated pipeline runs."""
    if system == "gitlab":
        jobs = [doc["default"], *(v for v in doc.values() if isinstance(v, dict) and "script" in v)]
        return [line for job in jobs for key in ("before_script", "script") for line in job.get(key, [])]
    return [line for job in doc["jobs"].values() for step in job["steps"] for line in step.get("run", "").split("\n")]


def test_every_command_parses_with_the_real_cli(checkout: Path) -> None:
    """Each trainimg line both pipelines run is accepted by click's parser of this trainimg (flags and values)."""
    verbs = set()
    for system, signing in product(SCHEMAS, ((), ("--sign-key-var", "RELEASE_KEY"))):
        r = ci(checkout, system, "--registry", REGISTRIES[0], "--base-image", "local/debian:bookworm", *signing)
        assert r.returncode == 0, r.stderr
        for line in shell_lines(system, yaml.safe_load(r.stdout)):
            args = shlex.split(line)
            if not args or args[0] != "trainimg":
                continue
            args = args[3:] if args[1] == "--recipes" else args[1:]
            command = cli.commands[args[0]]  # KeyError: a verb this trainimg lacks
            command.make_context(args[0], args[1:])  # click.UsageError on an unknown flag or a bad value
            verbs.add(args[0])
    assert verbs == {"release", "promote", "matrix"}, verbs


AUDITS = [((), []), (("--advisories", "https://osv.example.internal"), ["--advisories", "https://osv.example.internal"]),
          (("--skip-audit",), ["--skip-audit"])]


@pytest.mark.parametrize("system", sorted(SCHEMAS))
def test_stage_jobs_audit_as_release_does(system: str, checkout: Path) -> None:
    """No audit flag: each stage's release audits against its own default (OSV's public API), with no flag in the
    file; --advisories and --skip-audit are passed on as given; both at once are refused, as release refuses them."""
    for flags, said in AUDITS:
        r = ci(checkout, system, "--registry", REGISTRIES[0], *flags)
        assert r.returncode == 0, r.stderr
        for lines in stage_scripts(system, yaml.safe_load(r.stdout)).values():
            args = shlex.split(lines[0])
            audit = [a for i, a in enumerate(args) if a in ("--advisories", "--skip-audit", "--waivers")
                     or args[i - 1] == "--advisories"]
            assert audit == said, (flags, args)
    r = ci(checkout, system, "--registry", REGISTRIES[0], "--advisories", "osv/", "--skip-audit")
    assert r.returncode == 2 and r.stderr.splitlines() == [
        "--skip-audit: --skip-audit skips the audit --advisories asks for: give one"], r.stderr


def test_a_recipes_folder_inside_the_checkout_is_named_as_the_jobs_see_it(checkout: Path, tmp_path: Path) -> None:
    sub = checkout / "ml" / "recipes"
    if not sub.exists():
        shutil.copytree(checkout / "recipes", sub)
    r = subprocess.run(["trainimg", "--recipes", str(sub), "ci", "gitlab", "--registry", REGISTRIES[0]], cwd=checkout,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = [line for line in shell_lines("gitlab", yaml.safe_load(r.stdout)) if line.startswith("trainimg ")]
    assert lines and all(line.startswith("trainimg --recipes ml/recipes ") for line in lines), lines
    r = subprocess.run(["trainimg", "--recipes", str(sub), "ci", "gitlab", "--registry", REGISTRIES[0]], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)  # run from outside the checkout
    assert r.returncode == 2 and "outside the current directory" in r.stderr, r.stderr


@pytest.mark.parametrize("flags,where", [
    (("--registry", "https://registry.example.com"), "--registry"),
    (("--registry", "r.example.com", "--password-var", "NOT-A-NAME"), "--password-var"),
    (("--registry", "r.example.com", "--base-image", "Bad Image"), "--base-image"),
    (("--registry", "r.example.com", "--install", "pip install ${{ github.token }}"), "--install"),
    (("--registry", "r.example.com", "no-such-variant"), "variant"),
    (("--registry", "r.example.com", "--branch", "a..b"), "--branch"),
])
def test_bad_input_is_one_line_and_exit_2(flags: tuple[str, ...], where: str, checkout: Path) -> None:
    r = ci(checkout, "gitlab", *flags)
    assert r.returncode == 2 and r.stdout == "", (r.stdout, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and where in r.stderr, r.stderr


def test_gitlab_ci_local_reads_the_generated_pipeline(checkout: Path, tmp_path: Path,
                                                      host_tool: Callable[[str], str]) -> None:
    """gitlab-ci-local (with GitLab's schema validation) lists the jobs: stage jobs in `stage`, promote after."""
    gitlab_ci_local = host_tool("gitlab-ci-local")  # .ci/setup-host installs it
    repo = tmp_path / "repo"
    shutil.copytree(checkout, repo)
    r = ci(repo, "gitlab", "--registry", REGISTRIES[0], "--output", str(repo / ".gitlab-ci.yml"))
    assert r.returncode == 0, r.stderr
    git = ["git", "-c", "user.email=ci@trainimg.test", "-c", "user.name=trainimg-test"]
    for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"], [*git, "commit", "-q", "-m", "pipeline"]):
        subprocess.run(cmd, cwd=repo, check=True, timeout=60)
    r = subprocess.run([gitlab_ci_local, "--list-json", "--json-schema-validation"], cwd=repo,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    jobs = {j["name"]: j for j in json.loads(r.stdout)}
    stages = {name for name, j in jobs.items() if j["stage"] == "stage"}
    assert stages == {n for n in jobs if n.startswith("stage-")} and len(stages) == expected_jobs(listed_variants(repo))
    assert jobs["promote"]["stage"] == "promote"
    assert sorted(n["job"] for n in jobs["promote"]["needs"]) == sorted(stages)


# ------------------------------------------------------------------------------------------------------------
# The support matrix


def entry(variant: str, version: str, *, passed: bool = True, cuda: str | None = None) -> LockEntry:
    tag = f"trainimg/pytorch:{version}"
    digest = "sha256:" + (variant.encode().hex() * 64)[:64]
    return LockEntry(variant=variant, recipe="recipes/pytorch.yaml", tag=tag, image_id="sha256:" + "1" * 64,
                     base_image="local/debian:bookworm", base_digest="sha256:" + "2" * 64,
                     versions={"framework": "2.13.0", "cuda": cuda, "nccl": "2.30.7" if cuda else None,
                               "cudnn": None, "python": "3.11.2"},
                     pushed={f"r.example.com/{tag}": digest,
                             f"r.example.com/trainimg/pytorch:{version.split('-')[0].rsplit('.', 1)[0]}-cpu": digest},
                     conformance={"passed": passed, "counts": {"passed": 12, "failed": 0 if passed else 1,
                                                               "skipped": 3, "warning": 0},
                                  "failed": [] if passed else ["allreduce_vertex_x2"], "platform": "vertex",
                                  "replicas": 2},
                     size=1_234_000_000, released="2026-11-24T08:00:00Z")


def matrix(*args: str) -> subprocess.CompletedProcess[str]:
    return trainimg("matrix", *args, timeout=60)


def test_matrix_markdown_has_a_row_per_variant(tmp_path: Path) -> None:
    lock = tmp_path / "images.lock"
    write_lock(lock, [entry("pytorch-2.13.0-cpu-py3.11", "2.13.0-cpu-py3.11"),
                      entry("pytorch-2.14.1-cu130-py3.11", "2.14.1-cu130-py3.11", cuda="13.0.96", passed=False)])
    r = matrix("--lock", str(lock), "--format", "md")
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("| `")]
    assert [row.split("|")[1].strip() for row in rows] == ["`pytorch-2.13.0-cpu-py3.11`",
                                                           "`pytorch-2.14.1-cu130-py3.11`"]
    assert "13.0.96" in rows[1] and "2.30.7" in rows[1] and "FAILED allreduce_vertex_x2" in rows[1]
    assert "1,234 MB" in rows[0] and "passed (12 passed, 3 skipped) on vertex ×2" in rows[0]


def test_matrix_without_a_lockfile_is_one_line_exit_2(tmp_path: Path) -> None:
    r = matrix("--lock", str(tmp_path / "none.lock"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "none.lock" in r.stderr, r.stderr


def test_matrix_html_is_self_contained_and_escaped(tmp_path: Path, chromium_render: Callable[..., str]) -> None:
    lock = tmp_path / "images.lock"
    hostile = "x<script>document.title='owned'</script>"  # a lockfile is user input: its text is escaped
    write_lock(lock, [entry("pytorch-2.13.0-cpu-py3.11", "2.13.0-cpu-py3.11"), entry(hostile, "2.13.0-cpu-py3.12")])
    page = tmp_path / "matrix.html"
    r = matrix("--lock", str(lock), "--format", "html", "--output", str(page))
    assert r.returncode == 0, r.stderr
    text = page.read_text()
    assert "<script" not in text and "http" not in text.replace('lang="en"', "")  # no script, no external asset
    dom = chromium_render(page, ROOT / "reports" / "matrix-escaping.png", tmp_path / "profile")
    assert f'data-variant="{hostile.replace("<", "&lt;").replace(">", "&gt;")}"' in dom
    assert "<title>trainimg support matrix</title>" in dom and "owned" not in dom.split("<body>")[0]
    assert dom.count("<tr data-variant=") == 2
