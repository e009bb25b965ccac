"""The registry's own HTTP API (Distribution v2 / OCI distribution), reached through one client.

Everything trainimg asks a registry directly goes through `RegistryAPI`: proving access before a push, reading
which digest a tag names, reading a manifest and an image config without pulling a layer (the CI inputs key),
copying a manifest under another tag (promotion: no layer moves), and uploading the small blobs and manifests of
OCI artifacts (an SBOM, a conformance report) that refer to an image. The engine still uploads images' layers.

Errors are classified here once: what a person can fix (credentials, DNS, TLS) is a RegistryError with the action
in it; what another attempt may fix is a `Transient`. No credential ever reaches a message: every text that leaves
goes through `redact`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path
from dataclasses import dataclass, field
from typing import IO, Any, cast
from urllib.parse import urljoin

import requests

from ..errors import RegistryError
from .references import RegistryTarget

MANIFEST_TYPES = (
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.index.v1+json",
)


def sha256_digest(data: bytes) -> str:
    """The content digest a registry names `data` by."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Transient(RegistryError):
    """A failure worth another attempt (dropped connection, 5xx, timeout); `push` retries it and callers outside
    this package see it as the RegistryError it is."""


def redact(text: str, credentials: dict[str, str] | None) -> str:
    """Blank every secret out of `text`, whatever produced it."""
    for key in ("password", "identitytoken", "registrytoken"):
        secret = (credentials or {}).get(key)
        if secret:
            text = text.replace(secret, "***")
    return text


def auth_error(host: str, credentials: dict[str, str] | None) -> RegistryError:
    user = (credentials or {}).get("username")
    if user:
        return RegistryError(f"registry {host} rejected the credentials for {user}: check the username and "
                             f"TRAINIMG_REGISTRY_PASSWORD or run docker login {host}")
    if credentials:
        return RegistryError(f"registry {host} rejected the stored identity token: run docker login {host}")
    return RegistryError(f"registry {host} asks for credentials: run docker login {host} or pass --username with "
                         "TRAINIMG_REGISTRY_PASSWORD")


def dns_error(host: str) -> RegistryError:
    return RegistryError(f"registry host {host.rsplit(':', 1)[0]} could not be resolved (DNS): check the spelling "
                         "of --registry")


def unreachable_error(host: str, why: str) -> Transient:
    return Transient(f"registry {host} is unreachable ({why}): check that it is running and that the host and "
                      "port in --registry are right")


def classify_request_exception(exc: requests.RequestException, host: str, timeout: float) -> RegistryError:
    text = repr(exc).lower()
    if "nameresolution" in text or "name or service not known" in text or "getaddrinfo" in text:
        return dns_error(host)
    if isinstance(exc, requests.Timeout):
        return Transient(f"registry {host} did not answer within {timeout:g} s: check the network or the "
                          "registry's health")
    if "refused" in text:
        return unreachable_error(host, "connection refused")
    if isinstance(exc, requests.exceptions.SSLError):
        return RegistryError(f"registry {host}: TLS failed ({type(exc).__name__}); if it serves plain http, add it "
                             "to the engine's insecure-registries")
    return Transient(f"registry {host} dropped the connection: {type(exc).__name__}")


class _Sized:
    """A stream with its length and nothing else: requests sends it with that Content-Length (a response stream
    has a `fileno`, the socket's, which requests would measure as 0 and send chunked, beside the length: a body the
    registry waits for forever)."""

    def __init__(self, body: IO[bytes], size: int) -> None:
        self.body, self.size = body, size

    def __len__(self) -> int:
        return self.size

    def read(self, n: int = -1) -> bytes:
        return self.body.read(n)


@dataclass
class RegistryAPI:
    """Minimal Distribution API v2 client: Basic auth, or the Bearer token flow when the registry asks for it."""

    target: RegistryTarget
    credentials: dict[str, str] | None
    timeout: float = 30.0
    _session: requests.Session = field(default_factory=requests.Session)
    _tokens: dict[str, str] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return f"{self.target.scheme}://{self.target.host}"

    def request(self, method: str, path: str, *, scope: str = "", headers: dict[str, str] | None = None,
                data: bytes | IO[bytes] | None = None) -> requests.Response:
        """Send one request, answering a 401 challenge once; transport failures become RegistryError."""
        url = path if path.startswith("http") else self.base + path
        headers = dict(headers or {})
        if scope in self._tokens:
            headers["Authorization"] = self._tokens[scope]
        resp = self._send(method, url, headers, data=data)
        if resp.status_code == 401:
            challenge = resp.headers.get("WWW-Authenticate", "")
            auth = self._answer(challenge, scope)
            if auth is None:
                raise auth_error(self.target.host, self.credentials)
            self._tokens[scope] = auth
            headers["Authorization"] = auth
            resp = self._send(method, url, headers, data=data)
            if resp.status_code == 401:
                raise auth_error(self.target.host, self.credentials)
        if resp.status_code >= 500:
            raise Transient(f"registry {self.target.host} answered HTTP {resp.status_code} to {method} {path}")
        return resp

    def _send(self, method: str, url: str, headers: dict[str, str], **kwargs: Any) -> requests.Response:
        try:
            return self._session.request(method, url, headers=headers, timeout=self.timeout, allow_redirects=True,
                                         **kwargs)
        except requests.RequestException as exc:
            raise classify_request_exception(exc, self.target.host, self.timeout) from None

    def _answer(self, challenge: str, scope: str) -> str | None:
        """The Authorization header value for a 401 challenge, or None when we hold nothing to answer with."""
        creds = self.credentials or {}
        kind, _, params_text = challenge.partition(" ")
        if kind.lower() == "basic":
            if not creds.get("username") or not creds.get("password"):
                return None
            pair = f"{creds['username']}:{creds['password']}".encode()
            return "Basic " + base64.b64encode(pair).decode("ascii")
        if kind.lower() != "bearer":
            return None
        params = dict(re.findall(r'(\w+)="([^"]*)"', params_text))
        if "realm" not in params:
            return None
        query = {"service": params.get("service", "")}
        if scope:
            query["scope"] = scope
        if creds.get("identitytoken"):
            resp = self._send("POST", params["realm"], {}, data={
                **query, "grant_type": "refresh_token", "refresh_token": creds["identitytoken"],
                "client_id": "trainimg"})
        else:
            basic = (creds["username"], creds["password"]) if creds.get("password") else None
            resp = self._send("GET", params["realm"], {}, params=query, auth=basic)
        if resp.status_code in (401, 403):
            return None
        if resp.status_code != 200:
            raise Transient(f"registry token service {params['realm']} answered HTTP {resp.status_code}")
        body = resp.json()
        token = body.get("token") or body.get("access_token")
        return f"Bearer {token}" if token else None

    def check_access(self) -> None:
        """GET /v2/: proves the registry is there and takes our credentials before the engine uploads anything."""
        resp = self.request("GET", "/v2/")
        if resp.status_code != 200:
            raise RegistryError(f"registry {self.target.host} answered HTTP {resp.status_code} to GET /v2/: is it "
                                "a Docker registry (API v2)?")

    def manifest(self, repository: str, reference: str, method: str = "HEAD") -> requests.Response | None:
        resp = self.request(method, f"/v2/{repository}/manifests/{reference}", scope=f"repository:{repository}:pull",
                            headers={"Accept": ", ".join(MANIFEST_TYPES)})
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise RegistryError(f"registry {self.target.host} answered HTTP {resp.status_code} for the manifest of "
                                f"{repository}:{reference}")
        return resp


    def manifest_json(self, repository: str, reference: str) -> tuple[bytes, str, str] | None:
        """The manifest's exact bytes, media type and digest (None: not there): bytes, so a copy keeps the digest."""
        resp = self.manifest(repository, reference, method="GET")
        if resp is None:
            return None
        media_type = resp.headers.get("Content-Type", "").split(";", 1)[0].strip()
        return resp.content, media_type, resp.headers.get("Docker-Content-Digest") or sha256_digest(resp.content)

    def blob(self, repository: str, digest: str) -> bytes:
        """A blob's bytes (for configs and artifacts: small; never call it for a layer)."""
        resp = self.request("GET", f"/v2/{repository}/blobs/{digest}", scope=f"repository:{repository}:pull")
        if resp.status_code != 200:
            raise RegistryError(f"registry {self.target.host} answered HTTP {resp.status_code} for blob {digest} "
                                f"of {repository}")
        if sha256_digest(resp.content) != digest:
            raise RegistryError(f"registry {self.target.host} served blob {digest} of {repository} with other "
                                "content")
        return resp.content

    def open_blob(self, repository: str, digest: str) -> requests.Response:
        """A layer blob as a stream (`with api.open_blob(...) as resp: resp.raw`): gigabytes never held in memory."""
        url = f"{self.base}/v2/{repository}/blobs/{digest}"
        scope = f"repository:{repository}:pull"
        self.request("HEAD", f"/v2/{repository}/blobs/{digest}", scope=scope)  # answers an auth challenge first
        headers = {"Authorization": self._tokens[scope]} if scope in self._tokens else {}
        resp = self._send("GET", url, headers, stream=True)
        if resp.status_code != 200:
            resp.close()
            raise RegistryError(f"registry {self.target.host} answered HTTP {resp.status_code} for blob {digest} "
                                f"of {repository}")
        return resp

    def blob_range(self, repository: str, digest: str, start: int, end: int) -> bytes:
        """Bytes `start` up to `end` of a blob, by a range request (an eStargz layer's footer and TOC, read as a lazy
        node reads them); checked for their length only: the blob's digest covers the whole of it."""
        scope = f"repository:{repository}:pull"
        self.request("HEAD", f"/v2/{repository}/blobs/{digest}", scope=scope)  # answers an auth challenge first
        headers = {"Authorization": self._tokens[scope]} if scope in self._tokens else {}
        with self._send("GET", f"{self.base}/v2/{repository}/blobs/{digest}",
                        {**headers, "Range": f"bytes={start}-{end - 1}"}, stream=True) as resp:
            if resp.status_code != 206:
                raise RegistryError(f"registry {self.target.host} answered HTTP {resp.status_code} to a range request "
                                    f"for blob {digest} of {repository} (a lazy pull needs ranges)")
            data = resp.raw.read(end - start + 1)
        if len(data) != end - start:
            raise RegistryError(f"registry {self.target.host} served {len(data)} bytes for bytes {start}-{end - 1} "
                                f"of blob {digest} of {repository}")
        return data

    def has_blob(self, repository: str, digest: str) -> bool:
        scope = f"repository:{repository}:pull"
        return self.request("HEAD", f"/v2/{repository}/blobs/{digest}", scope=scope).status_code == 200

    def mount_blob(self, repository: str, digest: str, source: str) -> bool:
        """Link blob `digest` of repository `source` into `repository` without sending it (the Distribution API's
        cross-repository mount); False when the registry would not, its upload session then cancelled."""
        scope = f"repository:{repository}:pull,push repository:{source}:pull"
        resp = self.request("POST", f"/v2/{repository}/blobs/uploads/?mount={digest}&from={source}", scope=scope)
        if resp.status_code == 201:
            return True
        location = resp.headers.get("Location", "")
        if resp.status_code == 202 and location:  # an upload session instead: not used, so not left open
            self.request("DELETE", location if location.startswith("http") else self.base + location, scope=scope)
        return False

    def put_blob(self, repository: str, data: bytes) -> str:
        """Upload `data` as one blob (monolithic POST then PUT) unless the registry has it; returns its digest."""
        digest = sha256_digest(data)
        if self.has_blob(repository, digest):
            return digest
        self._upload(repository, digest, data, {"Content-Type": "application/octet-stream"})
        return digest

    def upload_file(self, repository: str, path: Path, digest: str) -> None:
        """Upload the file `path` as blob `digest` (monolithic POST then PUT, the body streamed from disk)."""
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(path.stat().st_size)}
        with path.open("rb") as body:
            self._upload(repository, digest, body, headers)

    def upload_stream(self, repository: str, digest: str, body: IO[bytes], size: int) -> None:
        """Upload `size` bytes read from `body` (another registry's blob, as it streams) as blob `digest`."""
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
        self._upload(repository, digest, cast(IO[bytes], _Sized(body, size)), headers)

    def _upload(self, repository: str, digest: str, body: bytes | IO[bytes], headers: dict[str, str]) -> None:
        """One monolithic upload (POST for a location, then PUT of the whole body with its digest)."""
        scope = f"repository:{repository}:pull,push"
        start = self.request("POST", f"/v2/{repository}/blobs/uploads/", scope=scope)
        if start.status_code != 202 or "Location" not in start.headers:
            raise RegistryError(f"registry {self.target.host} answered HTTP {start.status_code} to a blob upload "
                                f"to {repository}")
        location = start.headers["Location"]
        url = location if location.startswith("http") else self.base + location
        url += ("&" if "?" in url else "?") + "digest=" + digest
        done = self.request("PUT", url, scope=scope, headers=headers, data=body)
        if done.status_code != 201:
            raise RegistryError(f"registry {self.target.host} answered HTTP {done.status_code} to the upload of "
                                f"blob {digest} to {repository}")

    def put_manifest(self, repository: str, reference: str, body: bytes, media_type: str) -> str:
        """Store a manifest under a tag or its digest; returns the digest the registry names it by."""
        resp = self.request("PUT", f"/v2/{repository}/manifests/{reference}",
                            scope=f"repository:{repository}:pull,push",
                            headers={"Content-Type": media_type}, data=body)
        if resp.status_code != 201:
            detail = resp.text.strip().splitlines()[0][:200] if resp.text.strip() else "no detail"
            raise RegistryError(f"registry {self.target.host} refused the manifest {repository}:{reference} "
                                f"(HTTP {resp.status_code}): {detail}")
        return resp.headers.get("Docker-Content-Digest") or sha256_digest(body)

    def copy_manifest(self, repository: str, digest: str, tag: str) -> str:
        """Name the manifest `digest` also `tag` (GET its exact bytes, PUT them under the tag: no layer moves);
        returns the digest the registry now serves for `tag`."""
        got = self.manifest_json(repository, digest)
        if got is None:
            raise RegistryError(f"registry {self.target.host} has no manifest {digest} in {repository}")
        return self.put_manifest(repository, tag, got[0], got[1])

    def remote_digest(self, repository: str, reference: str) -> str | None:
        """The digest `reference` names in the registry, None when it names nothing."""
        resp = self.manifest(repository, reference)
        if resp is None:
            return None
        digest = resp.headers.get("Docker-Content-Digest")
        if digest:
            return digest
        got = self.manifest_json(repository, reference)
        return got[2] if got is not None else None

    def image_labels(self, repository: str, reference: str) -> tuple[str, dict[str, str]] | None:
        """(manifest digest, the image config's labels) of `repository:reference`, None when it names nothing; an
        index (several platforms) has no one config, so no labels. Two small requests: no layer is read."""
        got = self.manifest_json(repository, reference)
        if got is None:
            return None
        config = json.loads(got[0]).get("config", {}).get("digest")
        if not config:
            return got[2], {}
        labels = (json.loads(self.blob(repository, config)).get("config") or {}).get("Labels") or {}
        return got[2], {str(k): str(v) for k, v in labels.items()}

    def missing_blobs(self, repository: str, reference: str) -> list[str]:
        """The blobs (or an index's manifests) that `reference`'s manifest names and the registry lacks."""
        got = self.manifest_json(repository, reference)
        if got is None:
            raise RegistryError(f"registry {self.target.host} has no manifest for {repository}:{reference}")
        manifest = json.loads(got[0])
        if "manifests" in manifest:  # an index: each platform's manifest must be there
            return [entry["digest"] for entry in manifest["manifests"]
                    if self.manifest(repository, entry["digest"]) is None]
        digests = [manifest["config"]["digest"], *(layer["digest"] for layer in manifest.get("layers", []))]
        return [d for d in digests if not self.has_blob(repository, d)]

    def referrers(self, repository: str, digest: str) -> list[dict[str, Any]] | None:
        """The descriptors of the manifests whose `subject` is `digest`, by the registry's referrers API (OCI
        distribution 1.1); None when the registry has no such API: it answers 404 there (Debian's docker-registry
        2.8), which an API that exists never does, even for a digest nothing refers to."""
        resp = self.request("GET", f"/v2/{repository}/referrers/{digest}", scope=f"repository:{repository}:pull",
                            headers={"Accept": "application/vnd.oci.image.index.v1+json"})
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise RegistryError(f"registry {self.target.host} answered HTTP {resp.status_code} for the referrers of "
                                f"{repository}@{digest}")
        try:
            body = resp.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("manifests", []), list):
            raise RegistryError(f"registry {self.target.host} answered the referrers of {repository}@{digest} "
                                "with something that is not an OCI image index")
        return [m for m in body.get("manifests", []) if isinstance(m, dict)]

    def tags(self, repository: str) -> list[str]:
        """Every tag of `repository`, sorted, following the registry's pagination; [] when it has none."""
        found: list[str] = []
        path: str | None = f"/v2/{repository}/tags/list"
        while path:
            resp = self.request("GET", path, scope=f"repository:{repository}:pull")
            if resp.status_code == 404:
                return []
            if resp.status_code != 200:
                raise RegistryError(f"registry {self.target.host} answered HTTP {resp.status_code} listing tags of "
                                    f"{repository}")
            found.extend((resp.json() or {}).get("tags") or [])
            next_link = resp.links.get("next", {}).get("url")
            path = urljoin(self.base, next_link) if next_link else None
        return sorted(found)
