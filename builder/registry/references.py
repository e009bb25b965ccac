"""Where images go (``--registry HOST[:PORT][/PREFIX]``) and the references made from it.

Parsing only, no network and no engine: every piece is checked against the one grammar in `recipe.grammar`, and
any bad piece is the user's to fix (UserInputError, exit 2) with the rule it broke.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from ..errors import UserInputError
from ..recipe.grammar import (
    DOMAIN_NAME_RE,
    MAX_NAME,
    PATH_COMPONENT_RE,
    PATH_COMPONENT_RULE,
    REFERENCE_RE,
    PORT_RE,
    TAG_RE,
    TAG_RULE,
)

_MAX_TARGET = 1024  # longer than any host plus prefix that could leave room for an image name


def _bad_target(text: str, why: str) -> UserInputError:
    return UserInputError(f"--registry {text!r}: {why} (expected HOST[:PORT][/PREFIX], e.g. localhost:5000 or "
                          "registry.example.com/team/ml)")


def _check_name(name: str, what: str) -> None:
    """Raise UserInputError unless `name` is a docker repository path (lowercase components split by '/')."""
    for component in name.split("/"):
        if not PATH_COMPONENT_RE.match(component):
            raise UserInputError(f"{what} {name!r}: path component {component!r} {PATH_COMPONENT_RULE}")


def _is_loopback(host: str) -> bool:
    hostname = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    if hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False


def why_unshared(host: str) -> str | None:
    """Why other machines (a cluster's nodes, CI runners) cannot reach registry `host`, or None: a loopback host
    points each of them at itself. The one rule `spec` (`jobs.clusterimage`) and `ci` (`publish.pipelines`) apply."""
    if _is_loopback(host):
        return f"the loopback registry {host}"
    return None


def _host(text: str, host: str) -> str:
    """The `HOST[:PORT]` part, normalised (port without leading zeros), or UserInputError."""
    hostname, colon, port = host.partition(":")
    if not DOMAIN_NAME_RE.match(hostname):
        raise _bad_target(text, f"{hostname!r} is not a valid host name")
    if colon:
        if not PORT_RE.match(port) or not 1 <= int(port) <= 65535:
            raise _bad_target(text, f"port {port!r} must be a number from 1 to 65535")
        return f"{hostname}:{int(port)}"
    if "." not in hostname and hostname != "localhost":
        raise _bad_target(text, f"{hostname!r} has no dot and no port, so docker would read it as a Docker Hub "
                                "user name; add the domain or the port")
    return hostname


@dataclass(frozen=True)
class RegistryTarget:
    """Where images go: a registry host (with port) and an optional path prefix inside it.

    `insecure` means plain http, which the engine allows for loopback registries by default and for those named in
    its `insecure-registries`; `push` fills it in from the engine's settings.
    """

    host: str
    prefix: str = ""
    insecure: bool = False

    @classmethod
    def parse(cls, text: str) -> RegistryTarget:
        """Parse `HOST[:PORT][/PREFIX]`; bad input is the user's to fix, so it raises UserInputError."""
        text = text.strip()
        if not text:
            raise _bad_target(text, "empty")
        if len(text) > _MAX_TARGET:
            raise _bad_target(text[:40] + "...", f"longer than {_MAX_TARGET} characters")
        if "://" in text:
            raise _bad_target(text, "drop the scheme, the engine picks https or http itself")
        host_text, _, prefix = text.partition("/")
        host = _host(text, host_text)
        if prefix:
            for component in prefix.split("/"):
                if not PATH_COMPONENT_RE.match(component):
                    raise _bad_target(text, f"path component {component!r} {PATH_COMPONENT_RULE}")
        return cls(host=host, prefix=prefix, insecure=_is_loopback(host))

    @property
    def scheme(self) -> str:
        """http for insecure registries, https otherwise, as the engine does."""
        return "http" if self.insecure else "https"

    def repository(self, name: str) -> str:
        """The repository path inside the registry: prefix + local name (no host)."""
        _check_name(name, "image name")
        full = f"{self.prefix}/{name}" if self.prefix else name
        if len(self.host) + 1 + len(full) > MAX_NAME:
            raise UserInputError(f"image name {self.host}/{full} is longer than {MAX_NAME} characters")
        return full

    def ref(self, tag: str) -> str:
        """`<host[:port]>/<prefix/>name:tag` for a local `name:tag` such as `trainimg/pytorch:2.13.0-cpu-py3.11`."""
        name, tag_part = split_tag(tag)
        return f"{self.host}/{self.repository(name)}:{tag_part}"

    def __str__(self) -> str:
        return f"{self.host}/{self.prefix}" if self.prefix else self.host


def split_tag(tag: str) -> tuple[str, str]:
    """Split a local `name[:tag]` (no registry host) into name and tag; a missing tag means `latest`."""
    name, colon, tag_part = tag.rpartition(":")
    if not colon or "/" in tag_part:
        name, tag_part = tag, "latest"
    if not name:
        raise UserInputError(f"image tag {tag!r} has no name")
    _check_name(name, "image name")
    if not TAG_RE.match(tag_part):
        raise UserInputError(f"image tag {tag!r}: tag {tag_part!r} {TAG_RULE}")
    return name, tag_part


@dataclass(frozen=True)
class PushedRef:
    """A pushed image's reference, ``HOST[:PORT]/REPO[:TAG][@sha256:...]``: where it is, and what names it there (the
    digest when one is given, as the engine reads it, else the tag, else ``latest``)."""

    target: RegistryTarget
    repository: str
    reference: str

    @classmethod
    def parse(cls, text: str, where: str) -> PushedRef:
        """Parse `text`; anything that is not a reference with a registry host is the user's to fix (`where`)."""
        if not REFERENCE_RE.match(text):
            raise UserInputError(f"{text!r} is not an image reference (HOST[:PORT]/REPO:TAG or HOST[:PORT]/REPO@sha256:...)",
                                 where=where)
        host, slash, rest = text.partition("/")
        if not slash or not ("." in host or ":" in host or host == "localhost"):
            raise UserInputError(f"{text!r} names no registry host: give HOST[:PORT]/REPO:TAG as it was pushed",
                                 where=where)
        name, at, digest = rest.partition("@")
        repository, colon, tag = name.partition(":")
        target = RegistryTarget.parse(host)
        return cls(target, repository, digest if at else tag if colon else "latest")

    @property
    def identity(self) -> str:
        """``HOST/REPO``: the repository as a signature names it."""
        return f"{self.target.host}/{self.repository}"

    def __str__(self) -> str:
        return f"{self.identity}{'@' if self.reference.startswith('sha256:') else ':'}{self.reference}"
