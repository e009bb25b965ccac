"""The image's own environment (its config's ``ENV``) against the node variables table (`recipe.nodeenv`).

Why on the host: the engine's image config says exactly what the image sets, a team's image built ``FROM``
trainimg's included (its ``ENV`` lines add to the base's). Inside a container a node's variables and the image's
look alike, so no in-image check could tell whose a variable is.
"""

from __future__ import annotations

from ..engine.base import ImageInfo
from ..recipe.nodeenv import node_variables, why_not_in_image
from ..runtime.report import Check

NAME = "image_env"


def image_env_check(info: ImageInfo) -> Check:
    """Failed, naming each, where the image's config sets a node's NCCL or network variable."""
    values = dict(info.env)
    found = node_variables(values)
    details = {"node_variables": {name: values[name] for name in found}}
    if found:
        reason = "; ".join(f"the image's config sets {name}={values[name]}: {why_not_in_image(name)}" for name in found)
        return Check(NAME, "failed", reason, 0.0, details)
    return Check(NAME, "passed", f"no node's NCCL or network variable among the {len(values)} its config sets",
                 0.0, details)
