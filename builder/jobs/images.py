"""Which image a cloud job runs, as a reference the cluster can pull, and what trainimg knows about it.

Why: a variant's own tag (``trainimg/pytorch:2.13.0-cpu-py3.11``) is local; in a job spec Vertex would look for it
on Docker Hub. And a pushed reference alone loses what the recipe knows (the framework the launcher needs, whether
the image holds NCCL and google-reduction-server). So `resolve_image` accepts:

* ``VARIANT`` with ``--registry R``: the reference the variant was pushed as (``R/<tag>``), and its recipe's facts;
* ``VARIANT`` alone: the reference its ``images.lock`` entry records as pushed (one registry), and the recipe's
  facts when the recipes are at hand;
* a reference: its facts from its trainimg labels when the image is local, else from ``--framework`` (required).

A name that is neither a known variant nor a reference with a path is refused, never passed on as an image.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..engine.base import ImageInfo
from ..errors import UserInputError
from ..runtime.contract import (
    ABSENT_LABEL,
    FRAMEWORK_LABEL,
    REDUCTION_SERVER_LABEL,
    REDUCTION_SERVER_PACKAGE,
    VARIANT_LABEL,
    VERSION_PREFIX,
)
from ..publish.lock import LockEntry
from ..publish.references import RegistryTarget
from ..recipe.loading import Variant
from .shape import ImageFacts

FRAMEWORK_CHOICES = ("pytorch", "tensorflow", "jax", "none")

Inspect = Callable[[str], ImageInfo | None]


def facts_from_variant(v: Variant) -> ImageFacts:
    return ImageFacts(source="recipe", name=v.name, framework=v.framework, nccl=v.nccl or "none",
                      reduction_server=v.reduction_server)


def facts_from_labels(labels: Mapping[str, str]) -> ImageFacts | None:
    """Facts from a built image's labels (what the build installed), or None for an image trainimg did not build."""
    if FRAMEWORK_LABEL not in labels:
        return None
    absent = set(filter(None, labels.get(ABSENT_LABEL, "").split(",")))
    return ImageFacts(source="labels", name=labels.get(VARIANT_LABEL), framework=labels[FRAMEWORK_LABEL],
                      nccl=labels.get(f"{VERSION_PREFIX}nccl", "none"),
                      reduction_server=labels.get(REDUCTION_SERVER_LABEL) == "wanted"
                      and REDUCTION_SERVER_PACKAGE not in absent)


def resolve_image(image: str, *, variants: Mapping[str, Variant], lock: Mapping[str, LockEntry],
                  registry: str | None, framework: str | None, inspect: Inspect) -> tuple[str, ImageFacts | None]:
    """(reference, facts) for ``--image`` as the module docstring describes; `inspect` looks a local image up."""
    if framework is not None and framework not in FRAMEWORK_CHOICES:
        raise UserInputError(f"expected one of {', '.join(FRAMEWORK_CHOICES)}, got {framework!r}",
                             where="--framework")
    if image in variants or image in lock:
        return _from_variant(image, variants.get(image), lock.get(image), registry, framework)
    if registry is not None:
        raise UserInputError(f"--registry goes with a variant name; {image!r} is not one", where="--registry")
    if "/" not in image and ":" not in image:
        known = ", ".join(sorted(variants)[:8]) or "none here (no recipes, no images.lock entry)"
        raise UserInputError(f"unknown variant {image!r} (known: {known}); an image reference has a path, "
                             "such as REGISTRY/REPOSITORY:TAG", where="--image")
    if framework is not None:
        return image, ImageFacts(source="--framework", name=None, framework=framework)
    info = inspect(image)
    if info is None:
        raise UserInputError(f"{image} is not a local image, so its labels cannot say its framework; "
                             f"add --framework {{{','.join(FRAMEWORK_CHOICES)}}}", where="--image")
    facts = facts_from_labels(info.labels)
    if facts is None:
        raise UserInputError(f"{image} has no trainimg labels; add --framework {{{','.join(FRAMEWORK_CHOICES)}}}",
                             where="--image")
    return image, facts


def _from_variant(name: str, v: Variant | None, entry: LockEntry | None, registry: str | None,
                  framework: str | None) -> tuple[str, ImageFacts | None]:
    facts = facts_from_variant(v) if v is not None else None
    if framework is not None and facts is not None and framework != facts.framework:
        raise UserInputError(f"variant {name} is a {facts.framework} image, not {framework}", where="--framework")
    if facts is None and framework is not None:
        facts = ImageFacts(source="--framework", name=name, framework=framework)
    tag = v.tag if v is not None else entry.tag if entry is not None else name
    if registry is not None:
        return RegistryTarget.parse(registry).ref(tag), facts
    pushed = sorted(ref for ref in (entry.pushed if entry else {}) if ref.endswith(":" + tag.rpartition(":")[2]))
    if len(pushed) == 1:
        return pushed[0], facts
    if pushed:
        raise UserInputError(f"variant {name} was pushed to several registries ({', '.join(pushed)}); "
                             "pick one with --registry", where="--image")
    raise UserInputError(f"variant {name} is the local tag {tag}, which a cluster cannot pull; add --registry R "
                         "(where it was pushed) or release it with --lock", where="--image")
