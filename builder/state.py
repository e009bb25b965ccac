"""Where trainimg keeps what outlives one command: build logs, conformance records, the local registry.

One folder, chosen from the environment passed in (never the current directory): TRAINIMG_STATE_DIR, else
$XDG_CACHE_HOME/trainimg, else ~/.cache/trainimg.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def state_dir(env: Mapping[str, str]) -> Path:
    if env.get("TRAINIMG_STATE_DIR"):
        base = Path(env["TRAINIMG_STATE_DIR"])
    elif env.get("XDG_CACHE_HOME"):
        base = Path(env["XDG_CACHE_HOME"]) / "trainimg"
    else:
        base = Path(env.get("HOME", "/root")) / ".cache" / "trainimg"
    base.mkdir(parents=True, exist_ok=True)
    return base
