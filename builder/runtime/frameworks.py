"""The frameworks trainimg builds images for: each one's name, the module it imports as and the distributions
that install it, written once.

The recipe grammar, the CLI's ``--framework`` choices, the job specs, the launcher's import probe, the in-image
manifest and the host's reading of it all need these names; they once had a list each and drifted (the host's
version reader knew no ``tensorflow-gpu`` or ``tf-nightly`` while the manifest did). The runtime is the lowest
layer and runs inside the images, so the table lives here, standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

#: A framework's name, as recipes, labels and ``--framework`` spell it.
FrameworkName = Literal["pytorch", "tensorflow", "jax"]
PYTORCH, TENSORFLOW, JAX = get_args(FrameworkName)
NONE = "none"  # a recipe's framework for an image without one


@dataclass(frozen=True)
class Framework:
    """One framework: the module its package imports as, and every PyPI distribution that installs that module
    (the main one first; the others are the CPU-only, GPU, nightly or vendor builds of the same package)."""

    name: str
    module: str
    distributions: tuple[str, ...]


FRAMEWORKS: dict[str, Framework] = {
    PYTORCH: Framework(PYTORCH, "torch", ("torch",)),
    TENSORFLOW: Framework(TENSORFLOW, "tensorflow",
                          ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tf-nightly", "tensorflow-intel")),
    JAX: Framework(JAX, "jax", ("jax",)),
}
NAMES: tuple[str, ...] = tuple(FRAMEWORKS)  # pytorch, tensorflow, jax
RECIPE_NAMES: tuple[str, ...] = (*NAMES, NONE)  # what a recipe's `framework` and a job's --framework take
#: Every distribution that installs a framework, in table order: how an image's installed framework is found.
DISTRIBUTIONS: tuple[str, ...] = tuple(d for framework in FRAMEWORKS.values() for d in framework.distributions)
