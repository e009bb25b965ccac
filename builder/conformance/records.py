"""Conformance records: which exact image IDs passed conformance, so push can refuse the others.

A record is keyed by image ID (content-addressed), not by tag: retagging or rebuilding an image never inherits
a pass it did not earn.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import CheckFailed
from ..runtime.report import Suite
from ..state import state_dir


def _path(image_id: str, env: Mapping[str, str]) -> Path:
    digest = image_id.split(":", 1)[-1]
    if not digest.isalnum():
        raise ValueError(f"not an image id: {image_id!r}")
    return state_dir(env) / "conformance" / f"{digest}.json"


def save(suite: Suite, env: Mapping[str, str]) -> Path:
    path = _path(suite.image_id, env)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(suite.to_json(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def load(image_id: str, env: Mapping[str, str]) -> dict[str, Any] | None:
    path = _path(image_id, env)
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def require_pass(image_id: str, ref: str, env: Mapping[str, str]) -> dict[str, Any]:
    """The gate before push: the exact image must have a passing record."""
    record = load(image_id, env)
    if record is None:
        raise CheckFailed(f"{ref} ({image_id[7:19]}) has no conformance record: run `trainimg test {ref}` "
                          "first; trainimg never pushes an untested image")
    if not record.get("passed"):
        failed = ", ".join(c["name"] for c in record.get("checks", []) if c["status"] == "failed")
        raise CheckFailed(f"{ref} ({image_id[7:19]}) failed conformance ({failed}): fix the image and test again")
    return record
