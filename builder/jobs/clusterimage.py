"""What any cluster needs of the image a job runs, whatever the platform (Vertex, AI Platform; Kubernetes and Slurm
specs call the same two checks): that its nodes can pull it, and that it can use the GPUs the job asks for.

Why: both mistakes pass every API check and fail only after the machines are allocated. A reference without a
registry host (``trainimg/pytorch:2.13.0-cpu-py3.11``, a variant's local tag) is looked up on Docker Hub by every
node; one on a loopback registry (``localhost:5000/...``, ``127.0.0.1:5005/...``) points each node at itself. And a
CPU build (``trainimg.version.cuda=none``) on GPU machines runs its framework on the CPU, if at all.
"""

from __future__ import annotations

from ..errors import UserInputError
from ..registry.references import why_unshared
from ..recipe.grammar import is_reference
from .shape import NONE, ImageFacts

PUSHED_AS = ("give the reference it was pushed as to a registry the cluster reaches (REGISTRY/REPOSITORY:TAG; "
             "docker.io/REPOSITORY:TAG for Docker Hub)")


def registry_host(reference: str) -> str | None:
    """The registry host (with port) a reference names, or None when docker would read it from Docker Hub.

    Docker's rule (distribution/reference, ``splitDockerDomain``): the part before the first ``/`` is a host when
    it holds a ``.`` or a ``:``, is ``localhost``, or has an upper-case letter; otherwise it is a Docker Hub path.
    """
    first, slash, _ = reference.partition("/")
    if slash and (any(ch in first for ch in ".:") or first == "localhost" or first.lower() != first):
        return first
    return None


def why_unpullable(reference: str) -> str | None:
    """Why a cluster's nodes cannot pull `reference` (not a reference, no registry host, a loopback one), or None."""
    if not is_reference(reference):
        return f"not an image reference: {reference!r}"
    host = registry_host(reference)
    if host is None:
        return f"{reference} names no registry, so every node would look for it on Docker Hub"
    unshared = why_unshared(host)
    return None if unshared is None else f"{reference} is on {unshared}, which no cluster node can reach"


def check_pullable(reference: str, *, where: str = "--image", fix: str = PUSHED_AS) -> str:
    """`reference` when a cluster's nodes can pull it (`why_unpullable` finds nothing), else a `UserInputError` on
    `where` saying why and ending with `fix`: what to give instead (the caller knows best, e.g. ``--image VARIANT
    --registry R`` for a variant's local tag)."""
    why = why_unpullable(reference)
    if why is not None:
        raise UserInputError(f"{why}; {fix}", where=where)
    return reference


def check_gpu_image(image: str, facts: ImageFacts | None, gpus: int, *, where: str = "--accelerator") -> None:
    """Refuse `gpus` > 0 for an image known to have no CUDA build (its recipe or labels say ``cuda: none``).

    An image whose CUDA is unknown (`facts` None, or a reference known only by ``--framework``) is let through:
    only what trainimg knows is refused. `gpus` counts any accelerator the job attaches to each replica.
    """
    if gpus > 0 and facts is not None and facts.cuda == NONE:
        raise UserInputError(f"image {image} is a CPU build (no CUDA), so its framework cannot use the {gpus} "
                             "accelerator(s) asked for; drop --accelerator or use a CUDA (cuXYZ) variant", where=where)
