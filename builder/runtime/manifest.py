"""``python -m trainimg_runtime manifest [--write PATH]``: what is ACTUALLY installed in this image.

Not the recipe: the interpreter's version, every ``importlib.metadata`` distribution, the frameworks' versions and
the CUDA they were built for (read from their installed files, without importing them, so this stays fast), the
NCCL/cuDNN versions their libraries answer through ctypes, the dpkg packages of the CUDA-side stack and
google-reduction-server, and the components the build declared absent (``/etc/trainimg/absent/<name>``, one empty
file each, written when ``--allow-missing`` applied). Output is JSON with sorted keys and sorted lists: the same
image gives the same bytes.

Standard library only.
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import importlib.util
import json
import mmap
import os
import platform
import re
import shutil
import subprocess
import sys

from . import libs
from .contract import ABSENT_DIR
from .frameworks import FRAMEWORKS, JAX, PYTORCH, TENSORFLOW

DPKG_PATTERN = re.compile(r"google-reduction-server|libnccl|cuda-cudart|libcudnn")
SCHEMA_VERSION = 1


def distribution_key(name: str) -> str:
    """A distribution's name as PEP 503 normalises it (``tensorflow_cpu``, ``Tensorflow.CPU`` -> ``tensorflow-cpu``):
    the one way trainimg compares names that wheels, pip and requirements each spell their own way."""
    return re.sub(r"[-_.]+", "-", name).lower()


def distributions() -> dict[str, str]:
    """Installed distributions, name -> version, sorted by lower-cased name; the first on sys.path wins."""
    found: dict[str, str] = {}
    keys: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        try:
            name = dist.metadata["Name"]
        except Exception:  # noqa: BLE001 - a broken METADATA file must not end the manifest
            name = None
        if not name:
            continue
        key = distribution_key(name)
        if key in keys:
            continue
        keys[key] = name
        found[name] = dist.version or ""
    return dict(sorted(found.items(), key=lambda kv: kv[0].lower()))


def _dist_version(*names: str) -> tuple[str | None, str | None]:
    """(distribution name, version) of the first of `names` installed."""
    for name in names:
        try:
            return name, importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None, None


def _package_dir(module: str) -> str | None:
    """The directory of a top-level package, found without importing it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return list(spec.submodule_search_locations)[0]
    return os.path.dirname(spec.origin) if spec.origin else None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError:
        return None


def torch_build(text: str | None) -> dict:
    """``torch/version.py``'s text -> {"version", "cuda", "hip"} by parsing its assignments (no import)."""
    result: dict = {"version": None, "cuda": None, "hip": None}
    if not text:
        return result
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return result
    wanted = {"__version__": "version", "cuda": "cuda", "hip": "hip"}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        for target in targets:
            if isinstance(target, ast.Name) and target.id in wanted:
                try:
                    result[wanted[target.id]] = ast.literal_eval(value)
                except ValueError:
                    pass
    return result


def tensorflow_build(text: str | None) -> dict:
    """``tensorflow/python/platform/build_info.py``'s text -> its build_info dict (no import)."""
    if not text:
        return {}
    match = re.search(r"build_info\s*=\s*collections\.OrderedDict\((\[.*?\])\)", text, re.S)
    try:
        if match:
            return {k: v for k, v in ast.literal_eval(match.group(1))}
        match = re.search(r"build_info\s*=\s*(\{.*?\})\s*$", text, re.S | re.M)
        if match:
            return dict(ast.literal_eval(match.group(1)))
    except (ValueError, SyntaxError):
        pass
    return {}


def torch_archs(torch_dir: str) -> list[str] | None:
    """The architectures torch's CUDA build holds kernels for, as ``torch.cuda.get_arch_list()`` names them, read
    without importing torch (no GPU, no CUDA libraries needed): the CUDA_ARCH_FLAGS string compiled into
    ``lib/libtorch_cuda.so``, which ``torch._C._cuda_getArchFlags()`` returns. None for a CPU build."""
    path = os.path.join(torch_dir, "lib", "libtorch_cuda.so")
    try:
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            at = data.find(b"-gencode;arch=")
            flags = data[at:at + 4096].split(b"\0")[0].decode("ascii", "replace") if at >= 0 else ""
    except (OSError, ValueError):
        return None
    return arch_list(flags) or None


def arch_list(flags: str) -> list[str]:
    """``-gencode;arch=compute_90,code=sm_90;-gencode;arch=compute_120,code=compute_120`` -> ``["sm_90",
    "compute_120"]``: each ``code=`` target once, in the build's order (``compute_XY`` targets are PTX)."""
    return list(dict.fromkeys(re.findall(r"code=\[?((?:sm|compute)_[0-9]+[a-z]?)", flags)))


def frameworks() -> dict:
    """Framework versions and CUDA build facts, from metadata and installed files only."""
    out: dict = {}
    dist, version = _dist_version(*FRAMEWORKS[PYTORCH].distributions)
    if version:
        info: dict[str, object] = {"distribution": dist, "version": version}
        pkg = _package_dir(FRAMEWORKS[PYTORCH].module)
        if pkg:
            info.update({k: v for k, v in torch_build(_read(os.path.join(pkg, "version.py"))).items()
                         if k != "version"})
            archs = torch_archs(pkg)
            if archs:  # a CUDA build: the architectures it holds kernels for (a CPU build's manifest is unchanged)
                info["archs"] = archs
        out[PYTORCH] = info
    dist, version = _dist_version(*FRAMEWORKS[TENSORFLOW].distributions)
    if version:
        info = {"distribution": dist, "version": version}
        pkg = _package_dir(FRAMEWORKS[TENSORFLOW].module)
        if pkg:
            build = tensorflow_build(_read(os.path.join(pkg, "python", "platform", "build_info.py")))
            info["build_info"] = {k: v for k, v in sorted(build.items()) if isinstance(v, (str, bool, int))}
            info["cuda"] = build.get("cuda_version") if build.get("is_cuda_build") else None
        out[TENSORFLOW] = info
    dist, version = _dist_version(*FRAMEWORKS[JAX].distributions)
    if version:
        plugins = {}
        for name in ("jax-cuda13-plugin", "jax-cuda13-pjrt", "jax-cuda12-plugin", "jax-cuda12-pjrt"):
            _, v = _dist_version(name)
            if v:
                plugins[name] = v
        first = re.search(r"cuda([0-9]+)", next(iter(plugins), ""))  # every plugin name spells its CUDA major
        cuda = first.group(1) if first else None
        out[JAX] = {"distribution": dist, "version": version, "jaxlib": _dist_version("jaxlib")[1],
                      "cuda_plugins": plugins, "cuda": cuda}
    return out


def dpkg_packages(pattern: re.Pattern = DPKG_PATTERN) -> dict[str, str] | None:
    """Installed dpkg packages whose name matches `pattern`, name -> version; None without dpkg."""
    dpkg_query = shutil.which("dpkg-query")
    if not dpkg_query:
        return None
    try:
        proc = subprocess.run([dpkg_query, "-W", "-f", "${Package}\t${Version}\t${db:Status-Abbrev}\n"],
                              capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    found = {}
    for line in proc.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) < 2:
            continue
        name, version = parts[0], parts[1]
        status = parts[2].strip() if len(parts) > 2 else "ii"
        if status and not status.startswith("i"):  # removed, config-files only
            continue
        if pattern.search(name) and version:
            found[name] = version
    return dict(sorted(found.items()))


def absent_components(directory: str = ABSENT_DIR) -> list[str]:
    """Names the build declared missing: one file per component in `directory`."""
    try:
        return sorted(n for n in os.listdir(directory) if not n.startswith("."))
    except OSError:
        return []


def _library(kind: str) -> dict:
    found = libs.library_version(kind)
    return {"version": found["version"], "path": found["path"]} if found["found"] else {"version": None,
                                                                                        "path": None}


def build_manifest(absent_dir: str = ABSENT_DIR) -> dict:
    """Everything `main` prints, as a dict."""
    return {
        "schema": SCHEMA_VERSION,
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
        },
        "distributions": distributions(),
        "frameworks": frameworks(),
        "libraries": {"nccl": _library("nccl"), "cudnn": _library("cudnn")},
        "dpkg": dpkg_packages(),
        "absent": absent_components(absent_dir),
    }


def render(manifest: dict) -> str:
    return json.dumps(manifest, sort_keys=True, indent=2) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainimg_runtime manifest",
                                     description="Print (or write) the image's installed-software manifest.")
    parser.add_argument("--write", metavar="PATH", help="write the JSON here (parents created) instead of stdout")
    parser.add_argument("--absent-dir", default=ABSENT_DIR, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    text = render(build_manifest(args.absent_dir))
    if args.write:
        parent = os.path.dirname(os.path.abspath(args.write))
        os.makedirs(parent, exist_ok=True)
        tmp = f"{args.write}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, args.write)
        print(f"manifest: wrote {args.write}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
