"""Engine listings under real concurrency: containers and networks appear and vanish while a run starts.

docker-py's `containers.list()` lists, then inspects each container, and raises NotFound when one is removed in
between; a run's `reap_leftovers` made that call, so one run's cleanup crashed another's start. Here other
threads create and remove labelled containers as fast as the engine allows while this process lists and reaps.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator

import docker
import pytest
from brokenimages import owned_by
from trainimg.conformance.replicas import reap_leftovers
from trainimg.engine.docker import DockerEngine
from trainimg.runtime.contract import OWNER_LABEL, RUN_LABEL

LOCAL_BASE = "local/debian:bookworm"


def _dead_pid() -> int:
    out = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                         check=True)
    return int(out.stdout)


@pytest.fixture
def churn(client: docker.DockerClient) -> Iterator[str]:
    """Three threads that create and remove containers labelled like a live run's (this process owns them, so no
    reaper takes them), until the test ends; yields their run id."""
    stop = threading.Event()
    labels = {RUN_LABEL: f"churn-{uuid.uuid4().hex[:8]}", OWNER_LABEL: f"{socket.gethostname()}:{os.getpid()}"}
    made = {"count": 0}

    def loop() -> None:
        api = docker.from_env().api
        while not stop.is_set():
            cid = api.create_container(LOCAL_BASE, ["true"], labels=labels)["Id"]
            api.remove_container(cid, force=True)
            made["count"] += 1

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    yield labels[RUN_LABEL]
    stop.set()
    for t in threads:
        t.join(timeout=30)
    assert made["count"] > 20, "the churn made too few containers to race with: weak test"
    for c in client.api.containers(all=True, filters={"label": f"{RUN_LABEL}={labels[RUN_LABEL]}"}):
        client.api.remove_container(c["Id"], force=True)


def test_listing_and_reaping_while_other_runs_come_and_go(client: docker.DockerClient,
                                                          churn: str) -> None:
    engine = DockerEngine(client)
    dead = _dead_pid()
    owner = f"{socket.gethostname()}:{dead}"
    run = f"orphan-{uuid.uuid4().hex[:8]}"
    labels = {RUN_LABEL: run, OWNER_LABEL: owner}
    client.api.create_network(f"ti-{run}", driver="bridge", labels=labels)
    for i in range(5):
        client.api.create_container(LOCAL_BASE, ["true"], name=f"ti-{run}-worker-{i}", labels=labels)
    seen_churn = 0
    for _ in range(40):  # each round lists every run's containers while the churn removes some of them
        seen_churn += bool([c for c in engine.containers(RUN_LABEL) if c.labels.get(RUN_LABEL) == churn])
        owned_by(client, dead)
    assert seen_churn > 0, "no listing overlapped the churn: weak test"
    for _ in range(5):  # the reaper of every starting run, each racing the churn (and other users' runs)
        reap_leftovers(engine)
    assert owned_by(client, dead) == []
