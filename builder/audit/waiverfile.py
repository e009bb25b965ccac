"""The committed waivers file (`--waivers FILE`, YAML): a list under ``waivers:``, each with the keys of
`runtime.waivers.WAIVER_KEYS`. Example::

    waivers:
      - id: PYSEC-2023-135            # the advisory's id or any of its aliases (CVE-2023-37920)
        package: certifi
        version: 2022.12.7
        reason: the image never uses certifi's store; the system's CA bundle is configured
        approved-by: security@example.com
        expires: 2026-12-31           # the last day it holds
        justification: code_not_reachable   # optional, CycloneDX's: then the SBOM says not_affected

A mistake is bad input (exit 2), one line naming the file and the waiver. Python package names and versions are
normalised here (PEP 503, PEP 440) as the findings are, so ``Certifi`` / ``2022.12.07`` match what a lock pins.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml
from packaging.version import InvalidVersion, Version

from ..errors import UserInputError
from ..runtime.manifest import distribution_key
from ..runtime.waivers import Waiver, is_os_waiver, parse_waivers

WAIVERS_KEY = "waivers"


def canonical_version(text: str) -> str:
    """PEP 440's normal form of a version (``2015.04.28`` -> ``2015.4.28``); a version it cannot read as given."""
    try:
        return str(Version(text))
    except InvalidVersion:
        return text


def normalised(waiver: Waiver) -> Waiver:
    """A Python package's waiver with its name and version in normal form; an OS waiver as written."""
    if is_os_waiver(waiver):
        return waiver
    return dataclasses.replace(waiver, package=distribution_key(waiver.package),
                               version=canonical_version(waiver.version))


def read_waivers(path: Path | None) -> list[Waiver]:
    """The waivers of `path` (none: no waivers). UserInputError, ``FILE:waivers[i].key: reason``, on a mistake."""
    if path is None:
        return []
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise UserInputError(f"cannot read it: {err.strerror or err}", where=str(path)) from None
    except yaml.YAMLError as err:
        raise UserInputError(f"not YAML: {str(err).splitlines()[0]}", where=str(path)) from None
    if not isinstance(data, dict) or set(data) != {WAIVERS_KEY}:
        raise UserInputError(f"expected one key, {WAIVERS_KEY!r}, holding a list of waivers", where=str(path))
    try:
        return [normalised(w) for w in parse_waivers(data[WAIVERS_KEY] or [], f"{path}:{WAIVERS_KEY}")]
    except ValueError as err:
        where, _, reason = str(err).partition(": ")
        raise UserInputError(reason, where=where) from None
