"""The push policy, written once for `trainimg push` and `release` (the pipeline): what must hold before an image
leaves and what follows each push.

1. Every image's SBOM is read from the local image before the first push (`admit`): an image without one is refused
   while nothing has left yet.
2. An image is pushed only with a passing conformance record for its exact image ID (`gate`): trainimg never pushes
   an untested image.
   The gate hands the push the prefetch order the record keeps (records.py): an eStargz push writes those files
   first; one without an order says so in one line.
3. After each push its SBOM goes beside it, as a referrer of the pushed manifest (`pushed`).
4. A moving tag named at an image an earlier release pushed (a skipped variant) needs no local image: its SBOM is
   already beside that manifest in the same repository, and `kept` checks it is there, from the registry alone.

Both callers had their own copy of these three steps; a rule added to one was missed in the other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from ..conformance import records
from ..engine.base import Engine
from ..options.compression import DEFAULT_COMPRESSION, ESTARGZ, Compression
from .push import PushResult
from ..registry.references import RegistryTarget
from .sbom import SbomPublisher


class PushPolicy:
    """The three steps above for one registry target, with its credentials, the env the records are kept by and how
    the layers are written (`compression`: an eStargz push needs the order)."""

    def __init__(self, engine: Engine, target: RegistryTarget, credentials: dict[str, str] | None,
                 env: Mapping[str, str], on_line: Callable[[str], None] | None = None,
                 compression: Compression = DEFAULT_COMPRESSION) -> None:
        self.env, self.on_line, self.compression = env, on_line, compression
        self.sboms = SbomPublisher(engine, target, credentials, on_line)

    def admit(self, tags: Iterable[str]) -> None:
        """Read every image's SBOM now, before anything is pushed (a missing one is a CheckFailed naming it)."""
        for tag in tags:
            self.sboms.read(tag)

    def gate(self, image_id: str, ref: str) -> tuple[str, ...]:
        """Refuse `image_id` (pushed as `ref`) without a passing conformance record; its prefetch order (one line
        when an eStargz push has none)."""
        record = records.require_pass(image_id, ref, self.env)
        order = records.order_of(record)
        if not order and self.compression.algorithm == ESTARGZ and self.on_line is not None:
            self.on_line(records.no_order(ref, record))
        return order

    def pushed(self, tag: str, result: PushResult) -> None:
        """Publish `tag`'s SBOM beside what was just pushed (once per manifest digest)."""
        self.sboms(tag, result)

    def kept(self, tag: str, digest: str) -> None:
        """Refuse to name `tag`'s earlier-pushed manifest `digest` by a moving tag without its SBOM beside it."""
        self.sboms.require_beside(tag, digest)
