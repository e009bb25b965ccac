"""The inputs key: one hash of everything that determines a variant's image, so CI can tell an unchanged variant
from the registry alone (AWS's DLC skips builds and tests the same way: ../shared/reference/ci-and-supply-chain.md).

What goes in, per variant: the rendered Dockerfile; the build arguments, with the base resolved to what it names
(the engine's image ID for a base the engine holds, such as local/debian:bookworm, which is what BuildKit builds
on; otherwise the registry's manifest digest, one request) and, for a variant that `extends` another, the
parent's inputs key instead of its image (so a changed parent changes every child's key); the variant's committed
requirements lock where it has one; the runtime files copied into the image; the audit document the SBOM step reads
(its state and waived findings, builder/audit/vex.py: never the day the data was read); and the conformance suite's version
(the hash of its host-side files: the in-image side is the runtime, already in). Left out on purpose: the git
revision and commit time (provenance labels: a commit that changes no input must not rebuild) and the secrets
and wheelhouses (they reach pip, whose result the lock pins).

The key is `sha256:<hex>` of the canonical JSON of those parts; `INPUTS_FORMAT` changes whenever what goes in
changes, so keys of different formats never match.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from .. import conformance as conformance_pkg
from .. import runtime as runtime_pkg
from ..imagebuild.builder import build_args
from ..engine.base import Engine
from ..errors import RegistryError
from ..options import BuildOptions
from ..plan.requirements import lock_digest, lock_path
from ..plan.stages import BASE_ARG, PARENT_ARG, plans as plans_of
from ..recipe.compat import load_compat
from ..recipe.variant import RecipeSet
from ..render.dockerfile import render_plan
from ..registry.credentials import resolve_credentials
from ..registry.references import RegistryTarget
from ..registry.registryapi import RegistryAPI, sha256_digest

INPUTS_FORMAT = 1
DOCKER_HUB = "registry-1.docker.io"  # where a reference without a registry host is resolved


def tree_digest(folder: Path) -> str:
    """One digest of a folder's files (relative paths and bytes, sorted; caches left out)."""
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if "__pycache__" in path.parts or path.suffix == ".pyc":
            continue
        h.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return "sha256:" + h.hexdigest()


def suite_version() -> str:
    """The conformance suite's version: the digest of its host-side files (the checks run by the runtime, whose
    files are hashed as the runtime)."""
    return tree_digest(Path(conformance_pkg.__file__).parent)


def variant_lock_digest(root: Path, variant: str) -> str | None:
    """The digest of `images/<variant>/requirements.lock` under `root`, None when the variant has none."""
    path = lock_path(root, variant)
    return lock_digest(path.parent) if path.is_file() else None


def split_remote(ref: str) -> tuple[str, str, str]:
    """(registry host, repository, tag or digest) of an image reference, Docker Hub's rules for a bare name."""
    name, at, digest = ref.partition("@")
    repo, colon, tag = name.rpartition(":")
    if not colon or "/" in tag:
        repo, tag = name, "latest"
    first, slash, rest = repo.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        host, path = first, rest
    else:
        host, path = DOCKER_HUB, repo if slash else f"library/{repo}"
    return host, path, digest if at else tag


def base_digest(engine: Engine, ref: str, env: Mapping[str, str]) -> str:
    """What a root variant is built on: the engine's image ID when it holds `ref` (BuildKit builds on that), else
    the registry's manifest digest for it (one request; a digest reference is its own answer)."""
    info = engine.image(ref)
    if info is not None:
        return info.id
    host, repository, reference = split_remote(ref)
    if reference.startswith("sha256:"):
        return reference
    target = RegistryTarget.parse(host)
    digest = RegistryAPI(target, resolve_credentials(target, None, None, env=env)).remote_digest(repository,
                                                                                                 reference)
    if digest is None:
        raise RegistryError(f"base image {ref} is neither on this engine nor in registry {host}")
    return digest


def inputs_keys(recipes: RecipeSet, engine: Engine, names: Sequence[str], opts: BuildOptions, root: Path,
                env: Mapping[str, str]) -> dict[str, str]:
    """{variant: inputs key} for the variants `names` selects and the variants they extend (parents first)."""
    chosen = recipes.with_parents(recipes.select(list(names)))
    runtime, suite = tree_digest(Path(runtime_pkg.__file__).parent), suite_version()
    keys: dict[str, str] = {}
    for plan in plans_of(recipes, chosen, compat=load_compat()):
        v = plan.variant
        args = build_args(plan, opts, {v.extends: ""} if v.extends else {})
        if v.extends:
            args[PARENT_ARG] = keys[v.extends]
        else:
            args[BASE_ARG] = base_digest(engine, args[BASE_ARG], env)
        parts = {"format": INPUTS_FORMAT, "dockerfile": sha256_digest(render_plan(plan).encode()), "args": args,
                 "lock": variant_lock_digest(root, v.name), "runtime": runtime, "suite": suite}
        if v.name in opts.audits:  # the audit's state and VEX are in the SBOM layer: a changed waiver is a new image
            parts["audit"] = sha256_digest(opts.audits[v.name].encode())
        keys[v.name] = sha256_digest(json.dumps(parts, sort_keys=True).encode())
    return keys
