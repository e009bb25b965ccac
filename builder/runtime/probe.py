"""``python -m trainimg_runtime probe --expect JSON``: does the image hold what its recipe promised?

Runs inside the built image before push. Each check compares one fact the image can answer for itself (Python
version, framework version and CUDA build, NCCL/cuDNN versions through their own version calls, google-reduction-
server's files, a real hypertune metric report, cluster parsing, visible GPUs, duplicated CUDA libraries) with the
expectation the host derived from the recipe, and returns::

    {"name": str, "status": "passed"|"failed"|"skipped"|"warning", "reason": str, "duration": float, "details": {}}

**Skipped is never passed**: whatever was not actually verified is ``skipped`` with the reason why. The verb prints
one JSON list on stdout (nothing else goes to stdout: file descriptor 1 points at stderr while checks run, so a
framework's C++ logging cannot corrupt the document) and exits 0 unless a check failed.

Standard library only; a framework is imported lazily inside the check that exercises it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator

from . import libs
from .contract import CHECK_NAMES, EXIT_USAGE
from .frameworks import RECIPE_NAMES
from .probe_platform import (check_cluster_parsing, check_duplicate_libs, check_gpu, check_hypertune,
                             check_reduction_server, check_shm)
from .report import FAILED, PASSED, SKIPPED, WARNING
from .versions import major_minor, parse_version, satisfies, spoken, version_at_least, versions_equal



DEFAULT_EXPECT: dict = {
    "python": None,
    "framework": "none",
    "framework_version": None,
    "cuda": None,
    "cudnn": None,
    "nccl": None,
    "nccl_minimum": None,
    "nccl_built": None,
    "cudnn_built": None,
    "reduction_server": "none",
    "hypertune": None,
    "driver_min": None,  # the NVIDIA driver the image needs (its label), which the gpu check holds the node to
    "local_ranks": 1,  # the NCCL ranks this node runs (`shm.local_ranks`), whose floor the shm check holds
    "platform": None,  # whose job runs here: the shm check names the platform's way to set /dev/shm
    "shm_replayed": False,  # True where /dev/shm is the gate's choice, not a node's (trainimg test)
}

# -------------------------------------------------------------------------------------------------------------- checks


def check_python(expect: dict) -> tuple[str, str, dict]:
    """The interpreter on PATH is the Python major.minor the recipe asks for."""
    want = expect.get("python")
    have = f"{sys.version_info.major}.{sys.version_info.minor}"
    details = {"version": sys.version.split()[0], "executable": sys.executable, "expected": want}
    if not want:
        return SKIPPED, "no Python version expected", details
    if major_minor(str(want)) == have:
        return PASSED, f"Python {have}", details
    return FAILED, f"Python {have} found; the recipe asks for {want}", details


def _framework_cuda_plugin_jax() -> list[str]:
    """Installed JAX CUDA plugins (found, not imported)."""
    names = []
    for mod in ("jax_cuda13_plugin", "jax_cuda12_plugin", "jax_plugins.xla_cuda13", "jax_plugins.xla_cuda12"):
        try:
            if importlib.util.find_spec(mod) is not None:
                names.append(mod)
        except (ImportError, ValueError):
            continue
    return names


def check_framework(expect: dict) -> tuple[str, str, dict]:
    """The framework imports, at the recipe's version, built for the base's CUDA (or CPU-only for a CPU variant)."""
    framework = (expect.get("framework") or "none").lower()
    want = expect.get("framework_version")
    cuda = expect.get("cuda")
    details: dict = {"framework": framework, "expected_version": want, "expected_cuda": cuda}
    if framework in ("none", ""):
        return SKIPPED, "framework 'none': nothing to import", details
    build_cuda: str | None = None  # the CUDA major.minor the framework was built for; None = CPU-only
    cuda_known = True  # False when the framework cannot tell minor versions (JAX plugins name a major only)
    if framework in ("pytorch", "torch"):
        import torch  # noqa: PLC0415 - lazily, only where this check runs

        name, version = "torch", torch.__version__
        build_cuda = getattr(torch.version, "cuda", None)
        details["hip"] = getattr(torch.version, "hip", None)
    elif framework in ("tensorflow", "tf"):
        import tensorflow as tf  # noqa: PLC0415

        name, version = "tensorflow", tf.__version__
        info = dict(tf.sysconfig.get_build_info())
        details["build_info"] = {k: v for k, v in info.items() if isinstance(v, (str, bool, int))}
        build_cuda = info.get("cuda_version") if info.get("is_cuda_build") else None
    elif framework == "jax":
        import jax  # noqa: PLC0415

        name, version = "jax", jax.__version__
        try:
            details["jaxlib"] = importlib.metadata.version("jaxlib")
        except importlib.metadata.PackageNotFoundError:
            details["jaxlib"] = None
        plugins = _framework_cuda_plugin_jax()
        details["cuda_plugins"] = plugins
        major = re.search(r"cuda([0-9]+)", plugins[0]) if plugins else None
        if major:
            build_cuda = major.group(1)
            cuda_known = False
    else:
        return FAILED, f"unknown framework {framework!r} (expected one of {', '.join(RECIPE_NAMES)})", details
    details.update(version=version, build_cuda=build_cuda)
    problems = []
    if want and not versions_equal(version, want):
        problems.append(f"{name} {version} is installed; the recipe asks for {want}")
    if cuda:
        want_cuda = str(major_minor(str(cuda)))
        if not build_cuda:
            problems.append(f"{name} {version} is a CPU-only build; the recipe asks for CUDA {cuda}")
        elif cuda_known and not _runs_on(str(major_minor(build_cuda)), want_cuda):
            problems.append(f"{name} {version} is built for CUDA {build_cuda}; the recipe's base is CUDA {cuda} "
                            f"(a build runs on its own CUDA major, from its own minor up)")
        elif not cuda_known and str(build_cuda) != want_cuda.split(".")[0]:
            problems.append(f"{name} {version} has a CUDA {build_cuda} plugin; the recipe asks for CUDA {cuda}")
    if problems:
        return FAILED, "; ".join(problems), details
    build = f"CUDA {build_cuda}" if build_cuda else "CPU"
    if cuda and build_cuda and cuda_known and major_minor(build_cuda) != major_minor(str(cuda)):
        build += f", on a CUDA {cuda} base"
    if not want:
        return PASSED, f"{name} {version} imports ({build} build); no version expected", details
    return PASSED, f"{name} {version} ({build} build)", details


def _runs_on(build: str, line: str) -> bool:
    """CUDA minor-version compatibility: a framework built for 12.5 runs on a 12.6 base, not on 13.0 or 12.4."""
    b, l_ = parse_version(build)[0] + (0,), parse_version(line)[0] + (0,)
    return b[0] == l_[0] and b[:2] <= l_[:2]


def _gpu_variant(expect: dict) -> bool:
    return bool(expect.get("cuda"))


def _against(kind: str, version: str, path: str, want: str | None, built: str | None,
             width: int | None = None) -> tuple[str, str]:
    """Compare a loaded library with the recipe's constraint (pin or range) and the version the build read back
    (the image's labels); the message names the loaded version, the constraint and the recorded one."""
    problems = []
    if want and not satisfies(version, want, width):
        problems.append(f"{kind} {version} loaded from {path}; the recipe asks for {spoken(want)}")
    if built and not satisfies(version, built, width):
        problems.append(f"{kind} {version} loaded from {path}; the build recorded {built}")
    if problems:
        return FAILED, "; ".join(problems)
    asked = f"; the recipe asks for {spoken(want)}" if want else ""
    return PASSED, f"{kind} {version} ({path}){asked}"


def check_nccl(expect: dict) -> tuple[str, str, dict]:
    """The NCCL the loader finds, by its own version call, against the recipe's pin or range, the version the build
    recorded and the Reduction Server's floor; a CPU variant has none to check."""
    want = expect.get("nccl")
    minimum = expect.get("nccl_minimum")
    if not want and not _gpu_variant(expect):
        return SKIPPED, "CPU variant: no NCCL", {"expected": None}
    found = libs.nccl_version()
    details = {"expected": want, "built": expect.get("nccl_built"), "minimum": minimum, **found}
    if not found["found"]:
        why = found["error"] or "libnccl.so.2 not found on the loader path, LD_LIBRARY_PATH or nvidia/nccl/lib"
        return FAILED, f"NCCL: {why}", details
    version = found["version"]
    if minimum and not version_at_least(version, minimum):
        return FAILED, f"NCCL {version} is older than the minimum {minimum}", details
    status, reason = _against("NCCL", version, found["path"], want, expect.get("nccl_built"))
    return status, reason + (f" (>= {minimum} for the Reduction Server)" if minimum and status == PASSED else ""), details


def check_cudnn(expect: dict) -> tuple[str, str, dict]:
    """The cuDNN the loader finds, by its own version call, against the recipe's pin or range and the version the
    build recorded."""
    want = expect.get("cudnn")
    if not want:
        return SKIPPED, "no cuDNN expected" + (" (CPU variant)" if not _gpu_variant(expect) else ""), {}
    found = libs.cudnn_version()
    details = {"expected": want, "built": expect.get("cudnn_built"), **found}
    if not found["found"]:
        why = found["error"] or "libcudnn.so.* not found on the loader path, LD_LIBRARY_PATH or nvidia/cudnn/lib"
        return FAILED, f"cuDNN: {why}", details
    # cudnnGetVersion answers major.minor.patch; a recipe's 9.24.0.43 adds a build number it cannot see.
    status, reason = _against("cuDNN", found["version"], found["path"], want, expect.get("cudnn_built"), width=3)
    return status, reason, details


# The names (and the report's order) are the contract's `CHECK_NAMES`, which the host reads too; each name's check is
# the function ``check_<name>``, so a name without its function fails at import (KeyError), not in an image.
_BY_NAME = {check.__name__.removeprefix("check_"): check for check in (
    check_python, check_framework, check_nccl, check_cudnn, check_reduction_server, check_hypertune,
    check_cluster_parsing, check_gpu, check_shm, check_duplicate_libs)}
CHECKS: dict[str, Callable[..., tuple[str, str, dict]]] = {name: _BY_NAME[name] for name in CHECK_NAMES}


def run_check(name: str, expect: dict, **options: object) -> dict:
    """Run one check; an exception inside it becomes a ``failed`` result naming the exception."""
    start = time.monotonic()
    try:
        fn = CHECKS[name]
        if name == "duplicate_libs":
            status, reason, details = fn(expect, roots=options.get("roots"))
        else:
            status, reason, details = fn(expect)
    except Exception as err:  # noqa: BLE001 - one broken check must not hide the others
        status, reason, details = FAILED, f"{name} check raised {type(err).__name__}: {err}", {}
    return {"name": name, "status": status, "reason": reason, "duration": round(time.monotonic() - start, 4),
            "details": details}


def run_checks(expect: dict, only: set[str] | None = None, roots: list[str] | None = None) -> list[dict]:
    """Run every check (or those named in `only`) against `expect`; results in `CHECK_NAMES` order."""
    merged = {**DEFAULT_EXPECT, **(expect or {})}
    if only is not None:
        unknown = set(only) - set(CHECK_NAMES)
        if unknown:
            raise ValueError(f"unknown check(s): {', '.join(sorted(unknown))} (known: {', '.join(CHECK_NAMES)})")
    return [run_check(name, merged, roots=roots) for name in CHECK_NAMES if only is None or name in only]


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Point file descriptor 1 (and sys.stdout) at stderr, so nothing but the JSON document reaches stdout."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def summary_lines(results: list[dict]) -> list[str]:
    marks = {PASSED: "ok  ", FAILED: "FAIL", SKIPPED: "skip", WARNING: "warn"}
    return [f"[{marks.get(r['status'], r['status'])}] {r['name']:<17} {r['reason']}" for r in results]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainimg_runtime probe",
                                     description="Check the image against what its recipe promised.")
    parser.add_argument("--expect", default="{}", help="JSON object of expectations (or @file)")
    parser.add_argument("--checks", default=None, help=f"comma-separated subset of: {','.join(CHECK_NAMES)}")
    parser.add_argument("--roots", default=None,
                        help="duplicate_libs: os.pathsep- or comma-separated roots to scan instead of the defaults")
    parser.add_argument("--json", action="store_true", help="JSON only (no human summary on stderr)")
    args = parser.parse_args(argv)
    text = args.expect
    try:
        if text.startswith("@"):
            with open(text[1:], encoding="utf-8") as fh:
                text = fh.read()
        expect = json.loads(text)
        if not isinstance(expect, dict):
            raise ValueError("--expect must be a JSON object")
    except (OSError, ValueError) as err:
        print(f"probe: bad --expect: {err}", file=sys.stderr)
        return EXIT_USAGE
    only = {c.strip() for c in args.checks.split(",") if c.strip()} if args.checks else None
    roots = [r for r in re.split(r"[,%s]" % re.escape(os.pathsep), args.roots) if r] if args.roots else None
    try:
        with stdout_to_stderr():
            results = run_checks(expect, only, roots=roots)
    except ValueError as err:
        print(f"probe: {err}", file=sys.stderr)
        return EXIT_USAGE
    sys.stdout.write(json.dumps(results, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()
    if not args.json:
        for line in summary_lines(results):
            print(line, file=sys.stderr)
    return 1 if any(r["status"] == FAILED for r in results) else 0
