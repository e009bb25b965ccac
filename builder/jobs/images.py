"""Which image a cloud job runs, as a reference the cluster can pull, and what trainimg knows about it.

Why: a variant's own tag (``trainimg/pytorch:2.13.0-cpu-py3.11``) is local; in a job spec Vertex would look for it
on Docker Hub. And a pushed reference alone loses what the recipe knows (the framework the launcher needs, whether
the image holds NCCL and google-reduction-server). So `resolve_image` accepts:

* ``VARIANT`` with ``--registry R``: the reference the variant was pushed as (``R/<tag>``), and its recipe's facts;
* ``VARIANT`` alone: the reference its ``images.lock`` entry records as pushed (one registry), and the recipe's
  facts when the recipes are at hand;
* a reference: its facts from its trainimg labels when the image is local, else from ``--framework`` (required).

Whatever the route, the reference must be one a cluster can pull (`clusterimage.check_pullable`): a registry host
that is not loopback. A variant's bare tag or moving tag is refused naming ``--image VARIANT --registry R``; a
lockfile's loopback pushes (a test registry) are passed over for the one pushed where a cluster can reach it. A
name that is neither a known variant nor a reference with a path is refused, never passed on as an image.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ..engine.base import ImageInfo
from ..errors import UserInputError
from ..runtime.contract import (
    ABSENT_LABEL,
    FRAMEWORK_LABEL,
    RECIPE_VERSION_PREFIX,
    REDUCTION_SERVER_LABEL,
    REDUCTION_SERVER_PACKAGE,
    VARIANT_LABEL,
    VERSION_PREFIX,
)
from ..runtime.expect import versions_from_labels
from ..runtime.frameworks import RECIPE_NAMES
from ..publish.lockfile import LockEntry, variant_entries
from ..publish.movingtags import moving_tags
from ..registry.references import RegistryTarget
from ..recipe.loading import Variant
from ..recipe.gpuarch import archs_of
from .clusterimage import PUSHED_AS, check_pullable, why_unpullable
from .gpucheck import archs_from_labels, with_alternatives
from .shape import NONE, ImageFacts

FRAMEWORK_CHOICES = RECIPE_NAMES

Inspect = Callable[[str], ImageInfo | None]


def facts_from_variant(v: Variant, released: Sequence[LockEntry] = ()) -> ImageFacts:
    """A variant's facts from its recipe; the CPU architectures its tag holds are those the lockfile's entries
    record as released (`released`), else those the recipe lists."""
    return ImageFacts(source="recipe", name=v.name, framework=v.framework, cuda=v.cuda or NONE,
                      nccl=v.nccl or NONE, reduction_server=v.reduction_server,
                      archs=archs_of(v.framework, v.version, v.cuda),
                      platforms=tuple(e.arch for e in released) or v.arch)


def facts_from_labels(labels: Mapping[str, str], architecture: str = "") -> ImageFacts | None:
    """Facts from a built image's labels (what the build installed) and its config's `architecture`, or None for
    an image trainimg did not build."""
    if FRAMEWORK_LABEL not in labels:
        return None
    absent = set(filter(None, labels.get(ABSENT_LABEL, "").split(",")))
    return ImageFacts(source="labels", name=labels.get(VARIANT_LABEL), framework=labels[FRAMEWORK_LABEL],
                      cuda=_cuda_from_labels(labels), nccl=labels.get(f"{VERSION_PREFIX}nccl", NONE),
                      reduction_server=labels.get(REDUCTION_SERVER_LABEL) == "wanted"
                      and REDUCTION_SERVER_PACKAGE not in absent, archs=archs_from_labels(labels),
                      platforms=(architecture,) if architecture else None)


def _cuda_from_labels(labels: Mapping[str, str]) -> str | None:
    """The CUDA an image holds (`VERSION_PREFIX` label, read back by `build`), else the one its recipe asked for.

    The recipe labels (`RECIPE_VERSION_PREFIX`) name every version the recipe set, so with them present and no
    CUDA among them the image is a CPU build (`NONE`); with neither kind (an image from a bake file's older
    builder, or labels set by hand) CUDA is unknown (None).
    """
    built = versions_from_labels(labels)
    if "cuda" in built:
        return built["cuda"] or NONE
    asked = {k[len(RECIPE_VERSION_PREFIX):]: v for k, v in labels.items() if k.startswith(RECIPE_VERSION_PREFIX)}
    if asked:
        return asked.get("cuda", NONE)
    return None


def resolve_image(image: str, *, variants: Mapping[str, Variant], lock: Mapping[str, LockEntry],
                  registry: str | None, framework: str | None, inspect: Inspect) -> tuple[str, ImageFacts | None]:
    """(reference, facts) for ``--image`` as the module docstring describes; `inspect` looks a local image up."""
    if framework is not None and framework not in FRAMEWORK_CHOICES:
        raise UserInputError(f"expected one of {', '.join(FRAMEWORK_CHOICES)}, got {framework!r}",
                             where="--framework")
    if image in variants or image in lock:
        released = variant_entries(lock, image)
        return with_alternatives(_from_variant(image, variants.get(image), released, registry, framework),
                                 variants)
    if registry is not None:
        raise UserInputError(f"--registry goes with a variant name; {image!r} is not one", where="--registry")
    if "/" not in image and ":" not in image:
        known = ", ".join(sorted(variants)[:8]) or "none here (no recipes, no images.lock entry)"
        raise UserInputError(f"unknown variant {image!r} (known: {known}); an image reference has a path, "
                             "such as REGISTRY/REPOSITORY:TAG", where="--image")
    check_pullable(image, fix=_pull_fix(image, variants, lock))
    if framework is not None:
        return image, ImageFacts(source="--framework", name=None, framework=framework)
    info = inspect(image)
    if info is None:
        raise UserInputError(f"{image} is not a local image, so its labels cannot say its framework; "
                             f"add --framework {{{','.join(FRAMEWORK_CHOICES)}}}", where="--image")
    facts = facts_from_labels(info.labels, info.architecture)
    if facts is None:
        raise UserInputError(f"{image} has no trainimg labels; add --framework {{{','.join(FRAMEWORK_CHOICES)}}}",
                             where="--image")
    return with_alternatives((image, facts), variants)


def _from_variant(name: str, v: Variant | None, released: Sequence[LockEntry], registry: str | None,
                  framework: str | None) -> tuple[str, ImageFacts | None]:
    entry = released[0] if released else None
    facts = facts_from_variant(v, released) if v is not None else None
    if framework is not None and facts is not None and framework != facts.framework:
        raise UserInputError(f"variant {name} is a {facts.framework} image, not {framework}", where="--framework")
    if facts is None and framework is not None:
        facts = ImageFacts(source="--framework", name=name, framework=framework)
    tag = v.tag if v is not None else entry.tag if entry is not None else name
    fix = f"use --image {name} --registry R, R the registry the cluster pulls from"
    if registry is not None:
        return check_pullable(RegistryTarget.parse(registry).ref(tag), where="--registry", fix=fix), facts
    pushed = sorted(ref for ref in (entry.pushed if entry else {}) if ref.endswith(":" + tag.rpartition(":")[2]))
    reachable = [ref for ref in pushed if why_unpullable(ref) is None]
    if len(reachable) == 1:
        return reachable[0], facts
    if reachable:
        raise UserInputError(f"variant {name} was pushed to several registries ({', '.join(reachable)}); "
                             "pick one with --registry", where="--image")
    if pushed:
        check_pullable(pushed[0], fix=f"release it to one (trainimg release {name} --registry R) or {fix}")
    raise UserInputError(f"variant {name} is the local tag {tag}, which a cluster cannot pull; add --registry R "
                         "(where it was pushed) or release it with --lock", where="--image")


def _pull_fix(image: str, variants: Mapping[str, Variant], lock: Mapping[str, LockEntry]) -> str:
    """What to give instead of an unpullable `image`: ``--image VARIANT --registry R`` when it is a variant's tag or
    moving tag (local, as `build` tags it), else the reference it was pushed as."""
    tags = {v.tag: name for name, v in variants.items()} | {e.tag: name for name, e in lock.items()}
    tags |= {moving: tags[tag] for moving, tag in moving_tags(tags).items()}
    name = tags.get(image)
    if name is None:
        return PUSHED_AS
    return f"it is variant {name}'s local tag: use --image {name} --registry R, R where it was pushed"
