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
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

from . import libs
from .contract import CHECK_NAMES, EXIT_USAGE
from .gpus import nvidia_smi_gpus
from .versions import major_minor, parse_version, satisfies, spoken, version_at_least, versions_equal

PASSED, FAILED, SKIPPED, WARNING = "passed", "failed", "skipped", "warning"


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
}

REDUCTION_SERVER_PACKAGE = "google-reduction-server"


class CheckResult(Exception):
    """Raised inside a check to end it with a status (lets helpers end a check early)."""

    def __init__(self, status: str, reason: str, details: dict | None = None) -> None:
        super().__init__(reason)
        self.status, self.reason, self.details = status, reason, details or {}


# -------------------------------------------------------------------------------------------------------------- checks


def check_python(expect: dict) -> tuple[str, str, dict]:
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
        return FAILED, f"unknown framework {framework!r} (expected pytorch, tensorflow, jax or none)", details
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


def _dpkg(*args: str) -> subprocess.CompletedProcess | None:
    dpkg_query = shutil.which("dpkg-query")
    if not dpkg_query:
        return None
    try:
        return subprocess.run([dpkg_query, *args], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None


def reduction_server_state() -> dict:
    """Is google-reduction-server installed (dpkg) with all its listed files on disk?"""
    state: dict = {"present": False, "version": None, "files": 0, "missing_files": [], "libraries": []}
    query = _dpkg("-W", "-f", "${Version}", REDUCTION_SERVER_PACKAGE)
    if query is None:
        state["error"] = "dpkg-query is not available"
        return state
    if query.returncode != 0 or not query.stdout.strip():
        state["error"] = (query.stderr.strip() or f"{REDUCTION_SERVER_PACKAGE} is not installed").splitlines()[0]
        return state
    state["version"] = query.stdout.strip()
    listing = _dpkg("-L", REDUCTION_SERVER_PACKAGE)
    paths = []
    if listing is not None and listing.returncode == 0:
        for line in listing.stdout.splitlines():
            line = line.strip()
            # "diverted by ..."/"package diverts ..." lines describe diversions, not files; "/." is the root.
            if line.startswith("/") and line != "/.":
                paths.append(line)
    missing = [p for p in paths if not os.path.lexists(p)]
    state.update(files=len(paths), missing_files=missing[:50],
                 libraries=sorted(p for p in paths if ".so" in os.path.basename(p)))
    state["present"] = bool(paths) and not missing
    if not paths:
        state["error"] = f"dpkg lists no files for {REDUCTION_SERVER_PACKAGE}"
    return state


def check_reduction_server(expect: dict) -> tuple[str, str, dict]:
    want = (expect.get("reduction_server") or "none").lower()
    if want == "none":
        return SKIPPED, "this variant does not use google-reduction-server", {"present": None}
    state = reduction_server_state()
    if want == "absent":
        if state["present"]:
            return (WARNING, f"the build declared {REDUCTION_SERVER_PACKAGE} missing (--allow-missing) but "
                    f"version {state['version']} is installed; the image labels are stale", state)
        return (SKIPPED, f"absent: the build declared {REDUCTION_SERVER_PACKAGE} missing (--allow-missing)",
                {**state, "present": False})
    if want != "present":
        return FAILED, f"unknown reduction_server expectation {want!r} (present, absent or none)", state
    if state["present"]:
        return PASSED, f"{REDUCTION_SERVER_PACKAGE} {state['version']}: {state['files']} files present", state
    if state["version"] and state["missing_files"]:
        return (FAILED, f"{REDUCTION_SERVER_PACKAGE} {state['version']} is registered but "
                f"{len(state['missing_files'])} of its files are missing", state)
    return FAILED, f"{REDUCTION_SERVER_PACKAGE}: {state.get('error', 'not installed')}", state


_HYPERTUNE_SCRIPT = r"""
import json, os, sys
try:
    import hypertune
except Exception as err:
    print(json.dumps({"import_error": "%s: %s" % (type(err).__name__, err)}))
    sys.exit(0)
version = None
try:
    import importlib.metadata as md
    version = md.version("cloudml-hypertune")
except Exception:
    version = getattr(hypertune, "__version__", None)
value = float(sys.argv[1])
hypertune.HyperTune().report_hyperparameter_tuning_metric(
    hyperparameter_metric_tag="trainimg_probe", metric_value=value, global_step=1)
print(json.dumps({"version": version, "module": getattr(hypertune, "__file__", None)}))
"""


def check_hypertune(expect: dict) -> tuple[str, str, dict]:
    want = expect.get("hypertune")
    rng = random.SystemRandom()
    value = round(rng.uniform(0.001, 1000.0), 6)
    trial = str(rng.randrange(1, 10**6))
    details: dict = {"expected_version": want, "trial": trial, "value": value}
    with tempfile.TemporaryDirectory(prefix="trainimg-hypertune-") as tmp:
        metric_file = os.path.join(tmp, "metrics", "hptuning_metric")
        os.makedirs(os.path.dirname(metric_file))
        env = dict(os.environ, CLOUD_ML_HP_METRIC_FILE=metric_file, CLOUD_ML_TRIAL_ID=trial)
        try:
            proc = subprocess.run([sys.executable, "-c", _HYPERTUNE_SCRIPT, repr(value)], cwd=tmp, env=env,
                                  capture_output=True, text=True, timeout=120, check=False)
        except subprocess.TimeoutExpired:
            return FAILED, "hypertune: reporting a metric did not finish within 120 s", details
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        report = json.loads(lines[-1]) if lines else {}
        if proc.returncode != 0 or not lines:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            return FAILED, f"hypertune: reporting a metric raised ({tail})", {**details, "rc": proc.returncode}
        if "import_error" in report:
            return FAILED, f"hypertune is not importable: {report['import_error']}", details
        details.update(version=report.get("version"), module=report.get("module"))
        try:
            with open(metric_file, encoding="utf-8") as fh:
                text = fh.read()
        except OSError:
            text = ""
    records = []
    for line in text.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    details["records"] = len(records)
    match = [r for r in records if isinstance(r, dict) and "trainimg_probe" in r]
    if not match:
        return FAILED, "hypertune silent: the report wrote no 'trainimg_probe' metric to CLOUD_ML_HP_METRIC_FILE", details
    record = match[-1]
    try:
        got = float(record["trainimg_probe"])
    except (TypeError, ValueError):
        got = None
    details.update(got_value=record.get("trainimg_probe"), got_trial=record.get("trial"))
    if got is None or abs(got - value) > 1e-9 * max(1.0, abs(value)):
        return FAILED, f"hypertune silent: wrote {record.get('trainimg_probe')!r}, expected {value!r}", details
    if str(record.get("trial")) != trial:
        return FAILED, f"hypertune wrote trial {record.get('trial')!r}, expected CLOUD_ML_TRIAL_ID {trial}", details
    version = report.get("version")
    if want:
        if not version:
            return FAILED, f"hypertune works but its version is unknown (no cloudml-hypertune metadata); expected {want}", details
        if not versions_equal(version, want):
            return FAILED, f"cloudml-hypertune {version} is installed; the recipe asks for {want}", details
    return PASSED, f"cloudml-hypertune {version or '(version unknown)'} reported a metric for trial {trial}", details


def _cluster_samples() -> list[tuple[str, dict, dict]]:
    """(label, env, expected facts) for each platform's environment shape."""
    vertex = {
        "cluster": {
            "workerpool0": ["cmle-training-workerpool0-1a2b3c-0:2222"],
            "workerpool1": ["cmle-training-workerpool1-1a2b3c-0:2222", "cmle-training-workerpool1-1a2b3c-1:2222"],
            "workerpool2": ["cmle-training-workerpool2-1a2b3c-0:2222"],
            "workerpool3": ["cmle-training-workerpool3-1a2b3c-0:2222"],
        },
        "environment": "cloud",
        "task": {"type": "workerpool1", "index": 1},
        "job": '{"python_module":"","package_uris":[],"job_args":[]}',
    }
    aiplatform = {
        "cluster": {
            "master": ["master-0.job:2222"],
            "worker": ["worker-0.job:2222", "worker-1.job:2222", "worker-2.job:2222"],
            "ps": ["ps-0.job:2222"],
        },
        "environment": "cloud",
        "task": {"type": "worker", "index": 2, "trial": "7"},
    }
    uai = {
        "cluster": {
            "master": ["10.9.0.1:2222"],
            "worker": ["10.9.0.2:2222"],
            "ps": ["10.9.0.1:2223", "10.9.0.2:2223"],
        },
        "task": {"type": "ps", "index": 1},
    }
    return [
        ("vertex", {"CLUSTER_SPEC": json.dumps(vertex)},
         {"platform": "vertex", "role": "worker", "index": 1, "rank": 2, "world_size": 3,
          "master_addr": "cmle-training-workerpool0-1a2b3c-0", "master_port": 2222}),
        ("vertex_ps", {"CLUSTER_SPEC": json.dumps({**vertex, "task": {"type": "workerpool2", "index": 0}})},
         {"platform": "vertex", "role": "ps", "index": 0, "rank": None, "world_size": 3,
          "master_addr": "cmle-training-workerpool0-1a2b3c-0", "master_port": 2222}),
        ("aiplatform", {"CLUSTER_SPEC": json.dumps(aiplatform), "TF_CONFIG": json.dumps(aiplatform)},
         {"platform": "aiplatform", "role": "worker", "index": 2, "rank": 3, "world_size": 4,
          "master_addr": "master-0.job", "master_port": 2222}),
        ("uai", {"TF_CONFIG": json.dumps(uai)},
         {"platform": "tf_config", "role": "ps", "index": 1, "rank": None, "world_size": 2,
          "master_addr": "10.9.0.1", "master_port": 2222}),
        ("uai_master", {"TF_CONFIG": json.dumps({**uai, "task": {"type": "master", "index": 0}})},
         {"platform": "tf_config", "role": "chief", "index": 0, "rank": 0, "world_size": 2,
          "master_addr": "10.9.0.1", "master_port": 2222}),
    ]


def check_cluster_parsing(expect: dict) -> tuple[str, str, dict]:
    try:
        from .cluster import parse_cluster  # noqa: PLC0415 - written alongside; imported only here
    except ImportError as err:
        return FAILED, f"the runtime's cluster parser is not importable: {err}", {}
    details: dict = {}
    problems = []
    for label, env, want in _cluster_samples():
        try:
            info = parse_cluster(env)
        except Exception as err:  # noqa: BLE001 - any failure to parse a platform's sample is the finding
            problems.append(f"{label}: {type(err).__name__}: {err}")
            details[label] = {"error": str(err)}
            continue
        got = {key: getattr(info, key, None) for key in want}
        details[label] = got
        wrong = [f"{k}={got[k]!r} (expected {v!r})" for k, v in want.items() if got[k] != v]
        if wrong:
            problems.append(f"{label}: " + ", ".join(wrong))
    if problems:
        return FAILED, "cluster parsing: " + "; ".join(problems), details
    return PASSED, f"parsed {len(details)} platform samples (Vertex, AI Platform, UAI)", details


def _gpus_from_libcuda() -> tuple[int | None, int | None, str | None]:
    """(device count, driver CUDA version code, error) through libcuda.so.1."""
    import ctypes  # noqa: PLC0415

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as err:
        return None, None, f"libcuda.so.1: {err}"
    status = cuda.cuInit(0)
    driver = ctypes.c_int(0)
    cuda.cuDriverGetVersion(ctypes.byref(driver))
    if status != 0:
        return 0, driver.value or None, f"cuInit returned {status}"
    count = ctypes.c_int(0)
    status = cuda.cuDeviceGetCount(ctypes.byref(count))
    if status != 0:
        return 0, driver.value or None, f"cuDeviceGetCount returned {status}"
    return count.value, driver.value or None, None


def check_gpu(expect: dict) -> tuple[str, str, dict]:
    names, smi_error = nvidia_smi_gpus()
    count, driver, cuda_error = _gpus_from_libcuda()
    details: dict = {"nvidia_smi": names, "nvidia_smi_error": smi_error, "libcuda_count": count,
                     "libcuda_error": cuda_error}
    if driver:
        details["driver_cuda"] = f"{driver // 1000}.{(driver % 1000) // 10}"
    total = len(names) if names else (count or 0)
    details["count"] = total
    if not total:
        return SKIPPED, "no GPU", details
    want = expect.get("cuda")
    if want and driver:
        need = parse_version(str(want))[0]
        have = (driver // 1000, (driver % 1000) // 10)
        if have < need[:2] + (0,) * (2 - len(need[:2])):
            return (WARNING, f"{total} GPU(s), but the driver supports CUDA {details['driver_cuda']} and the image "
                    f"is built for CUDA {want} (needs cuda-compat or a newer driver)", details)
    return PASSED, f"{total} GPU(s)" + (f": {names[0].split(' (UUID')[0]}" if names else ""), details


def check_duplicate_libs(expect: dict, roots: list[str] | None = None) -> tuple[str, str, dict]:
    scan = libs.scan_duplicates(roots)
    dups = scan["duplicates"]
    if not dups:
        return PASSED, f"no duplicated CUDA libraries ({scan['scanned_files']} files scanned)", scan
    worst = sorted(dups, key=lambda s: -dups[s]["wasted"])
    listing = ", ".join(f"{s} x{len(dups[s]['copies'])}" for s in worst[:5])
    more = f" and {len(worst) - 5} more" if len(worst) > 5 else ""
    return (WARNING, f"{len(dups)} soname(s) in several directories ({listing}{more}); "
            f"{libs.human_bytes(scan['wasted_bytes'])} wasted", scan)


CHECKS: dict[str, Callable[..., tuple[str, str, dict]]] = {
    "python": check_python,
    "framework": check_framework,
    "nccl": check_nccl,
    "cudnn": check_cudnn,
    "reduction_server": check_reduction_server,
    "hypertune": check_hypertune,
    "cluster_parsing": check_cluster_parsing,
    "gpu": check_gpu,
    "duplicate_libs": check_duplicate_libs,
}


def run_check(name: str, expect: dict, **options: object) -> dict:
    """Run one check; an exception inside it becomes a ``failed`` result naming the exception."""
    start = time.monotonic()
    try:
        fn = CHECKS[name]
        if name == "duplicate_libs":
            status, reason, details = fn(expect, roots=options.get("roots"))
        else:
            status, reason, details = fn(expect)
    except CheckResult as result:
        status, reason, details = result.status, result.reason, result.details
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
