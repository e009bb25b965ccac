"""Pushing images to a registry and reading back what the registry holds.

trainimg's registry client sends the layers by default (registry/blobpush.py: only those the registry lacks, gzip or
zstd, the config with fixed times, so the same inputs push the same digest); the engine can (`--upload engine`):
this module drives it through the `Engine` interface, reads the errors that arrive *inside* the push stream,
retries what is transient, and then asks the registry's own HTTP API (v2) which manifest digest it stores, so a push
only counts when the registry and the engine agree on the digest and every blob of the manifest is really there.

Credentials never reach a log line, an exception message or a progress line: every text that leaves this module
goes through `redact` (registryapi).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any


from ..imagebuild.litter import remove_superseded
from ..engine.base import Engine, EngineLost
from ..errors import RegistryError, UserInputError
from ..options import AUTO_UPLOAD, CLIENT_UPLOAD, DEFAULT_UPLOAD, ENGINE_UPLOAD, check_transport
from ..conformance.records import no_order
from ..options.compression import DEFAULT_COMPRESSION, ESTARGZ, Compression
from ..registry.blobpush import known_layers, push_saved
from ..registry.layerformats import FORMATS
from ..registry.layermemory import LayerMemory
from ..registry.references import RegistryTarget, split_tag
from ..registry.registryapi import (RegistryAPI, Transient, auth_error, dns_error, redact,
                          unreachable_error)

log = logging.getLogger(__name__)


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
    """What a push achieved: the remote reference, its manifest digest, bytes sent, how many attempts it took and
    who sent the layers (`ENGINE_UPLOAD`, `CLIENT_UPLOAD`; "" for a registry-side copy). An image of several
    architectures names each one's manifest in `manifests`; `index` says the digest is the index's that names them
    (registry/imageindex.py), not one image's."""

    ref: str
    digest: str
    bytes_uploaded: int
    attempts: int
    upload: str = field(default="", compare=False)
    manifests: Mapping[str, str] = field(default_factory=dict, compare=False)
    index: bool = field(default=False, compare=False)
    cache: str = field(default="", compare=False)  # the client's build cache manifest beside the image ("": none)


def _classify_stream_error(message: str, host: str, credentials: dict[str, str] | None) -> RegistryError:
    """Turn an error from the engine's push stream into the error a person can act on."""
    low = message.lower()
    if any(m in low for m in _AUTH_MARKERS):
        return auth_error(host, credentials)
    if any(m in low for m in _DNS_MARKERS):
        return dns_error(host)
    if any(m in low for m in _REFUSED_MARKERS):
        return unreachable_error(host, "connection refused")
    detail = redact(message.strip().splitlines()[0] if message.strip() else "no detail", credentials)
    if any(m in low for m in _TRANSIENT_MARKERS):
        return Transient(f"registry {host} failed during the push: {detail}")
    return RegistryError(f"registry {host} refused the push: {detail}")


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
            on_progress(redact(line, credentials))
    return outcome


def _attempt(engine: Engine, api: RegistryAPI, tag: str, pushed: dict[str, int],
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
        raise Transient(redact(exc.message, creds)) from None
    if outcome.error is not None:
        raise _classify_stream_error(outcome.error, target.host, creds)
    remote = api.remote_digest(repository, tag_part)
    if remote is None:
        raise Transient(f"registry {target.host} does not list {ref} right after the push")
    pushed_image = engine.image(ref)
    local_digests = {d.split("@", 1)[1] for d in (pushed_image.repo_digests if pushed_image else ())
                     if d.split("@", 1)[0] == repository_ref}
    if remote not in local_digests or (outcome.digest and outcome.digest != remote):
        raise RegistryError(f"registry {target.host} serves {remote} for {ref} but the engine pushed "
                            f"{outcome.digest or sorted(local_digests)}: did someone push the same tag meanwhile?")
    missing = api.missing_blobs(repository, tag_part)
    if missing:
        raise Transient(f"registry {target.host} lacks {len(missing)} blob(s) of {ref} after the push, "
                         f"e.g. {missing[0]}")
    return remote


def _sibling_refs(api: RegistryAPI, siblings: Iterable[str]) -> list[tuple[str, str]]:
    return [(api.target.repository(n), t) for n, t in map(split_tag, siblings)]


def auto_upload(api: RegistryAPI, tag: str, layers: Iterable[str], siblings: Iterable[str],
                compression: Compression = DEFAULT_COMPRESSION) -> tuple[str, dict[str, tuple[str, int, str]]]:
    """`--upload auto`'s choice: the client when the registry holds a layer (diff ID) of the image under `tag` or a
    sibling, or the layers are to be zstd (the engine writes gzip only), else the engine; with what the registry
    holds (`blobpush.known_layers`), for the client to reuse."""
    name, tag_part = split_tag(tag)
    api.check_access()
    known = known_layers(api, [(api.target.repository(name), tag_part), *_sibling_refs(api, siblings)],
                         FORMATS[compression.algorithm])
    engine_fits = known.keys().isdisjoint(layers) and compression == DEFAULT_COMPRESSION
    return (ENGINE_UPLOAD if engine_fits else CLIENT_UPLOAD), known


def _attempt_client(engine: Engine, api: RegistryAPI, tag: str, image_id: str, pushed: dict[str, int],
                    siblings: Iterable[str], known: dict[str, tuple[str, int, str]] | None,
                    untagged: bool = False, compression: Compression = DEFAULT_COMPRESSION,
                    memory: LayerMemory | None = None) -> tuple[str, str]:
    """One push through the registry client: the layers the registry lacks, the config, the manifest (under the
    tag, or by its digest alone when `untagged`: one architecture's image of an index); (its digest, the digest of
    the build cache's manifest beside it or "")."""
    name, tag_part = split_tag(tag)
    repository = api.target.repository(name)
    api.check_access()
    result = push_saved(engine, image_id, api, repository, tag_part, siblings=_sibling_refs(api, siblings),
                        known=known, tagged=not untagged, compression=compression, memory=memory)
    pushed["client"] = pushed.get("client", 0) + result.bytes_uploaded
    missing = api.missing_blobs(repository, result.digest if untagged else tag_part)
    if missing:
        raise Transient(f"registry {api.target.host} lacks {len(missing)} blob(s) of {tag} after the push, "
                        f"e.g. {missing[0]}")
    return result.digest, result.cache


def reachable_target(engine: Engine, target: RegistryTarget) -> RegistryTarget:
    """`target`, marked plain http when the engine is set to reach its host so (`insecure-registries`)."""
    if not target.insecure and engine.plain_http(target.host):
        return replace(target, insecure=True)
    return target


def _engine_name(engine: Engine, image_id: str, ref: str) -> None:
    """Name the image `ref` (the engine pushes a name), removing the image that name left: no `<none>` litter."""
    old = engine.image(ref)
    engine.tag(image_id, ref)
    remove_superseded(engine, old, image_id)


def _say(message: str, on_progress: Callable[[str], None] | None) -> None:
    log.warning("%s", message)
    if on_progress:
        on_progress(message)


def _wait(exc: Transient, attempts: int, retries: int, backoff: float,
          on_progress: Callable[[str], None] | None) -> None:
    """Sleep before attempt `attempts + 1` (`backoff`, doubling, at most 60 s), or give up after `retries` more."""
    if attempts > retries:
        raise RegistryError(f"{exc.message} (gave up after {attempts} attempts)") from None
    delay = min(backoff * 2 ** (attempts - 1), 60.0)
    _say(f"{exc.message}; retrying in {delay:g} s (attempt {attempts + 1} of {retries + 1})", on_progress)
    time.sleep(delay)


def push(engine: Engine, local_ref: str, target: RegistryTarget, tag: str, *, credentials: dict[str, str] | None,
         retries: int = 4, backoff: float = 1.0, on_progress: Callable[[str], None] | None = None,
         gate: Callable[[str], Sequence[str] | None] | None = None, timeout: float = 30.0,
         upload: str = DEFAULT_UPLOAD,
         siblings: Iterable[str] = (), untagged: bool = False, compression: Compression = DEFAULT_COMPRESSION,
         memory: LayerMemory | None = None) -> PushResult:
    """Push local image `local_ref` to `target` as `tag` (`name:tag`), retrying transient failures.

    `gate(image_id)` runs before anything is tagged or sent, so an image without a passing conformance record never
    leaves the machine; what it returns is the prefetch order its run recorded, which an eStargz push writes first
    (`compression.ordered`). Retries (at most `retries` more attempts, sleeping `backoff`, 2*`backoff`, ... seconds) cover
    dropped connections, EOF, 5xx and timeouts; auth, DNS and refusals that retrying cannot fix raise at once.
    `timeout` bounds each HTTP call to the registry. The result's digest is what the registry serves and what the
    engine recorded, and every blob of that manifest answered 200. `upload`: `CLIENT_UPLOAD` (the default) sends the
    layers through trainimg's registry client (blobpush.py), only those the registry lacks, whatever the engine
    remembers, and the config with fixed times (one digest for one input); `ENGINE_UPLOAD` has the engine push them;
    `AUTO_UPLOAD` the client when the registry holds a layer of the image (`auto_upload`), else the engine.
    `compression` (the client's): gzip, or zstd under a repository or tag of its own. `siblings` are other local
    tags pushed to `target` (a release's other variants, the parent an image extends) and `memory` what this
    machine's pushes left where (registry/layermemory.py): the client mounts a layer they hold instead of sending it.
    `untagged`: the image is one architecture of an index (publish/indexpush.py): the client stores its manifest by
    digest, the tag is left to the index, and no engine name is made for it."""
    check_transport(upload, compression)
    image = engine.image(local_ref)
    if image is None:
        raise UserInputError(f"no local image {local_ref}: build it first")
    if gate is not None:
        compression = compression.ordered(gate(image.id) or ())
    elif compression.algorithm == ESTARGZ:  # nothing says what its start reads
        _say(no_order(local_ref, None), on_progress)
    ref = target.ref(tag)
    target = reachable_target(engine, target)
    if untagged:
        upload = CLIENT_UPLOAD
    else:
        _engine_name(engine, image.id, ref)
    api = RegistryAPI(target, credentials, timeout)
    pushed: dict[str, int] = {}
    known: dict[str, tuple[str, int, str]] | None = None  # what `--upload auto` read of the registry, for the client
    attempts = 0
    while True:
        attempts += 1
        try:
            if upload == AUTO_UPLOAD:  # decided once, inside the retries: asking the registry can fail as a push can
                upload, known = auto_upload(api, tag, image.layers, siblings, compression)
            digest, cache = (_attempt_client(engine, api, tag, image.id, pushed, siblings, known, untagged, compression,
                                             memory)
                             if upload == CLIENT_UPLOAD else (_attempt(engine, api, tag, pushed, on_progress), ""))
        except Transient as exc:
            _wait(exc, attempts, retries, backoff, on_progress)
            continue
        log.info("pushed %s (%s) in %d attempt(s)", ref, digest, attempts)
        return PushResult(ref=ref, digest=digest, bytes_uploaded=sum(pushed.values()), attempts=attempts,
                          upload=upload, cache=cache)
