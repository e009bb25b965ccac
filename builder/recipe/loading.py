"""Recipes: declarative YAML files under ``recipes/`` expanded into typed, validated variants.

A recipe file lists shared fields at the top, and a ``matrix`` whose axes (lists) expand by cartesian product
into variants, so a file lists axes, not copies. Every value that can reach a Dockerfile is checked here with a
strict grammar (versions with `packaging`, requirements with PEP 508, image references with the reference
grammar); a bad recipe raises one `RecipeError` naming ``file:key``, the reason and what would fit, before any
build starts. Compatibility (CUDA x framework x Python x OS) is checked in `validate`, against `compat`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from difflib import get_close_matches
from pathlib import Path
from typing import Any, Literal

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from .compat import Compat, load_compat
from .grammar import REFERENCE_RE, REPOSITORY_RE
from ..errors import RecipeError

FRAMEWORKS = ("pytorch", "tensorflow", "jax", "none")
FLAVOURS = ("base", "runtime", "devel")
DEFAULT_HYPERTUNE = "0.1.0.dev6"

# Grammars for anything that reaches a Dockerfile. Deliberately narrower than what Docker would accept:
# a value that matches can never open a new instruction, a shell word or a template expression.
_VERSION_RE = re.compile(r"^[0-9][0-9A-Za-z.+!-]{0,63}\Z")
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}\Z")
_LABEL_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}\Z")
_LABEL_VALUE_RE = re.compile(r"^[A-Za-z0-9 ._:/@+=,()-]{0,256}\Z")
_SOURCE_RE = re.compile(r"^[A-Za-z0-9 ._/@+=,()~-]{1,1024}\Z")  # a recipe file's path as shown
_REQ_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]+\])?==[0-9][0-9A-Za-z.+!-]*\Z")

FIELDS: dict[str, str] = {
    "name": "variant name (default: derived from repository and tag)",
    "repository": "image repository without registry (default trainimg/<framework>)",
    "framework": "pytorch, tensorflow, jax or none",
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


@dataclass(frozen=True)
class Variant:
    """One buildable image, fully resolved: every field validated, defaults applied."""

    name: str
    repository: str
    framework: Literal["pytorch", "tensorflow", "jax", "none"]
    version: str | None
    cuda: str | None
    os: str
    flavour: str
    cudnn_image: bool
    python: str
    nccl: str | None
    cudnn: str | None
    reduction_server: bool
    hypertune: str | None
    extras: tuple[str, ...]
    labels: tuple[tuple[str, str], ...]
    extends: str | None
    base_image: str
    source: str  # the recipe file, relative to the recipes folder's parent
    origin: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def gpu(self) -> bool:
        return self.cuda is not None

    @property
    def tag(self) -> str:
        """``trainimg/pytorch:2.13.0-cu128-py3.12``: the image reference without registry."""
        return f"{self.repository}:{self.tag_version}"

    @property
    def tag_version(self) -> str:
        accel = "cu" + self.cuda.replace(".", "") if self.cuda else "cpu"
        head = self.version if self.version else "base"
        return f"{head}-{accel}-py{self.python}"

    def versions(self) -> dict[str, str | None]:
        return {
            "cuda": self.cuda,
            "cudnn": self.cudnn,
            "nccl": self.nccl,
            "python": self.python,
            "framework": self.version,
            "hypertune": self.hypertune,
        }


class RecipeSet:
    """All variants of a recipes folder, in a stable order (file name, then matrix order)."""

    def __init__(self, variants: list[Variant]) -> None:
        self.variants = variants
        self.by_name = {v.name: v for v in variants}

    def select(self, patterns: Iterable[str]) -> list[Variant]:
        """Variants named by exact name or shell glob; an unknown name is a user error with a suggestion."""
        from fnmatch import fnmatchcase

        patterns = list(patterns)
        if not patterns:
            return list(self.variants)
        chosen: list[Variant] = []
        for pat in patterns:
            hits = [v for v in self.variants if fnmatchcase(v.name, pat) or v.tag == pat]
            if not hits:
                close = get_close_matches(pat, list(self.by_name), n=1)
                hint = f"; did you mean {close[0]}?" if close else "; run `trainimg list` to see them"
                raise RecipeError(f"no variant named {pat!r}{hint}", where="variant")
            chosen.extend(h for h in hits if h not in chosen)
        return chosen

    def with_parents(self, chosen: list[Variant]) -> list[Variant]:
        """`chosen` plus every variant they extend, parents first (the order builds must run in)."""
        ordered: list[Variant] = []

        def visit(v: Variant) -> None:
            if v.extends:
                visit(self.by_name[v.extends])
            if v not in ordered:
                ordered.append(v)

        for v in chosen:
            visit(v)
        return ordered


def load_recipes(recipes_dir: Path, paths: Iterable[Path] | None = None, compat: Compat | None = None) -> RecipeSet:
    """Load, expand and validate recipes. `paths` limits which files count (default: every *.yaml)."""
    compat = compat or load_compat()
    recipes_dir = Path(recipes_dir)
    if not recipes_dir.is_dir():
        raise RecipeError(f"recipes folder {str(recipes_dir)!r} does not exist; pass --recipes DIR", where="--recipes")
    files = sorted(Path(p) for p in paths) if paths else sorted(recipes_dir.glob("*.y*ml"))
    if not files:
        raise RecipeError("no recipe files (*.yaml) found", where=str(recipes_dir))
    fields = [f for path in files for f in expand_file(path, _display(path, recipes_dir))]
    return RecipeSet(resolve(fields, compat))


def resolve(fields: list[_Fields], compat: Compat, known: Iterable[Variant] = ()) -> list[Variant]:
    """Validate expanded recipe fields into variants: roots first, then those extending them (which may extend
    `known` variants too), then the checks across the whole set."""
    variants = list(known) + [_resolve(f, compat) for f in fields if "extends" not in f.values]
    _resolve_children(variants, [f for f in fields if "extends" in f.values])
    _check_set(variants)
    return variants


def _display(path: Path, recipes_dir: Path) -> str:
    """A path people recognise in errors: relative to the recipes folder's parent when possible."""
    try:
        return str(path.resolve().relative_to(recipes_dir.resolve().parent))
    except ValueError:
        return str(path)


def expand_file(path: Path, shown: str) -> list[_Fields]:
    """Parse one recipe file and expand its matrix into one field mapping per variant (validated later)."""
    if not _SOURCE_RE.match(shown):
        # The path reaches the Dockerfile's header comment and a label: a newline there would open an instruction.
        raise RecipeError("a recipe's path may hold only [A-Za-z0-9 ._/@+=,()~-]; rename the file",
                          where=_key(shown))
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RecipeError(f"cannot read: {exc.strerror}", where=shown) from exc
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark else ""
        raise RecipeError(f"not valid YAML{line}: {getattr(exc, 'problem', exc)}", where=shown) from exc
    if not isinstance(doc, dict):
        raise RecipeError("a recipe is a mapping of fields, with an optional matrix", where=shown)
    for key in doc:
        if not isinstance(key, str) or key not in _FILE_KEYS:
            raise RecipeError(_unknown(key, _FILE_KEYS), where=f"{shown}:{_key(key)}")

    shared = {k: v for k, v in doc.items() if k not in ("matrix", "exclude")}
    origin_shared = {k: k for k in shared}
    combos = list(_matrix(doc.get("matrix"), shown))
    excludes = _excludes(doc.get("exclude"), shown)
    out = []
    for values, origin in combos:
        if any(all(values.get(k) == v for k, v in ex.items()) for ex in excludes):
            continue
        out.append(_Fields({**shared, **values}, {**origin_shared, **origin}, shown))
    return out


def _key(key: Any) -> str:
    """A key as it may appear in the one-line `file:key` of an error: unprintable keys are shown quoted."""
    return key if isinstance(key, str) and key.isprintable() else repr(key)


def _unknown(key: Any, known: Iterable[str]) -> str:
    close = get_close_matches(str(key), list(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(sorted(known))}"
    return f"unknown key{hint}"


def _matrix(matrix: Any, shown: str) -> Iterable[tuple[dict[str, Any], dict[str, str]]]:
    """Yield (values, origin) per combination; origin maps a field to the key path it came from."""
    if matrix is None:
        yield {}, {}
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
                raise RecipeError(_unknown(key, FIELDS), where=f"{shown}:{prefix}.{_key(key)}")
            if not isinstance(values, list) or not values:
                raise RecipeError("a matrix axis is a non-empty list of values", where=f"{shown}:{prefix}.{key}")
            axes.append((key, values))
        for combo in itertools.product(*(vals for _, vals in axes)):
            values = {key: val for (key, _), val in zip(axes, combo)}
            yield values, {key: f"{prefix}.{key}" for key in values}


def _excludes(exclude: Any, shown: str) -> list[dict[str, Any]]:
    if exclude is None:
        return []
    if not isinstance(exclude, list) or not all(isinstance(e, dict) for e in exclude):
        raise RecipeError("exclude is a list of mappings (field: value)", where=f"{shown}:exclude")
    for i, ex in enumerate(exclude):
        for key in ex:
            if key not in FIELDS:
                raise RecipeError(_unknown(key, FIELDS), where=f"{shown}:exclude[{i}].{_key(key)}")
    return exclude


class _Fields:
    """Typed access to one merged variant mapping, raising `file:key` errors at the key's origin."""

    def __init__(self, values: dict[str, Any], origin: dict[str, str], shown: str) -> None:
        self.values, self.origin, self.shown = values, origin, shown

    def where(self, key: str) -> str:
        return f"{self.shown}:{self.origin.get(key, key)}"

    def fail(self, key: str, reason: str) -> RecipeError:
        return RecipeError(reason, where=self.where(key))

    def string(self, key: str, regex: re.Pattern[str], what: str, default: str | None = None) -> str | None:
        value = self.values.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise self.fail(key, f"expected {what}, got {type(value).__name__}")
        text = value if isinstance(value, str) else _yaml_number(value)
        if not regex.match(text):
            raise self.fail(key, f"{text!r} is not {what}")
        return text

    def version(self, key: str, default: str | None = None) -> str | None:
        text = self.string(key, _VERSION_RE, "a version (digits, dots, letters)", default)
        if text is None:
            return None
        try:
            Version(text)
        except InvalidVersion:
            raise self.fail(key, f"{text!r} is not a PEP 440 version") from None
        return text

    def boolean(self, key: str, default: bool | None) -> bool | None:
        value = self.values.get(key, default)
        if value is None or isinstance(value, bool):
            return value
        raise self.fail(key, f"expected true or false, got {value!r}")

    def choice(self, key: str, options: Iterable[str], default: str | None = None) -> str | None:
        value = self.values.get(key, default)
        options = list(options)
        if value is None:
            return None
        if not isinstance(value, str) or value not in options:
            raise self.fail(key, f"{value!r} is not one of {', '.join(options)}")
        return value


def _yaml_number(value: int | float) -> str:
    """YAML reads ``cuda: 13.0`` as a float; turn it back into the text the author meant."""
    return repr(value) if isinstance(value, float) else str(value)


def _resolve(f: _Fields, compat: Compat) -> Variant:
    values, origin, shown = f.values, f.origin, f.shown
    framework = f.choice("framework", FRAMEWORKS)
    if framework is None:
        raise f.fail("framework", f"missing; one of {', '.join(FRAMEWORKS)}")
    version = f.version("version")
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
    extras = _extras(f)
    labels = _labels(f)
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
    from .rules import check_variant  # validation needs the draft; kept in its own module

    resolved = check_variant(draft, f, compat)
    name = f.string("name", _NAME_RE, "a lowercase name ([a-z0-9._-])")
    if name is None:
        name = f"{repository.rsplit('/', 1)[-1]}-{resolved.tag_version}"
        if not _NAME_RE.match(name):  # the name becomes a folder under images/: held to the same grammar
            raise f.fail("repository", f"the variant name derived from it, {name[:40]!r}..., is longer than 100 "
                                       f"characters; set `name`")
    return _replace(resolved, name=name)


def _replace(v: Variant, **changes: Any) -> Variant:
    from dataclasses import replace

    return replace(v, **changes)


_CHILD_KEYS = ("extends", "name", "repository", "extras", "labels")


def _resolve_children(variants: list[Variant], children: list[_Fields]) -> None:
    """Resolve variants that extend another: they inherit everything and add only extras and labels.

    Children may extend children; each round resolves those whose parent is known, so order in files
    does not matter. What is left after no round makes progress names a missing parent or a cycle.
    """
    pending = list(children)
    while pending:
        known = {v.name: v for v in variants}
        progressed = False
        for f in list(pending):
            for key in f.values:
                if key not in _CHILD_KEYS:
                    raise f.fail(key, f"set by the variant this one extends; an extending variant sets only "
                                      f"{', '.join(_CHILD_KEYS)}")
            parent_name = f.string("extends", _NAME_RE, "a variant name")
            name = f.string("name", _NAME_RE, "a lowercase name ([a-z0-9._-])")
            if name is None:
                raise f.fail("extends", "an extending variant needs its own `name`")
            parent = known.get(parent_name or "")
            if parent is None:
                continue
            repository = f.string("repository", REPOSITORY_RE, "a lowercase repository path") or f"trainimg/{name}"
            variants.append(_replace(parent, name=name, repository=repository, extends=parent.name,
                                     extras=_extras(f), labels=_labels(f), source=f.shown, origin=dict(f.origin)))
            pending.remove(f)
            progressed = True
        if not progressed:
            names = [v.name for v in variants] + [str(c.values.get("name")) for c in pending]
            # A missing parent explains the whole stall; report it before calling anything a cycle.
            f = next((c for c in pending if c.values.get("extends") not in names), pending[0])
            target = f.values.get("extends")
            close = get_close_matches(str(target), names, n=1)
            reason = ("extends forms a cycle" if target in names
                      else f"no variant named {target!r}" + (f"; did you mean {close[0]}?" if close else ""))
            raise f.fail("extends", reason)


def _extras(f: _Fields) -> tuple[str, ...]:
    raw = f.values.get("extras", [])
    if not isinstance(raw, list):
        raise f.fail("extras", "expected a list of requirements such as numpy==2.1.3")
    out = []
    for item in raw:
        if not isinstance(item, str) or not _REQ_RE.match(item):
            raise f.fail("extras", f"{item!r} is not a pinned requirement NAME==VERSION (PEP 508, no URLs or markers)")
        try:
            req = Requirement(item)
            Version(str(next(iter(req.specifier)).version))
        except (InvalidRequirement, InvalidVersion) as exc:
            raise f.fail("extras", f"{item!r} is not a valid requirement: {exc}") from None
        out.append(str(req))
    if len({Requirement(r).name.lower() for r in out}) != len(out):
        raise f.fail("extras", "a package is listed twice")
    return tuple(sorted(out, key=str.lower))


def _labels(f: _Fields) -> tuple[tuple[str, str], ...]:
    raw = f.values.get("labels", {})
    if not isinstance(raw, dict):
        raise f.fail("labels", "expected a mapping of label keys to values")
    out = []
    for key, value in raw.items():
        if not isinstance(key, str) or not _LABEL_KEY_RE.match(key):
            raise f.fail("labels", f"{key!r} is not a label key ([a-z0-9._-], lowercase)")
        if key.startswith(("org.opencontainers.", "trainimg.")):
            raise f.fail("labels", f"{key!r} is set by trainimg itself; choose another key")
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise f.fail("labels", f"value of {key!r} must be a string")
        text = str(value)
        if not _LABEL_VALUE_RE.match(text):
            raise f.fail("labels", f"value of {key!r} has characters outside [A-Za-z0-9 ._:/@+=,()-]")
        out.append((key, text))
    return tuple(sorted(out))


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
