"""How many GPUs there are: the one count the launcher (`--nproc-per-node auto`), the probe's `gpu` check and the
host's conformance suite (GPU all-reduce or skip) all use, so they cannot disagree about the same machine.

Standard library only: it runs in images and on the host alike.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping

# What CUDA accepts in CUDA_VISIBLE_DEVICES: a device index or a UUID; the first other entry hides the rest.
_DEVICE_ID = re.compile(r"[0-9]+|GPU-.+|MIG-.+")


def nvidia_smi_gpus(path: str | None = None, timeout: float = 60) -> tuple[list[str] | None, str | None]:
    """(the `GPU n: ...` lines of ``nvidia-smi -L``, None) or (None, why there is no listing).

    `path` is the PATH to look nvidia-smi up in (None: this process's)."""
    smi = shutil.which("nvidia-smi", path=path)
    if not smi:
        return None, "nvidia-smi not found"
    try:
        proc = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError) as err:
        return None, f"nvidia-smi: {err}"
    if proc.returncode != 0:
        return None, f"nvidia-smi -L exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()[:200]}"
    return [ln.strip() for ln in proc.stdout.splitlines() if ln.strip().startswith("GPU ")], None


def gpu_count(path: str | None = None) -> int:
    """GPUs nvidia-smi lists on this machine; 0 where it is missing or fails."""
    lines, _error = nvidia_smi_gpus(path)
    return len(lines or [])


def cuda_visible_count(env: Mapping[str, str]) -> int | None:
    """GPUs ``CUDA_VISIBLE_DEVICES`` leaves visible, counted the way CUDA reads it (up to the first entry that
    is not a device index or UUID, so ``-1`` or ``NoDevFiles`` hide the rest); None when it is not set."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return None
    count = 0
    for entry in visible.split(","):
        if not _DEVICE_ID.fullmatch(entry.strip()):
            break
        count += 1
    return count


def visible_gpus(env: Mapping[str, str]) -> int:
    """How many GPUs this replica may use, at least 1: what ``--nproc-per-node auto`` starts.

    ``CUDA_VISIBLE_DEVICES`` wins when set; else ``nvidia-smi -L`` lines (looked up on env's PATH); else 1.
    """
    visible = cuda_visible_count(env)
    if visible is not None:
        return max(visible, 1)
    return max(gpu_count(env.get("PATH")), 1)
