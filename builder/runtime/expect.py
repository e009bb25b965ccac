"""What an image promised, from its trainimg labels: the expectations every conformance check compares against.

One derivation for both gates: `trainimg test` reads the labels from the engine's image config; `selftest` runs
inside the image, where no engine answers, so the build also writes the static labels to `contract.LABELS_PATH`
and the components it declared absent to `contract.ABSENT_DIR`. A team's image built FROM a trainimg base inherits
both, as it inherits the labels. (The versions the build read back are labels added after the build; inside the
image they are not in the file, so `nccl_built`/`cudnn_built` are compared by `trainimg test` only.)

Standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .contract import (
    ABSENT_DIR,
    ABSENT_LABEL,
    DRIVER_MIN_LABEL,
    FRAMEWORK_LABEL,
    LABELS_PATH,
    NCCL_MINIMUM_LABEL,
    RECIPE_VERSION_PREFIX,
    REDUCTION_SERVER_LABEL,
    REDUCTION_SERVER_PACKAGE,
    VERSION_PREFIX,
)
from .manifest import absent_components


def versions_from_labels(labels: Mapping[str, str]) -> dict[str, str | None]:
    """The versions a built image holds, from the `VERSION_PREFIX` labels the build gave it ("none" is None)."""
    return {k[len(VERSION_PREFIX):]: (None if v == "none" else v) for k, v in sorted(labels.items())
            if k.startswith(VERSION_PREFIX)}


def expectations(labels: Mapping[str, str], nccl_minimum: str | None = None) -> dict[str, Any]:
    """What the probe compares against, from the image's trainimg labels. An image without them gets empty
    expectations: checks then skip. `nccl_minimum` is the floor for an image older than its NCCL floor label
    (the host passes today's compatibility data)."""
    if FRAMEWORK_LABEL not in labels:
        return {}
    absent = set(filter(None, labels.get(ABSENT_LABEL, "").split(",")))
    rs = labels.get(REDUCTION_SERVER_LABEL, "none")
    built = versions_from_labels(labels)

    def asked(key: str) -> str | None:
        return labels.get(f"{RECIPE_VERSION_PREFIX}{key}")

    return {
        "python": asked("python"),
        "framework": labels[FRAMEWORK_LABEL],
        "framework_version": asked("framework"),
        "cuda": asked("cuda"),
        "cudnn": asked("cudnn"),
        "nccl": asked("nccl"),
        "nccl_minimum": labels.get(NCCL_MINIMUM_LABEL) or nccl_minimum,
        # What the build read back from the image (labels_from_manifest): the image must still hold it.
        "nccl_built": built.get("nccl") or None,
        "cudnn_built": built.get("cudnn") or None,
        "reduction_server": "none" if rs == "none" else ("absent" if REDUCTION_SERVER_PACKAGE in absent
                                                         else "present"),
        "hypertune": asked("hypertune"),
        "driver_min": labels.get(DRIVER_MIN_LABEL),
    }


def image_labels(path: str = LABELS_PATH, absent_dir: str = ABSENT_DIR) -> dict[str, str]:
    """The labels as this image's own files record them ({} where the image has no labels file).

    The absent components come from `absent_dir`, the same files the builder reads back into the label.
    Raises ValueError when the file exists but is not a JSON object of strings.
    """
    try:
        with open(path, encoding="utf-8") as fh:
            labels = json.load(fh)
    except FileNotFoundError:
        return {}
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise ValueError(f"{path} is not a JSON object of strings")
    absent = absent_components(absent_dir)
    if absent:
        labels[ABSENT_LABEL] = ",".join(absent)
    return labels
