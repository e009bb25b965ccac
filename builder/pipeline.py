"""The release pipeline: audit -> build -> test -> push only if every variant passed -> lock.

It lives here, not in the CLI, so the order and the one rule that makes a release safe ("nothing is pushed
unless everything passed") are library code a CI script or a test can call, and the CLI verbs only parse flags
and print. Printing is the caller's: it passes callbacks.
"""

from __future__ import annotations

import dataclasses
from contextlib import nullcontext
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .audit.gate import AuditResult, not_audited, refuse
from .imagebuild.audited import audit_variants
from .imagebuild.builder import Builder, VariantBuild
from .conformance import records
from .runtime.report import Suite
from .conformance.suite import Conformance
from .engine.base import Engine
from .errors import CheckFailed
from .options import ReleaseOptions, TestOptions
from .progress import Progress, log_printer
from .conformance.structure import check_structure_tests
from .publish.inputs import inputs_keys
from .publish.lockedbases import cache_sources
from .publish.lockfile import DEFAULT_LOCK, LockEntry, PendingLock, read_lock, release_entries
from .publish.movingtags import copy_moving_tags, moving_of, planned_moves, push_immutable
from .publish.passrecord import attach_records
from .publish.promote import write_parts
from .publish.push import PushResult, reachable_target
from .publish.signing import release_images, sign_all, utc_now
from .registry.layermemory import LayerMemory
from .registry.registryapi import RegistryAPI
from .imagebuild.lockcompile import left_out
from .plan.requirements import lock_states
from .publish.indexpush import needs_index
from .publish.skip import Decision, check_whole, decide
from .recipe.compat import load_compat
from .recipe.arches import split_key
from .registry.references import RegistryTarget
from .publish.policy import PushPolicy
from .recipe.loading import RecipeSet
from .trust.signer import Signer


@dataclass(frozen=True)
class ReleaseResult:
    builds: list[VariantBuild]
    suites: list[Suite]
    pushed: Mapping[str, PushResult]
    skipped: Mapping[str, Decision] = dataclasses.field(default_factory=dict)  # variant -> why it was not built


def test_images(engine: Engine, images: Sequence[tuple[str, str | None]], opts: TestOptions,
                env: Mapping[str, str], progress: str, on_suite: Callable[[Suite], None] | None = None
                ) -> list[Suite]:
    """Run the conformance suite on each (image, variant name); every suite is recorded by image ID and the latest
    decides what `push` allows (a failed run takes back an earlier pass)."""
    check_structure_tests(opts.structure_tests)  # bad configs fail before any container starts
    conf = Conformance(engine, log_printer(progress, env))
    suites = []
    for image, name in images:
        suite = conf.run(image, opts, name)
        suites.append(suite)
        records.save(suite, env)
        if on_suite is not None:
            on_suite(suite)
    return suites


test_images.__test__ = False  # type: ignore[attr-defined]  # a library function, not a pytest test


def release(recipes: RecipeSet, engine: Engine, variants: Sequence[str], opts: ReleaseOptions, *,
            target: RegistryTarget, credentials: dict[str, str] | None, env: Mapping[str, str], root: Path,
            progress: str, on_suite: Callable[[Suite], None] | None = None,
            on_tested: Callable[[list[Suite]], None] | None = None,
            on_pushed: Callable[[str, Any], None] | None = None,
            on_decision: Callable[[Decision], None] | None = None,
            on_sbom: Callable[[str], None] | None = None,
            on_record: Callable[[str], None] | None = None, signer: Signer | None = None) -> ReleaseResult:
    """Build `variants` (all of them when empty), test each, and push only if every suite passed; then record the
    release in `opts.lock_path` (or, with `opts.stage`, one part per variant in `opts.lock_dir`, no moving tag).

    Each variant's inputs key is computed first; one whose key and passed image the registry already holds is
    skipped (publish/skip.py; `on_decision` sees every verdict) and keeps its digest, its lock entry and its
    place in the moving tags. `on_tested` sees every suite before the decision (reports are written even when
    nothing is pushed). Each pushed variant's lock entry then goes beside its image too (publish/passrecord.py;
    `on_record` sees a line each). The moving tags move last, all or nothing, and the lockfile is written only
    when they did. A skipped variant is never read from the engine: its moving tag is a registry copy and its SBOM
    is already beside its manifest, so a runner that starts empty releases nothing-to-do with nothing built.
    With a `signer` every image a tag of the release names (built, or kept) is signed and attested
    (publish/signing.py) before a tag moves: a failure moves none. Raises CheckFailed, naming each failed variant
    and check, when anything failed."""
    started = utc_now()
    previous = read_lock(opts.lock_path or DEFAULT_LOCK)  # a malformed lockfile fails before an hour of building
    check_structure_tests(opts.test.structure_tests)
    chosen = recipes.with_parents(recipes.select(list(variants)))
    audited = _audit(recipes, [v.name for v in chosen], opts, env, root, on_tested)
    build_opts = dataclasses.replace(opts.build, audits={v.name: audited.document(v.name) for v in chosen})
    keys = inputs_keys(recipes, engine, [v.name for v in chosen], build_opts, root, env)
    api = RegistryAPI(reachable_target(engine, target), credentials)
    decisions = decide(api, target, chosen, keys, previous, opts.rebuild)
    for d in decisions.values():
        if on_decision is not None:
            on_decision(d)
    todo = frozenset(k for k, d in decisions.items() if not d.skip)  # per (variant, architecture): arches.arch_key
    left = left_out(chosen, lock_states(chosen, load_compat(), root))  # not lockable here: no build makes them
    if not opts.stage:
        check_whole(chosen, decisions, left)  # one index per tag: no architecture left behind
    wanted = sorted({decisions[k].variant for k in todo})
    build_opts = dataclasses.replace(build_opts, inputs_keys=keys, only=todo)
    if not build_opts.cache_from:  # an ephemeral CI runner starts empty: the last release's pushes are its cache
        build_opts = dataclasses.replace(build_opts, cache_from=cache_sources(previous, wanted))
    builds = Builder(recipes, engine, Progress(progress, env), env, root).build(wanted, build_opts) if wanted else []
    builds = [b for b in builds if b.key in todo]  # a skipped parent built again only for its child stays out
    suites = test_images(engine, [(b.tag, b.key) for b in builds], opts.test, env, progress, on_suite)
    for suite in suites:  # the audit's check in each report, the release record and JUnit
        suite.checks.append(audited.check(split_key(suite.name)[0]))
    if on_tested is not None:
        on_tested(suites)
    kept = {k: d for k, d in decisions.items() if d.skip}
    failed = [s for s in suites if not s.passed]
    if failed:
        if opts.stage:  # promote names the failure instead of a missing part
            write_parts(opts.lock_dir, release_entries(engine, recipes, builds, suites, {}, build_opts.audits))
        raise CheckFailed("nothing pushed: " + "; ".join(
            f"{s.name} failed {', '.join(ch.name for ch in s.failed)}" for s in failed))
    indexed = frozenset(v.tag for v in chosen if needs_index([a for a in v.arch if (v.name, a) not in left]))
    return _publish(engine, recipes, builds, suites, kept, opts, target=target, credentials=credentials, env=env,
                    api=api, audits=build_opts.audits, on_pushed=on_pushed, on_sbom=on_sbom, on_record=on_record,
                    signing=(signer, root, started), indexed=indexed)


def _publish(engine: Engine, recipes: RecipeSet, builds: list[VariantBuild], suites: list[Suite],
             kept: Mapping[str, Decision], opts: ReleaseOptions, *, target: RegistryTarget,
             credentials: dict[str, str] | None, env: Mapping[str, str], api: RegistryAPI,
             audits: Mapping[str, str], on_pushed: Callable[[str, Any], None] | None,
             on_sbom: Callable[[str], None] | None, on_record: Callable[[str], None] | None,
             signing: tuple[Signer | None, Path, str], indexed: frozenset[str] = frozenset()) -> ReleaseResult:
    """What a release puts in the registry once every suite passed, in order: the immutable tags with their SBOMs,
    the release records, the signatures and provenance (`signing`: the signer, the checkout, when the release
    started), then (unless staging) the moving tags and the lockfile, all or nothing. `indexed`: the tags of the
    variants built for several architectures (one index each)."""
    policy = PushPolicy(engine, target, credentials, env, on_sbom, opts.compression)
    policy.admit(b.tag for b in builds)

    def pushed_with_sbom(tag: str, result: PushResult) -> None:
        if on_pushed is not None:
            on_pushed(tag, result)
        policy.pushed(tag, result)

    pushed = push_immutable(engine, builds, target, credentials, gate=policy.gate, on_pushed=pushed_with_sbom,
                            kept=sorted({d.tag for d in kept.values()}), upload=opts.upload,
                            compression=opts.compression, memory=LayerMemory.from_env(env),
                            kept_manifests=_kept_manifests(kept.values()), index=not opts.stage,
                            on_manifest=pushed_with_sbom, indexed=indexed)
    digests = {**{d.tag: d.tag_digest or d.digest for d in kept.values() if d.digest},
               **{t: r.digest for t, r in pushed.items() if not r.manifests or r.index}}
    moves = {} if opts.stage else planned_moves(target, digests)
    for d in kept.values():
        now = digests.get(d.tag)
        if now and d.tag not in pushed and any(r.digest == now and moving_of(t, d.tag) for t, r in moves.items()):
            policy.kept(d.tag, now)
    built, skipped = _entries(engine, recipes, builds, suites, {**pushed, **moves}, kept, target, audits)
    attach_records(api, target, built, on_record)
    signer, root, started = signing
    if signer is not None:  # after the SBOMs and records (the provenance names them), before a tag moves
        sign_all(signer, api, release_images(engine, recipes, root, target, builds, pushed, kept.values(), started))
    if opts.stage:
        write_parts(opts.lock_dir, [*built, *skipped])
        return ReleaseResult(builds, suites, pushed, kept)
    # The last step, all or nothing: the lockfile is written beside its path first (one that cannot be written
    # fails while no tag has moved), the moving tags move (a failed copy puts the moved ones back), then the
    # lockfile is put in place.
    with PendingLock(opts.lock_path, [*built, *skipped]) if opts.lock_path else nullcontext() as pending:
        moved = copy_moving_tags(api, target, digests)
        if pending is not None:
            pending.commit()
    for mt, res in moved.items():
        if on_pushed is not None:
            on_pushed(mt, res)
    return ReleaseResult(builds, suites, {**pushed, **moved}, kept)


def _audit(recipes: RecipeSet, names: list[str], opts: ReleaseOptions, env: Mapping[str, str], root: Path,
           on_tested: Callable[[list[Suite]], None] | None) -> AuditResult:
    """The advisory audit of every chosen variant, before anything is built or asked of a registry; a failed one
    is reported (each variant's ``advisories`` check) and stops the release."""
    if opts.audit is None:
        return not_audited()
    result = audit_variants(recipes, names, root, env, opts.audit)
    if not result.passed:
        if on_tested is not None:
            on_tested(result.suites(names))
        refuse(result)
    return result


def _entries(engine: Engine, recipes: RecipeSet, builds: list[VariantBuild], suites: list[Suite],
             pushed: Mapping[str, PushResult], kept: Mapping[str, Decision], target: RegistryTarget,
             audits: Mapping[str, str]) -> tuple[list[LockEntry], list[LockEntry]]:
    """The lock entries of what was built and of what was skipped (its entry kept, its references those of
    `pushed`: the immutable tag, and the moving tags about to name its digest)."""
    skipped = []
    for d in kept.values():
        assert d.entry is not None and d.digest is not None
        again = pushed.get(d.tag)  # its index pushed anew, with a changed architecture's image beside this one
        now = again.digest if again is not None and again.index else d.tag_digest or d.digest
        refs = {target.ref(d.tag): now}
        refs.update({r.ref: r.digest for t, r in pushed.items() if moving_of(t, d.tag) and r.digest == now})
        skipped.append(dataclasses.replace(d.entry, pushed=dict(sorted(refs.items())),
                                           manifest=d.digest if now != d.digest else None))
    return release_entries(engine, recipes, builds, suites, pushed, audits), skipped


def _kept_manifests(kept: Iterable[Decision]) -> dict[str, dict[str, str]]:
    """{tag: {architecture: manifest digest}} of the images a release keeps as unchanged: an index pushed for a
    changed architecture of the same variant names them again."""
    out: dict[str, dict[str, str]] = {}
    for d in kept:
        if d.digest:
            out.setdefault(d.tag, {})[d.arch] = d.digest
    return out
