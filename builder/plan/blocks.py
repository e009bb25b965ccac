"""Building blocks: one small function per component, each rendering its own template into Dockerfile text.

A block takes resolved, validated values (never raw recipe input) and returns a `Block`; `plan` composes blocks
into stages. Each block has a golden test (tests/golden/), the way HPCCM tests its building blocks.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import jinja2
from packaging.requirements import Requirement

from ..recipe.compat import Compat, as_constraint, is_pin, spoken
from ..recipe.drivers import REQUIRE_CUDA, floor_for, major_of, require_cuda
from ..recipe.loading import Variant
from .installer import (
    BUILD_MOUNTS,
    LOCKS_DIR,
    LOCKS_STAGE,
    CA_SECRET,
    INSTALLER_STAGE,
    PIP_CONF_SECRET,
    UV,
    UV_CACHE,
    UV_CONF_SECRET,
    UV_DIR,
    UV_UNPACKED,
    UV_SHA256_BY_ARCH,
    UV_VERSION,
    WHEEL_CACHE_ID,
)
from .reproducible import BASE_FILES, SEAL_BEGIN, SEAL_END, SECRETS_DIR
from .requirements import LOCK_NAME, lock_path, variant_requirements
from ..recipe.arches import DEFAULT_ARCH
from ..runtime import lockgroups
from ..runtime.contract import (
    ABSENT_DIR,
    CONSTRAINTS_PATH,
    DRIVER_MIN_LABEL,
    ETC_DIR,
    IMAGE_LOCK_PATH,
    LABELS_PATH,
    LAUNCH_BIN,
    MANIFEST_PATH,
    REDUCTION_SERVER_PACKAGE,
    RUNTIME_BAKED,
    RUNTIME_BIN,
    RUNTIME_PACKAGE,
    RUNTIME_ROOT,
    SBOM_PATH,
    VENV,
)

GOOGLE_APT_KEY = "https://packages.cloud.google.com/apt/doc/apt-key.gpg"
GOOGLE_APT_REPO = "https://packages.cloud.google.com/apt"


@dataclass(frozen=True)
class Block:
    """Dockerfile text for one component, the component names whose absence it may record, and the stages its
    RUN steps mount files from (`--mount=from=`): a stage needs those as much as its FROM (bake names them)."""

    name: str
    text: str
    components: tuple[str, ...] = ()
    mounts: tuple[str, ...] = ()


@cache
def environment() -> jinja2.Environment:
    """The one jinja environment: StrictUndefined (a missing value is an error, not an empty string)."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader(__package__, "templates"),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=False,
    )
    env.filters["shquote"] = shlex.quote
    # A Dockerfile double-quoted word: JSON string syntax without jinja's HTML escaping of < > & '
    # (a label holding the range >=2.27.7,<3.0 must read back as written).
    env.filters["dockerquote"] = json.dumps
    return env


# The runtime's folder in the repository (and in the build context): the runtime step and the lock splitter mount it.
RUNTIME_SOURCE = "builder/runtime"


def _render(template: str, **params: object) -> str:
    """A block's text; every block gets the seal of its RUN steps and where mounts and secrets go."""
    common = dict(seal_begin=SEAL_BEGIN, seal_end=SEAL_END, mounts=BUILD_MOUNTS, secrets=SECRETS_DIR)
    return environment().get_template(f"blocks/{template}.j2").render(**{**common, **params}).rstrip("\n")


def base() -> Block:
    return Block("base", _render("base", base_files=BASE_FILES))


def parent(stage: str) -> Block:
    return Block("parent", _render("parent", stage=stage))


def python(v: Variant) -> Block:
    return Block("python", _render("python", python=v.python, venv=VENV))


def installer_stage(arch: str = DEFAULT_ARCH) -> Block:
    """uv, pinned by hash (its wheel for `arch`), into a stage the install steps mount (`--installer uv`)."""
    return Block(INSTALLER_STAGE, _render("installer", version=UV_VERSION, uv_dir=UV_DIR,
                                          requirement=f"uv=={UV_VERSION} --hash=sha256:{UV_SHA256_BY_ARCH[arch]}",
                                          conf_secret=PIP_CONF_SECRET, ca_secret=CA_SECRET))


def nccl_note(v: Variant, compat: Compat) -> list[str]:
    """What the lock holds of NCCL and why, as comment lines of the install step."""
    key, wheels = compat.build(v.framework, v.version, v.cuda)  # type: ignore[arg-type]
    text = _render("nccl", nccl=spoken(v.nccl), wheel=wheels.nccl_wheel, ranged=not is_pin(v.nccl),  # type: ignore[arg-type]
                   framework_pip=f"{compat.frameworks[v.framework].pip_name} {v.version} (CUDA {key} build)",  # type: ignore[index]
                   required=spoken(as_constraint(wheels.nccl)))
    return text.splitlines()


def install_groups(v: Variant) -> tuple[str | None, ...]:
    """The lock's layer groups, one RUN each, lowest first: every group, always, so no pin of the lock can go
    uninstalled (an extra's `nvidia-*` pin on a CPU variant too); a group the lock does not fill installs nothing
    and adds no layer. The extras' group only when the recipe has extras of its own (`own_extras`): nothing else
    can fill it. An extending variant installs its whole lock (the parent's pins are there already) in one step,
    `None`."""
    if v.extends:
        return (None,)
    return tuple(g for g in lockgroups.GROUP_NAMES if g != lockgroups.EXTRAS or own_extras(v))


def own_extras(v: Variant) -> tuple[str, ...]:
    """The distribution names of `v`'s extras that go to the extras' layer group (those no pattern of
    runtime/lockgroups.py claims), normalised and sorted: what the locks stage passes its splitter."""
    names = sorted({lockgroups.normalise(Requirement(extra).name) for extra in v.extras})
    return tuple(n for n in names if lockgroups.group_of(n, names) == lockgroups.EXTRAS)


def packages(v: Variant, compat: Compat, installer: str, arch: str = DEFAULT_ARCH) -> Block:
    """Every wheel of the variant's lock, hash-checked, no resolver, in one step per layer group (CUDA libraries,
    NCCL, the framework, hypertune: runtime/lockgroups.py); NCCL registered with the loader after its group (GPU),
    and after the last a pip freeze into the constraints file that holds every version for a team's later
    `pip install`."""
    req = variant_requirements(v, compat, parent=None, arch=arch) if not v.extends else None
    wanted = ", ".join(req.requirements) if req else ", ".join(v.extras)
    groups = install_groups(v)
    comment = [f"Every wheel {LOCK_NAME} pins, checked against its hash, no resolver. Locked from:",
               f"  {wanted}", f"Every installed version is then held by {CONSTRAINTS_PATH}."]
    if len(groups) > 1:
        comment.append(f"One step per layer group, in the order they change: {', '.join(map(str, groups))}.")
    after: dict[str | None, list[str]] = {g: [] for g in groups}
    notes: dict[str | None, list[str]] = {g: [] for g in groups}
    notes[groups[0]] = comment
    if v.gpu and v.framework != "none" and not v.extends:
        notes["nccl"] = nccl_note(v, compat)
        nccl_lib = f"{VENV}/lib/python{v.python}/site-packages/nvidia/nccl/lib"
        after["nccl"].append(f"echo {nccl_lib} > /etc/ld.so.conf.d/trainimg-nccl.conf && ldconfig")
    after[groups[-1]].append(f"mkdir -p {ETC_DIR} && python -m pip freeze > {CONSTRAINTS_PATH}")
    # The lock stays in the image (one small text file): what it was installed from, the hashes its SBOM lists.
    after[groups[-1]].append(f"cp {BUILD_MOUNTS}/{LOCK_NAME} {IMAGE_LOCK_PATH}")
    steps = [_render("install", comment=notes[g], group=g, installer=installer, lock=lock_source(v, arch),
                     whole_lock=g == groups[-1], locks_stage=LOCKS_STAGE, locks_dir=LOCKS_DIR,
                     installer_stage=INSTALLER_STAGE, uv_dir=UV_DIR, cache_id=WHEEL_CACHE_ID, uv_cache=UV_CACHE,
                     unpacked=UV_UNPACKED,
                     python=f"{VENV}/bin/python", compiler=f"{RUNTIME_SOURCE}/bytecode.py", after=after[g],
                     ca_secret=CA_SECRET,
                     conf_secret=UV_CONF_SECRET if installer == UV else PIP_CONF_SECRET) for g in groups]
    stages = ((INSTALLER_STAGE,) if installer == UV else ()) + ((LOCKS_STAGE,) if groups != (None,) else ())
    return Block("packages", "\n".join(steps), mounts=stages)


def lock_source(v: Variant, arch: str = DEFAULT_ARCH) -> str:
    """Where the build context holds `v`'s lock for `arch` (`requirements.lock_path`, relative to the context)."""
    return lock_path(Path(), v.name, arch).as_posix()


def locks_stage(v: Variant, arch: str = DEFAULT_ARCH) -> Block:
    """The stage that slices `v`'s lock into its layer groups for the install steps to mount (`LOCKS_STAGE`)."""
    return Block(LOCKS_STAGE, _render("locks", lock=lock_source(v, arch), splitter=f"{RUNTIME_SOURCE}/lockgroups.py",
                                      locks_dir=LOCKS_DIR, groups=" ".join(map(str, install_groups(v))),
                                      extras=" ".join(own_extras(v))))


def reduction_server() -> Block:
    return Block("reduction_server", _render("reduction_server", key_url=GOOGLE_APT_KEY, repo_url=GOOGLE_APT_REPO,
                                   absent_dir=ABSENT_DIR, package=REDUCTION_SERVER_PACKAGE),
                 components=(REDUCTION_SERVER_PACKAGE,))


def runtime(v: Variant) -> Block:
    return Block("runtime", _render("runtime", python=v.python, venv=VENV, baked=RUNTIME_BAKED, root=RUNTIME_ROOT,
                                    package=RUNTIME_PACKAGE, launch_bin=LAUNCH_BIN, runtime_bin=RUNTIME_BIN,
                                    manifest=MANIFEST_PATH, source=RUNTIME_SOURCE))


# The build context's folder of audit documents, one per variant (`audit/<variant>.json`, builder/audit/vex.py): the
# advisory audit's state and waived findings the SBOM step writes into the SBOM as its VEX.
AUDIT_SOURCE = "audit"


def audit_document(variant: str) -> str:
    """Where the build context holds `variant`'s audit document."""
    return f"{AUDIT_SOURCE}/{variant}.json"


def sbom(v: Variant) -> Block:
    """The image's SBOM, written by the runtime from inside the image; after every install and the labels (it
    names the image by its variant label). It mounts the variant's audit document (its VEX: BuildKit keys the step
    by the file's content, so a changed waiver writes the SBOM again and nothing below it), and leaves nothing but
    the file."""
    return Block("sbom", _render("sbom", package=RUNTIME_PACKAGE, sbom=SBOM_PATH, audit=audit_document(v.name)))


def image_env(pairs: tuple[tuple[str, str], ...]) -> Block:
    """The recipe's ``env`` (checked by `recipe.fields.env_of`), after every step: setting it re-runs none."""
    return Block("env", _render("env", env=pairs))


def driver(cuda: str) -> Block:
    """``NVIDIA_REQUIRE_CUDA`` for the CUDA the image carries (`recipe.drivers`): after every step, so setting it
    re-runs none of them."""
    floor = floor_for(cuda)
    return Block("driver", _render("driver", major=major_of(cuda), driver=floor.driver, branch=floor.branch,
                                   label=DRIVER_MIN_LABEL, variable=REQUIRE_CUDA, value=require_cuda(cuda)))


def labels(pairs: list[tuple[str, str]]) -> Block:
    """The image's labels, and the same labels as a file in it: `selftest` runs where no engine reads labels."""
    text = json.dumps(dict(pairs), sort_keys=True, separators=(",", ":"))
    return Block("labels", _render("labels", labels=pairs, labels_json=text, etc_dir=ETC_DIR,
                                      labels_file=LABELS_PATH))
