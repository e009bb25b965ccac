"""`trainimg test` against the real engine: broken images must fail the named check and never reach a registry;
the good CPU image (and images derived from it) must pass on every platform, with JSON and JUnit reports; runs
clean up their containers and networks on success, failure, timeout, Ctrl-C, and after a SIGKILL (the next run
reaps them).

The broken images are derived FROM the session's CPU image by tests/brokenimages.py (small Dockerfiles, labelled
trainimg.test=1, removed at teardown).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import xmlschema
from brokenimages import TestImages, owned_by, registry_digest
from conftest import ROOT, default_sigint, trainimg
from conftest_registry import RegistryLogin

from trainimg.runtime.allreduce_result import EXIT_TIMEOUT, timeout_message

JUNIT_XSD = Path(__file__).resolve().parent.parent / "builder" / "conformance" / "data" / "junit.xsd"  # Jenkins xunit junit-10
GPU_CHECKS = ("nccl", "cudnn", "gpu", "allreduce_nccl_containers", "allreduce_nccl_single_container")
PROBE_CHECKS = ("python", "framework", "nccl", "cudnn", "reduction_server", "hypertune", "cluster_parsing", "gpu",
                "shm", "duplicate_libs")


@pytest.fixture(scope="module")
def images(client: docker.DockerClient, pinned_cpu_image: str) -> Iterator[TestImages]:
    made = TestImages(client, pinned_cpu_image)
    yield made
    made.remove_all()


def start(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """The real CLI in the background, so a test knows its pid (the owner label of its replicas)."""
    return subprocess.Popen(["trainimg", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=default_sigint)


def wait_for_replicas(client: docker.DockerClient, proc: subprocess.Popen[str], timeout: float = 600) -> list[str]:
    """Block until `proc` has started at least one replica container; returns what it owns. `timeout` is a hang
    guard: it returns as soon as one runs, however loaded the machine."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [x for x in owned_by(client, proc.pid, checks=False) if x.startswith("container")]
        if found:
            return found
        assert proc.poll() is None, f"trainimg test ended before any replica started: {proc.communicate()}"
        time.sleep(0.1)
    raise AssertionError(f"no replica of pid {proc.pid} started within {timeout} s")


def checks_of(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    (suite,) = report["suites"]
    return {c["name"]: c for c in suite["checks"]}


def run_test(image: str, tmp_path: Path, env: dict[str, str], *extra: str, name: str = "report"
             ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], Path]:
    """`trainimg test IMAGE --json --junit`: the process, the JSON report and the JUnit file."""
    json_path, junit_path = tmp_path / f"{name}.json", tmp_path / f"{name}.xml"
    r = trainimg("test", image, "--json", str(json_path), "--junit", str(junit_path), "--progress", "quiet", *extra,
                 env=env, timeout=300)
    assert json_path.is_file(), f"no JSON report (exit {r.returncode}): {r.stderr[-2000:]}"
    return r, json.loads(json_path.read_text(encoding="utf-8")), junit_path


def assert_passing_reports(report: dict[str, Any], junit_path: Path, platform: str, replicas: int) -> None:
    """A passing run's JSON and JUnit reports say the same, and nothing skipped is counted as passed."""
    assert report["passed"] is True
    (suite,) = report["suites"]
    checks = checks_of(report)
    assert suite["passed"] is True and suite["platform"] == platform and suite["replicas"] == replicas
    assert set(PROBE_CHECKS) <= set(checks), "the probe did not report every check"
    allreduce = checks[f"allreduce_{platform}_x{replicas}"]
    assert allreduce["status"] == "passed", allreduce
    assert f"sum {replicas * (replicas + 1) // 2} on all {replicas} ranks" in allreduce["reason"]
    for name in GPU_CHECKS:
        assert checks[name]["status"] == "skipped", checks[name]
        assert "no GPU" in checks[name]["reason"] or "CPU variant" in checks[name]["reason"], checks[name]
    statuses = [c["status"] for c in suite["checks"]]
    assert suite["counts"]["passed"] == statuses.count("passed")
    assert suite["counts"]["skipped"] == statuses.count("skipped") >= len(GPU_CHECKS)
    assert suite["counts"]["failed"] == 0
    assert sum(suite["counts"].values()) == len(statuses)

    root = ET.parse(junit_path).getroot()
    assert root.tag == "testsuites"
    (ts,) = root.findall("testsuite")
    cases = {tc.get("name"): tc for tc in ts.findall("testcase")}
    assert set(cases) == set(checks)
    assert int(ts.get("tests")) == len(cases) and ts.get("failures") == "0"
    assert int(ts.get("skipped")) == statuses.count("skipped")
    for name, check in checks.items():
        skipped, failed = cases[name].findall("skipped"), cases[name].findall("failure")
        assert not failed, name
        assert len(skipped) == (check["status"] == "skipped"), name  # a skip is a <skipped>, never a bare pass
    for name in GPU_CHECKS:
        message = cases[name].find("skipped").get("message")
        assert "no GPU" in message or "CPU variant" in message, (name, message)
    assert len(ts.findall("testcase/skipped")) == statuses.count("skipped")


# -- the good image --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vertex_x4(pinned_cpu_image: str, state_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
              ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], Path]:
    return run_test(pinned_cpu_image, tmp_path_factory.mktemp("vertex"), state_env, "--platform", "vertex",
                    "--replicas", "4")


def test_good_image_passes_vertex_with_4_replicas(vertex_x4) -> None:
    r, report, junit = vertex_x4
    assert r.returncode == 0, r.stderr[-3000:]
    assert_passing_reports(report, junit, "vertex", 4)


def test_junit_report_validates_against_jenkins_schema(vertex_x4) -> None:
    _, _, junit = vertex_x4
    xmlschema.XMLSchema(str(JUNIT_XSD)).validate(str(junit))


def test_two_runs_at_once_on_different_platforms_both_pass(pinned_cpu_image: str, state_env: dict[str, str],
                                                           tmp_path: Path, client: docker.DockerClient) -> None:
    runs = {}
    for platform in ("aiplatform", "uai"):
        runs[platform] = start("test", pinned_cpu_image, "--platform", platform, "--replicas", "2", "--progress", "quiet",
                               "--json", str(tmp_path / f"{platform}.json"),
                               "--junit", str(tmp_path / f"{platform}.xml"), env=state_env)
    for platform, proc in runs.items():
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{platform}: {err[-3000:]}"
        report = json.loads((tmp_path / f"{platform}.json").read_text(encoding="utf-8"))
        assert_passing_reports(report, tmp_path / f"{platform}.xml", platform, 2)
        assert owned_by(client, proc.pid) == []


def test_team_image_built_from_the_cpu_image_passes(images: TestImages, state_env: dict[str, str],
                                                    tmp_path: Path, client: docker.DockerClient) -> None:
    """It passes, and the report, the JUnit suite and the summary line name the image tested, not the parent's
    variant its labels carry."""
    tag = images.team_image()
    assert client.images.get(tag).labels["trainimg.variant"] == "pytorch-2.13.0-cpu-py3.11"  # inherited
    r, report, junit = run_test(tag, tmp_path, state_env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert_passing_reports(report, junit, "vertex", 2)
    assert report["suites"][0]["image_id"] == images.image_id(tag)
    assert report["suites"][0]["name"] == tag and report["suites"][0]["image"] == tag
    assert [ts.get("name") for ts in ET.parse(junit).getroot().findall("testsuite")] == [tag]
    assert [line for line in r.stderr.splitlines() if line.startswith("trainimg: ")] == [
        f"trainimg: {tag} passed ({report['suites'][0]['counts']['passed']} passed, 0 failed, "
        f"{report['suites'][0]['counts']['skipped']} skipped, {report['suites'][0]['counts']['warning']} warnings)"]


def test_image_without_the_runtime_is_probed_with_the_mounted_one(images: TestImages, state_env: dict[str, str],
                                                                  tmp_path: Path, client: docker.DockerClient
                                                                  ) -> None:
    tag = images.without_runtime()
    assert b"gone" in client.containers.run(tag, ["sh", "-c", "test -e /opt/trainimg || echo gone"],
                                            entrypoint=[], remove=True, network_mode="none")
    r, report, junit = run_test(tag, tmp_path, state_env)
    checks = checks_of(report)
    assert "probe" not in checks, checks.get("probe")  # "the probe did not run"
    assert r.returncode == 0, r.stderr[-3000:]
    assert_passing_reports(report, junit, "vertex", 2)


# -- broken images -----------------------------------------------------------------------------------------------


def assert_never_pushed(tag: str, registry: RegistryLogin, env: dict[str, str]) -> None:
    push_env = {**env, "TRAINIMG_REGISTRY_PASSWORD": registry.password}
    r = trainimg("push", tag, "--registry", registry.host, "--username", registry.username, env=push_env,
                 timeout=120)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "conformance" in r.stderr, r.stderr
    assert r.stdout == ""
    assert registry_digest(registry.host, registry.username, registry.password, tag) is None


BROKEN = {
    # case: (TestImages method, extra `trainimg test` args, {failed check: words its reason must hold})
    "nccl_missing": ("gpu_labels", (), {"nccl": ("libnccl.so.2", "not found"), "framework": ("CPU-only",)}),
    "nccl_too_old": ("old_nccl", (), {"nccl": ("2.6.4", "2.7")}),
    "hypertune_missing": ("no_hypertune", (), {"hypertune": ("not importable",)}),
    "hypertune_silent": ("silent_hypertune", (), {"hypertune": ("silent",)}),
    "allreduce_wrong_sum": ("wrong_allreduce", (), {"allreduce_vertex_x2": ("expected", 'got [4]')}),
    "hung_replica": ("hung_replica", ("--timeout", "30"), {"allreduce_vertex_x2": ("timed out|timeout",)}),
}


HANG_GUARD = 1200  # s


@pytest.fixture(scope="module")
def broken_runs(images: TestImages, state_env: dict[str, str], client: docker.DockerClient,
                tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every broken case's `trainimg test`, all started at once (a hung one costs its timeout only once):
    {case: {tag, rc, stderr, report, leftovers}}. HANG_GUARD only ends a run that hangs: each ends by itself, the
    hung replica's by its --timeout (on a loaded 2-core machine the six took up to 310 s)."""
    workdir = tmp_path_factory.mktemp("broken")
    procs: dict[str, tuple[str, subprocess.Popen[str]]] = {}
    for case, (method, extra, _) in BROKEN.items():
        tag = getattr(images, method)(workdir) if method == "old_nccl" else getattr(images, method)()
        procs[case] = (tag, start("test", tag, "--json", str(workdir / f"{case}.json"), "--progress", "quiet",
                                  *extra, env=state_env))
    done: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + HANG_GUARD
    try:
        while len(done) < len(procs) and time.monotonic() < deadline:
            for case, (tag, proc) in procs.items():
                if case not in done and proc.poll() is not None:
                    _, err = proc.communicate()
                    json_path = workdir / f"{case}.json"
                    done[case] = {"tag": tag, "rc": proc.returncode, "stderr": err,
                                  "report": json.loads(json_path.read_text(encoding="utf-8"))
                                  if json_path.exists() else None,
                                  "leftovers": owned_by(client, proc.pid)}
            time.sleep(0.2)
    finally:
        for _, proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert len(done) == len(procs), f"still running after {HANG_GUARD} s: {sorted(set(procs) - set(done))}"
    return done


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_image_fails_the_named_check_and_is_never_pushed(case: str, broken_runs, registry: RegistryLogin,
                                                                state_env: dict[str, str]) -> None:
    run = broken_runs[case]
    _, _, wanted = BROKEN[case]
    assert run["rc"] == 1, (run["rc"], run["stderr"][-3000:])
    assert run["report"] is not None, "no JSON report written"
    assert run["report"]["passed"] is False
    checks = checks_of(run["report"])
    for name, words in wanted.items():
        assert checks[name]["status"] == "failed", checks[name]
        for word in words:  # "a|b": either will do
            assert any(w in checks[name]["reason"] for w in word.split("|")), (word, checks[name]["reason"])
    last = run["stderr"].strip().splitlines()[-1]
    assert "failed conformance" in last and all(name in last for name in wanted), last
    assert run["leftovers"] == [], run["leftovers"]
    assert_never_pushed(run["tag"], registry, state_env)


def test_hung_replica_is_stopped_by_the_timeout_and_leaves_nothing(broken_runs, client: docker.DockerClient) -> None:
    """The replica that never finishes is stopped by `--timeout 30`, not waited out (it never ends by itself), by
    one of three deadlines, and the check's reason says which: the runner's (30 s: both waited replicas timed out),
    or one rank's own all-reduce watchdog (the gate gives each the timeout less 10 s; the hung rank's fires too,
    from its own thread): that rank exits EXIT_TIMEOUT saying so, and the runner stops the other then, or both
    ranks' watchdogs when they fire within one of the runner's polls. Which comes first depends on how long each
    container took to start and import torch (all four were seen in suite runs), so each is the feature working;
    anything else fails.
    No wall-clock bound: six `trainimg test` runs start at once here, and on a loaded 2-core machine the run with
    its 30 s timeout took 307 s in all. The runner's deadline is the timeout it is given (test_replicas_memory)."""
    run = broken_runs["hung_replica"]
    assert run["rc"] == 1
    check = checks_of(run["report"])["allreduce_vertex_x2"]
    by_runner = "chief-0 timed out; worker-0 timed out"
    by_chief = f"chief-0 exited {EXIT_TIMEOUT}: {timeout_message(20, 0, 2, 'pytorch')}; worker-0 did not finish"
    by_worker = f"chief-0 did not finish; worker-0 exited {EXIT_TIMEOUT}: {timeout_message(20, 1, 2, 'pytorch')}"
    by_both = (f"chief-0 exited {EXIT_TIMEOUT}: {timeout_message(20, 0, 2, 'pytorch')}; "
               f"worker-0 exited {EXIT_TIMEOUT}: {timeout_message(20, 1, 2, 'pytorch')}")
    assert check["reason"] in (by_runner, by_chief, by_worker, by_both), check["reason"]
    timed_out = {name: r["timed_out"] for name, r in check["details"]["replicas"].items()}
    both = check["reason"] == by_runner
    assert timed_out == {"chief-0": both, "worker-0": both}, check["details"]
    assert run["leftovers"] == []


def test_cpu_only_framework_in_a_gpu_variant_fails_framework(broken_runs) -> None:
    run = broken_runs["nccl_missing"]  # the CPU image labelled as a CUDA 13.0 variant
    framework = checks_of(run["report"])["framework"]
    assert framework["status"] == "failed"
    assert "CPU-only" in framework["reason"] and "13.0" in framework["reason"], framework


# -- interrupted runs ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hung_image(images: TestImages) -> str:
    """Rank 1 never joins: the all-reduce runs until the timeout, so a signal surely lands during it."""
    return images.hung_replica()


def wait_until_all_running(client: docker.DockerClient, proc: subprocess.Popen[str], n: int,
                           timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listed = client.api.containers(filters={"label": "trainimg.run", "status": "running"})
        running = [c for c in listed
                   if f"container {c['Names'][0].lstrip('/')}" in owned_by(client, proc.pid, checks=False)]
        if len(running) >= n:
            time.sleep(0.5)  # the CLI is past starting them, in its wait loop
            return
        assert proc.poll() is None, f"trainimg test ended early: {proc.communicate()}"
        time.sleep(0.2)
    raise AssertionError(f"{n} replicas of pid {proc.pid} were not running within {timeout} s")


def interrupt(proc: subprocess.Popen[str], sig: int) -> str:
    try:
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return err or ""


def test_sigint_during_the_allreduce_cleans_up(hung_image: str, state_env: dict[str, str],
                                               client: docker.DockerClient) -> None:
    proc = start("test", hung_image, "--replicas", "4", "--progress", "quiet", env=state_env)
    wait_until_all_running(client, proc, 4)
    err = interrupt(proc, signal.SIGINT)
    assert proc.returncode == 130, (proc.returncode, err[-2000:])
    assert err.strip().splitlines()[-1] == "trainimg: interrupted", err[-2000:]
    assert owned_by(client, proc.pid) == [], err[-2000:]


def test_sigint_while_replicas_start_cleans_up(pinned_cpu_image: str, state_env: dict[str, str],
                                               client: docker.DockerClient) -> None:
    proc = start("test", pinned_cpu_image, "--replicas", "4", "--progress", "quiet", env=state_env)
    try:
        wait_for_replicas(client, proc)  # the first replica exists; the others are being created
    except BaseException:
        interrupt(proc, signal.SIGKILL)
        raise
    err = interrupt(proc, signal.SIGINT)
    assert proc.returncode != 0, "the run finished before SIGINT arrived"
    # A container the engine created while Ctrl-C arrived (state "created") must go too: cleanup by run label.
    assert owned_by(client, proc.pid) == [], err[-2000:]


def test_sigkill_leftovers_are_reaped_by_the_next_run(hung_image: str, pinned_cpu_image: str, state_env: dict[str, str],
                                                      client: docker.DockerClient, tmp_path: Path) -> None:
    proc = start("test", hung_image, "--replicas", "4", "--progress", "quiet", env=state_env)
    wait_until_all_running(client, proc, 4)
    interrupt(proc, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    left = owned_by(client, proc.pid, checks=False)  # the probe's container, if it had not ended, is left too
    assert len([x for x in left if x.startswith("container")]) == 4 and any(x.startswith("network") for x in left), left
    r, _, _ = run_test(pinned_cpu_image, tmp_path, state_env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert owned_by(client, proc.pid) == [], "the next run did not reap the killed run's containers and networks"


def test_sigkill_during_run_is_reaped_by_the_next_run(pinned_cpu_image: str, state_env: dict[str, str],
                                                      client: docker.DockerClient) -> None:
    """`trainimg run` killed outright leaves its replicas; the next run of anything reaps them by label."""
    proc = start("run", pinned_cpu_image, "--platform", "vertex", "--replicas", "2", "--progress", "quiet", "--",
                 "sleep", "120", env=state_env)
    wait_until_all_running(client, proc, 2)
    interrupt(proc, signal.SIGKILL)
    assert [x for x in owned_by(client, proc.pid) if x.startswith("container")], "nothing left to reap: weak test"
    r = trainimg("run", pinned_cpu_image, "--platform", "vertex", "--replicas", "1", "--progress", "quiet", "--", "true",
                 env=state_env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert owned_by(client, proc.pid) == [], "the next run did not reap the killed run's containers and networks"
