"""Building blocks: one small function per component, each rendering its own template into Dockerfile text.

A block takes resolved, validated values (never raw recipe input) and returns a `Block`; `plan` composes blocks
into stages. Each block has a golden test (tests/golden/), the way HPCCM tests its building blocks.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from functools import cache

import jinja2

from ..recipe.compat import Compat, as_constraint, is_pin, spoken
from ..recipe.loading import Variant
from ..runtime.contract import (
    ABSENT_DIR,
    CONSTRAINTS_PATH,
    ETC_DIR,
    LABELS_PATH,
    LAUNCH_BIN,
    MANIFEST_PATH,
    REDUCTION_SERVER_PACKAGE,
    RUNTIME_BAKED,
    RUNTIME_BIN,
    RUNTIME_PACKAGE,
    RUNTIME_ROOT,
    VENV,
)

GOOGLE_APT_KEY = "https://packages.cloud.google.com/apt/doc/apt-key.gpg"
GOOGLE_APT_REPO = "https://packages.cloud.google.com/apt"


@dataclass(frozen=True)
class Block:
    """Dockerfile text for one component, and the component names whose absence it may record."""

    name: str
    text: str
    components: tuple[str, ...] = ()


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


def _render(template: str, **params: object) -> str:
    return environment().get_template(f"blocks/{template}.j2").render(**params).rstrip("\n")


def base() -> Block:
    return Block("base", _render("base"))


def parent(stage: str) -> Block:
    return Block("parent", _render("parent", stage=stage))


def python(v: Variant) -> Block:
    return Block("python", _render("python", python=v.python, venv=VENV))


def pip_install(name: str, requirements: list[str], *, indexes: tuple[str, ...] = (), after: str = "",
                comment: str = "", constraints: str = "") -> Block:
    return Block(name, _render("pip", requirements=requirements, indexes=indexes, after=after, comment=comment,
                               constraints=constraints))


def hypertune(v: Variant) -> Block:
    return pip_install("hypertune", [f"cloudml-hypertune=={v.hypertune}"],
                       comment="cloudml-hypertune: reports metrics to the platform's hyperparameter tuning (seed 002).")


def requirement(wheel: str, constraint: str) -> str:
    """A pip requirement for a recipe constraint: a pin is ``==``, a range is written as it stands."""
    return f"{wheel}=={constraint}" if is_pin(constraint) else f"{wheel}{constraint}"


def nccl(v: Variant, compat: Compat) -> Block:
    """NCCL before the framework, as the recipe constrains it (pin or range), so the framework's install keeps it."""
    key, wheels = compat.build(v.framework, v.version, v.cuda)  # type: ignore[arg-type]
    lib = f"{VENV}/lib/python{v.python}/site-packages/nvidia/nccl/lib"
    text = _render("nccl", nccl=spoken(v.nccl), wheel=wheels.nccl_wheel, ranged=not is_pin(v.nccl),  # type: ignore[arg-type]
                   framework_pip=f"{compat.frameworks[v.framework].pip_name} {v.version} (CUDA {key} build)",  # type: ignore[index]
                   required=spoken(as_constraint(wheels.nccl)),
                   requirements=[requirement(wheels.nccl_wheel, v.nccl)], indexes=(), comment="",  # type: ignore[arg-type]
                   constraints="", after=f"echo {lib} > /etc/ld.so.conf.d/trainimg-nccl.conf && ldconfig")
    return Block("nccl", text)


def reduction_server() -> Block:
    return Block("reduction_server", _render("reduction_server", key_url=GOOGLE_APT_KEY, repo_url=GOOGLE_APT_REPO,
                                   absent_dir=ABSENT_DIR, package=REDUCTION_SERVER_PACKAGE),
                 components=(REDUCTION_SERVER_PACKAGE,))


def framework(v: Variant, compat: Compat) -> Block:
    """The framework, then a pip freeze into the constraints file that holds every version in place."""
    fw = compat.frameworks[v.framework]  # type: ignore[index]
    release = compat.release(v.framework, v.version)  # type: ignore[arg-type]
    if release is None:
        raise ValueError(f"no compatibility data for {v.framework} {v.version}: validate the recipe first")
    indexes: tuple[str, ...] = ()
    if v.cuda is None:
        name = release.cpu_pip_name or fw.pip_name
        local = "+cpu" if release.cpu_pip_index else ""
        reqs = [f"{name}=={v.version}{local}"]
        indexes = (release.cpu_pip_index,) if release.cpu_pip_index else ()
    else:
        _, wheels = compat.build(v.framework, v.version, v.cuda)  # type: ignore[arg-type]
        extra = f"[{wheels.pip_extra}]" if wheels.pip_extra else ""
        reqs = [f"{fw.pip_name}{extra}=={v.version}"]
        if v.cudnn and v.cudnn != as_constraint(wheels.cudnn):  # the tested cuDNN, narrower than the wheels' range
            reqs.append(requirement(wheels.cudnn_wheel, v.cudnn))
        indexes = (wheels.pip_index,) if wheels.pip_index else ()
    if v.framework == "jax":
        reqs.append(f"jaxlib=={v.version}")
    after = f"mkdir -p {ETC_DIR} && python -m pip freeze > {CONSTRAINTS_PATH}"
    return pip_install("framework", reqs, indexes=indexes, after=after,
                       comment=f"{fw.pip_name} {v.version}; every installed version is then held by "
                               f"{CONSTRAINTS_PATH}.")


def extras(v: Variant) -> Block:
    # Held by the constraints file the framework block froze (a framework-less image has none to hold).
    held = CONSTRAINTS_PATH if v.framework != "none" else ""
    return pip_install("extras", list(v.extras), constraints=held,
                       comment="Extra packages of the recipe, inside the held versions." if held
                       else "Extra packages of the recipe.")


def secrets_cleanup() -> Block:
    """BuildKit 0.8 leaves the empty /run/secrets mount point in the layer of a RUN that mounted a secret; a
    later RUN without mounts removes it (the root variants' runtime step does this itself)."""
    return Block("secrets_cleanup", "RUN rmdir /run/secrets 2>/dev/null || true")


def runtime(v: Variant) -> Block:
    return Block("runtime", _render("runtime", python=v.python, venv=VENV, baked=RUNTIME_BAKED, root=RUNTIME_ROOT,
                                    package=RUNTIME_PACKAGE, launch_bin=LAUNCH_BIN, runtime_bin=RUNTIME_BIN,
                                    manifest=MANIFEST_PATH))


def labels(pairs: list[tuple[str, str]]) -> Block:
    """The image's labels, and the same labels as a file in it: `selftest` runs where no engine reads labels."""
    text = json.dumps(dict(pairs), sort_keys=True, separators=(",", ":"))
    return Block("labels", _render("labels", labels=pairs, labels_json=text, etc_dir=ETC_DIR,
                                      labels_file=LABELS_PATH))
