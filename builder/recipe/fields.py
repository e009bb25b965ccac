"""Typed, strict access to the fields of one expanded recipe entry, and the grammars of values that reach a
Dockerfile.

The grammars are deliberately narrower than what Docker or pip would accept: a value that matches can never open a
new instruction, a shell word or a template expression. A bad value raises one `RecipeError` at the place it was
written, ``file:line:key`` (the key path, e.g. ``matrix[1].cuda``), saying what would fit. The `held` field (a variant
held back on purpose, with why) is read here too, at the end.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from ..errors import RecipeError
from ..runtime.contract import LABEL_PREFIX, OCI_PREFIX
from .drivers import REQUIRE_CUDA
from .nodeenv import node_variables, why_not_in_image
from .yamlfile import WrittenFloat, written

_VERSION_RE = re.compile(r"^[0-9][0-9A-Za-z.+!-]{0,63}\Z")
# A framework version is a full release: X.Y.Z (jax also ships X.Y.Z.N), no pre-release, dev, post, local or epoch
# part, no leading zeros.
_RELEASE_RE = re.compile(r"\A(?:0|[1-9][0-9]{0,3})(?:\.(?:0|[1-9][0-9]{0,3})){2,3}\Z")
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}\Z")
_LABEL_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}\Z")
_LABEL_VALUE_RE = re.compile(r"^[A-Za-z0-9 ._:/@+=,()-]{0,256}\Z")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
# An ENV value never holds `$` (Docker expands it in ENV), a quote or a backslash: it stays one literal word.
_ENV_VALUE_RE = re.compile(r"^[A-Za-z0-9 ._:/@+=,()%^-]{0,1024}\Z")
_REQ_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]+\])?==[0-9][0-9A-Za-z.+!-]*\Z")


class _Fields:
    """Typed access to one merged variant mapping, raising `file:line:key` errors where the key was written."""

    def __init__(self, values: dict[str, Any], origin: dict[str, str], shown: str,
                 lines: dict[str, int] | None = None) -> None:
        self.values, self.origin, self.shown = values, origin, shown
        self.lines = lines or {}

    def where(self, key: str) -> str:
        line = self.lines.get(key)
        path = self.origin.get(key, key)
        return f"{self.shown}:{line}:{path}" if line else f"{self.shown}:{path}"

    def fail(self, key: str, reason: str) -> RecipeError:
        return RecipeError(reason, where=self.where(key))

    def string(self, key: str, regex: re.Pattern[str], what: str, default: str | None = None) -> str | None:
        value = self.values.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            kind = next(t.__name__ for t in type(value).__mro__ if t.__module__ == "builtins")  # list, not LineList
            raise self.fail(key, f"expected {what}, got {kind}")
        text = value if isinstance(value, str) else self._number(key, value)
        if not regex.match(text):
            raise self.fail(key, f"{text!r} is not {what}")
        return text

    def _number(self, key: str, value: int | float) -> str:
        """YAML reads ``cuda: 13.0`` as a float: give back the text the author wrote, when the number keeps it."""
        if not isinstance(value, float):
            return str(value)
        text = value.text if isinstance(value, WrittenFloat) else repr(value)
        if text != repr(value):
            quoted = f'["{text}"]' if self.origin.get(key, key).startswith("matrix") else f'"{text}"'
            raise self.fail(key, f"YAML reads the unquoted {text} as the number {value!r}; quote it: "
                                 f"{key}: {quoted}")
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

    def release(self, key: str) -> str | None:
        """A framework version: a full release X.Y.Z, the only kind trainimg's compatibility data describes and
        the only kind that makes a valid, unambiguous image tag."""
        text = self.version(key)
        if text is not None and not _RELEASE_RE.match(text):
            raise self.fail(key, f"{text!r} is not a full release: a framework version is X.Y.Z such as 2.13.0 "
                                 f"(or X.Y.Z.N; no rc, a, b, dev, post or +local part)")
        return text

    def boolean(self, key: str, default: bool | None) -> bool | None:
        value = self.values.get(key, default)
        if value is None or isinstance(value, bool):
            return value
        raise self.fail(key, f"expected true or false, got {value!r}")

    def choices(self, key: str, options: Iterable[str], default: tuple[str, ...]) -> tuple[str, ...]:
        """A non-empty list of `options`, each at most once, given back in the options' order (``arch``)."""
        value = self.values.get(key)
        options = list(options)
        if value is None:
            return default
        if not isinstance(value, list) or not value:
            raise self.fail(key, f"expected a list of {', '.join(options)}, e.g. {key}: [{', '.join(options)}]")
        for item in value:
            if not isinstance(item, str) or item not in options:
                raise self.fail(key, f"{written(item)!r} is not one of {', '.join(options)}")
        if len(set(value)) != len(value):
            raise self.fail(key, "a value is listed twice")
        return tuple(o for o in options if o in value)

    def choice(self, key: str, options: Iterable[str], default: str | None = None) -> str | None:
        value = self.values.get(key, default)
        options = list(options)
        if value is None:
            return None
        if not isinstance(value, str) or value not in options:
            raise self.fail(key, f"{value!r} is not one of {', '.join(options)}")
        return value


def extras_of(f: _Fields) -> tuple[str, ...]:
    """The `extras` field: pinned PEP 508 requirements, each package once, sorted."""
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


def labels_of(f: _Fields) -> tuple[tuple[str, str], ...]:
    """The `labels` field: extra image labels; trainimg's own and OCI keys are reserved."""
    raw = f.values.get("labels", {})
    if not isinstance(raw, dict):
        raise f.fail("labels", "expected a mapping of label keys to values")
    out = []
    for key, value in raw.items():
        if not isinstance(key, str) or not _LABEL_KEY_RE.match(key):
            raise f.fail("labels", f"{key!r} is not a label key ([a-z0-9._-], lowercase)")
        if key.startswith((OCI_PREFIX, LABEL_PREFIX)):
            raise f.fail("labels", f"{key!r} is set by trainimg itself; choose another key")
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise f.fail("labels", f"value of {key!r} must be a string")
        text = str(written(value))
        if not _LABEL_VALUE_RE.match(text):
            raise f.fail("labels", f"value of {key!r} has characters outside [A-Za-z0-9 ._:/@+=,()-]")
        out.append((key, text))
    return tuple(sorted(out))


def env_of(f: _Fields) -> tuple[tuple[str, str], ...]:
    """The `env` field: image environment; a node's variables (`nodeenv`) and the one the driver floor writes
    (`drivers.REQUIRE_CUDA`) are refused."""
    raw = f.values.get("env", {})
    if not isinstance(raw, dict):
        raise f.fail("env", "expected a mapping of variable names to values")
    out = []
    for name, value in raw.items():
        if not isinstance(name, str) or not _ENV_NAME_RE.match(name):
            raise f.fail("env", f"{name!r} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)")
        if node_variables([name]):
            raise f.fail("env", why_not_in_image(name))
        if name == REQUIRE_CUDA:
            raise f.fail("env", f"{name} is written by trainimg from the CUDA the image carries (recipe/drivers.py)")
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise f.fail("env", f"value of {name} must be a string")
        text = str(written(value))
        if not _ENV_VALUE_RE.match(text):
            raise f.fail("env", f"value of {name} has characters outside [A-Za-z0-9 ._:/@+=,()%^-]")
        out.append((name, text))
    return tuple(sorted(out))


# --- `held`: a variant held back on purpose, with why ---------------------------------------------------------------
# The recipe's `held` field.
#
# Why: `trainimg outdated` watches every variant for a newer framework release and for a base near its end of life,
# and the scheduled pipeline bumps whatever it reports. Some variants stay behind for a reason that no index can see
# (the release's build is served only by an index this machine cannot reach; the variant is the one this machine can
# build; the OS is past its regular security support but still under long-term support). Such a variant says so in
# its recipe, as data: what is held (a kind of `outdated` item: `HOLD_KINDS`), the reason, the source that backs
# it, and optionally until when. `outdated` then shows the item as held with that reason (and its exit status is 0
# when only held items remain); `bump` leaves a variant held for `framework` where it is. An `os` hold ends, at the
# latest, on the OS's end of long-term support (`upstream/data/bases.yaml`): `outdated` applies that date.
#
#     held:
#       os:
#         reason: the demo's base; bookworm is under Debian LTS
#         source: https://wiki.debian.org/LTS
#         until: 2028-06-30

#: What can be held: `outdated`'s item kinds that are about one variant (a newer framework release, its base's end
#: of life).
HOLD_KINDS = ("framework", "os")
_KEYS = ("reason", "source", "until")
_TEXT_RE = re.compile(r"\A[^\x00-\x1f\x7f]{1,600}\Z")  # one line of text
_SOURCE_RE = re.compile(r"\A(?:https?://[^\s]{1,500}|[A-Za-z0-9_./-]{1,300})\Z")  # a URL or a file of the checkout


@dataclass(frozen=True)
class Hold:
    """One held kind of a variant: why, what backs it, until when (None: until the recipe changes)."""

    kind: str
    reason: str
    source: str
    until: datetime.date | None = None

    def in_force(self, today: datetime.date, end: datetime.date | None = None) -> bool:
        """Whether the hold still stands on `today`; `end` is a limit the data sets (an OS's LTS end)."""
        last = self.ends(end)
        return last is None or today <= last

    def ends(self, end: datetime.date | None = None) -> datetime.date | None:
        """The last day the hold stands: its own `until`, or `end`, whichever comes first."""
        days = [d for d in (self.until, end) if d is not None]
        return min(days) if days else None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason, "source": self.source,
                "until": str(self.until) if self.until else None}


def holds_of(raw: Any, where: str) -> tuple[Hold, ...]:
    """The `held` field (a mapping of kind -> {reason, source, until}), checked; `where` names it in errors."""
    if raw is None:
        return ()
    if not isinstance(raw, dict) or not raw:
        raise RecipeError(f"expected a mapping of what is held ({', '.join(HOLD_KINDS)}) to its reason, source and "
                          "until", where=where)
    out = []
    for kind, body in raw.items():
        at = f"{where}.{kind}"
        if kind not in HOLD_KINDS:
            raise RecipeError(f"{kind!r} cannot be held; one of {', '.join(HOLD_KINDS)}", where=where)
        if not isinstance(body, dict):
            raise RecipeError("expected reason, source and optionally until", where=at)
        unknown = [k for k in body if k not in _KEYS]
        if unknown:
            raise RecipeError(f"unknown key {unknown[0]!r}; a hold has {', '.join(_KEYS)}", where=at)
        out.append(Hold(kind, _text(body, "reason", _TEXT_RE, "one line saying why", at),
                        _text(body, "source", _SOURCE_RE, "a URL or a file of the checkout that backs the reason", at),
                        _date(body.get("until"), f"{at}.until")))
    return tuple(sorted(out, key=lambda h: HOLD_KINDS.index(h.kind)))


def _text(body: dict[str, Any], key: str, regex: re.Pattern[str], what: str, where: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not regex.match(value.strip()):
        raise RecipeError(f"{key}: expected {what}", where=f"{where}.{key}")
    return value.strip()


def _date(value: Any, where: str) -> datetime.date | None:
    if value is None or (isinstance(value, datetime.date) and not isinstance(value, datetime.datetime)):
        return value
    if isinstance(value, str):
        try:
            return datetime.date.fromisoformat(value)
        except ValueError:
            pass
    raise RecipeError(f"{value!r} is not a date; write YYYY-MM-DD", where=where)
