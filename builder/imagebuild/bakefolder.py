"""The folder of files a bake file names: a context holding the runtime and each variant's lock (where its
Dockerfile mounts it from), the rendered Dockerfiles, and the secrets (pip.conf, uv.toml, the CA bundle) as
mode-0600 files the targets name with `src=`.

One folder outside every build context, under trainimg's state folder (named on stderr by `trainimg bake`),
written afresh on each run and removed by `trainimg bake --clean`: secrets never sit in a context or the
repository, and never outlive the user's wish.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..options import LockOptions
from ..plan.stages import CA_SECRET, PIP_CONF_SECRET, UV_CONF_SECRET
from ..recipe.compat import load_compat
from ..recipe.loading import RecipeSet
from ..render.bake import BakeInputs, bake_file
from ..render.dockerfile import plans, render_plan
from ..state import state_dir
from .builder import audits_into, provenance, provenance_labels, runtime_context
from .lockcompile import locks_into
from .wheelhouse import default_ca_bundle, default_wheelhouses, pip_conf, uv_conf, write_secret


def bake_dir(env: Mapping[str, str]) -> Path:
    """The one folder `trainimg bake` writes its files to and `--clean` removes."""
    return state_dir(env) / "bake"


def clean(env: Mapping[str, str]) -> Path | None:
    """Remove the bake folder (secrets included); the folder removed, or None when there was none."""
    folder = bake_dir(env)
    if not folder.exists():
        return None
    shutil.rmtree(folder)
    return folder


def write_bake(recipes: RecipeSet, names: list[str], env: Mapping[str, str], repo_root: Path,
               say: Callable[[str], None]) -> dict[str, Any]:
    """Write the bake folder afresh for the chosen variants (and those they extend); return the bake file.
    `say` hears about locks compiled for variants that have none committed."""
    variants = recipes.with_parents(recipes.select(names))
    chosen = {v.name for v in variants}
    compat = load_compat()
    selected = [p for p in plans(recipes, compat=compat) if p.variant.name in chosen]
    clean(env)
    folder = bake_dir(env)
    folder.mkdir(mode=0o700, parents=True)
    context = runtime_context(folder / "context")
    locks_into(context, recipes, variants, repo_root, LockOptions(wheelhouses=default_wheelhouses(env)), env, say,
               compat)
    audits_into(context, variants, {})  # a bake build is not audited: its SBOM says so
    (folder / "dockerfiles").mkdir()
    dockerfiles = {}
    for plan in selected:
        dockerfiles[plan.variant.name] = folder / "dockerfiles" / f"{plan.variant.name}.Dockerfile"
        dockerfiles[plan.variant.name].write_text(render_plan(plan), encoding="utf-8")
    secrets_dir = folder / "secrets"
    secrets_dir.mkdir(mode=0o700)
    ca = default_ca_bundle(env)
    conf = write_secret(secrets_dir, PIP_CONF_SECRET, pip_conf(_pip_lines(env), ca, env))
    uv = write_secret(secrets_dir, UV_CONF_SECRET, uv_conf(_pip_lines(env), env))
    secrets = [f"id={PIP_CONF_SECRET},src={conf}", f"id={UV_CONF_SECRET},src={uv}"]
    if ca is not None:
        secrets.append(f"id={CA_SECRET},src={write_secret(secrets_dir, CA_SECRET, ca.read_text(encoding='utf-8'))}")
    prov = provenance(repo_root, env)
    labels = {p.variant.name: provenance_labels(p.variant, prov, recipes.by_name[p.variant.extends].tag
                                                if p.variant.extends else p.variant.base_image) for p in selected}
    return bake_file(selected, BakeInputs(context, dockerfiles, tuple(secrets), labels))


def _pip_lines(env: Mapping[str, str]) -> list[str]:
    """pip.conf lines from the host's PIP_FIND_LINKS entries a builder can reach (http/https URLs; local folders
    are `trainimg build`'s to serve, no BuildKit builder can read them) and PIP_TRUSTED_HOST (plain-http indexes)."""
    urls = [u for u in env.get("PIP_FIND_LINKS", "").split() if u.startswith(("http://", "https://"))]
    lines = [f"find-links = {' '.join(urls)}"] if urls else []
    return lines + ([f"trusted-host = {env['PIP_TRUSTED_HOST']}"] if env.get("PIP_TRUSTED_HOST") else [])
