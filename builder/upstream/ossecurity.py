"""The OS packages of released images that have a fix waiting in their distribution's security archive.

What the images hold is their SBOM (every dpkg package as ``pkg:deb/<os>/<name>@<version>?arch=..&distro=..``,
runtime/sbom.py), read beside each pushed image by the digest images.lock records (no layer pulled). What the
archive offers is its `Packages` index for `<codename>-security` (one file per OS release and architecture). A
package whose security version is newer than the installed one, by dpkg's ordering (`debian_compare`), is pending:
a rebuild on a base that carries it, or an upgrade step, would take it.

An ``Architecture: all`` package is looked up in the index of the image's own architecture (the one its other
packages name), as apt looks it up: the security suite's Release lists no ``all`` architecture, and the
``binary-all`` file it still serves is not complete (bookworm-security's lacked 84 of the 1107 ``all`` packages of
its binary-amd64 index on 2026-12-02, kitty-terminfo's fix among them), so reading it would miss pending fixes.

The version ordering is dpkg's (Debian Policy 5.6.12, "Version"): epoch, then upstream version and revision, each
compared as alternating non-digit parts (letters before non-letters, `~` before everything, even the end) and
numbers.
"""

from __future__ import annotations

import lzma
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from ..errors import CheckFailed
from ..publish.inputs import split_remote
from ..publish.lockfile import read_lock
from ..publish.sbom import parse_sbom
from ..registry.credentials import resolve_credentials
from ..registry.references import RegistryTarget
from ..registry.referrers import fetch
from ..registry.registryapi import RegistryAPI
from ..runtime.sbom import MEDIA_TYPE as SBOM_TYPE
from .items import Item
from .simpleapi import Http, IndexUnreadable

#: Each OS's security archive: the Packages index of a codename's security suite (main), by architecture.
SECURITY_ARCHIVES = {
    "debian": "https://deb.debian.org/debian-security/dists/{codename}-security/main/binary-{arch}/Packages.xz",
    "ubuntu": "http://security.ubuntu.com/ubuntu/dists/{codename}-security/main/binary-{arch}/Packages.xz",
}
_PURL = re.compile(r"^pkg:deb/(?P<os>[^/]+)/(?P<name>[^@]+)@(?P<version>[^?]+)\?(?P<query>.*)$")


def _order(c: str) -> int:
    """dpkg's weight of one character of a non-digit part: `~` first, then the end, letters, everything else."""
    if c == "~":
        return -1
    if c.isalpha():
        return ord(c)
    return ord(c) + 256


def _compare_part(a: str, b: str) -> int:
    while a or b:
        da, a = _take(a, digits=False)
        db, b = _take(b, digits=False)
        for ca, cb in zip(da + "\0", db + "\0"):
            wa = 0 if ca == "\0" else _order(ca)
            wb = 0 if cb == "\0" else _order(cb)
            if wa != wb:
                return -1 if wa < wb else 1
        na, a = _take(a, digits=True)
        nb, b = _take(b, digits=True)
        if int(na or 0) != int(nb or 0):
            return -1 if int(na or 0) < int(nb or 0) else 1
    return 0


def _take(text: str, digits: bool) -> tuple[str, str]:
    i = 0
    while i < len(text) and text[i].isdigit() == digits:
        i += 1
    return text[:i], text[i:]


def debian_compare(a: str, b: str) -> int:
    """-1, 0 or 1 as Debian version `a` sorts before, with or after `b`."""
    def split(v: str) -> tuple[int, str, str]:
        epoch, _, rest = v.rpartition(":") if ":" in v else ("0", "", v)
        upstream, _, revision = rest.rpartition("-") if "-" in rest else (rest, "", "0")
        return int(epoch or 0), upstream, revision

    (ea, ua, ra), (eb, ub, rb) = split(a), split(b)
    if ea != eb:
        return -1 if ea < eb else 1
    return _compare_part(ua, ub) or _compare_part(ra, rb)


@dataclass(frozen=True)
class DebPackage:
    os: str
    codename: str
    arch: str  # the package's own: a machine's, or "all"
    name: str
    version: str
    machine: str = ""  # the image's architecture (its other packages'): the index an "all" package is listed in

    @property
    def index_arch(self) -> str:
        """The architecture of the Packages index that lists this package (see the module doc)."""
        if self.arch != "all":
            return self.arch
        if not self.machine:
            raise IndexUnreadable(f"{self.name} is an Architecture: all package and the SBOM names no package of "
                                  "the image's own architecture: no security index can be chosen for it")
        return self.machine


def deb_packages(sbom: Mapping[str, Any]) -> list[DebPackage]:
    """The dpkg packages an SBOM lists, each with the image's architecture (the one most of them name)."""
    found = []
    for component in sbom.get("components") or []:
        match = _PURL.match(str(component.get("purl", ""))) if isinstance(component, dict) else None
        if not match:
            continue
        query = dict(part.partition("=")[::2] for part in match["query"].split("&"))
        if query.get("distro") and query.get("arch"):
            found.append(DebPackage(match["os"], unquote(query["distro"]), unquote(query["arch"]),
                                    unquote(match["name"]), unquote(match["version"])))
    machines = Counter(p.arch for p in found if p.arch != "all").most_common(1)
    return [replace(p, machine=machines[0][0]) for p in found] if machines else found


def parse_packages(text: str) -> dict[str, str]:
    """Package -> the newest version a Packages index lists for it."""
    newest: dict[str, str] = {}
    for stanza in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and not line[0].isspace())
        name, version = fields.get("Package"), fields.get("Version")
        if name and version and (name not in newest or debian_compare(version, newest[name]) > 0):
            newest[name] = version
    return newest


class SecurityArchive:
    """The security suites' Packages indexes, each fetched once."""

    def __init__(self, http: Http, archives: Mapping[str, str] = SECURITY_ARCHIVES) -> None:
        self.http, self.archives = http, archives
        self._indexes: dict[str, dict[str, str]] = {}

    def url(self, pkg: DebPackage) -> str:
        template = self.archives.get(pkg.os)
        if template is None:
            raise IndexUnreadable(f"no security archive known for {pkg.os} (trainimg knows "
                                  f"{', '.join(sorted(self.archives))}): its packages cannot be checked")
        return template.format(codename=pkg.codename, arch=pkg.index_arch)

    def fixed(self, pkg: DebPackage) -> str | None:
        url = self.url(pkg)
        if url not in self._indexes:
            raw = self.http.get(url)
            try:
                self._indexes[url] = parse_packages(lzma.decompress(raw).decode("utf-8", "replace"))
            except lzma.LZMAError:
                raise IndexUnreadable(f"{url} is not an xz-compressed Packages index") from None
        return self._indexes[url].get(pkg.name)


def pending(packages: Iterable[DebPackage], archive: SecurityArchive) -> tuple[list[str], set[str]]:
    """``name installed -> fixed`` for each package with a newer security version, and the indexes read."""
    lines, urls = [], set()
    for pkg in packages:
        fixed = archive.fixed(pkg)
        urls.add(archive.url(pkg))
        if fixed is not None and debian_compare(fixed, pkg.version) > 0:
            lines.append(f"{pkg.name} {pkg.version} -> {fixed}")
    return sorted(lines), urls


def security_item(variant: str, image: str, sbom: Mapping[str, Any], archive: SecurityArchive) -> Item | None:
    """The item for one released image with pending fixes, None when it has none."""
    lines, urls = pending(deb_packages(sbom), archive)
    if not lines:
        return None
    return Item(kind="os-security", name=variant, current=f"{image}", newest=f"{len(lines)} package(s) fixed",
                date=None, source=", ".join(sorted(urls)), where=(variant,),
                action=f"a release rebuilds {variant} once its base carries the fixes (the base's digest is in its "
                       "inputs key)",
                detail=tuple(lines))


def released_sboms(lock: Path, env: Mapping[str, str]) -> list[tuple[str, str, dict[str, Any]]]:
    """(variant, pushed image, its SBOM) for each entry of the lockfile that records a push: the SBOM beside the
    image, found by the image's recorded digest (the registry's credentials as the docker CLI stores them)."""
    out = []
    for name, entry in sorted(read_lock(lock).items()):
        if not entry.pushed:
            continue
        ref, digest = sorted(entry.pushed.items())[0]
        host, repository, _ = split_remote(ref)
        target = RegistryTarget.parse(host)
        api = RegistryAPI(target, resolve_credentials(target, None, None, env=env))
        data = fetch(api, repository, digest, SBOM_TYPE)
        if data is None:
            raise CheckFailed(f"no SBOM beside {ref} ({digest}): its OS packages cannot be checked")
        out.append((name, f"{ref}@{digest}", parse_sbom(data, ref)))
    return out
