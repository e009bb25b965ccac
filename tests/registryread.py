"""Reading back what a registry holds, for tests: a tag's digest, a repository's tags, blobs a manifest lacks.

Test-only conveniences over the package's one registry client (`registry.registryapi.RegistryAPI`), taking the
local-style `name:tag` the tests speak.
"""

from __future__ import annotations

from trainimg.registry.references import RegistryTarget, split_tag
from trainimg.registry.registryapi import RegistryAPI


def remote_digest(target: RegistryTarget, tag: str, credentials: dict[str, str] | None, *, timeout: float = 30.0
                  ) -> str | None:
    """The manifest digest the registry serves for local-style `name:tag`, or None when it has no such tag."""
    name, tag_part = split_tag(tag)
    return RegistryAPI(target, credentials, timeout).remote_digest(target.repository(name), tag_part)


def remote_tags(target: RegistryTarget, repo: str, credentials: dict[str, str] | None, *, timeout: float = 30.0
                ) -> list[str]:
    """Every tag of `repo` (a local name, the target's prefix is added) in the registry; [] when it has none."""
    return RegistryAPI(target, credentials, timeout).tags(target.repository(repo))


def missing_blobs(target: RegistryTarget, tag: str, credentials: dict[str, str] | None, *, timeout: float = 30.0
                  ) -> list[str]:
    """Digests that the manifest of `name:tag` names (config, layers, or platform manifests) but the registry lacks.

    A tag whose blobs are gone is a broken image that only fails when someone pulls it; `push` checks this right
    after uploading so that it is the pusher's error instead.
    """
    name, tag_part = split_tag(tag)
    return RegistryAPI(target, credentials, timeout).missing_blobs(target.repository(name), tag_part)
