"""Build variants through the engine: shared parents once per run, secrets as BuildKit secrets, labels read back.

Order of work for one run: plan every chosen variant (and the variants they extend); build each parent stage
that two or more variants share once (keyed by its content hash), so the variants then hit BuildKit's cache for
it; build each variant (one BuildKit pass); read its in-image manifest back; label the image with what is really
installed, in the config the build wrote (labelling.py); tag it. Only a fully built and labelled image gets a tag.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .. import runtime as runtime_pkg
from ..audit.gate import not_audited
from ..plan.blocks import audit_document
from ..recipe.compat import Compat, load_compat
from ..engine.base import BuildRequest, Engine
from ..errors import UserInputError
from ..options import BuildOptions, LockOptions
from ..registry.imageconfig import with_build_caches
from ..plan.stages import (
    BASE_ARG,
    CA_SECRET,
    FINAL_STAGE,
    PARENT_ARG,
    PIP_CONF_SECRET,
    UV_CONF_SECRET,
    Plan,
    plans as plans_of,
)
from ..progress import Progress
from ..recipe.arches import DEFAULT_ARCH, arch_key
from ..recipe.loading import RecipeSet, Variant
from ..plan.reproducible import BASE_FILES, base_files_tar, fix_times
from ..render.dockerfile import render_plan
from ..runtime.frameworks import DISTRIBUTIONS
from ..runtime.manifest import distribution_key
from ..runtime.contract import (
    ABSENT_LABEL,
    CUDA_ARCHS_LABEL,
    LOCK_DIGEST_LABEL,
    INPUTS_LABEL,
    MANAGED_LABEL,
    MANIFEST_PATH,
    OCI_BASE_NAME,
    OCI_CREATED,
    OCI_REVISION,
    OCI_SOURCE,
    OCI_VERSION,
    VERSION_PREFIX,
)
from .archplan import build_args, check_arches, check_bases, platform_of, selected
from .labelling import labelled
from .litter import pass_tag, release_names, remove_superseded
from .lockcompile import ContextLocks, locks_into
from .wheelhouse import Wheelhouse, check_dirs, pip_conf, serve, uv_conf, write_secret




@dataclass
class VariantBuild:
    """What one variant's build for one architecture produced, as the --json report lists it. `tag` is the
    engine's name for the image (`arches.local_tag`), `variant_tag` the tag the registry holds it under."""

    name: str
    tag: str
    image_id: str
    size: int
    seconds: float
    steps: int
    cached: int
    shared_parents: list[str]
    base_image: str
    absent: list[str]
    manifest: dict[str, Any]
    inputs: str | None = None  # the inputs key it was labelled with (publish/inputs.py), None when not computed
    dockerfile: str | None = None  # sha256 of the rendered Dockerfile the build read (the provenance names it)
    arch: str = DEFAULT_ARCH
    variant_tag: str = ""
    unread_caches: list[str] = field(default_factory=list)  # `REF: why` of each --cache-from BuildKit could not read

    def __post_init__(self) -> None:
        self.variant_tag = self.variant_tag or self.tag

    @property
    def key(self) -> str:
        """The variant's name, ``@<arch>`` off amd64 (`arches.arch_key`)."""
        return arch_key(self.name, self.arch)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["cache_hits"] = data.pop("cached")
        return data


def provenance(repo_root: Path, env: Mapping[str, str]) -> dict[str, str]:
    """OCI source, revision and created, from git. `created` is the commit time (or SOURCE_DATE_EPOCH), not
    the clock, so a rebuild of the same commit gives the same image config and the same image ID."""

    def git(*args: str) -> str:
        out = subprocess.run(["git", "-C", str(repo_root), *args], capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else ""

    revision = git("rev-parse", "HEAD") or "unknown"
    if env.get("SOURCE_DATE_EPOCH", "").isdigit():
        stamp = datetime.fromtimestamp(int(env["SOURCE_DATE_EPOCH"]), tz=timezone.utc)
    else:
        seconds = git("log", "-1", "--format=%ct")
        stamp = datetime.fromtimestamp(int(seconds) if seconds.isdigit() else 0, tz=timezone.utc)
    source = env.get("TRAINIMG_SOURCE_URL") or git("remote", "get-url", "origin") or f"file://{repo_root}"
    return {"source": source, "revision": revision, "created": stamp.strftime("%Y-%m-%dT%H:%M:%SZ")}


def provenance_labels(v: Variant, prov: Mapping[str, str], base: str) -> dict[str, str]:
    """Labels known before the build: OCI provenance, the base the image is really built on (--base-image
    changes it) and trainimg's ownership mark. `build` and the bake file's targets both set these."""
    return {
        OCI_BASE_NAME: base,
        OCI_SOURCE: prov["source"],
        OCI_REVISION: prov["revision"],
        OCI_CREATED: prov["created"],
        OCI_VERSION: v.tag_version,
        MANAGED_LABEL: "image",
    }


def labels_from_manifest(v: Variant, manifest: Mapping[str, Any], prov: Mapping[str, str],
                         base: str) -> dict[str, str]:
    """Provenance labels plus what the build really installed (read back from the image)."""
    labels = provenance_labels(v, prov, base)
    labels[ABSENT_LABEL] = ",".join(sorted(manifest.get("absent", [])))
    for key, value in sorted(installed_versions(manifest).items()):
        labels[f"{VERSION_PREFIX}{key}"] = value or "none"
    archs = manifest.get("frameworks", {}).get("pytorch", {}).get("archs")
    if archs:  # what the built framework says it runs on: `spec` reads it before compat data (jobs.gpucheck)
        labels[CUDA_ARCHS_LABEL] = ",".join(archs)
    return labels


def runtime_context(folder: Path) -> Path:
    """A build context holding only what the Dockerfiles take from the repository, where they expect it:
    trainimg's runtime and the base files' tar. Times and modes are fixed (reproducible.fix_times), so the
    context is the same on every machine; `folder` is created and returned."""
    shutil.copytree(Path(runtime_pkg.__file__).parent, folder / "builder" / "runtime",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (folder / BASE_FILES).parent.mkdir(parents=True, exist_ok=True)
    (folder / BASE_FILES).write_bytes(base_files_tar())
    fix_times(folder)
    return folder


# The CUDA runtime a framework's wheels bring (cu12 wheels; CUDA 13's drop the suffix), else NVIDIA's apt package.
CUDA_RUNTIME_DISTS = ("nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13")


def installed_versions(manifest: Mapping[str, Any]) -> dict[str, str | None]:
    """python, framework, CUDA runtime, nccl, cudnn and hypertune versions as the in-image manifest reports them.
    The CUDA runtime is what the image HOLDS (TensorFlow 2.21, built for 12.5, installs the newest 12.x wheels),
    which the recipe's CUDA line (the base's) need not equal."""
    dists = {distribution_key(k): val for k, val in manifest.get("distributions", {}).items()}
    framework = next((dists[n] for n in DISTRIBUTIONS if n in dists), None)
    libraries = manifest.get("libraries", {})
    cudart = next((dists[n] for n in CUDA_RUNTIME_DISTS if n in dists), None)
    dpkg = manifest.get("dpkg") or {}
    cudart = cudart or next((v.split("-")[0] for k, v in sorted(dpkg.items()) if k.startswith("cuda-cudart-")), None)
    return {
        "python": manifest.get("python", {}).get("version"),
        "framework": framework,
        "cuda": cudart,
        "nccl": libraries.get("nccl", {}).get("version"),
        "cudnn": libraries.get("cudnn", {}).get("version"),
        "hypertune": dists.get("cloudml-hypertune"),
    }


def audits_into(ctx: Path, chosen: list[Variant], audits: Mapping[str, str]) -> None:
    """Each variant's audit document where its SBOM step mounts it from (`blocks.audit_document`): the audit this
    build followed, or one saying it was not audited."""
    for v in chosen:
        path = ctx / audit_document(v.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(audits.get(v.name) or not_audited().document(v.name), encoding="utf-8")


def _waves(plans: list[Plan]) -> list[list[Plan]]:
    """Plans grouped so that every variant comes in a later wave than the variant it extends (per architecture)."""
    depth: dict[str, int] = {}
    for p in plans:  # parents come before their children in `plans`
        parent = arch_key(p.variant.extends, p.arch) if p.variant.extends else None
        depth[p.key] = depth[parent] + 1 if parent in depth else 0
    return [[p for p in plans if depth[p.key] == d] for d in sorted(set(depth.values()))]


def _dockerfile(tmp: Path, plan: Plan) -> Path:
    """`plan` rendered into the build's temporary folder (the build reads it there, not from images/)."""
    path = tmp / f"{plan.key}.Dockerfile"
    path.write_text(render_plan(plan), encoding="utf-8")
    return path


class Builder:
    def __init__(self, recipes: RecipeSet, engine: Engine, progress: Progress, env: Mapping[str, str],
                 repo_root: Path, compat: Compat | None = None) -> None:
        self.recipes, self.engine, self.progress, self.env = recipes, engine, progress, env
        self.repo_root = repo_root
        self.compat = compat or load_compat()
        self.locks = ContextLocks({})

    def plans(self, variants: list[Variant], installer: str) -> list[Plan]:
        return plans_of(self.recipes, variants, compat=self.compat, installer=installer)

    def build(self, names: list[str], opts: BuildOptions) -> list[VariantBuild]:
        """Build `names` (and the variants they extend), every architecture each lists: check the options, put the
        locks and secrets in a build context, build the parent stages several variants share once, then the
        variants, wave by wave. An architecture whose committed lock is not lockable here is left out, said once."""
        chosen = self.recipes.with_parents(self.recipes.select(names))
        plans = [p for p in self.plans(chosen, opts.installer) if not opts.arches or p.arch in opts.arches]
        check_arches(chosen, opts.arches)
        wheelhouses = self._checked(plans, opts)
        prov = provenance(self.repo_root, self.env)
        with tempfile.TemporaryDirectory(prefix="trainimg-ctx-") as tmp, serve(wheelhouses) as lines:
            common = self._context(Path(tmp), chosen, opts, lines, bool(wheelhouses))
            plans = selected([p for p in plans if p.key in self.locks.digests], opts.only)
            check_bases(self.engine, plans, opts)
            files = {p.key: _dockerfile(Path(tmp), p) for p in plans}
            used = self._build_parents(plans, files, opts, common)
            return self._build_waves(plans, files, used, opts, common, prov)

    def _checked(self, plans: list[Plan], opts: BuildOptions) -> tuple[Wheelhouse, ...]:
        """The options' mistakes, before anything starts: components, wheel folders, the CA bundle."""
        known = sorted({c for p in plans for c in p.components})
        for name in opts.allow_missing:
            if name not in known:
                raise UserInputError(f"{name!r} is not a component these variants install; "
                                     f"components: {', '.join(known) or 'none'}", where="--allow-missing")
        wheelhouses = check_dirs(opts.wheelhouses)
        if opts.ca_bundle is not None and not opts.ca_bundle.is_file():
            raise UserInputError(f"{opts.ca_bundle} is not a file", where="--ca-bundle")
        return wheelhouses

    def _context(self, tmp: Path, chosen: list[Variant], opts: BuildOptions, lines: list[str],
                 served: bool) -> dict[str, Any]:
        """The build context (the runtime, the variants' locks) and secrets: the arguments every build shares."""
        ctx = runtime_context(tmp / "context")
        self.progress.start("lock")
        self.locks = locks_into(ctx, self.recipes, chosen, self.repo_root, LockOptions(wheelhouses=opts.wheelhouses),
                                self.env, functools.partial(self.progress.line, "lock"), self.compat)
        for line in self.locks.left_out:
            self.progress.line("lock", line)
        self.progress.done("lock", f"{len(self.locks.digests)} locks in the build context")
        audits_into(ctx, chosen, opts.audits)
        secrets_dir = tmp / "secrets"
        secrets_dir.mkdir(mode=0o700)
        secrets = {PIP_CONF_SECRET: write_secret(secrets_dir, PIP_CONF_SECRET, pip_conf(lines, opts.ca_bundle, self.env)),
                   UV_CONF_SECRET: write_secret(secrets_dir, UV_CONF_SECRET, uv_conf(lines, self.env))}
        if opts.ca_bundle:
            secrets[CA_SECRET] = opts.ca_bundle
        return dict(context=ctx, secrets=secrets, network_host=served, cache_from=with_build_caches(opts.cache_from),
                    no_cache=opts.no_cache)

    def _build_parents(self, plans: list[Plan], files: Mapping[str, Path], opts: BuildOptions,
                       common: dict[str, Any]) -> dict[str, list[str]]:
        """Build each parent stage that several variants share, once; returns, per variant, the shared parents it
        uses (``name:key``)."""
        shared = self._shared_parents(plans)
        done: set[str] = set()
        used: dict[str, list[str]] = {}
        for plan in plans:
            used[plan.key] = [f"{s.name}:{s.key[:12]}" for s in plan.parents if s.key in shared]
            for stage in plan.parents:
                if stage.key in shared and stage.key not in done:
                    self._build_shared(stage, shared[stage.key], files[plan.key], build_args(plan, opts, {}),
                                       {**common, "platform": platform_of(plan.arch)})
                    done.add(stage.key)
        return used

    def _build_waves(self, plans: list[Plan], files: Mapping[str, Path], used: Mapping[str, list[str]],
                     opts: BuildOptions, common: dict[str, Any], prov: Mapping[str, str]) -> list[VariantBuild]:
        """The variants, concurrently once their shared parents are in the cache (BuildKit runs the framework
        installs side by side); a variant that extends another waits for the wave before it. `built` maps a
        variant to its tag for the variants that extend it: BuildKit (20.10) reads `FROM sha256:<id>` as the Docker
        Hub image library/sha256 (see publish/lockedbases.py), but resolves a local tag this run set."""
        built: dict[str, str] = {}
        by_name: dict[str, VariantBuild] = {}
        for wave in _waves(plans):
            with ThreadPoolExecutor(max_workers=max(1, min(opts.jobs, len(wave)))) as pool:
                futures = {p.key: pool.submit(self._build_variant, p, files[p.key], build_args(p, opts, built),
                                              {**common, "platform": platform_of(p.arch)}, used[p.key], prov,
                                              opts.inputs_keys.get(p.key)) for p in wave}
                for key, future in futures.items():
                    by_name[key] = future.result()
                    built[key] = by_name[key].tag
        return [by_name[p.key] for p in plans]

    def _build_shared(self, stage: Any, users: int, df: Path, args: dict[str, str],
                      common: dict[str, Any]) -> None:
        """Build one parent stage that `users` variants share, once, so they hit BuildKit's cache for it."""
        task = f"{stage.name} stage {stage.key[:12]} (shared by {users} variants)"
        self.progress.start(task)
        name = pass_tag(stage.name)
        res = self.engine.build(BuildRequest(df, target=stage.name, build_args=args, tags=(name,), **common),
                                functools.partial(self.progress.line, task))
        release_names(self.engine, [name])  # BuildKit keeps the cache; the stored image may go
        self.progress.done(task, f"built {task} in {res.seconds:.1f}s")

    def _shared_parents(self, plans: list[Plan]) -> dict[str, int]:
        counts = Counter(s.key for p in plans for s in p.parents)
        return {key: n for key, n in counts.items() if n > 1}

    def _build_variant(self, plan: Plan, df: Path, args: dict[str, str], common: dict[str, Any], used: list[str],
                       prov: Mapping[str, str], inputs: str | None) -> VariantBuild:
        v, task = plan.variant, plan.key
        self.progress.start(task)
        start = time.monotonic()
        what = v.name if plan.arch == DEFAULT_ARCH else f"{v.name}-{plan.arch}"
        names = (pass_tag(what), pass_tag(what))
        # Without the cache, the shared parents this run built are still to be reused: only a variant with none
        # runs every step anew.
        req = BuildRequest(df, target=FINAL_STAGE, build_args=args, tags=names[:1],
                           **{**common, "no_cache": common["no_cache"] and not used})
        res = self.engine.build(req, lambda line: self.progress.line(task, line))
        manifest = json.loads(self.engine.read_file(res.image_id, MANIFEST_PATH))
        base = args.get(BASE_ARG) or args.get(PARENT_ARG, "")
        # The labels go into the config BuildKit wrote, stored over the same layers (labelling.py): no second pass.
        labels = labels_from_manifest(v, manifest, prov, base)
        labels[LOCK_DIGEST_LABEL] = self.locks.digests[plan.key]
        if inputs:
            labels[INPUTS_LABEL] = inputs
        image_id = labelled(self.engine, res.image_id, labels, names[1])
        old = self.engine.image(plan.local_tag)
        self.engine.tag(image_id, plan.local_tag)
        release_names(self.engine, names)
        remove_superseded(self.engine, old, image_id)  # the image the tag left: no `<none>` litter
        info = self.engine.image(image_id)
        size = info.size if info else 0
        seconds = time.monotonic() - start
        unread = "".join(f"; cache not read: {why}" for why in res.unread_caches)
        if any(code in why for why in res.unread_caches for code in (" 401 ", " 403 ")):
            unread += " (BuildKit reads --cache-from with the docker client's login: `docker login` that registry)"
        self.progress.done(task, f"built {plan.local_tag} ({image_id[7:19]}, {size / 1e6:.0f} MB) in {seconds:.1f}s, "
                           f"{res.cached}/{res.steps} steps cached{unread}")
        return VariantBuild(
            name=v.name, tag=plan.local_tag, image_id=image_id, size=size, seconds=round(seconds, 2),
            steps=res.steps, cached=res.cached, shared_parents=used,
            base_image=base,
            absent=sorted(manifest.get("absent", [])), manifest=manifest, inputs=inputs,
            dockerfile=f"sha256:{hashlib.sha256(df.read_bytes()).hexdigest()}", arch=plan.arch, variant_tag=v.tag,
            unread_caches=list(res.unread_caches),
        )
