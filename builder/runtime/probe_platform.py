"""The probe's checks of what a training platform relies on: the Reduction Server's files, a real hypertune metric
report, the cluster variables every platform injects, the GPUs the image sees, duplicated CUDA libraries.

Each check takes the expectations the host derived from the recipe (`probe.DEFAULT_EXPECT` merged with them) and
returns ``(status, reason, details)``; `probe` runs them beside its version checks.

Standard library only.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

from . import libs, shm
from .cause import reason as cause_of
from .contract import DRIVER_MIN_LABEL, REDUCTION_SERVER_PACKAGE
from .gpus import VISIBLE_VARIABLE, driver_version, gpu_view, nvidia_smi_gpus
from .report import FAILED, PASSED, SKIPPED, WARNING
from .shm import NodeShm
from .versions import version_at_least, versions_equal


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
    """google-reduction-server's files are installed where the variant wants it, or declared absent by the build
    (`--allow-missing`): absence is never taken for a pass."""
    want = (expect.get("reduction_server") or "none").lower()
    if want == "none":
        return SKIPPED, f"this variant does not use {REDUCTION_SERVER_PACKAGE}", {"present": None}
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
    """cloudml-hypertune really reports a metric: a random value written through it is read back from the metric
    file, as the tuning service reads it."""
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
            return FAILED, f"hypertune: reporting a metric raised ({cause_of(proc.stderr)})", {**details, "rc": proc.returncode}
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


def check_cluster_parsing(expect: dict) -> tuple[str, str, dict]:
    """The image's runtime parses every platform's sample environment (`platforms.samples`) into the world the
    platform means (role, ranks, rendezvous)."""
    try:
        from .cluster import parse_cluster  # noqa: PLC0415 - written alongside; imported only here
        from .platforms import elsewhere, samples  # noqa: PLC0415
    except ImportError as err:
        return FAILED, f"the runtime's cluster parser is not importable: {err}", {}
    details: dict = {}
    problems = []
    for label, env, want in samples():
        try:
            info = parse_cluster(elsewhere(env))  # not this container's own platform file
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
    return PASSED, f"parsed {len(details)} platform samples ({', '.join(details)})", details


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
    """The GPUs CUDA will enumerate here (`gpus.gpu_view`: ``CUDA_VISIBLE_DEVICES`` applied to nvidia-smi's list;
    libcuda's own count where nvidia-smi is missing), saying when nvidia-smi lists more than are visible."""
    names, smi_error = nvidia_smi_gpus()
    count, driver, cuda_error = _gpus_from_libcuda()
    view = gpu_view(os.environ, names, smi_error, look=False)
    details: dict = {"nvidia_smi": names, "nvidia_smi_error": smi_error, "libcuda_count": count,
                     "libcuda_error": cuda_error, "cuda_visible_devices": view.setting,
                     "listed": len(names) if names is not None else None}
    if driver:
        details["driver_cuda"] = f"{driver // 1000}.{(driver % 1000) // 10}"
    total = view.visible if names is not None else (count or 0)
    details["count"] = total
    if not total:
        if view.hidden:
            return (WARNING, f"0 GPU(s) visible of {view.hidden} listed by nvidia-smi: {VISIBLE_VARIABLE}="
                    f"{view.setting!r} hides them; the NCCL all-reduce cannot run", details)
        return SKIPPED, "no GPU", details
    seen = f"{total} GPU(s)" + (f" visible of {len(names or [])} listed ({VISIBLE_VARIABLE}={view.setting!r})"
                                if view.hidden else "")
    if names is not None and count is not None and cuda_error is None and count != total:
        return WARNING, f"{seen}, but libcuda's cuDeviceGetCount says {count}", details
    floor = expect.get("driver_min")
    if floor:
        version, why = driver_version()
        details.update(driver=version, driver_min=floor)
        short = driver_short(version, why, str(floor), expect.get("cuda"))
        if short:
            return FAILED, f"{seen}, but {short}", details
        seen += f", driver {version} (>= {floor})"
    return PASSED, seen + (f": {names[0].split(' (UUID')[0]}" if names and not view.hidden else ""), details


def driver_short(version: str | None, why: str | None, floor: str, cuda: object) -> str | None:
    """Why the NVIDIA driver `version` falls short of the `floor` the image's label states (None where it does
    not); a version that cannot be read falls short too: a check that could not look never passes."""
    if version is None:
        return f"the driver's version cannot be read ({why}); the image needs {floor}"
    if not version_at_least(version, floor):
        return f"NVIDIA driver {version} is older than the {floor} this image needs ({DRIVER_MIN_LABEL}, CUDA {cuda})"
    return None


def check_shm(expect: dict) -> tuple[str, str, dict]:
    """``/dev/shm`` against what this node's local ranks need: NCCL's container floor (`shm.NCCL_ADVICE`) from two
    ranks on; a failure names the platform's way to set it. A CUDA image's ranks with limited locked memory (NCCL
    also asks for ``--ulimit memlock=-1``) warn: the limit is the node's daemon's to give."""
    from .platforms import BY_NAME  # noqa: PLC0415 - as check_cluster_parsing: a broken one fails this check only

    ranks = int(expect.get("local_ranks") or 1)
    platform = expect.get("platform")
    row: NodeShm | None = getattr(BY_NAME[platform], "SHM", None) if platform in BY_NAME else None
    need, limit = shm.needed(ranks), shm.memlock_limit()
    details: dict = {"path": shm.PATH, "local_ranks": ranks, "needed": need, "memlock": limit, "platform": platform,
                     "source": shm.NCCL_SOURCE}
    try:
        size = details["bytes"] = shm.measure()
    except OSError as err:
        return (FAILED if ranks > 1 else SKIPPED), f"{shm.PATH}: {err}" + _shm_fix(row, platform, ranks), details
    if ranks <= 1:
        return SKIPPED, f"one local rank: NCCL's floor applies from two ({shm.PATH} here: {shm.show(size)})", details
    if size < need:
        return (FAILED, f"{shm.PATH} is {shm.show(size)}; {ranks} local ranks need at least {shm.show(need)} "
                f"(NCCL: {shm.NCCL_ADVICE})" + _shm_fix(row, platform, ranks), details)
    reason = f"{shm.PATH} {shm.show(size)} for {ranks} local ranks (NCCL's floor: {shm.show(need)})"
    if expect.get("cuda") and limit is not None:  # pinned and RDMA-registered buffers: the node's, not the image's
        return (WARNING, f"{reason}; locked memory is limited to {shm.show(limit)}, where NCCL's advice is none "
                "(--ulimit memlock=-1; a container engine gives only what its daemon has)", details)
    if expect.get("shm_replayed") and row is not None and row.setting is None:
        return (WARNING, f"{reason}, as the gate gave it: {platform} gives a job no way to set it ({row.default_said}); "
                f"`trainimg spec --platform {platform} --conformance` checks a node's own", details)
    return PASSED, reason, details


def _shm_fix(row: NodeShm | None, platform: str | None, ranks: int) -> str:
    """How this platform's job gets what `ranks` local ranks need, as the tail of a failure."""
    size = shm.show(shm.size_for(ranks))
    if row is None:
        return f"; give the container {size} (docker run --shm-size, and --ulimit memlock=-1)"
    if row.setting is not None:
        return f"; on {platform}: {row.setting} ({size})"
    return (f"; {platform} gives a job no way to set it ({row.default_said}): start fewer ranks per node, or set "
            f"NCCL_SHM_DISABLE=1 (NCCL then goes through the network; DataLoader workers still need it)")


def check_duplicate_libs(expect: dict, roots: list[str] | None = None) -> tuple[str, str, dict]:
    """No CUDA library (soname) lies in several directories, where two copies can load side by side; a warning
    names them and the bytes they waste."""
    scan = libs.scan_duplicates(roots)
    dups = scan["duplicates"]
    if not dups:
        return PASSED, f"no duplicated CUDA libraries ({scan['scanned_files']} files scanned)", scan
    worst = sorted(dups, key=lambda s: -dups[s]["wasted"])
    listing = ", ".join(f"{s} x{len(dups[s]['copies'])}" for s in worst[:5])
    more = f" and {len(worst) - 5} more" if len(worst) > 5 else ""
    return (WARNING, f"{len(dups)} soname(s) in several directories ({listing}{more}); "
            f"{libs.human_bytes(scan['wasted_bytes'])} wasted", scan)
