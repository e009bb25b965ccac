"""One recipe file read into one field mapping per variant: its keys checked, its matrix expanded, its excludes
applied (`loading` validates the fields and resolves the variants).

Every mistake of a file's shape is reported together (`errors.RecipeErrors`): unknown keys are named and skipped,
each matrix group and each exclude is checked on its own; a file that does not parse is one mistake and no more.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable
from difflib import get_close_matches
from pathlib import Path
from typing import Any, TypeVar

from ..errors import RecipeError, RecipeErrors
from ..runtime.frameworks import RECIPE_NAMES
from .fields import _Fields
from .yamlfile import printable_key, read_recipe_file, written

FIELDS: dict[str, str] = {
    "name": "variant name (default: derived from repository and tag)",
    "repository": "image repository without registry (default trainimg/<framework>)",
    "framework": f"{', '.join(RECIPE_NAMES[:-1])} or {RECIPE_NAMES[-1]}",
    "version": "framework version, e.g. 2.14.1",
    "cuda": "CUDA major.minor, e.g. 13.0; null or absent for a CPU variant",
    "os": "an OS of compat.yaml's operating_systems, e.g. debian13 or ubuntu24.04",
    "flavour": "nvidia/cuda flavour: base, runtime or devel",
    "cudnn": "true to start from NVIDIA's -cudnn- image",
    "python": "Python major.minor, e.g. 3.11",
    "nccl": "NCCL version (default: the one the framework's CUDA build pins)",
    "reduction_server": "install google-reduction-server (default: true for GPU variants)",
    "hypertune": "cloudml-hypertune version",
    "extras": "list of extra pip requirements pinned with ==",
    "labels": "mapping of extra image labels",
    "env": "mapping of image environment variables (a node's NCCL/network variables are refused: node_env.yaml)",
    "extends": "name of the variant whose image this one is built on",
    "base_image": "explicit base image reference (a mirror of the nvidia/cuda tag)",
    "arch": "list of CPU architectures the image is built for: amd64, arm64 (default [amd64])",
    "held": "what `outdated` should not ask to move (framework, os), each with its reason, source and until",
}
# Fields whose value is the variant's whole: in a matrix group they are the group's, never an axis (one variant
# holds every architecture under one tag; an axis would make a variant per architecture, with one name; `held` is a
# mapping of reasons, recipe/fields.py `held`).
GROUP_FIELDS = ("arch", "held")
_FILE_KEYS = set(FIELDS) | {"matrix", "exclude"}
_SOURCE_RE = re.compile(r"^[A-Za-z0-9 ._/@+=,()~-]{1,1024}\Z")  # a recipe file's path as shown
#: One combination of a matrix: the values, the key path each came from, the line of each value.
Combination = tuple[dict[str, Any], dict[str, str], dict[str, int]]


T = TypeVar("T")


def collect(errors: list[RecipeError], read: Callable[[], T], instead: T) -> T:
    """`read()`, or `instead` with its mistake added to `errors`: the reading goes on past it."""
    try:
        return read()
    except RecipeError as err:
        errors.append(err)
        return instead


def _at(shown: str, container: Any, index: Any, path: str) -> str:
    """``file:line:path`` when YAML recorded the line of `container[index]`, else ``file:path``."""
    lines = getattr(container, "lines", None)
    line = None
    if isinstance(lines, dict):
        line = lines.get(index)
    elif isinstance(lines, list) and isinstance(index, int) and 0 <= index < len(lines):
        line = lines[index]
    return f"{shown}:{line}:{path}" if line else f"{shown}:{path}"


def expand_file(path: Path, shown: str) -> list[_Fields]:
    """Parse one recipe file and expand its matrix into one field mapping per variant (validated later); every
    mistake of its shape (unknown keys, a bad matrix or exclude) is reported together."""
    out, errors = expand(path, shown)
    RecipeErrors.raise_any(errors)
    return out


def expand(path: Path, shown: str) -> tuple[list[_Fields], list[RecipeError]]:
    """`expand_file`, with the mistakes of the file's shape returned beside the variants still found: an unknown
    key is skipped, so the fields of the variants can still be checked in the same run."""
    if not _SOURCE_RE.match(shown):
        # The path reaches the Dockerfile's header comment and a label: a newline there would open an instruction.
        raise RecipeError("a recipe's path may hold only [A-Za-z0-9 ._/@+=,()~-]; rename the file",
                          where=printable_key(shown))
    doc = read_recipe_file(path, shown)
    if not isinstance(doc, dict):
        raise RecipeError("a recipe is a mapping of fields, with an optional matrix", where=shown)
    errors = [RecipeError(_unknown(key, _FILE_KEYS), where=_at(shown, doc, key, printable_key(key)))
              for key in doc if not isinstance(key, str) or key not in _FILE_KEYS]
    shared = {k: v for k, v in doc.items() if k in FIELDS}
    shared_lines = {k: line for k in shared if (line := getattr(doc, "lines", {}).get(k))}
    excludes: list[dict[str, Any]] = collect(errors, lambda: _excludes(doc.get("exclude"), shown), [])
    nothing: tuple[list[Combination], list[RecipeError]] = ([], [])
    combos, bad_axes = collect(errors, lambda: _matrix(doc.get("matrix"), shown), nothing)
    errors += bad_axes
    out, used = [], set()
    for values, origin, lines in combos:
        merged = {**shared, **values}
        hits = {i for i, ex in enumerate(excludes)
                if all(written(merged.get(k)) == written(v) for k, v in ex.items())}
        used |= hits
        if not hits:
            out.append(_Fields(merged, {**{k: k for k in shared}, **origin}, shown, {**shared_lines, **lines}))
    errors += [RecipeError("matches no variant of this file (values compare as written: 13.0 and \"13.0\" are the "
                          "same); fix it or remove it", where=_at(shown, doc["exclude"], i, f"exclude[{i}]"))
              for i in range(len(excludes)) if i not in used]
    if excludes and not out:
        errors.append(RecipeError("excludes every variant of this file; remove the file or an exclude",
                                  where=_at(shown, doc, "exclude", "exclude")))
    return out, errors


def _unknown(key: Any, known: Iterable[str]) -> str:
    close = get_close_matches(str(key), list(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(sorted(known))}"
    return f"unknown key{hint}"


def _matrix(matrix: Any, shown: str) -> tuple[list[Combination], list[RecipeError]]:
    """(values, origin, lines) per combination, and the matrix's mistakes; origin maps a field to the key path it
    came from, lines to the line of the value chosen. A bad axis is reported and left out; the others expand."""
    if matrix is None:
        return [({}, {}, {})], []
    groups = matrix if isinstance(matrix, list) else [matrix]
    if not groups:
        raise RecipeError("an empty matrix gives no variants; list axes, or remove matrix", where=f"{shown}:matrix")
    errors: list[RecipeError] = []
    out: list[Combination] = []
    for gi, group in enumerate(groups):
        prefix = "matrix" if not isinstance(matrix, list) else f"matrix[{gi}]"
        axes = _axes(group, shown, prefix, errors)
        fixed = {key: group[key] for key in GROUP_FIELDS if isinstance(group, dict) and key in group}
        fixed_lines = {key: line for key in fixed if (line := getattr(group, "lines", {}).get(key))}
        for combo in itertools.product(*(range(len(vals)) for _, vals in axes)):
            chosen = {key: vals[i] for (key, vals), i in zip(axes, combo)} | fixed
            lines = {key: line for (key, vals), i in zip(axes, combo) if (line := _line_of(vals, i))} | fixed_lines
            out.append((chosen, {key: f"{prefix}.{key}" for key in chosen}, lines))
    return out, errors


def _axes(group: Any, shown: str, prefix: str, errors: list[RecipeError]) -> list[tuple[str, list[Any]]]:
    """One matrix group's good axes, each a field and its non-empty list of values; each bad one goes to
    `errors`. A group that is not a mapping of axes has none."""
    if not isinstance(group, dict) or not group:
        errors.append(RecipeError("a matrix is a mapping of axes to lists of values", where=f"{shown}:{prefix}"))
        return []
    axes = []
    for key, values in group.items():
        if key in GROUP_FIELDS:
            continue  # the group's own value (`_matrix`), read with the other fields
        if not isinstance(key, str) or key not in FIELDS:
            errors.append(RecipeError(_unknown(key, FIELDS),
                                      where=_at(shown, group, key, f"{prefix}.{printable_key(key)}")))
        elif not isinstance(values, list) or not values:
            errors.append(RecipeError("a matrix axis is a non-empty list of values",
                                      where=_at(shown, group, key, f"{prefix}.{key}")))
        else:
            axes.append((key, values))
    return axes


def _line_of(items: Any, i: int) -> int | None:
    lines = getattr(items, "lines", None)
    return lines[i] if isinstance(lines, list) and i < len(lines) else None


def _excludes(exclude: Any, shown: str) -> list[dict[str, Any]]:
    if exclude is None:
        return []
    if not isinstance(exclude, list) or not all(isinstance(e, dict) for e in exclude):
        raise RecipeError("exclude is a list of mappings (field: value)", where=f"{shown}:exclude")
    RecipeErrors.raise_any([RecipeError(_unknown(key, FIELDS) if key not in FIELDS else
                                        f"{key} is a list the variant holds whole, not an axis; an exclude cannot "
                                        f"match it: set {key} in the matrix group instead",
                                        where=_at(shown, ex, key, f"exclude[{i}].{printable_key(key)}"))
                            for i, ex in enumerate(exclude) for key in ex
                            if key not in FIELDS or key in GROUP_FIELDS])
    return exclude
