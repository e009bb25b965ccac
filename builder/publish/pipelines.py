"""CI pipelines people start from: `trainimg ci github` (a GitHub Actions workflow) and `trainimg ci gitlab` (a
`.gitlab-ci.yml`), both the same release across runners.

Why generated, not documented: the job list follows the recipes (a job per variant, or per group of variants that
`extends` one another, since a child builds on its parent in the same run), and the commands must spell the CLI's
contracts exactly. Each stage job logs in (BuildKit reads the registry cache with the docker client's login), runs
`trainimg release VARIANT... --stage --registry R --cache-from R/<tag>...` (build with the registry as cache, test,
push the immutable tag only, write `lock.d/<variant>.json`) and hands `lock.d/` on as an artifact; one `promote`
job needs every stage job, gathers the parts and runs `trainimg promote lock.d/ --registry R` (moving tags only if
every part passed, `images.lock` written), then `trainimg matrix` for the support matrix. Promote runs even after a
failed stage job (GitLab `when: always`, GitHub `!cancelled()`): the gate is trainimg's, whatever the engine's
retry rules, and a missing or failed part makes it refuse with a line naming it, moving nothing.

Credentials appear only as the names of CI secrets/variables (`CiOptions.username_var`, `password_var`); every
value that reaches a shell line is grammar-checked or quoted.

Architectures: a group whose variants are built for arm64 too gets a second stage job on an arm64 runner (`release
... --stage --arch arm64`; the amd64 job takes `--arch amd64`): native where the CI has arm64 runners, GitHub's
hosted ``ubuntu-24.04-arm`` and GitLab.com's ``saas-linux-medium-arm64`` by default (`--arm64-runner LABEL` names
another). With `--emulate-arm64` the group's one job builds arm64 too, under QEMU (GitHub:
docker/setup-qemu-action; GitLab: tonistiigi/binfmt). The file's header says which. Each architecture's job pushes
its images by digest and writes its part; promote puts each variant's index under its tag once every part passed.

With `--sign-key-var NAME` promote signs every image before a tag moves (`promote --sign-key`), with the key from
the CI's secret store: on GitHub the secret NAME holds the key's text, written to a mode-0600 file in the runner's
temporary folder for the promote step and removed after it; on GitLab NAME is a File variable (its value is the
path of a file holding the key). The passphrase comes from the secret `sign_password_var` as
`TRAINIMG_SIGN_PASSWORD`. Only promote signs: the stage jobs, which run the builds (and every package's install
scripts), never see the key.

With `--schedule CRON` the pipeline also runs on a schedule, where it rebuilds what changed and bumps the recipes
through a merge/pull request (`schedule`).
"""

from __future__ import annotations

import shlex
from collections.abc import Set
from dataclasses import dataclass
from typing import Any

import yaml

from ..errors import UserInputError
from ..options import DEFAULT_LOCK_DIR as STAGED_DIR  # `release --stage` writes it, `promote` reads it
from ..options.ci import CiOptions
from ..recipe.arches import ARCHES, DEFAULT_ARCH
from ..recipe.grammar import is_reference
from ..recipe.variant import RecipeSet, Variant
from .lockfile import DEFAULT_LOCK
from ..registry.references import RegistryTarget, why_unshared
from ..trust.keys import PASSWORD_VARS
from . import schedule

DEFAULT_RECIPES = "recipes"
MATRIX_FILES = {"md": "support-matrix.md", "html": "support-matrix.html"}
GITHUB_RUNNER = "ubuntu-latest"
GITHUB_ACTIONS = {  # the actions a workflow uses, by major version
    "checkout": "actions/checkout@v4",
    "upload": "actions/upload-artifact@v4",
    "download": "actions/download-artifact@v4",
}
ARTIFACT_PREFIX = "lock-"  # GitHub: one artifact per stage job, merged by promote
SIGN_PASSWORD_ENV = PASSWORD_VARS[0]  # what `--sign-key` reads the passphrase from
GITHUB_KEY_FILE = '"$RUNNER_TEMP/trainimg-sign.key"'  # the promote step's copy of the key (a shell word)


@dataclass(frozen=True)
class StageGroup:
    """One stage job: a root variant and every chosen variant that extends it (parents first), for one
    architecture (`arch`, the job's `--arch`) or, None, every one its variants are built for."""

    root: str
    variants: tuple[str, ...]
    tags: tuple[str, ...]  # local tags: their pushed images are the job's build cache
    arch: str | None = None
    emulated: bool = False  # it builds arm64 under QEMU on an amd64 runner

    @property
    def job(self) -> str:
        """The job's name (GitLab's, and GitHub's display name)."""
        return f"stage-{self.root}" + (f"-{self.arch}" if self.arch not in (None, DEFAULT_ARCH) else "")

    @property
    def job_id(self) -> str:
        """GitHub's job id grammar is `[A-Za-z_][A-Za-z0-9_-]*`: dots become underscores."""
        return self.job.replace(".", "_")


@dataclass(frozen=True)
class Plan:
    """What both pipelines run: the stage groups and the shell lines of each kind of job."""

    groups: tuple[StageGroup, ...]
    setup: tuple[str, ...]  # install trainimg, log in to the registry
    promote: tuple[str, ...]

    def stage(self, group: StageGroup, opts: CiOptions, target: RegistryTarget) -> str:
        """`trainimg release ... --stage` for one group, the registry's copy of each variant as its cache."""
        args = [*_trainimg(opts), "release", *group.variants, "--stage", "--registry", str(target)]
        if group.arch:
            args += ["--arch", group.arch]
        if opts.base_image:
            args += ["--base-image", opts.base_image]
        for tag in group.tags:
            args += ["--cache-from", target.ref(tag)]
        if opts.advisories:  # neither flag: release audits against its default source (OSV's public API)
            args += ["--advisories", opts.advisories]
        elif opts.skip_audit:
            args.append("--skip-audit")
        return shlex.join([*args, "--progress", "plain"])


def stage_groups(recipes: RecipeSet, patterns: tuple[str, ...], left: Set[tuple[str, str]] = frozenset(),
                 emulate: bool = False) -> tuple[StageGroup, ...]:
    """The chosen variants (all when `patterns` is empty) with their parents, one group per root variant; one per
    root and architecture where the variants are built for more than amd64, unless `emulate` (one job builds them
    all, arm64 under QEMU). `left`: the (variant, architecture) pairs no build makes (not lockable here)."""
    chosen = recipes.with_parents(recipes.select(list(patterns)))

    def root(v: Variant) -> str:
        while v.extends:
            v = recipes.by_name[v.extends]
        return v.name

    order: dict[str, list[Variant]] = {}
    for v in chosen:
        order.setdefault(root(v), []).append(v)
    groups = []
    for name, vs in order.items():
        arches = [a for a in ARCHES if any(a in v.arch and (v.name, a) not in left for v in vs)]
        if arches in ([DEFAULT_ARCH], []) or emulate:
            groups.append(StageGroup(name, tuple(v.name for v in vs), tuple(v.tag for v in vs),
                                     emulated=emulate and arches not in ([DEFAULT_ARCH], [])))
            continue
        for arch in arches:
            mine = [v for v in vs if arch in v.arch and (v.name, arch) not in left]
            groups.append(StageGroup(name, tuple(v.name for v in mine), tuple(v.tag for v in mine), arch))
    return tuple(groups)


def _trainimg(opts: CiOptions) -> list[str]:
    return ["trainimg"] if opts.recipes == DEFAULT_RECIPES else ["trainimg", "--recipes", opts.recipes]


def plan(recipes: RecipeSet, opts: CiOptions, left: Set[tuple[str, str]] = frozenset()
         ) -> tuple[Plan, RegistryTarget]:
    """Check every value that reaches a shell line, then lay out the jobs' commands."""
    target = RegistryTarget.parse(opts.registry)
    unshared = why_unshared(target.host)
    if unshared is not None and not opts.one_machine:
        raise UserInputError(f"{unshared} is each runner's own: every one would push to itself and "
                             "promote would find nothing; give one the runners share (ghcr.io/OWNER, registry.gitlab.com/GROUP), or --one-machine",
                             where="--registry")
    for flag, ref in (("--base-image", opts.base_image), ("--image", opts.image)):
        if ref is not None and not is_reference(ref):
            raise UserInputError(f"{ref!r} is not an image reference", where=flag)
    login = (f'printf \'%s\\n\' "${opts.password_var}" | docker login {shlex.quote(target.host)} '
             f'--username "${opts.username_var}" --password-stdin')
    matrix = [shlex.join([*_trainimg(opts), "matrix", "--lock", DEFAULT_LOCK, "--format", fmt, "--output", path])
              for fmt, path in MATRIX_FILES.items()]
    groups = stage_groups(recipes, opts.variants, left, opts.emulate_arm64)
    expected = [name for g in groups for name in g.variants] if opts.variants else []  # none: every variant
    promote = (shlex.join([*_trainimg(opts), "promote", f"{STAGED_DIR}/", *expected, "--registry", str(target)]),
               *matrix)
    return Plan(groups, (opts.install, login), promote), target


HEADER = ("# Generated by `trainimg ci {system}` from the recipes: regenerate it after changing them, rather than\n"
          "# editing it. Stage jobs build, test and push each variant's immutable tag; promote moves the tags\n"
          "# only if every variant passed.\n")
# The CI's own arm64 runners: GitHub-hosted `ubuntu-24.04-arm` (docs.github.com, "GitHub-hosted runners
# reference": standard runners for Linux arm64) and GitLab.com's `saas-linux-medium-arm64` (docs.gitlab.com,
# "Hosted runners on Linux": the arm64 machine types and their tags).
ARM64_RUNNERS = {"github": "ubuntu-24.04-arm", "gitlab": "saas-linux-medium-arm64"}
QEMU_ACTION = "docker/setup-qemu-action@v3"  # registers QEMU's binfmt handlers on the runner
QEMU_GITLAB = "docker run --privileged --rm tonistiigi/binfmt --install arm64"  # the same, where no action exists


def arm64_runner(opts: CiOptions) -> str:
    return opts.arm64_runner or ARM64_RUNNERS[opts.system]


SCHEDULED = ("# On the schedule ({cron}) it also rebuilds what changed (a republished base) and the bump job opens a\n"
             "# merge/pull request with the recipes moved to what is newer upstream.{gitlab}\n")
GITLAB_SCHEDULE = ("\n# GitLab: add the schedule in the project (Build > Pipeline schedules) with that cron; the bump job\n"
                   "# needs {token}, a masked variable holding a project access token (api, write_repository).")


def signed(line: str, key_file: str | None) -> str:
    """The promote line, signing with the key in `key_file` (a shell word: a variable's value) when there is one."""
    return f"{line} --sign-key {key_file}" if key_file else line


def _dump(system: str, doc: dict[str, Any], groups: tuple[StageGroup, ...] = (), opts: CiOptions | None = None
          ) -> str:
    """The file: the header (how its arm64 images are built, where it builds any; its schedule), then the YAML."""
    header = HEADER.format(system=system)
    if opts is not None and any(g.arch not in (None, DEFAULT_ARCH) for g in groups):
        header += f"# arm64: built natively, in the *-arm64 stage jobs, on the arm64 runner `{arm64_runner(opts)}`.\n"
    elif any(g.emulated for g in groups):
        header += "# arm64: built under emulation (QEMU) in the amd64 stage jobs: no arm64 runner was asked for.\n"
    if opts is not None and opts.schedule:
        note = GITLAB_SCHEDULE.format(token=schedule.token_var(opts)) if system == "gitlab" else ""
        header += SCHEDULED.format(cron=opts.schedule, gitlab=note)
        if opts.regenerate:
            header += (f"# The bump job writes this file again (`trainimg ci {system} ... --output`, the words that wrote it)"
                       "\n# and commits it with the recipes it moved"
                       + (": its push needs a token that may change workflows (--token-var, a PAT or app's)."
                          if system == "github" and not opts.token_var else ".") + "\n")
    return header + yaml.safe_dump(doc, sort_keys=False, width=1000, default_flow_style=False)


def github_workflow(recipes: RecipeSet, opts: CiOptions, left: Set[tuple[str, str]] = frozenset()) -> str:
    """A GitHub Actions workflow: a stage job per group (and architecture), then promote needing all of them."""
    p, target = plan(recipes, opts, left)
    secrets = {name: f"${{{{ secrets.{name} }}}}" for name in (opts.username_var, opts.password_var)}
    runner: str | list[str] = list(opts.runner) if len(opts.runner) > 1 else (opts.runner or (GITHUB_RUNNER,))[0]

    def job(name: str, steps: list[dict[str, Any]], needs: list[str] | None = None,
            runs_on: str | list[str] = runner) -> dict[str, Any]:
        body: dict[str, Any] = {"name": name, "runs-on": runs_on}
        if needs:
            body["needs"] = needs
        if opts.image:
            body["container"] = {"image": opts.image}
        setup = [{"name": "install trainimg", "run": p.setup[0]},  # only the login step sees the secrets
                 {"name": f"log in to {target.host}", "env": dict(secrets), "run": p.setup[1]}]
        body["steps"] = [{"uses": GITHUB_ACTIONS["checkout"]}, *setup, *steps]
        return body

    qemu = [{"name": "arm64 under emulation: QEMU's binfmt handlers", "uses": QEMU_ACTION,
             "with": {"platforms": "arm64"}}]
    jobs = {g.job_id: job(g.job, [
        *(qemu if g.emulated else []),
        {"name": "build, test, push the immutable tags", "run": p.stage(g, opts, target)},
        {"if": "${{ !cancelled() }}", "uses": GITHUB_ACTIONS["upload"],  # a failed part too: promote names it
         "with": {"name": ARTIFACT_PREFIX + g.job[len("stage-"):], "path": f"{STAGED_DIR}/",
                  "if-no-files-found": "warn"}},
    ], runs_on=arm64_runner(opts) if g.arch not in (None, DEFAULT_ARCH) else runner) for g in p.groups}
    jobs["promote"] = job("promote", [
        {"uses": GITHUB_ACTIONS["download"], "with": {"pattern": ARTIFACT_PREFIX + "*", "path": STAGED_DIR,
                                                      "merge-multiple": True}},
        *_github_promote(p, opts),
        {"name": "support matrix",
         "run": "\n".join([*p.promote[1:], f'cat {MATRIX_FILES["md"]} >> "$GITHUB_STEP_SUMMARY"'])},
        {"uses": GITHUB_ACTIONS["upload"],
         "with": {"name": "images-lock", "path": "\n".join([DEFAULT_LOCK, *MATRIX_FILES.values()])}},
    ], needs=[g.job_id for g in p.groups])
    jobs["promote"]["if"] = "${{ !cancelled() }}"  # promote is the gate: it runs, and refuses a missing part
    on: dict[str, Any] = {"push": {"branches": [opts.branch]}, "workflow_dispatch": {}}
    if opts.schedule:
        on["schedule"] = [{"cron": opts.schedule}]
        jobs["bump"] = schedule.github_job(_trainimg(opts), opts, {"name": "install trainimg", "run": p.setup[0]},
                                           runner)
    doc = {"name": "trainimg release",
           "on": on,
           "permissions": {"contents": "read"},
           "concurrency": {"group": "trainimg-release", "cancel-in-progress": False},
           "jobs": jobs}
    return _dump("github", doc, p.groups, opts)


def _github_promote(p: Plan, opts: CiOptions) -> list[dict[str, Any]]:
    """The promote step, signing with the key from the secret `opts.sign_key_var` when there is one: written to a
    mode-0600 file for that step only (the steps before and after it never see the secret), removed after it."""
    move = {"name": "move the tags if every variant passed"}
    if not opts.sign_key_var:
        return [{**move, "run": p.promote[0]}]
    write = {"name": "the signing key, from the CI's secrets",
             "env": {"TRAINIMG_SIGN_KEY": f"${{{{ secrets.{opts.sign_key_var} }}}}"},
             "run": f"umask 077\nprintf '%s\\n' \"$TRAINIMG_SIGN_KEY\" > {GITHUB_KEY_FILE}"}
    sign = {**move, "env": {SIGN_PASSWORD_ENV: f"${{{{ secrets.{opts.sign_password_var} }}}}"},
            "run": signed(p.promote[0], GITHUB_KEY_FILE)}
    remove = {"name": "remove the signing key", "if": "${{ always() }}", "run": f"rm -f {GITHUB_KEY_FILE}"}
    return [write, sign, remove]


def gitlab_pipeline(recipes: RecipeSet, opts: CiOptions, left: Set[tuple[str, str]] = frozenset()) -> str:
    """A `.gitlab-ci.yml`: stage jobs (per architecture) in stage `stage`, then promote needing every one."""
    p, target = plan(recipes, opts, left)
    default: dict[str, Any] = {}
    if opts.image:
        default["image"] = opts.image
    if opts.runner:
        default["tags"] = list(opts.runner)
    default["before_script"] = list(p.setup)
    doc: dict[str, Any] = {
        "workflow": {"rules": [{"if": f'$CI_COMMIT_BRANCH == "{opts.branch}"'},
                               {"if": '$CI_PIPELINE_SOURCE == "web"'}]},
        "stages": ["stage", "promote"],
        "default": default,
    }
    if opts.schedule:
        doc["workflow"]["rules"].append({"if": '$CI_PIPELINE_SOURCE == "schedule"'})
        doc["stages"].insert(0, "bump")
        doc["bump"] = schedule.gitlab_job(_trainimg(opts), opts, p.setup[0])
    for g in p.groups:
        doc[g.job] = {"stage": "stage", "script": [*([QEMU_GITLAB] if g.emulated else []), p.stage(g, opts, target)],
                      "artifacts": {"paths": [f"{STAGED_DIR}/"], "expire_in": "1 week",
                                    "when": "always"}}  # a failed part too: promote names its failed checks
        if g.arch not in (None, DEFAULT_ARCH):
            doc[g.job]["tags"] = [arm64_runner(opts)]
    promote = list(p.promote)
    if opts.sign_key_var:  # a File variable: its value is the key file's path
        promote[0] = signed(promote[0], f'"${opts.sign_key_var}"')
        if opts.sign_password_var != SIGN_PASSWORD_ENV:
            promote.insert(0, f'export {SIGN_PASSWORD_ENV}="${opts.sign_password_var}"')
    doc["promote"] = {"stage": "promote", "needs": [{"job": g.job, "artifacts": True} for g in p.groups],
                      "when": "always",  # promote is the gate: it runs, and refuses a missing part
                      "resource_group": "trainimg-promote", "script": promote,
                      "artifacts": {"paths": [DEFAULT_LOCK, *MATRIX_FILES.values()], "expire_in": "1 year"}}
    return _dump("gitlab", doc, p.groups, opts)


WRITERS = {"github": github_workflow, "gitlab": gitlab_pipeline}


def pipeline(recipes: RecipeSet, opts: CiOptions, left: Set[tuple[str, str]] = frozenset()) -> str:
    """The pipeline file for `opts.system`; `left`: the (variant, architecture) pairs no build makes."""
    return WRITERS[opts.system](recipes, opts, left)
