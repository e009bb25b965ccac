"""Recipes: declarative YAML files under ``recipes/`` expanded into typed, validated variants.

A recipe file lists shared fields at the top, and a ``matrix`` whose axes (lists) expand by cartesian product
into variants, so a file lists axes, not copies; ``exclude`` removes combinations, compared as written (``cuda:
13.0`` and ``cuda: "13.0"`` are the same) over matrix and top-level fields alike. Every ``*.yaml``/``*.yml`` under
the folder is a recipe, sub-folders included (names starting with ``.`` are skipped). Every value that can reach
a Dockerfile is checked with a strict grammar (`fields`); a bad recipe raises one `RecipeError` naming
``file:line:key``, the reason and what would fit, before any build starts. Compatibility (CUDA x framework x
Python x OS) is checked by `rules`, against `compat`, for roots and for the variants that extend them alike.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import replace
from difflib import get_close_matches
from pathlib import Path
from typing import Any

from ..errors import RecipeError
from ..runtime.frameworks import RECIPE_NAMES
from .compat import Compat, load_compat
from .fields import _NAME_RE, _Fields, extras_of, labels_of
from .grammar import REFERENCE_RE, REPOSITORY_RE
from .rules import check_extras, check_variant
from .variant import RecipeSet, Variant
from .yamlfile import printable_key, read_recipe_file, written

FRAMEWORKS = RECIPE_NAMES
FLAVOURS = ("base", "runtime", "devel")
DEFAULT_HYPERTUNE = "0.1.0.dev6"
RECIPE_SUFFIXES = (".yaml", ".yml")

_SOURCE_RE = re.compile(r"^[A-Za-z0-9 ._/@+=,()~-]{1,1024}\Z")  # a recipe file's path as shown

FIELDS: dict[str, str] = {
    "name": "variant name (default: derived from repository and tag)",
    "repository": "image repository without registry (default trainimg/<framework>)",
    "framework": f"{', '.join(RECIPE_NAMES[:-1])} or {RECIPE_NAMES[-1]}",
    "version": "framework version, e.g. 2.14.1",
    "cuda": "CUDA major.minor, e.g. 13.0; null or absent for a CPU variant",
    "os": "debian12, ubuntu22.04 or ubuntu24.04",
    "flavour": "nvidia/cuda flavour: base, runtime or devel",
    "cudnn": "true to start from NVIDIA's -cudnn- image",
    "python": "Python major.minor, e.g. 3.11",
    "nccl": "NCCL version (default: the one the framework's CUDA build pins)",
    "reduction_server": "install google-reduction-server (default: true for GPU variants)",
    "hypertune": "cloudml-hypertune version",
    "extras": "list of extra pip requirements pinned with ==",
    "labels": "mapping of extra image labels",
    "extends": "name of the variant whose image this one is built on",
    "base_image": "explicit base image reference (a mirror of the nvidia/cuda tag)",
}
_FILE_KEYS = set(FIELDS) | {"matrix", "exclude"}
_CHILD_KEYS = ("extends", "name", "repository", "extras", "labels")


def load_recipes(recipes_dir: Path, paths: Iterable[Path] | None = None, compat: Compat | None = None) -> RecipeSet:
    """Load, expand and validate recipes: every file under `recipes_dir`, or only `paths` (each once).

    A file of `paths` that extends a variant is resolved against the whole folder, and the set holds its
    variants and their parents.
    """
    compat = compat or load_compat()
    recipes_dir = Path(recipes_dir)
    if recipes_dir.is_file():
        raise RecipeError(f"{str(recipes_dir)!r} is a file; --recipes takes the folder that holds the recipes, "
                          f"e.g. --recipes {recipes_dir.parent}", where="--recipes")
    if not recipes_dir.is_dir():
        raise RecipeError(f"recipes folder {str(recipes_dir)!r} does not exist; pass --recipes DIR", where="--recipes")
    folder = recipe_files(recipes_dir)
    if not paths:
        if not folder:
            raise RecipeError("no recipe files (*.yaml) found", where=str(recipes_dir))
        return RecipeSet(resolve(_expand_all(folder, recipes_dir), compat))
    chosen = _unique(paths)
    fields = _expand_all(chosen, recipes_dir)
    if not any("extends" in f.values for f in fields):
        return RecipeSet(resolve(fields, compat))
    same = {_identity(p) for p in chosen}
    others = [p for p in folder if _identity(p) not in same]
    everything = RecipeSet(resolve(fields + _expand_all(others, recipes_dir), compat))
    shown = {f.shown for f in fields}
    return RecipeSet(everything.with_parents([v for v in everything.variants if v.source in shown]))


def recipe_files(recipes_dir: Path) -> list[Path]:
    """Every recipe file under the folder, sub-folders included, sorted; linked folders are followed once."""
    found: list[Path] = []
    seen: set[str] = set()
    for top, dirs, files in os.walk(recipes_dir, followlinks=True):
        real = os.path.realpath(top)
        if real in seen:  # a link back to a folder already walked: a loop, or the same files twice
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        found.extend(Path(top, n) for n in files if n.endswith(RECIPE_SUFFIXES) and not n.startswith("."))
    return sorted(found)


def _identity(path: Path) -> str:
    """What makes two spellings of a path the same file (`validate a.yaml ./a.yaml` is one file)."""
    try:
        return str(Path(path).resolve())
    except (OSError, RuntimeError):  # a symlink loop: reading it reports the loop
        return os.path.abspath(path)


def _unique(paths: Iterable[Path]) -> list[Path]:
    by_identity = {_identity(Path(p)): Path(p) for p in sorted(Path(p) for p in paths)}
    return sorted(by_identity.values())


def _expand_all(files: list[Path], recipes_dir: Path) -> list[_Fields]:
    return [f for path in files for f in expand_file(path, _display(path, recipes_dir))]


def resolve(fields: list[_Fields], compat: Compat, known: Iterable[Variant] = ()) -> list[Variant]:
    """Validate expanded recipe fields into variants: roots first, then those extending them (which may extend
    `known` variants too), then the checks across the whole set."""
    variants = list(known) + [_resolve(f, compat) for f in fields if "extends" not in f.values]
    _resolve_children(variants, [f for f in fields if "extends" in f.values], compat)
    _check_set(variants)
    return variants


def _display(path: Path, recipes_dir: Path) -> str:
    """A path people recognise in errors: relative to the recipes folder's parent when possible."""
    try:
        return str(path.resolve().relative_to(recipes_dir.resolve().parent))
    except (OSError, RuntimeError):  # a symlink loop (reading it says so): name the link itself
        return os.path.relpath(os.path.abspath(path), os.path.dirname(os.path.abspath(recipes_dir)))
    except ValueError:  # a file outside the folder's parent
        return str(path)


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
    """Parse one recipe file and expand its matrix into one field mapping per variant (validated later)."""
    if not _SOURCE_RE.match(shown):
        # The path reaches the Dockerfile's header comment and a label: a newline there would open an instruction.
        raise RecipeError("a recipe's path may hold only [A-Za-z0-9 ._/@+=,()~-]; rename the file",
                          where=printable_key(shown))
    doc = read_recipe_file(path, shown)
    if not isinstance(doc, dict):
        raise RecipeError("a recipe is a mapping of fields, with an optional matrix", where=shown)
    for key in doc:
        if not isinstance(key, str) or key not in _FILE_KEYS:
            raise RecipeError(_unknown(key, _FILE_KEYS), where=_at(shown, doc, key, printable_key(key)))
    shared = {k: v for k, v in doc.items() if k not in ("matrix", "exclude")}
    shared_lines = {k: line for k in shared if (line := getattr(doc, "lines", {}).get(k))}
    excludes = _excludes(doc.get("exclude"), shown)
    out, used = [], set()
    for values, origin, lines in _matrix(doc.get("matrix"), shown):
        merged = {**shared, **values}
        hits = {i for i, ex in enumerate(excludes)
                if all(written(merged.get(k)) == written(v) for k, v in ex.items())}
        used |= hits
        if not hits:
            out.append(_Fields(merged, {**{k: k for k in shared}, **origin}, shown, {**shared_lines, **lines}))
    for i in range(len(excludes)):
        if i not in used:
            raise RecipeError("matches no variant of this file (values compare as written: 13.0 and \"13.0\" are the "
                              "same); fix it or remove it", where=_at(shown, doc["exclude"], i, f"exclude[{i}]"))
    if excludes and not out:
        raise RecipeError("excludes every variant of this file; remove the file or an exclude",
                          where=_at(shown, doc, "exclude", "exclude"))
    return out


def _unknown(key: Any, known: Iterable[str]) -> str:
    close = get_close_matches(str(key), list(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(sorted(known))}"
    return f"unknown key{hint}"


def _matrix(matrix: Any, shown: str) -> Iterator[tuple[dict[str, Any], dict[str, str], dict[str, int]]]:
    """Yield (values, origin, lines) per combination; origin maps a field to the key path it came from, lines to
    the line of the value chosen."""
    if matrix is None:
        yield {}, {}, {}
        return
    groups = matrix if isinstance(matrix, list) else [matrix]
    if not groups:
        raise RecipeError("an empty matrix gives no variants; list axes, or remove matrix", where=f"{shown}:matrix")
    for gi, group in enumerate(groups):
        prefix = "matrix" if not isinstance(matrix, list) else f"matrix[{gi}]"
        if not isinstance(group, dict) or not group:
            raise RecipeError("a matrix is a mapping of axes to lists of values", where=f"{shown}:{prefix}")
        axes: list[tuple[str, list[Any]]] = []
        for key, values in group.items():
            if not isinstance(key, str) or key not in FIELDS:
                raise RecipeError(_unknown(key, FIELDS),
                                  where=_at(shown, group, key, f"{prefix}.{printable_key(key)}"))
            if not isinstance(values, list) or not values:
                raise RecipeError("a matrix axis is a non-empty list of values",
                                  where=_at(shown, group, key, f"{prefix}.{key}"))
            axes.append((key, values))
        for combo in itertools.product(*(range(len(vals)) for _, vals in axes)):
            chosen = {key: vals[i] for (key, vals), i in zip(axes, combo)}
            lines = {key: line for (key, vals), i in zip(axes, combo) if (line := _line_of(vals, i))}
            yield chosen, {key: f"{prefix}.{key}" for key in chosen}, lines


def _line_of(items: Any, i: int) -> int | None:
    lines = getattr(items, "lines", None)
    return lines[i] if isinstance(lines, list) and i < len(lines) else None


def _excludes(exclude: Any, shown: str) -> list[dict[str, Any]]:
    if exclude is None:
        return []
    if not isinstance(exclude, list) or not all(isinstance(e, dict) for e in exclude):
        raise RecipeError("exclude is a list of mappings (field: value)", where=f"{shown}:exclude")
    for i, ex in enumerate(exclude):
        for key in ex:
            if key not in FIELDS:
                raise RecipeError(_unknown(key, FIELDS),
                                  where=_at(shown, ex, key, f"exclude[{i}].{printable_key(key)}"))
    return exclude


def _resolve(f: _Fields, compat: Compat) -> Variant:
    values, origin, shown = f.values, f.origin, f.shown
    framework = f.choice("framework", FRAMEWORKS)
    if framework is None:
        raise f.fail("framework", f"missing; one of {', '.join(FRAMEWORKS)}")
    version = f.release("version")
    cuda = f.string("cuda", re.compile(r"^[0-9]{1,2}\.[0-9]{1,2}\Z"), "a CUDA major.minor such as 13.0")
    os_name = f.choice("os", compat.operating_systems)
    if os_name is None:
        raise f.fail("os", f"missing; one of {', '.join(compat.operating_systems)}")
    python = f.string("python", re.compile(r"^3\.[0-9]{1,2}\Z"), "a Python major.minor such as 3.11")
    if python is None:
        raise f.fail("python", "missing; the Python major.minor, e.g. 3.11")
    flavour = f.choice("flavour", FLAVOURS, "base")
    cudnn_image = bool(f.boolean("cudnn", False))
    nccl = f.version("nccl")
    rs = f.boolean("reduction_server", None)
    hypertune = f.version("hypertune", DEFAULT_HYPERTUNE) if values.get("hypertune", "") is not None else None
    extras = extras_of(f)
    labels = labels_of(f)
    base_image = f.string("base_image", REFERENCE_RE, "an image reference (registry/repo:tag)")
    repository = f.string("repository", REPOSITORY_RE, "a lowercase repository path such as trainimg/pytorch")
    repository = repository or f"trainimg/{framework if framework != 'none' else 'base'}"

    draft = Variant(
        name="",
        repository=repository,
        framework=framework,  # type: ignore[arg-type]
        version=version,
        cuda=cuda,
        os=os_name,
        flavour=flavour or "base",
        cudnn_image=cudnn_image,
        python=python,
        nccl=nccl,
        cudnn=None,
        reduction_server=bool(rs) if rs is not None else cuda is not None,
        hypertune=hypertune,
        extras=extras,
        labels=labels,
        extends=None,
        base_image=base_image or "",
        source=shown,
        origin=dict(origin),
    )
    resolved = check_variant(draft, f, compat)
    name = f.string("name", _NAME_RE, "a lowercase name ([a-z0-9._-])")
    if name is None:
        name = f"{repository.rsplit('/', 1)[-1]}-{resolved.tag_version}"
        if not _NAME_RE.match(name):  # the name becomes a folder under images/: held to the same grammar
            raise f.fail("repository", f"the variant name derived from it, {name[:40]!r}..., is longer than 100 "
                                       f"characters; set `name`")
    return replace(resolved, name=name)


def _resolve_children(variants: list[Variant], children: list[_Fields], compat: Compat) -> None:
    """Resolve variants that extend another: they inherit everything and add only extras and labels, which pass
    the same rules as a root's (the grammar, the reserved labels, the managed-package guard on extras).

    Children may extend children; each round resolves those whose parent is known, so order in files
    does not matter. What is left after no round makes progress names a missing parent or a cycle.
    """
    pending = list(children)
    while pending:
        known = {v.name: v for v in variants}
        progressed = False
        for f in list(pending):
            parent = known.get(_child_parent(f) or "")
            if parent is None:
                continue
            name = f.string("name", _NAME_RE, "a lowercase name ([a-z0-9._-])") or ""
            repository = f.string("repository", REPOSITORY_RE, "a lowercase repository path") or f"trainimg/{name}"
            extras = extras_of(f)
            check_extras(extras, f, compat)  # what the child adds; what it inherits passed on its parent
            variants.append(replace(parent, name=name, repository=repository, extends=parent.name, extras=extras,
                                    labels=labels_of(f), source=f.shown, origin=dict(f.origin)))
            pending.remove(f)
            progressed = True
        if not progressed:
            _stalled(variants, pending)


def _child_parent(f: _Fields) -> str | None:
    """The parent an extending entry names, after checking it sets only what a child may set."""
    for key in f.values:
        if key not in _CHILD_KEYS:
            raise f.fail(key, f"set by the variant this one extends; an extending variant sets only "
                              f"{', '.join(_CHILD_KEYS)}")
    parent_name = f.string("extends", _NAME_RE, "a variant name")
    if f.string("name", _NAME_RE, "a lowercase name ([a-z0-9._-])") is None:
        raise f.fail("extends", "an extending variant needs its own `name`")
    return parent_name


def _stalled(variants: list[Variant], pending: list[_Fields]) -> None:
    """No pending child's parent exists: report the missing parent first (it explains the stall), else a cycle."""
    names = [v.name for v in variants] + [str(c.values.get("name")) for c in pending]
    f = next((c for c in pending if c.values.get("extends") not in names), pending[0])
    target = f.values.get("extends")
    close = get_close_matches(str(target), names, n=1)
    reason = ("extends forms a cycle" if target in names
              else f"no variant named {target!r}" + (f"; did you mean {close[0]}?" if close else ""))
    raise f.fail("extends", reason)


def _check_set(variants: list[Variant]) -> None:
    """Checks across files: variant names and image tags are unique."""
    names: dict[str, Variant] = {}
    tags: dict[str, Variant] = {}
    for v in variants:
        if v.name in names:
            raise RecipeError(f"variant name {v.name!r} is also produced by {names[v.name].source}; set `name`",
                              where=f"{v.source}:name")
        if v.tag in tags:
            raise RecipeError(f"image tag {v.tag} is also produced by {tags[v.tag].source}; set `repository`",
                              where=f"{v.source}:repository")
        names[v.name], tags[v.tag] = v, v
