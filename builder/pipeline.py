"""The release pipeline: build -> test -> push only if every variant passed -> lock.

It lives here, not in the CLI, so the order and the one rule that makes a release safe ("nothing is pushed
unless everything passed") are library code a CI script or a test can call, and the CLI verbs only parse flags
and print. Printing is the caller's: it passes callbacks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .build.builder import Builder, VariantBuild
from .conformance import records
from .runtime.report import Suite
from .conformance.suite import Conformance
from .engine.base import Engine
from .errors import CheckFailed
from .options import ReleaseOptions, TestOptions
from .progress import Progress, log_printer
from .conformance.structure import check_structure_tests
from .publish.lock import DEFAULT_LOCK, cache_sources, push_release, read_lock, record_release
from .publish.push import PushResult
from .publish.references import RegistryTarget
from .recipe.loading import RecipeSet


@dataclass(frozen=True)
class ReleaseResult:
    builds: list[VariantBuild]
    suites: list[Suite]
    pushed: Mapping[str, PushResult]


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
            on_pushed: Callable[[str, Any], None] | None = None) -> ReleaseResult:
    """Build `variants` (all of them when empty), test each, and push only if every suite passed; then record the
    release in `opts.lock_path`. `on_tested` sees every suite before the decision (reports are written even when
    nothing is pushed). Raises CheckFailed, naming each failed variant and check, when anything failed."""
    previous = read_lock(opts.lock_path or DEFAULT_LOCK)  # a malformed lockfile fails before an hour of building
    check_structure_tests(opts.test.structure_tests)
    build_opts = opts.build
    if not build_opts.cache_from:  # an ephemeral CI runner starts empty: the last release's pushes are its cache
        chosen = [v.name for v in recipes.with_parents(recipes.select(list(variants)))]
        build_opts = dataclasses.replace(build_opts, cache_from=cache_sources(previous, chosen))
    builds = Builder(recipes, engine, Progress(progress, env), env, root).build(list(variants), build_opts)
    suites = test_images(engine, [(b.tag, b.name) for b in builds], opts.test, env, progress, on_suite)
    if on_tested is not None:
        on_tested(suites)
    failed = [s for s in suites if not s.passed]
    if failed:
        raise CheckFailed("nothing pushed: " + "; ".join(
            f"{s.name} failed {', '.join(ch.name for ch in s.failed)}" for s in failed))
    pushed = push_release(engine, builds, target, credentials,
                          gate=lambda image_id, ref: records.require_pass(image_id, ref, env), on_pushed=on_pushed)
    if opts.lock_path:
        record_release(opts.lock_path, engine, recipes, builds, suites, pushed)
    return ReleaseResult(builds, suites, pushed)
