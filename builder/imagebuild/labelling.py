"""The labels read back from a built image, written into its config without building it again.

Why not through BuildKit: what these labels say is known only once the image exists (the Python that Debian's
package installed, NCCL's and cuDNN's versions as their libraries answer, the CUDA architectures compiled into
torch, the components found absent: runtime/manifest.py), and BuildKit 0.8 cannot take a label from a step's
output. A second, fully cached BuildKit pass with `--label` did it, at the price of a whole solve (a `--cache-from`
import again on an empty runner); the classic builder (`docker commit`, a `LABEL` build) writes a new config that
drops BuildKit's inline cache, which `--cache-from` and the pushed `<tag>.buildcache` need.

So the config the build wrote, its exact bytes (`Engine.image_config`), gets the labels merged into
`config.Labels` and is stored over the layers the engine already holds (`Engine.store_config`: a `docker load` of
that config alone). Nothing else changes: the layers (no layer is written, so each stays the one built), the
history and its times, the inline cache. It is serialised as dockerd and BuildKit write a config (Go's
encoding/json: keys of the labels sorted, no spaces, ``<``, ``>`` and ``&`` escaped), so the image is byte for
byte the one the second pass made, with the same image ID (a fully cached pass reproduces the first pass's config,
labels aside).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..engine.base import Engine
from ..errors import EngineError

# What Go's encoding/json escapes inside strings that Python's json.dumps(ensure_ascii=False) writes as they are
# (its HTML-safe escapes and the two JavaScript line separators), and the two short escapes Python has and Go has not.
_GO_ESCAPES = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"),
               ("\\b", "\\u0008"), ("\\f", "\\u000c"))


def go_json(data: Any) -> bytes:
    """`data` serialised as Go's json.Marshal writes it (strings, objects and lists of them: what a config holds).
    The characters replaced never occur outside a string in JSON, so replacing them throughout is exact; a
    backslash written as ``\\\\`` followed by ``b`` or ``f`` is the one pair that must not change, and is kept."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    text = text.replace("\\\\", "\0")  # an escaped backslash, out of the way of the \b and \f replacements
    for plain, escaped in _GO_ESCAPES:
        text = text.replace(plain, escaped)
    return text.replace("\0", "\\\\").encode("utf-8")


def with_labels(config: bytes, labels: Mapping[str, str]) -> bytes:
    """`config` (an image config's bytes) with `labels` set in `config.Labels` (a label it has already takes the
    new value), the labels in key order as the engine writes them; nothing else of the config changes."""
    data = json.loads(config)
    if not isinstance(data, dict) or not isinstance(data.get("config"), dict):
        raise EngineError("the image config has no `config` object to carry labels")
    merged = {**(data["config"].get("Labels") or {}), **labels}
    data["config"]["Labels"] = dict(sorted(merged.items()))
    return go_json(data)


def labelled(engine: Engine, image_id: str, labels: Mapping[str, str], tag: str) -> str:
    """The image `image_id` with `labels` added, stored under `tag` (held from the moment the engine stores it:
    imagebuild/litter.py); returns its ID."""
    return engine.store_config(with_labels(engine.image_config(image_id), labels), tag)
