"""Recipes: declarative YAML files under ``recipes/`` expanded into typed, validated variants.

A recipe file lists shared fields at the top, and a ``matrix`` whose axes (lists) expand by cartesian product
into variants, so a file lists axes, not copies; ``exclude`` removes combinations, compared as written (``cuda:
13.0`` and ``cuda: "13.0"`` are the same) over matrix and top-level fields alike. Every ``*.yaml``/``*.yml`` under
the folder is a recipe, sub-folders included (names starting with ``.`` are skipped). Every value that can reach
a Dockerfile is checked with a strict grammar (`fields`); a bad recipe raises one `RecipeError` naming
``file:line:key``, the reason and what would fit, before any build starts. Compatibility (CUDA x framework x
Python x OS) is checked by `rules`, against `compat`, for roots and for the variants that extend them alike.

Every mistake of every file is reported in one run (`errors.RecipeErrors`, one line each), wherever it is sound to
go on: a file that does not parse is one mistake and nothing more of it is read; an unknown key is skipped and the
rest of the file read; each field of a variant is read on its own; the compatibility rules, which build on each
other, stop at a variant's first broken one; a variant extending one that failed is not blamed for it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import replace
from difflib import get_close_matches
from pathlib import Path
from typing import Any

from ..errors import RecipeError, RecipeErrors
from ..runtime.frameworks import RECIPE_NAMES
from .arches import ARCHES, DEFAULT_ARCHES
from .compat import Compat, load_compat
from .fields import _NAME_RE, _Fields, env_of, extras_of, labels_of
from .grammar import REFERENCE_RE, REPOSITORY_RE
from .fields import holds_of
from .rules import check_extras, check_variant
from .expand import FIELDS, collect, expand, expand_file
from .variant import RecipeSet, Variant

FRAMEWORKS = RECIPE_NAMES
FLAVOURS = ("base", "runtime", "devel")
DEFAULT_HYPERTUNE = "0.1.0.dev6"
RECIPE_SUFFIXES = (".yaml", ".yml")
__all__ = ["FIELDS", "RecipeError", "RecipeSet", "Variant", "expand_file", "load_recipes"]  # re-exported
_CHILD_KEYS = ("extends", "name", "repository", "extras", "labels", "env")


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
    paths = given_files(paths) if paths else None
    if not paths:
        if not folder:
            raise RecipeError("no recipe files (*.yaml) found", where=str(recipes_dir))
        return RecipeSet(resolve(_expand_all(folder, recipes_dir, compat), compat))
    chosen = _unique(paths)
    fields = _expand_all(chosen, recipes_dir, compat)
    if not any("extends" in f.values for f in fields):
        return RecipeSet(resolve(fields, compat))
    same = {_identity(p) for p in chosen}
    others = [p for p in folder if _identity(p) not in same]
    everything = RecipeSet(resolve(fields + _expand_all(others, recipes_dir, compat), compat))
    shown = {f.shown for f in fields}
    return RecipeSet(everything.with_parents([v for v in everything.variants if v.source in shown]))


def given_files(paths: Iterable[Path]) -> list[Path]:
    """The files a user named: a folder stands for the recipe files under it (`validate recipes/team`)."""
    return _unique(f for p in paths for f in (recipe_files(Path(p)) if Path(p).is_dir() else [Path(p)]))


def shown_path(path: Path, recipes_dir: Path) -> str:
    """How a recipe file is named in errors and in a variant's `source`."""
    return _display(path, recipes_dir)


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


def _expand_all(files: list[Path], recipes_dir: Path, compat: Compat) -> list[_Fields]:
    out, errors = [], []  # type: tuple[list[_Fields], list[RecipeError]]
    for path in files:
        nothing: tuple[list[_Fields], list[RecipeError]] = ([], [])
        found, mistakes = collect(errors, lambda: expand(path, _display(path, recipes_dir)), nothing)
        out.extend(found)
        errors.extend(mistakes)
    if errors:  # with the files' shape mistakes, those of the roots' fields (their children wait for a clean run)
        roots = [f for f in out if "extends" not in f.values]
        try:
            resolve(roots, compat)
        except RecipeError as err:
            errors.append(err)
        RecipeErrors.raise_any(errors)
    return out


def resolve(fields: list[_Fields], compat: Compat, known: Iterable[Variant] = ()) -> list[Variant]:
    """Validate expanded recipe fields into variants: roots first, then those extending them (which may extend
    `known` variants too), then the checks across the whole set."""
    errors: list[RecipeError] = []
    variants = list(known)
    for f in fields:
        if "extends" not in f.values:
            variants.extend(collect(errors, lambda: [_resolve(f, compat)], []))
    roots_failed = bool(errors)
    _resolve_children(variants, [f for f in fields if "extends" in f.values], compat, errors, roots_failed)
    errors.extend(_check_set(variants))
    RecipeErrors.raise_any(errors)
    return variants


def _display(path: Path, recipes_dir: Path) -> str:
    """A path people recognise in errors: relative to the recipes folder's parent when possible."""
    try:
        return str(path.resolve().relative_to(recipes_dir.resolve().parent))
    except (OSError, RuntimeError):  # a symlink loop (reading it says so): name the link itself
        return os.path.relpath(os.path.abspath(path), os.path.dirname(os.path.abspath(recipes_dir)))
    except ValueError:  # a file outside the folder's parent
        return str(path)


def _read_root(f: _Fields, compat: Compat) -> dict[str, Any]:
    """Every field of a root entry read on its own with its grammar, so all bad ones are reported together."""
    os_names = compat.operating_systems
    readers: dict[str, Callable[[], Any]] = {
        "framework": lambda: _required(f, "framework", f.choice("framework", FRAMEWORKS),
                                       f"missing; one of {', '.join(FRAMEWORKS)}"),
        "version": lambda: f.release("version"),
        "cuda": lambda: f.string("cuda", re.compile(r"^[0-9]{1,2}\.[0-9]{1,2}\Z"), "a CUDA major.minor such as 13.0"),
        "os": lambda: _required(f, "os", f.choice("os", os_names), f"missing; one of {', '.join(os_names)}"),
        "python": lambda: _required(f, "python", f.string("python", re.compile(r"^3\.[0-9]{1,2}\Z"),
                                                          "a Python major.minor such as 3.11"),
                                    "missing; the Python major.minor, e.g. 3.11"),
        "flavour": lambda: f.choice("flavour", FLAVOURS, "base") or "base",
        "cudnn_image": lambda: bool(f.boolean("cudnn", False)),
        "nccl": lambda: f.version("nccl"),
        "rs": lambda: f.boolean("reduction_server", None),
        "hypertune": lambda: (f.version("hypertune", DEFAULT_HYPERTUNE) if f.values.get("hypertune", "") is not None
                              else None),
        "extras": lambda: extras_of(f),
        "labels": lambda: labels_of(f),
        "env": lambda: env_of(f),
        "base_image": lambda: f.string("base_image", REFERENCE_RE, "an image reference (registry/repo:tag)"),
        "repository": lambda: f.string("repository", REPOSITORY_RE,
                                       "a lowercase repository path such as trainimg/pytorch"),
        "name": lambda: f.string("name", _NAME_RE, "a lowercase name ([a-z0-9._-])"),
        "arch": lambda: f.choices("arch", ARCHES, DEFAULT_ARCHES),
        "held": lambda: holds_of(f.values.get("held"), f.where("held")),
    }
    errors: list[RecipeError] = []
    got = {key: collect(errors, read, None) for key, read in readers.items()}
    RecipeErrors.raise_any(errors)
    return got


def _required(f: _Fields, key: str, value: str | None, missing: str) -> str:
    if value is None:
        raise f.fail(key, missing)
    return value


def _resolve(f: _Fields, compat: Compat) -> Variant:
    got = _read_root(f, compat)
    framework, cuda, rs = got["framework"], got["cuda"], got["rs"]
    repository = got["repository"] or f"trainimg/{framework if framework != 'none' else 'base'}"
    draft = Variant(
        name="", repository=repository, framework=framework, version=got["version"], cuda=cuda, os=got["os"],
        flavour=got["flavour"], cudnn_image=got["cudnn_image"], python=got["python"], nccl=got["nccl"], cudnn=None,
        reduction_server=bool(rs) if rs is not None else cuda is not None, hypertune=got["hypertune"],
        extras=got["extras"], labels=got["labels"], extends=None, base_image=got["base_image"] or "",
        source=f.shown, arch=got["arch"] or DEFAULT_ARCHES, env=got["env"], origin=dict(f.origin),
        held=got["held"] or (),
    )
    resolved = check_variant(draft, f, compat)
    name = got["name"]
    if name is None:
        name = f"{repository.rsplit('/', 1)[-1]}-{resolved.tag_version}"
        if not _NAME_RE.match(name):  # the name becomes a folder under images/: held to the same grammar
            raise f.fail("repository", f"the variant name derived from it, {name[:40]!r}..., is longer than 100 "
                                       f"characters; set `name`")
    return replace(resolved, name=name)


def _resolve_children(variants: list[Variant], children: list[_Fields], compat: Compat,
                      errors: list[RecipeError], roots_failed: bool) -> None:
    """Resolve variants that extend another: they inherit everything and add only extras, labels and env, which
    pass the same rules as a root's (the grammar, the reserved labels, the managed-package guard on extras).

    Children may extend children; each round resolves those whose parent is known, so order in files
    does not matter. What is left after no round makes progress names a missing parent or a cycle, unless a root
    failed (`roots_failed`): its children are not blamed for its mistake. Mistakes go to `errors`.
    """
    pending = list(children)
    while pending:
        known = {v.name: v for v in variants}
        progressed = False
        for f in list(pending):
            try:
                parent = known.get(_child_parent(f) or "")
            except RecipeError as err:  # the child's own mistake: reported, the child dropped
                errors.append(err)
                pending.remove(f)
                progressed = True
                continue
            if parent is None:
                continue
            variants.extend(collect(errors, lambda: [_child(f, parent, compat)], []))
            pending.remove(f)
            progressed = True
        if not progressed:
            if pending and not roots_failed:
                errors.append(_stalled(variants, pending))
            return


def _child(f: _Fields, parent: Variant, compat: Compat) -> Variant:
    name = f.string("name", _NAME_RE, "a lowercase name ([a-z0-9._-])") or ""
    repository = f.string("repository", REPOSITORY_RE, "a lowercase repository path") or f"trainimg/{name}"
    extras = extras_of(f)
    check_extras(extras, f, compat)  # what the child adds; what it inherits passed on its parent
    return replace(parent, name=name, repository=repository, extends=parent.name, extras=extras,
                   labels=labels_of(f), env=env_of(f), source=f.shown, origin=dict(f.origin))


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


def _stalled(variants: list[Variant], pending: list[_Fields]) -> RecipeError:
    """No pending child's parent exists: report the missing parent first (it explains the stall), else a cycle."""
    names = [v.name for v in variants] + [str(c.values.get("name")) for c in pending]
    f = next((c for c in pending if c.values.get("extends") not in names), pending[0])
    target = f.values.get("extends")
    close = get_close_matches(str(target), names, n=1)
    reason = ("extends forms a cycle" if target in names
              else f"no variant named {target!r}" + (f"; did you mean {close[0]}?" if close else ""))
    return f.fail("extends", reason)


def _check_set(variants: list[Variant]) -> list[RecipeError]:
    """Checks across files: variant names and image tags are unique (every clash reported)."""
    names: dict[str, Variant] = {}
    tags: dict[str, Variant] = {}
    errors = []
    for v in variants:
        if v.name in names:
            errors.append(RecipeError(f"variant name {v.name!r} is also produced by {names[v.name].source}; set "
                                      "`name`", where=f"{v.source}:name"))
        elif v.tag in tags:
            errors.append(RecipeError(f"image tag {v.tag} is also produced by {tags[v.tag].source}; set "
                                      "`repository`", where=f"{v.source}:repository"))
        names.setdefault(v.name, v)
        tags.setdefault(v.tag, v)
    return errors
