"""`trainimg diff A B`: what differs between two images, or between an image and what the lockfile recorded.

A side is loaded by `load_side` from one of:

* an image reference on the engine (``trainimg/pytorch:2.13.0-cpu-py3.11``, ``sha256:...``); the CLI first turns a
  variant name of the recipes into its tag;
* ``lock:<variant>``: that variant's entry in the lockfile (``--lock FILE``, default images.lock);
* ``<path to a lockfile>:<variant>`` (``release/images.lock:pytorch-2.13.0-cpu-py3.11``).

A lock side has the recorded versions and image ID; its labels, layers and size come from the engine when the
recorded image is still there, and are unknown (None) otherwise, which `diff_images` reports as not compared.

Compared: the CPU architecture (an arm64 image against the amd64 one of the same variant: `lock:<variant>@arm64`,
`<tag>-arm64`), the versions (CUDA first, then framework, cudnn, nccl, python, hypertune: ``trainimg.version.*`` labels for
an image, the recorded versions for a lock entry), the packages (added, removed, version changed: from the two images' SBOMs), the
other labels, the layers (count, and the RootFS layer digests only one side has) and the size. Everything is plain data (`diff_images` returns JSON-ready dicts); `render_diff` is the
text form.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..engine.base import Engine, ImageInfo
from ..errors import EngineError, RegistryError, UserInputError
from ..runtime.contract import SBOM_PATH, VERSION_PREFIX
from .sbom import package_changes, parse_sbom

# The versions compared, in the order shown: CUDA first (a CPU and a GPU image differ there before anything else),
# then what is built on it. Other `trainimg.version.*` labels follow, sorted.
VERSION_KEYS = ("cuda", "framework", "cudnn", "nccl", "python", "hypertune")


def _norm(value: Any) -> str | None:
    return None if value in (None, "", "none") else str(value)


def _from_inspect(info: ImageInfo) -> dict[str, Any]:
    labels = dict(info.labels)
    return {
        "image_id": info.id,
        "labels": {k: v for k, v in labels.items() if not k.startswith(VERSION_PREFIX)},
        "layers": list(info.layers),
        "size": info.size,
        "architecture": info.architecture or None,
        "_versions": {k[len(VERSION_PREFIX):]: _norm(v) for k, v in labels.items() if k.startswith(VERSION_PREFIX)},
    }


def _sbom(engine: Engine, info: ImageInfo | None) -> dict[str, Any] | None:
    """The image's SBOM document, None when the image is gone or has none (built before SBOMs)."""
    if info is None:
        return None
    try:
        return parse_sbom(engine.read_file(info.id, SBOM_PATH).encode("utf-8"), info.id)
    except (EngineError, RegistryError):
        return None


def _lock_ref(ref: str, lock_path: str | os.PathLike[str] | None) -> tuple[Path, str] | None:
    if ref.startswith("lock:"):
        return Path(lock_path or "images.lock"), ref[len("lock:"):]
    path, colon, variant = ref.rpartition(":")
    if colon and path and Path(path).is_file() and "/" not in variant:
        return Path(path), variant
    return None


def load_side(engine: Engine, ref: str, lock_path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """One side of a diff: {ref, source ('image'|'lock'), image_id, versions, labels, layers, size}."""
    from .lockfile import read_lock

    locked = _lock_ref(ref, lock_path)
    if locked is not None:
        path, variant = locked
        if not path.is_file():
            raise UserInputError(f"no lockfile {path} (release with --lock first, or pass --lock FILE)", where=ref)
        entries = read_lock(path)
        if variant not in entries:
            known = ", ".join(sorted(entries)) or "none"
            raise UserInputError(f"{path} has no entry for {variant!r} (it has: {known})", where=ref)
        entry = entries[variant]
        info = engine.image(entry.image_id)
        side: dict[str, Any] = _from_inspect(info) if info else {"labels": None, "layers": None, "size": None}
        side.pop("_versions", None)
        return {**side, "ref": ref, "source": "lock", "tag": entry.tag, "image_id": entry.image_id,
                "architecture": entry.arch,
                "sbom": _sbom(engine, info),
                "versions": {k: _norm(entry.versions.get(k)) for k in VERSION_KEYS}, "base_digest": entry.base_digest,
                "pushed": dict(entry.pushed)}
    info = engine.image(ref)
    if info is None:
        raise UserInputError(f"no image {ref} on this engine: build or pull it, or name lock:<variant>", where=ref)
    side = _from_inspect(info)
    found = side.pop("_versions")
    return {**side, "ref": ref, "source": "image", "tag": ref, "sbom": _sbom(engine, info),
            "versions": {k: found.get(k) for k in _ordered(set(VERSION_KEYS) | set(found))}}


def _ordered(keys: set[str]) -> list[str]:
    """Version keys in VERSION_KEYS order, then any others sorted."""
    return [k for k in VERSION_KEYS if k in keys] + sorted(keys - set(VERSION_KEYS))


def _changed(a: dict[str, Any], b: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: {"a": a.get(k), "b": b.get(k)} for k in _ordered(set(a) | set(b)) if a.get(k) != b.get(k)}


def diff_images(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """What differs from side `a` to side `b` (as `load_side` returns them); `same` is True when nothing does.
    Labels, layers or size are None when a side does not know them (a lock entry whose image is gone)."""
    versions = _changed(a.get("versions") or {}, b.get("versions") or {})
    labels = None
    if a.get("labels") is not None and b.get("labels") is not None:
        la, lb = a["labels"], b["labels"]
        labels = {
            "added": {k: lb[k] for k in sorted(set(lb) - set(la))},
            "removed": {k: la[k] for k in sorted(set(la) - set(lb))},
            "changed": {k: {"a": la[k], "b": lb[k]} for k in sorted(set(la) & set(lb)) if la[k] != lb[k]},
        }
    layers = None
    if a.get("layers") is not None and b.get("layers") is not None:
        ya, yb = a["layers"], b["layers"]
        common = 0
        for x, y in zip(ya, yb):
            if x != y:
                break
            common += 1
        layers = {"a": len(ya), "b": len(yb), "common_prefix": common,
                  "added": [d for d in yb if d not in set(ya)], "removed": [d for d in ya if d not in set(yb)]}
    size = None
    if a.get("size") is not None and b.get("size") is not None:
        size = {"a": a["size"], "b": b["size"], "delta": b["size"] - a["size"]}
    arch = ({"a": a.get("architecture"), "b": b.get("architecture")}
            if a.get("architecture") and b.get("architecture") and a["architecture"] != b["architecture"] else None)
    same = (a.get("image_id") == b.get("image_id") and a.get("image_id") is not None) or (
        not versions and arch is None and labels is not None and not any(labels.values()) and layers is not None
        and not layers["added"] and not layers["removed"] and layers["a"] == layers["b"])
    return {
        "a": {"ref": a.get("ref"), "source": a.get("source"), "image_id": a.get("image_id")},
        "b": {"ref": b.get("ref"), "source": b.get("source"), "image_id": b.get("image_id")},
        "same": bool(same),
        "architecture": arch,  # None: the same (or a side does not say)
        "versions": versions,
        "packages": package_changes(a["sbom"], b["sbom"]) if a.get("sbom") and b.get("sbom") else None,
        "labels": labels,
        "layers": layers,
        "size": size,
    }


def _mb(n: int) -> str:
    return f"{n / 1e6:+.1f} MB" if n else "0 MB"


def _package_lines(packages: dict[str, Any] | None) -> list[str]:
    if packages is None:
        return ["packages: not compared (a side has no SBOM: its image is gone or was built before SBOMs)"]
    if not any(packages.values()):
        return ["packages: same"]
    counts = ", ".join(f"{len(packages[k])} {k}" for k in ("changed", "added", "removed"))
    lines = [f"packages: {counts}"]
    lines += [f"  ~ {k}: {v['a']} -> {v['b']}" for k, v in packages["changed"].items()]
    lines += [f"  + {k} {v}" for k, v in packages["added"].items()]
    lines += [f"  - {k} {v}" for k, v in packages["removed"].items()]
    return lines


def render_diff(d: dict[str, Any]) -> str:
    """The text form of `diff_images`' result."""
    a, b = d["a"], d["b"]
    lines = [f"--- a: {a['ref']} ({(a['image_id'] or '?')[7:19]})",
             f"+++ b: {b['ref']} ({(b['image_id'] or '?')[7:19]})"]
    if d["same"]:
        lines.append("same image" if a["image_id"] == b["image_id"] else "no differences")
        return "\n".join(lines) + "\n"
    if d.get("architecture"):
        lines.append(f"architecture: {d['architecture']['a']} -> {d['architecture']['b']}")
    lines.append("versions:" if d["versions"] else "versions: same")
    for k, v in d["versions"].items():
        lines.append(f"  {k}: {v['a'] or 'none'} -> {v['b'] or 'none'}")
    lines += _package_lines(d["packages"])
    if d["labels"] is None:
        lines.append("labels: not compared (a side's image is not on this engine)")
    elif any(d["labels"].values()):
        lines.append("labels:")
        for k, v in d["labels"]["changed"].items():
            lines.append(f"  ~ {k}: {v['a']} -> {v['b']}")
        for k, v in d["labels"]["added"].items():
            lines.append(f"  + {k}={v}")
        for k, v in d["labels"]["removed"].items():
            lines.append(f"  - {k}={v}")
    else:
        lines.append("labels: same")
    layers = d["layers"]
    if layers is None:
        lines.append("layers: not compared (a side's image is not on this engine)")
    else:
        lines.append(f"layers: {layers['a']} -> {layers['b']} ({layers['common_prefix']} shared from the bottom)")
        for digest in layers["removed"]:
            lines.append(f"  - {digest}")
        for digest in layers["added"]:
            lines.append(f"  + {digest}")
    if d["size"] is not None:
        lines.append(f"size: {d['size']['a']} -> {d['size']['b']} bytes ({_mb(d['size']['delta'])})")
    return "\n".join(lines) + "\n"
