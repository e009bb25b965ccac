"""Pushing images to a registry and reading back what the registry holds.

The engine does the upload (it owns the layers); this module drives it through the `Engine` interface, reads the errors
that arrive *inside* the push stream, retries what is transient, and then asks the registry's own HTTP API (v2)
which manifest digest it stores, so a push only counts when the registry and the engine agree on the digest and
every blob of the manifest is really there.

Credentials never reach a log line, an exception message or a progress line: every text that leaves this module
goes through `_redact`.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import requests

from ..engine.base import Engine, EngineLost
from ..errors import RegistryError, UserInputError
from .references import RegistryTarget, split_tag

log = logging.getLogger(__name__)


MANIFEST_TYPES = (
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.index.v1+json",
)

# Texts the engine puts in a push stream's error, by what they mean for the person pushing.
_AUTH_MARKERS = ("unauthorized", "authentication required", "no basic auth credentials", "denied", "insufficient_scope")
_DNS_MARKERS = ("no such host", "server misbehaving", "name resolution", "name or service not known")
_REFUSED_MARKERS = ("connection refused", "no route to host", "network is unreachable")
_TRANSIENT_MARKERS = (
    "eof",
    "connection reset",
    "broken pipe",
    "timeout",
    "timed out",
    "received unexpected http status: 5",
    "500 internal server error",
    "502 bad gateway",
    "503 service unavailable",
    "504 gateway timeout",
    "blob upload unknown",
    "server closed idle connection",
    "use of closed network connection",
)


@dataclass(frozen=True)
class PushResult:
    """What a push achieved: the remote reference, its manifest digest, bytes sent and how many attempts it took."""

    ref: str
    digest: str
    bytes_uploaded: int
    attempts: int


# ----------------------------------------------------------------------------------------------------------------
# Errors


class _Transient(RegistryError):
    """A failure worth another attempt (dropped connection, 5xx, timeout); private so callers see RegistryError."""


def _redact(text: str, credentials: dict[str, str] | None) -> str:
    """Blank every secret out of `text`, whatever produced it."""
    for key in ("password", "identitytoken", "registrytoken"):
        secret = (credentials or {}).get(key)
        if secret:
            text = text.replace(secret, "***")
    return text


def _auth_error(host: str, credentials: dict[str, str] | None) -> RegistryError:
    user = (credentials or {}).get("username")
    if user:
        return RegistryError(f"registry {host} rejected the credentials for {user}: check the username and "
                             f"TRAINIMG_REGISTRY_PASSWORD or run docker login {host}")
    if credentials:
        return RegistryError(f"registry {host} rejected the stored identity token: run docker login {host}")
    return RegistryError(f"registry {host} asks for credentials: run docker login {host} or pass --username with "
                         "TRAINIMG_REGISTRY_PASSWORD")


def _dns_error(host: str) -> RegistryError:
    return RegistryError(f"registry host {host.rsplit(':', 1)[0]} could not be resolved (DNS): check the spelling "
                         "of --registry")


def _unreachable_error(host: str, why: str) -> _Transient:
    return _Transient(f"registry {host} is unreachable ({why}): check that it is running and that the host and "
                      "port in --registry are right")


def _classify_stream_error(message: str, host: str, credentials: dict[str, str] | None) -> RegistryError:
    """Turn an error from the engine's push stream into the error a person can act on."""
    low = message.lower()
    if any(m in low for m in _AUTH_MARKERS):
        return _auth_error(host, credentials)
    if any(m in low for m in _DNS_MARKERS):
        return _dns_error(host)
    if any(m in low for m in _REFUSED_MARKERS):
        return _unreachable_error(host, "connection refused")
    detail = _redact(message.strip().splitlines()[0] if message.strip() else "no detail", credentials)
    if any(m in low for m in _TRANSIENT_MARKERS):
        return _Transient(f"registry {host} failed during the push: {detail}")
    return RegistryError(f"registry {host} refused the push: {detail}")


def _classify_request_exception(exc: requests.RequestException, host: str, timeout: float) -> RegistryError:
    text = repr(exc).lower()
    if "nameresolution" in text or "name or service not known" in text or "getaddrinfo" in text:
        return _dns_error(host)
    if isinstance(exc, requests.Timeout):
        return _Transient(f"registry {host} did not answer within {timeout:g} s: check the network or the "
                          "registry's health")
    if "refused" in text:
        return _unreachable_error(host, "connection refused")
    if isinstance(exc, requests.exceptions.SSLError):
        return RegistryError(f"registry {host}: TLS failed ({type(exc).__name__}); if it serves plain http, add it "
                             "to the engine's insecure-registries")
    return _Transient(f"registry {host} dropped the connection: {type(exc).__name__}")


# ----------------------------------------------------------------------------------------------------------------
# Registry HTTP API v2


@dataclass
class _RegistryAPI:
    """Minimal Distribution API v2 client: Basic auth, or the Bearer token flow when the registry asks for it."""

    target: RegistryTarget
    credentials: dict[str, str] | None
    timeout: float = 30.0
    _session: requests.Session = field(default_factory=requests.Session)
    _tokens: dict[str, str] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return f"{self.target.scheme}://{self.target.host}"

    def request(self, method: str, path: str, *, scope: str = "", headers: dict[str, str] | None = None
                ) -> requests.Response:
        """Send one request, answering a 401 challenge once; transport failures become RegistryError."""
        url = path if path.startswith("http") else self.base + path
        headers = dict(headers or {})
        if scope in self._tokens:
            headers["Authorization"] = self._tokens[scope]
        resp = self._send(method, url, headers)
        if resp.status_code == 401:
            challenge = resp.headers.get("WWW-Authenticate", "")
            auth = self._answer(challenge, scope)
            if auth is None:
                raise _auth_error(self.target.host, self.credentials)
            self._tokens[scope] = auth
            headers["Authorization"] = auth
            resp = self._send(method, url, headers)
            if resp.status_code == 401:
                raise _auth_error(self.target.host, self.credentials)
        if resp.status_code >= 500:
            raise _Transient(f"registry {self.target.host} answered HTTP {resp.status_code} to {method} {path}")
        return resp

    def _send(self, method: str, url: str, headers: dict[str, str], **kwargs: Any) -> requests.Response:
        try:
            return self._session.request(method, url, headers=headers, timeout=self.timeout, allow_redirects=True,
                                         **kwargs)
        except requests.RequestException as exc:
            raise _classify_request_exception(exc, self.target.host, self.timeout) from None

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
            raise _Transient(f"registry token service {params['realm']} answered HTTP {resp.status_code}")
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


def _remote_digest(api: _RegistryAPI, repository: str, reference: str) -> str | None:
    resp = api.manifest(repository, reference)
    if resp is None:
        return None
    digest = resp.headers.get("Docker-Content-Digest")
    if digest:
        return digest
    resp = api.manifest(repository, reference, method="GET")
    return "sha256:" + hashlib.sha256(resp.content).hexdigest() if resp is not None else None


def _missing_blobs(api: _RegistryAPI, repository: str, reference: str) -> list[str]:
    resp = api.manifest(repository, reference, method="GET")
    if resp is None:
        raise RegistryError(f"registry {api.target.host} has no manifest for {repository}:{reference}")
    manifest = resp.json()
    if "manifests" in manifest:  # an index: each platform's manifest must be there
        return [entry["digest"] for entry in manifest["manifests"]
                if api.manifest(repository, entry["digest"]) is None]
    digests = [manifest["config"]["digest"], *(layer["digest"] for layer in manifest.get("layers", []))]
    scope = f"repository:{repository}:pull"
    return [d for d in digests if api.request("HEAD", f"/v2/{repository}/blobs/{d}", scope=scope).status_code != 200]


# ----------------------------------------------------------------------------------------------------------------
# Push


@dataclass
class _StreamOutcome:
    digest: str | None = None
    error: str | None = None


def _consume_push_stream(events: Iterable[dict[str, Any]], pushed: dict[str, int],
                         on_progress: Callable[[str], None] | None,
                         credentials: dict[str, str] | None) -> _StreamOutcome:
    """Read the engine's push stream: record bytes per layer that reached 'Pushed', the digest, or the error."""
    outcome = _StreamOutcome()
    current: dict[str, int] = {}
    for event in events:
        if "error" in event or "errorDetail" in event:
            outcome.error = (event.get("errorDetail") or {}).get("message") or str(event.get("error"))
            return outcome
        layer, status = event.get("id"), event.get("status", "")
        detail = event.get("progressDetail") or {}
        if layer and status == "Pushing" and detail.get("current"):
            current[layer] = max(current.get(layer, 0), int(detail["current"]))
        elif layer and status == "Pushed":
            pushed[layer] = max(pushed.get(layer, 0), current.get(layer, 0))
        aux = event.get("aux") or {}
        if aux.get("Digest"):
            outcome.digest = aux["Digest"]
        if on_progress and status and status != "Pushing":
            line = f"{layer}: {status}" if layer else status
            on_progress(_redact(line, credentials))
    return outcome


def _attempt(engine: Engine, api: _RegistryAPI, tag: str, pushed: dict[str, int],
             on_progress: Callable[[str], None] | None) -> str:
    """One push attempt; returns the digest the registry and the engine agree on or raises RegistryError."""
    target, creds = api.target, api.credentials
    ref = target.ref(tag)
    repository_ref, _, tag_part = ref.rpartition(":")
    repository = target.repository(split_tag(tag)[0])
    api.check_access()
    try:
        outcome = _consume_push_stream(engine.push(repository_ref, tag_part, creds), pushed, on_progress, creds)
    except EngineLost as exc:
        raise _Transient(_redact(exc.message, creds)) from None
    if outcome.error is not None:
        raise _classify_stream_error(outcome.error, target.host, creds)
    remote = _remote_digest(api, repository, tag_part)
    if remote is None:
        raise _Transient(f"registry {target.host} does not list {ref} right after the push")
    pushed_image = engine.image(ref)
    local_digests = {d.split("@", 1)[1] for d in (pushed_image.repo_digests if pushed_image else ())
                     if d.split("@", 1)[0] == repository_ref}
    if remote not in local_digests or (outcome.digest and outcome.digest != remote):
        raise RegistryError(f"registry {target.host} serves {remote} for {ref} but the engine pushed "
                            f"{outcome.digest or sorted(local_digests)}: did someone push the same tag meanwhile?")
    missing = _missing_blobs(api, repository, tag_part)
    if missing:
        raise _Transient(f"registry {target.host} lacks {len(missing)} blob(s) of {ref} after the push, "
                         f"e.g. {missing[0]}")
    return remote


def push(
    engine: Engine,
    local_ref: str,
    target: RegistryTarget,
    tag: str,
    *,
    credentials: dict[str, str] | None,
    retries: int = 4,
    backoff: float = 1.0,
    on_progress: Callable[[str], None] | None = None,
    gate: Callable[[str], None] | None = None,
    timeout: float = 30.0,
) -> PushResult:
    """Push local image `local_ref` to `target` as `tag` (`name:tag`), retrying transient failures.

    `gate(image_id)` runs before anything is tagged or sent, so an image without a passing conformance record never
    leaves the machine. Retries (at most `retries` more attempts, sleeping `backoff`, 2*`backoff`, ... seconds) cover
    dropped connections, EOF, 5xx and timeouts; auth, DNS and refusals that retrying cannot fix raise at once.
    `timeout` bounds each HTTP call to the registry. The result's digest is what the registry serves and what the
    engine recorded, and every blob of that manifest answered 200.
    """
    image = engine.image(local_ref)
    if image is None:
        raise UserInputError(f"no local image {local_ref}: build it first")
    if gate is not None:
        gate(image.id)
    ref = target.ref(tag)
    if not target.insecure and engine.plain_http(target.host):
        target = replace(target, insecure=True)
    engine.tag(image.id, ref)
    api = _RegistryAPI(target, credentials, timeout)
    pushed: dict[str, int] = {}
    attempts = 0
    while True:
        attempts += 1
        try:
            digest = _attempt(engine, api, tag, pushed, on_progress)
        except _Transient as exc:
            if attempts > retries:
                raise RegistryError(f"{exc.message} (gave up after {attempts} attempts)") from None
            delay = min(backoff * 2 ** (attempts - 1), 60.0)
            message = f"{exc.message}; retrying in {delay:g} s (attempt {attempts + 1} of {retries + 1})"
            log.warning("%s", message)
            if on_progress:
                on_progress(message)
            time.sleep(delay)
            continue
        log.info("pushed %s (%s) in %d attempt(s)", ref, digest, attempts)
        return PushResult(ref=ref, digest=digest, bytes_uploaded=sum(pushed.values()), attempts=attempts)
