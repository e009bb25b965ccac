"""Reading back what a registry holds, for tests: a tag's digest, a repository's tags, blobs a manifest lacks.

Test-only, so kept out of the package: built on the package's registry client (`publish.push`), whose own push
path uses the same private helpers.
"""

from __future__ import annotations

from urllib.parse import urljoin

from trainimg.errors import RegistryError
from trainimg.publish.push import _missing_blobs, _RegistryAPI, _remote_digest
from trainimg.publish.references import RegistryTarget, split_tag


def remote_digest(target: RegistryTarget, tag: str, credentials: dict[str, str] | None, *, timeout: float = 30.0
                  ) -> str | None:
    """The manifest digest the registry serves for local-style `name:tag`, or None when it has no such tag."""
    name, tag_part = split_tag(tag)
    return _remote_digest(_RegistryAPI(target, credentials, timeout), target.repository(name), tag_part)


def remote_tags(target: RegistryTarget, repo: str, credentials: dict[str, str] | None, *, timeout: float = 30.0
                ) -> list[str]:
    """Every tag of `repo` (a local name, the target's prefix is added) in the registry; [] when it has none."""
    api = _RegistryAPI(target, credentials, timeout)
    repository = target.repository(repo)
    tags: list[str] = []
    path: str | None = f"/v2/{repository}/tags/list"
    while path:
        resp = api.request("GET", path, scope=f"repository:{repository}:pull")
        if resp.status_code == 404:
            return []
        if resp.status_code != 200:
            raise RegistryError(f"registry {target.host} answered HTTP {resp.status_code} listing tags of {repository}")
        tags.extend((resp.json() or {}).get("tags") or [])
        next_link = resp.links.get("next", {}).get("url")
        path = urljoin(api.base, next_link) if next_link else None
    return sorted(tags)


def missing_blobs(target: RegistryTarget, tag: str, credentials: dict[str, str] | None, *, timeout: float = 30.0
                  ) -> list[str]:
    """Digests that the manifest of `name:tag` names (config, layers, or platform manifests) but the registry lacks.

    A tag whose blobs are gone is a broken image that only fails when someone pulls it; `push` checks this right
    after uploading so that it is the pusher's error instead.
    """
    name, tag_part = split_tag(tag)
    return _missing_blobs(_RegistryAPI(target, credentials, timeout), target.repository(name), tag_part)
