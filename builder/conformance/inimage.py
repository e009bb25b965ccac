"""How the host starts trainimg's runtime inside any image: the image's own copy when it is baked in (every
trainimg image), else the host's copy mounted read-only (a team's image, or any image with python3).

One shell prelude decides inside the container, so no extra container is started just to look.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from .. import runtime as runtime_pkg
from ..runtime.contract import RUNTIME_BAKED, RUNTIME_MOUNTED, RUNTIME_PACKAGE, VENV

HOST_COPY = str(Path(runtime_pkg.__file__).parent)
# The image's own PATH may lack /opt/venv when a container's env is replaced: name the usual places.
PATH = f"{VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_PRELUDE = (
    'PY="$(command -v python3 || command -v python)" || '
    '{ echo "trainimg: no python3 in this image to run the runtime with" >&2; exit 127; }; '
    f'if [ ! -f {RUNTIME_BAKED}/__main__.py ]; then '
    f'export PYTHONPATH={PurePosixPath(RUNTIME_MOUNTED).parent}${{PYTHONPATH:+:$PYTHONPATH}}; fi; '
    f'exec "$PY" -m {RUNTIME_PACKAGE} "$@"'
)


def command(*args: str) -> list[str]:
    """``python -m trainimg_runtime ARGS`` in the container; PYTHONPATH is exported, so processes the launcher
    starts (``python3 -m trainimg_runtime allreduce``) find the same copy."""
    return ["sh", "-c", _PRELUDE, "trainimg-runtime", *args]


def volumes() -> dict[str, str]:
    """Host path -> container path of the runtime mount (used only when the image has no copy of its own)."""
    return {HOST_COPY: RUNTIME_MOUNTED}
