"""The Python parts of the GPU device run (`benchmarks/gpu_device.sh`, `benchmarks/gpu_selftest.sh`).

The device machine has Python, the frameworks and trainimg's runtime carried as ``trainimg_runtime``, nothing else
of the project: this file is standard library only and is run by path. Each ``check`` reads what one step of the
run wrote and says, in one line, whether it shows what that step must show (``ok ...`` / ``FAIL ...``, exit 0/1);
``labels`` writes the labels file an image of a framework would carry; ``summary`` gathers the steps' verdicts.

    python3 benchmarks/gpu_device.py versions
    python3 benchmarks/gpu_device.py labels pytorch|jax
    python3 benchmarks/gpu_device.py gate SELFTEST_REPORT.json
    python3 benchmarks/gpu_device.py check KIND ARGS...      (KIND: see CHECKS)
    python3 benchmarks/gpu_device.py summary OUT_DIR
"""

from __future__ import annotations

import importlib.metadata as md
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The GPU checks a GPU machine must pass, never skip (the gate of gpu_selftest.sh).
GPU_CHECKS = ("gpu", "framework", "nccl", "cudnn")
Verdict = tuple[bool, str]


def _version(*names: str) -> str | None:
    for name in names:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            pass
    return None


def labels(framework: str) -> dict[str, str]:
    """The labels a trainimg image of `framework` would carry, from what is installed here (CUDA 13 wheels)."""
    out = {"trainimg.framework": framework, "trainimg.variant": f"{framework}-native-gpu",
           "trainimg.recipe.python": "%d.%d" % sys.version_info[:2], "trainimg.recipe.cuda": "13.0",
           "trainimg.reduction-server": "none"}
    found = {"framework": _version("torch") if framework == "pytorch" else _version("jax"),
             "nccl": _version("nvidia-nccl-cu13"), "cudnn": _version("nvidia-cudnn-cu13")}
    out.update({f"trainimg.recipe.{k}": v for k, v in found.items() if v})
    return out


#: The packages whose versions a device run records (versions.txt).
PACKAGES = ("torch", "jax", "jaxlib", "jax-cuda13-plugin", "nvidia-nccl-cu13", "nvidia-cudnn-cu13")


def versions() -> list[str]:
    """Python, the packages of `PACKAGES` and what torch says of CUDA, NCCL and cuDNN (versions.txt)."""
    lines = [f"python {sys.version.split()[0]} {sys.executable}"]
    lines += [f"{name} {_version(name) or 'missing'}" for name in PACKAGES]
    try:
        import torch  # noqa: PLC0415

        lines.append(f"torch.cuda {torch.version.cuda} available {torch.cuda.is_available()} nccl "
                     f"{torch.cuda.nccl.version() if torch.cuda.is_available() else None} cudnn "
                     f"{torch.backends.cudnn.version()}")
    except Exception as err:  # noqa: BLE001 - recorded, not fatal
        lines.append(f"torch: {type(err).__name__}: {err}")
    return lines


def _checks(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for suite in report.get("suites", []) for c in suite.get("checks", [])}


def _load(path: str) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        return {"error": f"{path}: {err}"}


def gate_failures(report: dict[str, Any]) -> list[str]:
    """``name status: reason`` of each GPU check or NCCL all-reduce of a selftest report that did not pass
    (skipped is not passed)."""
    checks = _checks(report)
    wanted = [checks.get(n, {"name": n, "status": "missing", "reason": ""}) for n in GPU_CHECKS]
    nccl = [c for n, c in checks.items() if n.startswith("allreduce_nccl")]
    wanted += nccl or [{"name": "allreduce_nccl", "status": "missing", "reason": "no NCCL all-reduce ran"}]
    return [f"{c['name']} {c['status']}: {c['reason']}" for c in wanted if c["status"] != "passed"]


def check_gate(report_path: str) -> Verdict:
    """Every GPU check and every NCCL all-reduce of a selftest report passed."""
    report = _load(report_path)
    if "error" in report:
        return False, f"no report: {report['error']}"
    bad = gate_failures(report)
    if bad:
        return False, "; ".join(bad)
    checks = _checks(report)
    nccl = ", ".join(n for n in checks if n.startswith("allreduce_nccl"))
    return True, f"{', '.join(GPU_CHECKS)} and {nccl} passed ({checks['gpu']['reason']})"


def check_cluster(log_path: str) -> Verdict:
    """``selftest --cluster`` under the launcher: its one-line JSON report has allreduce_cluster passed."""
    for line in reversed(Path(log_path).read_text(errors="replace").splitlines()):
        if line.startswith("{") and '"suites"' in line:
            check = _checks(json.loads(line)).get("allreduce_cluster", {})
            return check.get("status") == "passed", f"allreduce_cluster {check.get('status')}: {check.get('reason')}"
    return False, "no JSON report in the log"


def check_line(log_path: str, pattern: str) -> Verdict:
    """The log has a line matching `pattern` (a user's program said it ran)."""
    for line in Path(log_path).read_text(errors="replace").splitlines():
        if re.search(pattern, line):
            return True, line.strip()[:200]
    return False, f"no line matching {pattern!r}"


def check_refused(rc: str, log_path: str, nproc: str, gpus: str) -> Verdict:
    """A misuse refused up front: exit 2, one line naming both numbers (processes and GPUs)."""
    lines = [ln for ln in Path(log_path).read_text(errors="replace").splitlines() if ln.strip()]
    named = [ln for ln in lines if f"--nproc-per-node {nproc}:" in ln and f"has {gpus} GPU(s)" in ln]
    if rc != "2" or not named:
        last = lines[-1] if lines else "no output"
        return False, f"exit {rc}, not refused naming {nproc} processes and {gpus} GPU(s): {last[:200]}"
    return True, named[0].strip()


def check_hidden(report_path: str) -> Verdict:
    """``CUDA_VISIBLE_DEVICES=-1``: the gpu check counts 0 visible and the all-reduce agrees (gloo, passed)."""
    report = _load(report_path)
    if "error" in report:
        return False, f"no report: {report['error']}"
    checks = _checks(report)
    gpu = checks.get("gpu", {})
    runs = {n: c for n, c in checks.items() if n.startswith("allreduce_") and c["status"] != "skipped"}
    count = gpu.get("details", {}).get("count")
    agree = count == 0 and all(n.startswith("allreduce_gloo") and c["status"] == "passed" for n, c in runs.items())
    detail = f"gpu {gpu.get('status')}: {gpu.get('reason')}; " + "; ".join(
        f"{n} {c['status']}: {c['reason']}" for n, c in runs.items())
    return bool(agree and runs), detail


def check_bench(*paths: str) -> Verdict:
    """``allreduce --benchmark-bytes`` results: right sums; one rank without a bandwidth figure, N ranks with
    nccl-tests' busbw; each with the device copy of the same bytes."""
    figures, bad = [], []
    for path in paths:
        r = _load(path)
        size = r.get("size_bytes")
        if "error" in r:  # no JSON line: the run's log (beside it) says why
            log = Path(path).with_suffix(".log")
            lines = log.read_text(errors="replace").split("\n") if log.is_file() else []
            bad.append(f"{Path(path).name}: no result: {([ln for ln in lines if ln.strip()] or ['no log'])[-1][:200]}")
        elif not r.get("ok"):
            bad.append(f"{Path(path).name}: the sum was not right")
        elif r.get("nranks") == 1 and ("algbw_gbps" in r or r.get("communicated") is not False):
            bad.append(f"{size} bytes: one rank printed a bandwidth ({r.get('algbw_gbps')} GB/s)")
        elif r.get("nranks", 0) > 1 and "busbw_gbps" not in r:
            bad.append(f"{size} bytes: {r.get('nranks')} ranks without busbw")
        elif "copy_gbps" not in r:
            bad.append(f"{size} bytes: no device copy figure")
        else:
            bus = f"busbw {r['busbw_gbps']} GB/s, " if r.get("communicated") else "nothing communicated, "
            figures.append(f"{size} B x{r['nranks']}: {bus}copy {r['copy_gbps']} GB/s")
    return (not bad and bool(figures)), "; ".join(bad or figures)


def check_shm(expected: str, report_path: str) -> Verdict:
    """Two local ranks and /dev/shm: ``refused``, the shm check failed naming the size and no rank started (the
    all-reduce reported not started); ``passed``, the shm check and the all-reduce passed."""
    report = _load(report_path)
    if "error" in report:
        return False, f"no report: {report['error']}"
    checks = _checks(report)
    shm = checks.get("shm", {"status": "missing", "reason": ""})
    runs = [c for n, c in checks.items() if n.startswith("allreduce_") and n != "allreduce_nccl"]
    said = f"shm {shm['status']}: {shm['reason']}; " + "; ".join(f"{c['name']} {c['status']}: {c['reason']}"
                                                                 for c in runs)
    if expected == "refused":
        ok = shm["status"] == "failed" and "/dev/shm is 64 MiB" in shm["reason"] and bool(runs) and all(
            c["status"] == "skipped" and c["reason"].startswith("not started") for c in runs)
    else:
        ok = shm["status"] in ("passed", "warning") and bool(runs) and all(c["status"] == "passed" for c in runs)
    return ok, said


CHECKS: dict[str, Callable[..., Verdict]] = {"gate": check_gate, "cluster": check_cluster, "line": check_line,
                                             "refused": check_refused, "hidden": check_hidden,
                                             "bench": check_bench, "shm": check_shm}


def summary(out: Path) -> tuple[bool, dict[str, Any]]:
    """The steps' verdicts (``steps.tsv``: name, ok|FAIL, seconds, detail) as one document."""
    steps = []
    for line in (out / "steps.tsv").read_text().splitlines():
        name, verdict, seconds, detail = (line.split("\t") + ["", "", ""])[:4]
        steps.append({"step": name, "ok": verdict == "ok", "seconds": float(seconds or 0), "detail": detail})
    passed = bool(steps) and all(s["ok"] for s in steps)
    return passed, {"passed": passed, "steps": steps, "seconds": round(sum(s["seconds"] for s in steps), 1)}


def main(argv: list[str]) -> int:
    if argv == ["versions"]:
        print("\n".join(versions()))
        return 0
    if len(argv) == 2 and argv[0] == "labels":
        print(json.dumps(labels(argv[1]), sort_keys=True))
        return 0
    if len(argv) == 2 and argv[0] == "gate":  # gpu_selftest.sh: the report's checks, then a FAIL line per failure
        report = _load(argv[1])
        for c in _checks(report).values():
            print(f"  {c['status']:<8} {c['name']:<28} {c['reason']}")
        bad = [f"no report: {report['error']}"] if "error" in report else gate_failures(report)
        for line in bad:
            print(f"FAIL: {line}")
        return 1 if bad else 0
    if len(argv) >= 2 and argv[0] == "check" and argv[1] in CHECKS:
        ok, detail = CHECKS[argv[1]](*argv[2:])
        print(f"{'ok' if ok else 'FAIL'}\t{detail}")
        return 0 if ok else 1
    if len(argv) == 2 and argv[0] == "summary":
        passed, doc = summary(Path(argv[1]))
        Path(argv[1], "summary.json").write_text(json.dumps(doc, indent=1) + "\n")
        for s in doc["steps"]:
            print(f"{'ok  ' if s['ok'] else 'FAIL'} {s['step']:<28} {s['seconds']:>6.1f}s  {s['detail'][:160]}")
        return 0 if passed else 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
