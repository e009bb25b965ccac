"""The files of the image a gate process reads, in first-read order: the prefetch order of its eStargz layers.

`trainimg test` runs the image's real start (the framework import, the process group, the all-reduce, the in-image
checks); nothing else knows so exactly which files a training start reads, which is what a lazy-pulling node should
fetch first (registry/estargz.py). With READS_ENV naming a folder (the host mounts one there), each runtime process
(`python -m trainimg_runtime ...`, and the all-reduce workers it starts) records
* each file Python opens for reading (the `open` audit event, `sys.addaudithook`: sources, bytecode, data files);
* each file mapped into the process (`/proc/self/maps`): the interpreter and the shared libraries the dynamic
  linker loads, extension modules and the framework's own (`libtorch_cpu.so`), which no Python open sees. Read
  again at the first import after the linker may have loaded something (an extension module's import, which audits
  its file just before loading it, or `ctypes.dlopen`), and at the end; not on a clock, so two runs of the same start
  give the same order (and an eStargz push of it the same digest). Not at every import: a reading costs about 1 ms
  with TensorFlow mapped, and `import tensorflow` is thousands of imports (a reading at each of them took its import
  from 1.8 s to 4.8 s of one core, now 2.1 s; libraries a framework's C++ loads itself are seen at the next reading);
* at the start, what was read before the hook could be installed: the maps, and the modules already imported.
At exit, and when the all-reduce prints its verdict (a TensorFlow rank leaves by `os._exit`), or before the
launcher execs torchrun, it writes them, symlinks resolved, kept to regular files of the image's own filesystem
(not under another mount: /proc, /dev, a volume, the runtime's own mount, Docker's /etc/hosts; nor under /tmp), as
one JSON file in that folder: `node` (the host name), `started` (its clock at the start) and `reads`. The host
merges the processes' files (`merge`): node by node (a replica's host name is its role and index, the same in every
run of the job), each node's processes in start order, a path where first seen.

Standard library only.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any

READS_ENV = "TRAINIMG_READS_DIR"
_NOT_IMAGE = ("/proc", "/sys", "/dev", "/tmp")  # the kernel's, and what the run itself writes
_WRITE_MODES = frozenset("wxa")


class _Recorder:
    """The paths one process opened or mapped, first-seen order, until `write`."""

    def __init__(self, folder: str) -> None:
        self.folder, self.started = folder, time.time()
        self.seen: dict[str, None] = {}
        self.busy = False
        self.linked = True  # the linker may have mapped files since the last `maps` reading
        self.node = os.uname().nodename
        self.name = os.path.join(folder, f"{self.node}-{os.getpid()}-{time.monotonic_ns()}.json")

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        """The audit hook: it must never raise (the exception would reach the `open` or `import` it audits)."""
        if self.busy:
            return
        try:
            if event == "open":
                self._opened(args)
            elif event == "import":
                if self.linked:
                    self.maps()
                self.linked = args[1] is not None  # an extension module's file: the linker loads it next
            elif event == "ctypes.dlopen":
                self.linked = True
        except Exception:  # noqa: BLE001  (a path that cannot be read as one: not recorded)
            pass

    def _opened(self, args: tuple[Any, ...]) -> None:
        path, mode, flags = (tuple(args) + (None, None, 0))[:3]
        if isinstance(mode, str) and _WRITE_MODES & set(mode) and "+" not in mode:
            return
        if mode is None and isinstance(flags, int) and flags & os.O_ACCMODE == os.O_WRONLY:
            return
        if isinstance(path, (str, bytes, os.PathLike)):
            name = os.fsdecode(path)
            self.seen.setdefault(name if name.startswith("/") else os.path.join(os.getcwd(), name))

    def maps(self) -> None:
        """Every file mapped now (the dynamic linker's loads since the last reading), those new since the last
        reading by name: the maps list them by address, which changes from run to run (ASLR)."""
        self.busy, self.linked = True, False
        try:
            with open("/proc/self/maps", encoding="utf-8", errors="surrogateescape") as fh:
                mapped = {line[line.find("/"):].rstrip("\n") for line in fh if "/" in line}
            for path in sorted(mapped):
                if not path.endswith(" (deleted)"):
                    self.seen.setdefault(path)
        except OSError:
            pass
        finally:
            self.busy = False

    def loaded(self) -> None:
        """What was read before the hook: the maps (interpreter, libc), then each imported module's bytecode."""
        self.maps()
        for module in list(sys.modules.values()):
            for attr in ("__cached__", "__file__"):
                path = getattr(module, attr, None)
                if isinstance(path, str) and os.path.isfile(path):
                    self.seen.setdefault(os.path.abspath(path))
                    break

    def write(self) -> None:
        """The image's regular files read so far, into this process's file (whole, or not at all)."""
        self.maps()
        self.busy = True
        try:
            reads = image_files(self.seen, _mount_points())
            part = f"{self.name}.part"
            with open(part, "w", encoding="utf-8", errors="surrogateescape") as fh:
                json.dump({"node": self.node, "started": self.started, "argv": sys.argv[:4], "reads": reads}, fh)
            os.replace(part, self.name)
        except OSError as exc:
            print(f"trainimg: could not record the files this process read: {exc}", file=sys.stderr)
        finally:
            self.busy = False


_recorder: _Recorder | None = None


def start() -> None:
    """Record this process's reads when READS_ENV names a folder (once per process)."""
    global _recorder
    folder = os.environ.get(READS_ENV, "")
    if _recorder is not None or not folder or not os.path.isdir(folder):
        return
    _recorder = _Recorder(folder)
    _recorder.loaded()
    sys.addaudithook(_recorder.hook)
    atexit.register(_recorder.write)


def flush() -> None:
    """Write what this process read so far (when it may leave without `atexit`: `os._exit`, a kill)."""
    if _recorder is not None:
        _recorder.write()


def image_files(paths: Iterable[str], mounts: Sequence[str]) -> list[str]:
    """`paths` resolved, each once, kept when a regular file outside `mounts` (mount points other than "/"), the
    kernel's pseudo filesystems and /tmp."""
    out: dict[str, None] = {}
    for path in paths:
        real = os.path.realpath(path)
        if real in out or any(real == m or real.startswith(m.rstrip("/") + "/") for m in (*_NOT_IMAGE, *mounts)):
            continue
        if os.path.isfile(real):
            out[real] = None
    return list(out)


def _mount_points() -> list[str]:
    """The mount points of this process other than "/" (`/proc/self/mountinfo`'s fifth field, octal escapes
    undone)."""
    points = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) > 4 and fields[4] != "/":
                    points.append(_unescape(fields[4]))
    except OSError:
        pass
    return points


def _unescape(field: str) -> str:
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def merge(records: Iterable[dict[str, Any]]) -> list[str]:
    """The union of processes' `reads`, node by node (`node`), each node's in the order of their `started`, each path
    where first seen: the same list from two runs whose nodes read the same, whichever replica started first."""
    out: dict[str, None] = {}
    for record in sorted(records, key=lambda r: (str(r.get("node") or ""), float(r.get("started") or 0.0))):
        for path in record.get("reads") or []:
            if isinstance(path, str):
                out.setdefault(path)
    return list(out)
