"""Conformance records: which exact image IDs passed conformance, so push can refuse the others.

A record is keyed by image ID (content-addressed), not by tag: retagging or rebuilding an image never inherits
a pass it did not earn. It also keeps the image's files the gate's run read, first-read order (`PREFETCH`,
conformance/startreads.py): what an eStargz push of that image writes first in its layers (`prefetch_order`).
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


PREFETCH = "prefetch"  # the record's key of the files the gate's run read (runtime/report.py Suite.prefetch)


def order_of(record: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The prefetch order a record keeps (absolute paths, first read first); () when it has none."""
    paths = (record or {}).get(PREFETCH) or []
    return tuple(p for p in paths if isinstance(p, str) and p.startswith("/")) if isinstance(paths, list) else ()


def prefetch_order(image_id: str, env: Mapping[str, str]) -> tuple[str, ...]:
    """The prefetch order of the image's conformance record; () when it has no record or no order."""
    return order_of(load(image_id, env))


def no_order(ref: str, record: Mapping[str, Any] | None) -> str:
    """The one line an eStargz push of `ref` without a prefetch order prints: why there is none (`record`: its passed
    conformance record; None: the push had no gate)."""
    if record is None:
        why = "it was not gated (`trainimg test` records the files its start reads)"
    elif PREFETCH not in record:
        why = f"its conformance record predates the recording of what the start reads: `trainimg test {ref}`"
    else:
        why = "its gate's run recorded no file of the image (a runtime baked in before the recording?)"
    return (f"{ref}: no prefetch order, {why}; its eStargz layers go without one (`.no.prefetch.landmark`: a lazy "
            "node fetches every file when it is first read)")
