"""Which (variant, architecture) pairs a build makes, and on what: the checks a build of several architectures
needs before anything runs, and the platform each is built for.

Why apart from the builder: they are the architecture rules (recipe/arches.py) a build applies, each refusing what
would otherwise be built wrong or left out quietly: an amd64 base under an arm64 build (every step would run amd64
programs, and the result be labelled arm64), a `--arch` no chosen variant is built for.
"""

from __future__ import annotations

from ..engine.base import Engine
from ..errors import UserInputError
from ..options import BuildOptions
from collections.abc import Mapping

from ..plan.stages import BASE_ARG, PARENT_ARG, Plan
from ..recipe.arches import DEFAULT_ARCH, arch_key, arch_of
from ..recipe.loading import Variant


ALLOW_MISSING_ARG = "TRAINIMG_ALLOW_MISSING"  # the components a build may miss (`--allow-missing`)


def build_args(plan: Plan, opts: BuildOptions, built: Mapping[str, str]) -> dict[str, str]:
    """The build arguments of `plan`'s variant and architecture; `built` maps a parent's `arch_key` to the local
    name of its image. The base: the lockfile's (`build --locked`), else `--base-image ARCH=REF`, else
    `--base-image REF`, else the recipe's. The inputs key (publish/inputs.py) hashes these with the base and parent
    resolved to what they name."""
    v = plan.variant
    args = {ALLOW_MISSING_ARG: " ".join(sorted(opts.allow_missing))}
    if v.extends:
        args[PARENT_ARG] = built[arch_key(v.extends, plan.arch)]
    else:
        args[BASE_ARG] = (opts.base_overrides.get(plan.key) or opts.arch_bases.get(plan.arch) or opts.base_image
                          or v.base_image)
    return args



def selected(plans: list[Plan], only: frozenset[str]) -> list[Plan]:
    """`plans` whose key is in `only` (all when it is empty), with the plans they are built on."""
    if not only:
        return plans
    wanted = set(only)
    for p in reversed(plans):  # children after parents in `plans`: walk back, adding each wanted one's parent
        if p.key in wanted and p.variant.extends:
            wanted.add(arch_key(p.variant.extends, p.arch))
    return [p for p in plans if p.key in wanted]


def check_arches(variants: list[Variant], arches: tuple[str, ...]) -> None:
    """`--arch`: every chosen variant must be built for one of the architectures asked for (else it would be
    quietly left out)."""
    lacking = [v for v in variants if arches and not set(arches) & set(v.arch)]
    if lacking:
        v = lacking[0]
        raise UserInputError(f"{v.name} is not built for {' or '.join(arches)} (its recipe lists "
                             f"{', '.join(v.arch)})", where="--arch")


def check_bases(engine: Engine, plans: list[Plan], opts: BuildOptions) -> None:
    """Refuse a base on the engine whose architecture is not its plan's (an amd64 base under an arm64 build would
    run amd64 programs in every step and label the result arm64), before anything is built. A base the engine does
    not hold is the registry's index, which BuildKit resolves for the platform."""
    for plan in plans:
        if plan.variant.extends:
            continue
        base = build_args(plan, opts, {})[BASE_ARG]
        info = engine.image(base)
        if info is not None and info.architecture and info.architecture != plan.arch:
            raise UserInputError(f"{base} is linux/{info.architecture}; {plan.key} is built for {plan.arch}: give "
                                 f"its base with --base-image {plan.arch}=REF", where="--base-image")


def platform_of(arch: str) -> str | None:
    """The `--platform` of a build for `arch`: none for amd64 (the engine's own, as before architectures)."""
    return None if arch == DEFAULT_ARCH else arch_of(arch).platform
