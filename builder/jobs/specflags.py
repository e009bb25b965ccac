"""`trainimg spec`'s flags, gathered from the platforms that declare them, and the one rule that refuses the rest.

Why here: each platform module owns its flags (its ``FLAGS``, `flagdecl.Flag` data); this module only collects
them, so the CLI can build its options from them and refuse, by construction, a flag the chosen platform does not
declare (one line naming the flag and the platforms that take it). No list of what to refuse exists: a platform's
refusals are every declared flag it does not name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import fields
from functools import cache
from typing import Any

from ..errors import UserInputError
from .flagdecl import COMMON, Flag
from .platforms import PLATFORMS
from .shape import SpecOptions

#: platform -> the flags it reads besides `flagdecl.COMMON`, in `--platform`'s order (cloud first).
PLATFORM_FLAGS: dict[str, tuple[Flag, ...]] = {platform.name: platform.flags for platform in PLATFORMS}
SPEC_PLATFORMS = tuple(PLATFORM_FLAGS)


@cache  # the platforms' tables are constants; every spec a caller checks asks again
def platform_flags() -> tuple[Flag, ...]:
    """Every platform's flag once, in the order the platforms declare them."""
    seen: dict[str, Flag] = {}
    for flag in (f for declared in PLATFORM_FLAGS.values() for f in declared):
        if seen.setdefault(flag.name, flag) is not flag:
            raise AssertionError(f"{flag.name} is declared twice; declare it once and name it in each FLAGS")
    return tuple(seen.values())


def owners(flag: Flag) -> tuple[str, ...]:
    """The platforms that read `flag` (every one for a common flag)."""
    if flag in COMMON:
        return SPEC_PLATFORMS
    return tuple(platform for platform, declared in PLATFORM_FLAGS.items() if flag in declared)


def groups() -> list[tuple[tuple[str, ...], list[Flag]]]:
    """The platform flags grouped by the platforms that read them, for ``spec --help``."""
    grouped: dict[tuple[str, ...], list[Flag]] = {}
    for flag in platform_flags():
        grouped.setdefault(owners(flag), []).append(flag)
    return list(grouped.items())


def check_given(platform: str, given: Iterable[str]) -> None:
    """Refuse the first flag in `given` (flag keys, `Flag.key`) that `platform` does not read."""
    wanted = set(given)
    for flag in platform_flags():
        if flag.key not in wanted or flag in PLATFORM_FLAGS[platform]:
            continue
        instead = next((f for f in PLATFORM_FLAGS[platform] if flag.name in f.replaces), None)
        hint = f" ({platform} takes {instead.usage})" if instead is not None else ""
        article = "an" if platform[0] in "aeiou" else "a"
        raise UserInputError(f"not {article} {platform} flag; it is for {', '.join(owners(flag))}{hint}", where=flag.name)


def given_in(opts: SpecOptions) -> set[str]:
    """The flag keys whose value differs from its default (a `SpecOptions` field's, a platform flag's declared
    one): what a caller of the library asked for."""
    declared = {flag.key: flag for flag in platform_flags()}
    own = {key for key, value in opts.platform_flags.items() if key not in declared or value != declared[key].default}
    keys = _flag_keys()
    return own | {field.name for field in fields(SpecOptions)
                  if field.name in keys and getattr(opts, field.name) != field.default}


def check_options(opts: SpecOptions) -> None:
    """`check_given` for options made without the CLI (which also counts a flag given at its default value); a
    platform flag key no platform declares is refused too, never dropped."""
    unknown = sorted(set(opts.platform_flags) - {flag.key for flag in platform_flags()})
    if unknown:
        raise UserInputError("no platform declares this flag", where=f"--{unknown[0].replace('_', '-')}")
    check_given(opts.platform, given_in(opts))


def spec_options(values: Mapping[str, Any], **resolved: Any) -> SpecOptions:
    """The typed options from the CLI's parsed flags (`values`, by key), `resolved` (image, facts) overriding:
    the chosen platform's own flags (those its module declares beyond `SpecOptions`' fields) go into
    ``platform_flags``."""
    names = {field.name for field in fields(SpecOptions)}
    chosen = {key: value for key, value in values.items() if key in names}
    chosen["command"] = values.get("command") or None
    own = {flag.key: values[flag.key] for flag in PLATFORM_FLAGS[values["platform"]]
           if flag.key not in names and flag.key in values}
    return SpecOptions(**{**chosen, "platform_flags": own, **resolved})


@cache
def _flag_keys() -> frozenset[str]:
    return frozenset(flag.key for flag in (*COMMON, *platform_flags()))
