"""Replica scheduling, timeouts, cleanup and all-reduce verdicts on the in-memory engine (no Docker).

The real-engine tests (test_conformance, test_jobs) prove the same paths against Docker; these stage what Docker
cannot on demand: a replica vanishing mid-run, the engine refusing a start, Ctrl-C at a chosen moment, and a
concurrent run's leftovers of a dead owner.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
from memory_engine import MemoryEngine, Outcome
from trainimg.conformance import suite as conformance
from trainimg.conformance.replicas import (
    OWNER_LABEL,
    RUN_LABEL,
    VANISHED,
    ReplicaJob,
    ReplicaRunner,
    reap_leftovers,
)
from trainimg.engine.base import ContainerSpec, ImageInfo
from trainimg.errors import EngineError
from trainimg.runtime.topology import replica_specs

IMAGE = ImageInfo(id="sha256:" + "a" * 64, labels={"trainimg.framework": "pytorch", "trainimg.variant": "mem"})


def role_of(spec: ContainerSpec) -> str:
    """chief, worker, ps, evaluator, or holder (a UAI node's network holder) from the container's name."""
    if spec.command[:1] == ("sleep",):
        return "holder"
    return (spec.name or "").rsplit("-", 2)[-2]


def runner(engine: MemoryEngine) -> ReplicaRunner:
    r = ReplicaRunner(engine)
    r.poll = 0.01
    return r


def job(r: ReplicaRunner, platform: str = "vertex", replicas: int = 2, **kw: int) -> ReplicaJob:
    specs = replica_specs(platform, replicas, hosts=r.host, **kw)
    return ReplicaJob(image=IMAGE.id, specs=specs, command=lambda s: ["train", s.name])


def scripted(**by_role: Outcome) -> Callable[[ContainerSpec], Outcome]:
    return lambda spec: by_role.get(role_of(spec), Outcome())


def test_success_returns_every_replica_and_leaves_nothing() -> None:
    engine = MemoryEngine(script=lambda s: Outcome(logs=f"hello from {s.name}\n", seconds=0.05))
    r = runner(engine)
    results = r.run(job(r, replicas=3), timeout=10)
    assert [(x.name, x.exit_code, x.timed_out) for x in results] == [
        ("chief-0", 0, False), ("worker-0", 0, False), ("worker-1", 0, False)]
    assert results[1].logs == f"hello from {r.host('worker', 0)}\n"
    assert engine.leftovers() == []
    # Each replica got the platform's env, joined the run's network under its peers' name for it.
    chief = next(s for s in engine.started if role_of(s) == "chief")
    assert chief.network == f"ti-{r.run_id}" and chief.hostname == chief.name == r.host("chief", 0)
    assert json.loads(chief.env["CLUSTER_SPEC"])["task"]["type"] == "workerpool0"
    assert chief.labels[RUN_LABEL] == r.run_id and chief.labels[OWNER_LABEL].endswith(f":{os.getpid()}")


def test_one_failed_replica_ends_the_job_without_waiting_out_the_others() -> None:
    engine = MemoryEngine(script=scripted(chief=Outcome(hang=True), worker=Outcome(exit_code=3, logs="boom\n")))
    r = runner(engine)
    results = r.run(job(r), timeout=30)
    # not waited out: the hung chief was stopped when the worker failed, not timed out 30 s later
    codes = {x.name: (x.exit_code, x.timed_out) for x in results}
    assert codes == {"chief-0": (None, False), "worker-0": (3, False)}
    assert engine.leftovers() == []


def test_timeout_marks_the_waited_replicas_and_cleans_up() -> None:
    engine = MemoryEngine(script=lambda s: Outcome(hang=True))
    r = runner(engine)
    start = time.monotonic()
    results = r.run(job(r, ps=1, evaluators=1), timeout=0.3)
    assert time.monotonic() - start >= 0.3  # the timeout was waited, then the waited replicas marked
    # ps and evaluators never exit by themselves: they are not waited for, so they are not "timed out".
    assert {x.name: x.timed_out for x in results} == {"chief-0": True, "worker-0": True, "ps-0": False,
                                                      "evaluator-0": False}
    assert engine.leftovers() == []


def test_ps_and_evaluators_do_not_hold_the_job() -> None:
    engine = MemoryEngine(script=scripted(ps=Outcome(hang=True), evaluator=Outcome(hang=True)))
    r = runner(engine)
    results = r.run(job(r, replicas=2, ps=1, evaluators=1), timeout=30)
    assert {x.name: x.exit_code for x in results} == {"chief-0": 0, "worker-0": 0, "ps-0": None,
                                                      "evaluator-0": None}
    assert engine.leftovers() == []


def test_vanished_replica_fails_never_passes() -> None:
    engine = MemoryEngine(script=scripted(worker=Outcome(vanish=True, seconds=0.05), chief=Outcome(hang=True)))
    r = runner(engine)
    results = r.run(job(r), timeout=30)
    worker = next(x for x in results if x.role == "worker")
    assert worker.exit_code == VANISHED and "disappeared" in worker.logs
    assert engine.leftovers() == []


def test_refused_start_raises_engine_error_and_removes_what_was_made() -> None:
    engine = MemoryEngine(script=lambda s: Outcome(hang=True),
                          refuse=lambda s: "no space left on device" if role_of(s) == "worker" else None)
    r = runner(engine)
    with pytest.raises(EngineError, match="cannot start replica worker-0: no space left on device"):
        r.run(job(r), timeout=30)
    assert engine.leftovers() == []  # the chief, the half-created worker and the network


def test_interrupt_while_waiting_removes_everything() -> None:
    calls = []

    def ctrl_c() -> None:
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt

    engine = MemoryEngine(script=lambda s: Outcome(hang=True), on_state=ctrl_c)
    r = runner(engine)
    with pytest.raises(KeyboardInterrupt):
        r.run(job(r, replicas=3), timeout=30)
    assert len(engine.started) == 3 and engine.leftovers() == []


def test_uai_nodes_share_a_holder_and_everything_is_removed() -> None:
    engine = MemoryEngine(script=scripted(ps=Outcome(hang=True), holder=Outcome(hang=True)))
    r = runner(engine)
    results = r.run(job(r, platform="uai", replicas=2), timeout=30)
    holders = [s for s in engine.started if role_of(s) == "holder"]
    assert [h.name for h in holders] == [r.host("chief", 0), r.host("worker", 0)]
    ps = [s for s in engine.started if role_of(s) == "ps"]
    # A node's ps joins its holder's network namespace: same host as the node's chief/worker, another port.
    assert sorted(p.share_network_of for p in ps) == sorted(h.name for h in holders)
    assert all(p.network is None for p in ps)
    assert {x.role for x in results if x.exit_code == 0} == {"chief", "worker"}
    assert engine.leftovers() == []


def test_reap_removes_only_what_dead_owners_left() -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    engine = MemoryEngine(script=lambda s: Outcome(hang=True))
    for owner, name in ((f"{socket.gethostname()}:{dead}", "orphan"), (f"{socket.gethostname()}:{os.getpid()}",
                                                                       "alive"), ("elsewhere:1", "remote")):
        labels = {RUN_LABEL: name, OWNER_LABEL: owner}
        engine.create_network(name, labels)
        engine.start(ContainerSpec(image=IMAGE.id, command=("x",), name=name, network=name, labels=labels))
    assert reap_leftovers(engine) == 2  # the orphan's container and network
    assert sorted(engine.leftovers()) == ["alive", "alive", "remote", "remote"]


# -- verdicts: the whole `trainimg test` on the memory engine ----------------------------------------------------
def allreduce_script(got: Callable[[int], int | None], exit_code: int = 0) -> Callable[[ContainerSpec], Outcome]:
    """The probe answers no checks; chief/workers print the all-reduce line the runtime prints, ranks by start."""
    ranks: list[str] = []

    def script(spec: ContainerSpec) -> Outcome:
        if "probe" in spec.command:
            return Outcome(logs="[]")
        ranks.append(spec.name or "")
        rank = len(ranks) - 1
        value = got(rank)
        line = {"framework": "pytorch", "backend": "gloo", "rank": rank, "world_size": 2, "expected": 3,
                "got": value, "ok": value == 3}
        return Outcome(exit_code=exit_code, logs=json.dumps(line) + "\n", seconds=0.02)

    return script


@pytest.mark.parametrize("got, exit_code, status, reason", [
    (lambda rank: 3, 0, "passed", "sum 3 on all 2 ranks"),
    (lambda rank: 4 if rank == 1 else 3, 1, "failed", "worker-0 got [4], expected 3"),
    (lambda rank: None if rank == 1 else 3, 124, "failed", "worker-0 exited 124"),
])
def test_allreduce_verdicts(got: Callable[[int], int | None], exit_code: int, status: str, reason: str,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ReplicaRunner, "poll", 0.01)
    engine = MemoryEngine(script=allreduce_script(got, exit_code), images={"mem:latest": IMAGE})
    opts = conformance.TestOptions(platform="aiplatform", replicas=2, timeout=30)
    suite = conformance.Conformance(engine).run("mem:latest", opts)
    check = next(c for c in suite.checks if c.name == "allreduce_aiplatform_x2")
    assert check.status == status and reason in check.reason, check.reason
    assert engine.leftovers() == []


def test_a_replica_that_vanished_is_a_failed_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ReplicaRunner, "poll", 0.01)
    def script(spec: ContainerSpec) -> Outcome:
        if "probe" in spec.command:
            return Outcome(logs="[]")
        return Outcome(vanish=True, seconds=0.02)

    engine = MemoryEngine(script=script, images={"mem:latest": IMAGE})
    opts = conformance.TestOptions(platform="vertex", replicas=2, timeout=30)
    suite = conformance.Conformance(engine).run("mem:latest", opts)
    check = next(c for c in suite.checks if c.name.startswith("allreduce_vertex"))
    assert check.status == "failed" and f"exited {VANISHED}" in check.reason
    assert engine.leftovers() == []

