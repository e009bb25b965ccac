"""One typed, frozen, keyword-only options object per verb, with its defaults and limits in one place.

The CLI's click options read their defaults, choices and the limits they show from here, and the library
functions take these objects instead of long lists of loose parameters (cibuildwheel's options model), so a limit
changed here changes the flag, its help and the check together. Each object checks itself on construction: bad
values are the user's to fix (UserInputError naming the flag, exit 2).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType

from ..errors import UserInputError
from .compression import DEFAULT_COMPRESSION, Compression
from ..runtime.contract import DEFAULT_PLATFORM, DEFAULT_TEST_TIMEOUT, PLATFORMS, TEST_TIMEOUT_RANGE
from ..runtime.platforms import FORCEABLE

LOCAL = "local"  # a job without a platform: one container, no cluster env
GOALS = ("max", "min")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # what `--env NAME=VALUE` accepts as NAME


@dataclass(frozen=True)
class IntLimit:
    """An inclusive integer range a flag accepts."""

    low: int
    high: int

    def check(self, value: object, flag: str, what: str = "") -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not self.low <= value <= self.high:
            raise UserInputError(f"{value!r}{what}: use {self.low} to {self.high}", where=flag)
        return value

    def __str__(self) -> str:
        return f"{self.low}..{self.high}"


@dataclass(frozen=True)
class SecondsLimit:
    """An open-closed range of seconds a timeout accepts."""

    low: float
    high: float

    def check(self, value: object, flag: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not self.low <= value <= self.high:
            raise UserInputError(f"{value!r}: use {self.low:g} to {self.high:g} seconds", where=flag)
        return float(value)


REPLICAS = IntLimit(1, 64)  # containers of one job on one engine
SIDE_REPLICAS = IntLimit(0, 64)  # ps, evaluators
NPROC_PER_NODE = IntLimit(1, 64)  # processes in one replica (one per GPU, or CPU workers)
PARALLEL_TRIALS = IntLimit(1, 64)
BUILD_JOBS = IntLimit(1, 16)
INSTALLERS = ("uv", "pip")  # what installs a variant's lock in the build (`--installer`)
DEFAULT_INSTALLER = "uv"
TEST_TIMEOUT = SecondsLimit(*TEST_TIMEOUT_RANGE)
JOB_TIMEOUT = SecondsLimit(1, 30 * 24 * 3600)
NO_TIMEOUT = 10.0**9  # what the replica runner waits for a job without --timeout
DEFAULT_LOCK_DIR = "lock.d"  # where `release --stage` writes one part per variant for `trainimg promote`


@dataclass(frozen=True, kw_only=True)
class LockOptions:
    """`trainimg lock`: the wheel folders it resolves from (as the build serves them) and how far versions move."""

    wheelhouses: tuple[Path, ...] = ()
    upgrade: bool = False  # re-resolve every package to the newest that fits
    upgrade_packages: tuple[str, ...] = ()  # only these move; the rest keep the lock's pins

    def __post_init__(self) -> None:
        if self.upgrade and self.upgrade_packages:
            raise UserInputError("--upgrade moves every package already; drop --upgrade-package",
                                 where="--upgrade-package")


@dataclass(frozen=True, kw_only=True)
class BuildOptions:
    """`trainimg build` (and release's build step); the CLI fills it from flags and the environment."""

    base_image: str | None = None  # `--base-image REF`: every architecture's base
    arch_bases: Mapping[str, str] = field(default_factory=dict)  # `--base-image ARCH=REF`: one architecture's
    ca_bundle: Path | None = None
    wheelhouses: tuple[Path, ...] = ()
    allow_missing: tuple[str, ...] = ()
    jobs: int = 3  # variants built at once after their shared parents
    # variant name (`arches.arch_key`: @arch off amd64) -> base image for that root variant and architecture (`build
    # --locked`: lock.locked_bases); wins over arch_bases and base_image.
    base_overrides: Mapping[str, str] = field(default_factory=dict)
    # Registry images to reuse BuildKit's inline cache from (`--cache-from`; `release` adds the locked image).
    cache_from: tuple[str, ...] = ()
    # variant name -> its inputs key (publish/inputs.py), labelled on the image; `release` fills it in.
    inputs_keys: Mapping[str, str] = field(default_factory=dict)
    # What installs the lock in the build: uv (default), or pip (`--installer pip`); both check every hash.
    installer: str = DEFAULT_INSTALLER
    # Run every step anew, BuildKit's layer cache unused (`verify` rebuilds so; the wheel cache mount still serves).
    no_cache: bool = False
    # Only these (variant, architecture) pairs (`arches.arch_key`) and what they are built on; empty: every pair
    # (`release` builds only what changed, per architecture).
    only: frozenset[str] = frozenset()
    # `--arch`: only these CPU architectures of the variants (recipe/arches.py, checked by the CLI); empty: every one
    # each variant lists (a CI job per architecture on its own runner builds one).
    arches: tuple[str, ...] = ()
    # variant name -> the audit document its SBOM step reads (builder/audit/vex.py: the audit's state and VEX);
    # `build --advisories` and `release` fill it after their audit, a variant without one is built not audited.
    audits: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        BUILD_JOBS.check(self.jobs, "--jobs")
        if self.installer not in INSTALLERS:
            raise UserInputError(f"{self.installer!r}: use {' or '.join(INSTALLERS)}", where="--installer")


# How old advisory data may be (`--max-age DAYS`): a week. OSV's own service is current within the hour; a mirror
# or an air-gapped folder synced at least weekly stays inside it, and data older than that means the sync broke:
# a fix published since would go unseen, so the audit refuses it instead of passing on stale data.
AUDIT_MAX_AGE = IntLimit(0, 36500)
DEFAULT_MAX_AGE_DAYS = 7
# Where `release` and `audit` read advisories without `--advisories`: OSV's public API, a public service as
# pip-audit's default source is (PyPI's JSON API; pip-audit's `osv` source asks this same API, its DEFAULT_OSV_URL).
# It answers from data it keeps current. A machine that cannot reach it gives another source (`--advisories
# DIR|URL`: a folder, a mirror) or skips the audit explicitly (`release --skip-audit`): nothing passes unaudited.
OSV_API = "https://api.osv.dev"


@dataclass(frozen=True, kw_only=True)
class AuditOptions:
    """`trainimg audit`, and `build`'s and `release`'s audit before they build: where advisories come from
    (`--advisories DIR|URL`, else the verb's default), the committed waivers, how old the data may be, or the
    explicit `--skip-audit`."""

    advisories: str | None = None  # `--advisories` as given
    # The source without `--advisories`: OSV_API for `release` and `audit`; None for `build`, which audits only when
    # asked (its SBOM then says not audited).
    default: str | None = None
    waivers: Path | None = None
    max_age_days: int = DEFAULT_MAX_AGE_DAYS
    skip: bool = False

    def __post_init__(self) -> None:
        AUDIT_MAX_AGE.check(self.max_age_days, "--max-age", " days")
        if self.skip and self.advisories:
            raise UserInputError("--skip-audit skips the audit --advisories asks for: give one", where="--skip-audit")

    @property
    def source(self) -> str | None:
        """What the audit reads: `--advisories`, else the default; None when there is no audit to run."""
        return None if self.skip else self.advisories or self.default


# Who sends an image's layers on `push`: trainimg's registry client (the default), which sends only the layers the
# registry lacks whatever the engine remembers (registry/blobpush.py) and pushes the image config with fixed times, so
# two builds of the same inputs push one digest (registry/imageconfig.py); the engine (`docker push`), which streams
# a first push without dockerd staging a copy of the image for `docker save` (the client's source: ~6 GB beside a
# GPU image) but pushes BuildKit 0.8's clock times, a new digest per build, and gzip only; `auto`: the engine when
# the registry holds no layer of the image (the tag, the release's other images), else the client.
AUTO_UPLOAD, ENGINE_UPLOAD, CLIENT_UPLOAD = "auto", "engine", "client"
UPLOADS = (AUTO_UPLOAD, ENGINE_UPLOAD, CLIENT_UPLOAD)
DEFAULT_UPLOAD = CLIENT_UPLOAD


@dataclass(frozen=True, kw_only=True)
class TestOptions:
    """`trainimg test` (and release's test step): whose env the replicas get, how many, for how long."""

    __test__ = False  # not a pytest test class, whatever its name says

    platform: str = DEFAULT_PLATFORM
    replicas: int = 2
    timeout: float = DEFAULT_TEST_TIMEOUT
    nproc_per_node: int = 1
    structure_tests: tuple[Path, ...] = ()  # teams' container-structure-test configs (conformance/structure.py)
    shm_size: int | None = None  # bytes of /dev/shm each container gets; None: what the platform gives (runtime/shm.py)
    # Also check the OS packages against the release's security suite (conformance/osfixes.py), pending fixes judged
    # with the committed `waivers` (the audit's file).
    os_fixes: bool = False
    waivers: Path | None = None

    def __post_init__(self) -> None:
        IntLimit(1, 1 << 50).check(1 if self.shm_size is None else self.shm_size, "--shm-size", " bytes")  # or None
        if self.platform not in PLATFORMS:
            raise UserInputError(f"{self.platform!r} is not one of {', '.join(PLATFORMS)}", where="--platform")
        REPLICAS.check(self.replicas, "--replicas", " replicas")
        NPROC_PER_NODE.check(self.nproc_per_node, "--nproc-per-node", " processes per node")
        TEST_TIMEOUT.check(self.timeout, "--timeout")


def _check_env(env: Mapping[str, str]) -> None:
    bad = [k for k in env if not ENV_NAME.fullmatch(k)]
    if bad:
        raise UserInputError(f"{bad[0]!r} is not a variable name", where="--env")


@dataclass(frozen=True, kw_only=True)
class JobOptions:
    """`trainimg run`: a job's shape (as the platform would lay it out) and what goes into its containers.

    `volumes` maps host paths to container paths (`jobs.run.parse_volumes` reads `SRC:DST` flags);
    `trial` sets the platform's ``task.trial`` and ``CLOUD_ML_TRIAL_ID``; no `platform` means one container."""

    command: tuple[str, ...]  # empty: the image's own ENTRYPOINT and CMD (`run` without `-- CMD`, as `docker run`)
    platform: str | None = None
    replicas: int = 1
    ps: int | None = None
    evaluators: int = 0
    nproc_per_node: int = 1
    env: Mapping[str, str] = field(default_factory=dict)
    volumes: Mapping[str, str] = field(default_factory=dict)
    timeout: float | None = None
    trial: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "command", tuple(self.command))
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))
        object.__setattr__(self, "volumes", MappingProxyType(dict(self.volumes)))
        if not all(isinstance(a, str) for a in self.command) or (self.command and not self.command[0]):
            raise UserInputError("give the command to run after `--`, e.g. -- python train.py", where="command")
        if self.platform is not None and self.platform not in PLATFORMS:
            raise UserInputError(f"{self.platform!r} is not one of {', '.join(PLATFORMS)}", where="--platform")
        REPLICAS.check(self.replicas, "--replicas")
        if self.ps is not None:
            SIDE_REPLICAS.check(self.ps, "--ps")
        SIDE_REPLICAS.check(self.evaluators, "--evaluators")
        NPROC_PER_NODE.check(self.nproc_per_node, "--nproc-per-node")
        if self.timeout is not None:
            JOB_TIMEOUT.check(self.timeout, "--timeout")
        _check_env(self.env)
        if self.trial is not None and (not isinstance(self.trial, str) or not self.trial.strip()):
            raise UserInputError(f"{self.trial!r}: give a non-empty trial id", where="--trial")

    @property
    def where(self) -> str:
        """The platform, or `local` for one container without a platform's env."""
        return self.platform or LOCAL


@dataclass(frozen=True, kw_only=True)
class TuneOptions:
    """`trainimg tune`: the grid, how to judge it, how many trials at once, and each trial's job."""

    params: Mapping[str, Sequence[str]]
    job: JobOptions
    metric: str | None = None
    goal: str = GOALS[0]
    parallel: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", MappingProxyType({k: tuple(v) for k, v in self.params.items()}))
        if not self.params:
            raise UserInputError("give at least one --param NAME=V1,V2,...", where="--param")
        if self.goal not in GOALS:
            raise UserInputError(f"{self.goal!r}: use {' or '.join(GOALS)}", where="--goal")
        PARALLEL_TRIALS.check(self.parallel, "--parallel", " trials at once")
        if self.job.trial is not None:
            raise UserInputError("tune numbers the trials itself", where="--trial")
        if not self.job.command:  # each trial's program gets the trial's --NAME=value flags
            raise UserInputError("give the command to run after `--`, e.g. -- python train.py", where="command")


@dataclass(frozen=True, kw_only=True)
class ClusterOptions:
    """`trainimg cluster`: the process-level view is added when `nproc_per_node` is given; `reduction_server`
    says a Vertex workerpool2 holds reducers, not parameter servers."""

    nproc_per_node: int | None = None
    reduction_server: bool = False
    platform: str | None = None  # read this platform's variables (runtime.platforms.FORCEABLE), whatever is set

    def __post_init__(self) -> None:
        if self.nproc_per_node is not None:
            NPROC_PER_NODE.check(self.nproc_per_node, "--nproc-per-node")
        if self.platform is not None and self.platform not in FORCEABLE:
            raise UserInputError(f"{self.platform!r} is not one of {', '.join(FORCEABLE)}", where="--platform")


@dataclass(frozen=True, kw_only=True)
class ReleaseOptions:
    """`trainimg release`: build, test, then push only if every variant passed, then lock."""

    build: BuildOptions
    test: TestOptions
    # The advisory audit before anything is built (`--advisories`, or the explicit `--skip-audit`); None only for
    # callers of the library that audit themselves: the CLI always sets it.
    audit: AuditOptions | None = None
    lock_path: str | None = None
    rebuild: bool = False  # build, test and push even a variant whose inputs key and passed image are in the registry
    # One CI job of many: push the immutable tags only, write a part per variant into lock_dir (the lockfile is
    # read, for what to skip and the cache, never written: `trainimg promote` writes it).
    stage: bool = False
    lock_dir: str = DEFAULT_LOCK_DIR
    upload: str = DEFAULT_UPLOAD  # who sends the layers (`--upload`): the engine, or trainimg's registry client
    compression: Compression = DEFAULT_COMPRESSION  # `--compression`: how the client writes the layers it sends
    sign_key: Path | None = None  # `--sign-key`: sign and attest what is pushed, before any tag moves

    def __post_init__(self) -> None:
        if not self.lock_dir.strip():
            raise UserInputError("give a folder", where="--lock-dir")
        if self.lock_dir != DEFAULT_LOCK_DIR and not self.stage:
            raise UserInputError("--lock-dir is where --stage writes its parts: add --stage", where="--lock-dir")
        if self.upload not in UPLOADS:
            raise UserInputError(f"{self.upload!r}: use {' or '.join(UPLOADS)}", where="--upload")
        check_transport(self.upload, self.compression)


def check_transport(upload: str, compression: Compression) -> None:
    """The engine writes gzip only: zstd goes through the client (`auto` picks it)."""
    if upload == ENGINE_UPLOAD and compression != DEFAULT_COMPRESSION:
        raise UserInputError(f"the engine's push writes gzip only; {compression} goes through trainimg's registry "
                             "client: drop --upload engine", where="--compression")


@dataclass(frozen=True, kw_only=True)
class PromoteOptions:
    """`trainimg promote LOCK_DIR`: the parts the stage jobs wrote, the variants expected (none: every variant of
    the recipes; each with its parents) and the lockfile the promotion is merged into."""

    lock_dir: Path
    variants: tuple[str, ...] = ()
    lock_path: str | None = None
    sign_key: Path | None = None  # `--sign-key`: sign and attest every promoted image before a tag moves

    def __post_init__(self) -> None:
        object.__setattr__(self, "variants", tuple(self.variants))
        if not self.lock_dir.is_dir():
            raise UserInputError(f"{self.lock_dir} is not a folder of stage parts (`release --stage` writes them)")


@dataclass(frozen=True, kw_only=True)
class PruneOptions:
    """`trainimg prune`: only images that also carry every one of `labels` (KEY=VALUE); `dry_run` lists them."""

    labels: Mapping[str, str] = field(default_factory=dict)
    dry_run: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))
        for key in self.labels:
            if not key or "=" in key:
                raise UserInputError(f"{key!r}: use --label KEY=VALUE", where="--label")


def default(options: type, name: str) -> object:
    """The default of one field of an options class: what the click option shows and uses."""
    for f in fields(options):
        if f.name == name:
            return f.default
    raise KeyError(f"{options.__name__} has no option {name!r}")


PYPI_SIMPLE = "https://pypi.org/simple/"  # the index `outdated`, `compat add` and `bump` read by default


def index_url(given: str | None, env: Mapping[str, str]) -> str:
    """The PEP 691 index read for releases: `--index-url`, else $PIP_INDEX_URL, else PyPI."""
    url = (given or env.get("PIP_INDEX_URL") or PYPI_SIMPLE).strip()
    if not url.startswith(("http://", "https://")):
        raise UserInputError(f"{url!r}: give the http(s) URL of a simple index (PEP 691)", where="--index-url")
    return url
