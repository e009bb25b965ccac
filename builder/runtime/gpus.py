"""How many GPUs there are: the one count the launcher (`--nproc-per-node auto`, and its refusal of more processes
than GPUs), the probe's `gpu` check, selftest's all-reduce and the host's conformance suite all use, so no two
checks of one run can disagree about the same machine (the first GPU run had `gpu` say "passed, 1 GPU(s)" from
nvidia-smi's list while, with ``CUDA_VISIBLE_DEVICES=-1``, torch saw none).

The count is CUDA's: nvidia-smi lists the machine's GPUs whatever the environment says, CUDA enumerates only those
``CUDA_VISIBLE_DEVICES`` leaves visible. Its rules, from the CUDA C Programming Guide (CUDA Environment Variables)
and PyTorch's reading of them (``torch.cuda._parse_visible_devices`` / ``_device_count_nvml``):

* unset: every GPU; set but empty: none;
* a comma-separated sequence of device indices or UUIDs (``GPU-...``, a unique prefix allowed; ``MIG-...``);
  devices are enumerated in the order given;
* the first invalid entry (not an index or UUID, a negative index such as ``-1``, an index past the last GPU, a
  UUID no GPU has) ends the sequence: only the devices before it are visible (``0,2,-1,1`` -> 0 and 2);
* a repeated device makes the whole list invalid: none visible.

Standard library only: it runs in images and on the host alike.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

VISIBLE_VARIABLE = "CUDA_VISIBLE_DEVICES"
# `nvidia-smi -L`'s line for one GPU: "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-a2314e0e-...)".
_LISTED = re.compile(r"GPU (?P<index>[0-9]+): .*?(?:\(UUID: (?P<uuid>GPU-[0-9A-Fa-f-]+)\))?\s*$")
# An index as CUDA (like strtoul) reads it: leading digits, an optional sign; "1gpu2" is 1.
_INDEX = re.compile(r"[+-]?[0-9]+")


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


# The kernel module's banner: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Tue ..." (the driver's).
DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"
_MODULE_VERSION = re.compile(r"Kernel Module(?: for [^ ]+)?\s+([0-9]+(?:\.[0-9]+)+)")


def driver_version(path: str | None = None, version_file: str = DRIVER_VERSION_FILE) -> tuple[str | None, str | None]:
    """(the NVIDIA driver's version, None) from the kernel module's banner, else nvidia-smi's; or (None, why not)."""
    try:
        with open(version_file, encoding="utf-8", errors="replace") as fh:
            found = _MODULE_VERSION.search(fh.read())
        if found:
            return found.group(1), None
    except OSError:
        pass
    smi = shutil.which("nvidia-smi", path=path)
    if not smi:
        return None, f"neither {version_file} nor nvidia-smi says the driver's version"
    try:
        proc = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError) as err:
        return None, f"nvidia-smi: {err}"
    first = proc.stdout.strip().splitlines()[:1]
    if proc.returncode != 0 or not first:
        return None, f"nvidia-smi --query-gpu=driver_version exited {proc.returncode}"
    return first[0].strip(), None


def gpu_count(path: str | None = None) -> int:
    """GPUs nvidia-smi lists on this machine (what a container engine's ``--gpus all`` hands out); 0 where it
    is missing or fails. Not what CUDA in this process sees: that is `gpu_view`'s ``visible``."""
    lines, _error = nvidia_smi_gpus(path)
    return len(lines or [])


def _uuids(listed: Sequence[str]) -> list[str]:
    out = []
    for line in listed:
        match = _LISTED.match(line)
        out.append((match.group("uuid") or "") if match else "")
    return out


def _entry_device(entry: str, listed: Sequence[str] | None) -> str | None:
    """The device one ``CUDA_VISIBLE_DEVICES`` entry names (``"3"``, ``"GPU-..."``), None where it is invalid.
    Without a listing (no nvidia-smi) an index or UUID cannot be checked against the machine and is taken."""
    if entry.startswith(("GPU-", "MIG-")):
        if listed is None or entry.startswith("MIG-"):
            return entry
        found = [uuid for uuid in _uuids(listed) if uuid and uuid.startswith(entry)]
        return found[0] if len(found) == 1 else None
    match = _INDEX.match(entry)
    if not match or int(match.group()) < 0:
        return None
    index = int(match.group())
    if listed is not None and index >= len(listed):
        return None
    return str(index)


def cuda_visible_devices(value: str, listed: Sequence[str] | None) -> list[str]:
    """The devices CUDA enumerates for ``CUDA_VISIBLE_DEVICES=value`` (see the module doc for the rules), given
    nvidia-smi's `listed` GPUs (None where there is no listing)."""
    devices: list[str] = []
    if not value.strip():
        return devices
    for entry in value.split(","):
        device = _entry_device(entry.strip(), listed)
        if device is None:
            break
        if device in devices:
            return []
        devices.append(device)
    return devices


def cuda_visible_count(env: Mapping[str, str], listed: Sequence[str] | None = None) -> int | None:
    """GPUs ``CUDA_VISIBLE_DEVICES`` leaves visible of those `listed`; None when it is not set."""
    value = env.get(VISIBLE_VARIABLE)
    if value is None:
        return None
    return len(cuda_visible_devices(value, listed))


@dataclass(frozen=True)
class GpuView:
    """This machine's GPUs as nvidia-smi lists them and as CUDA will enumerate them in this environment."""

    listed: list[str] | None  # nvidia-smi -L's GPU lines; None where it is missing or failed
    listed_error: str | None
    visible: int  # what CUDA enumerates: CUDA_VISIBLE_DEVICES applied to the listing
    setting: str | None  # CUDA_VISIBLE_DEVICES as set (None: unset)

    @property
    def hidden(self) -> int:
        """Listed GPUs CUDA will not see (0 where nothing is listed)."""
        return max(len(self.listed or []) - self.visible, 0)

    def describe(self) -> str:
        """``1 visible`` or ``0 visible of 1 listed by nvidia-smi (CUDA_VISIBLE_DEVICES='-1')``."""
        text = f"{self.visible} visible"
        if self.hidden:
            text += f" of {len(self.listed or [])} listed by nvidia-smi ({VISIBLE_VARIABLE}={self.setting!r})"
        return text


def gpu_view(env: Mapping[str, str], listed: list[str] | None = None, listed_error: str | None = None,
             *, look: bool = True) -> GpuView:
    """The view for `env`; nvidia-smi is run (on env's PATH) unless `look` is false or `listed` is given."""
    if listed is None and look:
        listed, listed_error = nvidia_smi_gpus(env.get("PATH"))
    visible = cuda_visible_count(env, listed)
    if visible is None:
        visible = len(listed or [])
    return GpuView(listed, listed_error, visible, env.get(VISIBLE_VARIABLE))


def visible_gpus(env: Mapping[str, str]) -> int:
    """How many GPUs this replica may use, at least 1: what ``--nproc-per-node auto`` starts.

    ``CUDA_VISIBLE_DEVICES`` applied to ``nvidia-smi -L``'s list (looked up on env's PATH); without a listing,
    the entries ``CUDA_VISIBLE_DEVICES`` names; else 1.
    """
    return max(gpu_view(env).visible, 1)


def too_many_processes(nproc: int, gpus: int, backend: str, *, flag: str = "--nproc-per-node",
                       where: str = "this node") -> str | None:
    """Why `nproc` processes per node cannot run over `backend` with `gpus` GPUs there, or None where they can.

    The one rule every starter applies (`launch`, `selftest`, `trainimg test`/`run`) before any process starts:
    NCCL puts one rank on one GPU and refuses two ranks on the same device ("Duplicate GPU detected"); a rank
    asking for ``cuda:<local rank>`` past the last GPU fails "invalid device ordinal"; JAX's second process finds
    the memory the first preallocated. gloo runs on CPU, so any count is fine there.
    """
    if backend != "nccl" or nproc <= gpus:
        return None
    advice = f"use {flag} auto (or at most {gpus})" if flag.startswith("--") else f"run at most {gpus} per node"
    return (f"{flag} {nproc}: {where} has {gpus} GPU(s) and NCCL needs one GPU per process; {advice}"
            + (", or hide the GPUs (CUDA_VISIBLE_DEVICES=) to run on CPU over gloo" if gpus else ""))
