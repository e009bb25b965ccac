"""The options of `trainimg ci github|gitlab` (the pipelines publish/pipelines.py writes) and `trainimg matrix`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import UserInputError
from . import ENV_NAME, index_url

CI_SYSTEMS = ("github", "gitlab")  # `trainimg ci SYSTEM`: the CI engines a pipeline is written for
MATRIX_FORMATS = ("md", "html")  # `trainimg matrix --format`
CI_BRANCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,199}")  # a branch name both engines accept unquoted
CRON = re.compile(r"[0-9*/,A-Za-z-]+(?: [0-9*/,A-Za-z-]+){4}")  # five fields: minute hour day month weekday


@dataclass(frozen=True, kw_only=True)
class CiOptions:
    """`trainimg ci github|gitlab`: the pipeline's registry, variants, runners and where its secrets come from.

    Credentials are never values here, only the names of the CI secrets/variables that hold them, so a generated
    file can be committed. `install` is the shell line that puts trainimg on each job's PATH (default: the
    checkout, `python3 -m pip install .`)."""

    system: str
    registry: str
    variants: tuple[str, ...] = ()  # names or globs; none: every variant of the recipes
    base_image: str | None = None  # `release --base-image`: a mirror of the recipes' FROM
    runner: tuple[str, ...] = ()  # GitHub `runs-on` labels (none: ubuntu-latest), GitLab runner `tags`
    image: str | None = None  # the container image the jobs run in (GitHub `container`, GitLab `image`)
    install: str = "python3 -m pip install ."
    username_var: str = "TRAINIMG_REGISTRY_USER"
    password_var: str = "TRAINIMG_REGISTRY_PASSWORD"
    branch: str = "main"  # releases run on pushes to this branch (and by hand)
    recipes: str = "recipes"  # the recipes folder, relative to the checkout
    one_machine: bool = False  # every job runs on this machine (gitlab-ci-local): a loopback registry is shared
    # Where arm64 images are built: a job of their own on this arm64 runner label (None: the CI's hosted one,
    # publish/pipelines.py), or, with `emulate_arm64`, in the amd64 job under QEMU (a fleet without arm64 machines).
    arm64_runner: str | None = None
    emulate_arm64: bool = False
    # The audit each stage job's `release` runs: `--advisories` this source; `skip_audit`: `--skip-audit`, in the file
    # for review; neither: release's default source (OSV's public API), no flag.
    advisories: str | None = None
    skip_audit: bool = False
    # Signing in promote (the one job that holds the key; stage jobs, which run the builds, never see it): the CI
    # secret holding the private key (GitHub: its PEM text; GitLab: a File variable), and the passphrase's.
    sign_key_var: str | None = None
    sign_password_var: str = "TRAINIMG_SIGN_PASSWORD"


    # The schedule side (publish/schedule.py): its cron, the index its outdated and bump read, and the CI secret or
    # variable holding the token that pushes the bump's branch and opens the merge/pull request.
    schedule: str | None = None
    index_url: str | None = None
    token_var: str | None = None
    # The `trainimg ci SYSTEM` words that wrote this file (its --output among them): the bump job runs them again
    # after a bump, so the committed pipeline's jobs follow the variants the bump renamed. Empty: the file went to
    # stdout, and nothing names where it lives.
    regenerate: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "variants", tuple(self.variants))
        if self.skip_audit and self.advisories:
            raise UserInputError("--skip-audit skips the audit --advisories asks for: give one", where="--skip-audit")
        object.__setattr__(self, "runner", tuple(self.runner))
        object.__setattr__(self, "regenerate", tuple(self.regenerate))
        if self.schedule is not None and not CRON.fullmatch(self.schedule):
            raise UserInputError(f"{self.schedule!r}: give a cron of five fields, e.g. '17 4 * * 1'", where="--schedule")
        if self.token_var is not None and not ENV_NAME.fullmatch(self.token_var):
            raise UserInputError(f"{self.token_var!r} is not a variable name", where="--token-var")
        if (self.index_url or self.token_var) and self.schedule is None:
            raise UserInputError("it is read by the schedule side only: add --schedule CRON",
                                 where="--index-url" if self.index_url else "--token-var")
        if self.index_url is not None:
            index_url(self.index_url, {})
        if self.system not in CI_SYSTEMS:
            raise UserInputError(f"{self.system!r} is not one of {', '.join(CI_SYSTEMS)}")
        for flag, name in (("--username-var", self.username_var), ("--password-var", self.password_var),
                           ("--sign-key-var", self.sign_key_var or "X"),
                           ("--sign-password-var", self.sign_password_var)):
            if not ENV_NAME.fullmatch(name):
                raise UserInputError(f"{name!r} is not a variable name", where=flag)
        if self.emulate_arm64 and self.arm64_runner is not None:
            raise UserInputError("--emulate-arm64 builds arm64 in the amd64 jobs: drop --arm64-runner",
                                 where="--emulate-arm64")
        lines = (("--install", self.install), *(("--runner", r) for r in self.runner),
                 *((("--arm64-runner", self.arm64_runner),) if self.arm64_runner is not None else ()))
        for flag, text in lines:
            if not text.strip() or "\n" in text or "${{" in text:
                raise UserInputError(f"{text!r}: give one non-empty line without `${{{{`", where=flag)
        if not CI_BRANCH.fullmatch(self.branch) or ".." in self.branch:
            raise UserInputError(f"{self.branch!r} is not a branch name", where="--branch")
        if not self.recipes.strip() or "\n" in self.recipes:
            raise UserInputError(f"{self.recipes!r} is not a folder", where="--recipes")


@dataclass(frozen=True, kw_only=True)
class MatrixOptions:
    """`trainimg matrix`: which lockfile (None: the default images.lock) and which page format."""

    lock_path: str | None = None
    format: str = MATRIX_FORMATS[0]

    def __post_init__(self) -> None:
        if self.format not in MATRIX_FORMATS:
            raise UserInputError(f"{self.format!r}: use {' or '.join(MATRIX_FORMATS)}", where="--format")
