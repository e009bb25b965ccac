"""Finding and asking the CUDA-side shared libraries an image carries: NCCL, cuDNN and their duplicates.

Standard library only: the probe and the manifest use this inside images where nothing but python3 may exist.
Libraries are found where the dynamic loader would look (``LD_LIBRARY_PATH``, ``ldconfig -p``), where the NVIDIA pip
wheels put them (``site-packages/nvidia/<name>/lib`` of every ``sys.path`` entry) and in the usual CUDA prefixes;
versions are read by loading the library with ctypes and calling its own version function, which answers without a
GPU. Nothing here raises for a missing library: the caller decides whether absence is a failure.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fnmatch
import os
import re
import site
import subprocess
import sys
from collections.abc import Iterable

#: Directories CUDA base images and distribution packages install libraries into, searched after the loader's own.
STANDARD_DIRS = (
    "/usr/local/nvidia/lib64",
    "/usr/local/nvidia/lib",
    "/usr/local/cuda/lib64",
    "/usr/local/cuda/targets/x86_64-linux/lib",
    "/usr/local/cuda/targets/sbsa-linux/lib",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
)

#: The CUDA-side libraries whose duplicates waste image space or shadow each other at load time. Matched against
#: the file name; the soname is the name up to and including the major version.
DUPLICATE_SONAME = re.compile(
    r"^(lib(?:cudart|cudnn[A-Za-z0-9_]*|nccl|cublas(?:Lt)?|cufft[A-Za-z0-9_]*|cusparse[A-Za-z0-9_]*"
    r"|cusolver[A-Za-z0-9_]*|curand|nvrtc(?:-builtins)?|nvJitLink)\.so\.[0-9]+)(?:\.[0-9A-Za-z_.]+)?$"
)


# --------------------------------------------------------------------------------------------------------- finding


def site_packages_dirs() -> list[str]:
    """Every site-packages / dist-packages directory this interpreter knows, in sys.path order, de-duplicated."""
    found: list[str] = []
    candidates: list[str] = list(sys.path)
    try:
        candidates += site.getsitepackages()
    except AttributeError:  # pragma: no cover - very old virtualenv's site module
        pass
    try:
        candidates.append(site.getusersitepackages())
    except AttributeError:  # pragma: no cover
        pass
    for entry in candidates:
        if not entry:
            continue
        base = os.path.basename(os.path.normpath(entry))
        if base in ("site-packages", "dist-packages") and os.path.isdir(entry) and entry not in found:
            found.append(entry)
    return found


def _ldconfig_paths(pattern: str) -> list[str]:
    """Paths ``ldconfig -p`` lists whose file name matches the glob `pattern` (empty without ldconfig)."""
    for ldconfig in ("ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"):
        try:
            out = subprocess.run(
                [ldconfig, "-p"], capture_output=True, text=True, timeout=20, check=False
            ).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        paths = []
        for line in out.splitlines():
            name, arrow, path = line.strip().partition(" => ")
            if arrow and fnmatch.fnmatch(name.split(" ", 1)[0], pattern):
                paths.append(path.strip())
        return paths
    return []


def search_dirs(wheel_subdir: str | None = None) -> list[str]:
    """The directories searched, in order: LD_LIBRARY_PATH, the wheels' ``nvidia/<subdir>/lib``, the standard ones."""
    dirs: list[str] = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    if wheel_subdir:
        for sp in site_packages_dirs():
            dirs.append(os.path.join(sp, "nvidia", wheel_subdir, "lib"))
            # CUDA 13 wheels may share one prefix: site-packages/nvidia/cu13/lib.
            dirs.append(os.path.join(sp, "nvidia", "cu13", "lib"))
    dirs += STANDARD_DIRS
    unique: list[str] = []
    for d in dirs:
        if d not in unique:
            unique.append(d)
    return unique


def find_library(pattern: str, wheel_subdir: str | None = None, short_name: str | None = None) -> list[str]:
    """Every file matching the glob `pattern` (e.g. ``libnccl.so.2``), best candidate first, de-duplicated by realpath.

    Order: ``LD_LIBRARY_PATH``, the pip wheels' directory (`wheel_subdir`, e.g. ``nccl``), ``ldconfig -p``,
    ``ctypes.util.find_library(short_name)``, then the standard CUDA/distribution directories.
    """
    ordered: list[str] = []
    ld_dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    wheel_dirs = [d for d in search_dirs(wheel_subdir) if d not in ld_dirs and d not in STANDARD_DIRS]

    def scan(directories: Iterable[str]) -> None:
        for d in directories:
            try:
                names = sorted(os.listdir(d), reverse=True)  # libcudnn.so.9 before libcudnn.so.8
            except OSError:
                continue
            for name in names:
                if fnmatch.fnmatch(name, pattern):
                    ordered.append(os.path.join(d, name))

    scan(ld_dirs)
    scan(wheel_dirs)
    ordered += _ldconfig_paths(pattern)
    if short_name:
        found = ctypes.util.find_library(short_name)
        if found and fnmatch.fnmatch(os.path.basename(found), pattern):
            ordered.append(found if os.path.isabs(found) else found)
    scan(STANDARD_DIRS)
    result: list[str] = []
    seen: set[str] = set()
    for path in ordered:
        if os.path.isabs(path) and not os.path.exists(path):
            continue
        key = os.path.realpath(path) if os.path.isabs(path) else path
        if key not in seen:
            seen.add(key)
            result.append(path)
    return result


# ---------------------------------------------------------------------------------------------------------- versions


def decode_nccl_version(code: int) -> tuple[int, int, int]:
    """``ncclGetVersion``'s integer -> (major, minor, patch): 2.30.7 is 23007; NCCL before 2.9 used 1000s (2704)."""
    if code >= 10000:
        return code // 10000, (code % 10000) // 100, code % 100
    return code // 1000, (code % 1000) // 100, code % 100


def decode_cudnn_version(code: int) -> tuple[int, int, int]:
    """``cudnnGetVersion``'s integer -> (major, minor, patch): 9.x is major*10000+minor*100+patch, 8.x used 1000s."""
    if code >= 90000:
        return code // 10000, (code % 10000) // 100, code % 100
    return code // 1000, (code % 1000) // 100, code % 100


def _call_version(path: str, function: str, by_pointer: bool) -> int:
    """Load `path` and call its version function in a child interpreter.

    Isolated because a broken install can abort the caller: cuDNN 9's ``libcudnn.so.9`` is a shim that calls
    ``abort()`` ("Invalid handle. Cannot load symbol cudnnGetVersion") when ``libcudnn_graph.so.9`` is missing.
    """
    code = (
        "import ctypes, sys\n"
        "lib = ctypes.CDLL(sys.argv[1])\n"
        "fn = getattr(lib, sys.argv[2])\n"
        "if sys.argv[3] == '1':\n"
        "    v = ctypes.c_int(0)\n"
        "    fn.argtypes = [ctypes.POINTER(ctypes.c_int)]\n"
        "    fn.restype = ctypes.c_int\n"
        "    status = fn(ctypes.byref(v))\n"
        "    if status != 0:\n"
        "        sys.exit('%s returned error %d' % (sys.argv[2], status))\n"
        "    print(v.value)\n"
        "else:\n"
        "    fn.argtypes = []\n"
        "    fn.restype = ctypes.c_size_t\n"
        "    print(fn())\n"
    )
    try:
        proc = subprocess.run([sys.executable, "-c", code, path, function, "1" if by_pointer else "0"],
                              capture_output=True, text=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        raise OSError(f"{function} did not answer within 60 s") from None
    out = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not out:
        detail = " ".join((proc.stderr or "").split())[-300:]
        how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
        raise OSError(f"loading it and calling {function} failed ({how}): {detail or 'no output'}")
    try:
        return int(out[-1])
    except ValueError:
        raise OSError(f"{function} answered {out[-1]!r}") from None


def library_version(kind: str, path: str | None = None) -> dict:
    """Find and ask NCCL (`kind` "nccl") or cuDNN ("cudnn") its version; never raises.

    Returns ``{"found": bool, "path": str|None, "candidates": [...], "code": int|None, "version": "2.30.7"|None,
    "error": str|None}``; with `path` given only that file is tried.
    """
    if kind == "nccl":
        pattern, subdir, short, function, by_pointer, decode = (
            "libnccl.so.2", "nccl", "nccl", "ncclGetVersion", True, decode_nccl_version)
    elif kind == "cudnn":
        pattern, subdir, short, function, by_pointer, decode = (
            "libcudnn.so.[0-9]*", "cudnn", "cudnn", "cudnnGetVersion", False, decode_cudnn_version)
    else:
        raise ValueError(f"unknown library kind {kind!r}")
    candidates = [path] if path else find_library(pattern, subdir, short)
    result: dict = {"found": False, "path": None, "candidates": candidates, "code": None, "version": None,
                    "error": None}
    errors = []
    for candidate in candidates:
        try:
            code = _call_version(candidate, function, by_pointer)
        except (OSError, AttributeError) as err:
            errors.append(f"{candidate}: {err}")
            continue
        result.update(found=True, path=candidate, code=code, version=".".join(map(str, decode(code))))
        break
    if errors and not result["found"]:
        result["error"] = "; ".join(errors)
    return result


def nccl_version(path: str | None = None) -> dict:
    """`library_version` for ``libnccl.so.2``."""
    return library_version("nccl", path)


def cudnn_version(path: str | None = None) -> dict:
    """`library_version` for ``libcudnn.so.<major>``."""
    return library_version("cudnn", path)


# -------------------------------------------------------------------------------------------------------- duplicates


def default_scan_roots() -> list[str]:
    """The filesystem roots where CUDA libraries land in an image: system dirs, /opt and every site-packages."""
    roots = ["/usr/lib", "/usr/lib64", "/usr/local", "/opt"]
    roots += site_packages_dirs()
    return roots


def soname_of(filename: str) -> str | None:
    """``libcudnn.so.9.24.0`` -> ``libcudnn.so.9``; None for files that are not watched CUDA-side libraries."""
    match = DUPLICATE_SONAME.match(filename)
    return match.group(1) if match else None


def scan_duplicates(roots: Iterable[str] | None = None) -> dict:
    """Find CUDA/cuDNN/NCCL/cuBLAS... shared objects whose soname is present in two or more directories.

    Symlinks are resolved: a link to a file already seen (``libcudnn.so.9 -> libcudnn.so.9.24.0``) is the same copy,
    wherever it lives. Returns ``{"roots": [...], "duplicates": {soname: {"copies": [{"path", "size"}], "wasted":
    bytes}}, "wasted_bytes": total, "scanned_files": n}``; `wasted` counts all copies but the largest.
    """
    roots = list(default_scan_roots() if roots is None else roots)
    by_soname: dict[str, dict[str, int]] = {}  # soname -> realpath -> size
    seen_dirs: set[str] = set()
    scanned = 0
    for root in roots:
        if not os.path.isdir(root):
            continue
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            real_dir = os.path.realpath(dirpath)
            if real_dir in seen_dirs:  # overlapping roots (/usr/local and a site-packages under it)
                dirnames[:] = []
                continue
            seen_dirs.add(real_dir)
            dirnames[:] = [d for d in dirnames if d not in ("__pycache__", ".git")]
            for name in filenames:
                soname = soname_of(name)
                if soname is None:
                    continue
                path = os.path.join(dirpath, name)
                real = os.path.realpath(path)
                try:
                    size = os.stat(real).st_size
                except OSError:
                    continue  # dangling link
                scanned += 1
                real_soname = soname_of(os.path.basename(real)) or soname
                by_soname.setdefault(real_soname, {})[real] = size
    duplicates: dict[str, dict] = {}
    total = 0
    for soname in sorted(by_soname):
        copies = by_soname[soname]
        if len({os.path.dirname(p) for p in copies}) < 2:
            continue
        ordered = sorted(copies.items(), key=lambda c: (-c[1], c[0]))  # largest first, then by path
        listed = [{"path": p, "size": s} for p, s in ordered]
        wasted = sum(s for _, s in ordered[1:])
        duplicates[soname] = {"copies": listed, "wasted": wasted}
        total += wasted
    return {"roots": roots, "duplicates": duplicates, "wasted_bytes": total, "scanned_files": scanned}


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover
