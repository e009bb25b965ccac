"""The all-reduce under a real ``mpirun``, laid out as Kubeflow Trainer's MPI runtime lays it out
(`platforms.mpi.mpirun_job`): node containers ``<job>-node-0-<i>`` (reached as ``<job>-node-0-<i>.<job>``) waiting
in Debian's ``sshd``, a launcher container with the hostfile at ``/etc/mpi/hostfile`` and the Trainer's
``OMPI_MCA_*`` env, whose Open MPI ``mpirun`` starts every rank over ssh under ``trainimg-launch``; each rank runs
the in-image all-reduce and the exact sum is checked on all of them. The ssh key is made for each run, in its temp
folder. One run per replica count (2 and 4 nodes, 2 ranks on each).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from trainimg.conformance import inimage
from trainimg.conformance.replicas import ReplicaJob, ReplicaRunner
from trainimg.engine.docker import DockerEngine
from trainimg.runtime.platforms.mpi import ENV_LIST
from trainimg.runtime.platforms.mpi import HOSTFILE_PATH, NODE, mpirun_job
from trainimg.runtime.topology_spec import ReplicaSpec
from trainimg.runtime.verdict import judge_allreduce

MPI_IMAGE = "trainimg-test/mpi-pytorch:2.13.0-cpu"
KEYS = "/run/trainimg-ssh"  # where each container finds the run's key, copied into /root/.ssh at start
# The Trainer sets "-o ConnectionAttempts=10"; the rest stands in for its runtime images' ssh_config.
RSH_ARGS = "-o ConnectionAttempts=10 -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
INSTALL_KEY = f"mkdir -p /root/.ssh && cp {KEYS}/* /root/.ssh/ && chmod 700 /root/.ssh && chmod 600 /root/.ssh/*"


@pytest.fixture(scope="session")
def mpi_image(pinned_cpu_image: str, docker_cli: str) -> Iterator[str]:
    """The CPU PyTorch image with Debian's Open MPI and OpenSSH, as an MPI runtime's image carries them; removed
    at the end of the session (the engine's build cache keeps its layer for the next run). The classic builder, not
    BuildKit: BuildKit 0.8 in dockerd 20.10 failed this build once while the other engine lane was building ("failed
    to prepare ...: open /var/lib/docker/overlay2/<id>/committed: no such file or directory", moby/buildkit#5469,
    open upstream), and nothing here needs BuildKit's features."""
    dockerfile = (f"FROM {pinned_cpu_image}\nRUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "
                  "--no-install-recommends openmpi-bin openssh-server openssh-client "
                  "&& rm -rf /var/lib/apt/lists/* && mkdir -p /run/sshd\n")
    r = subprocess.run([docker_cli, "build", "-t", MPI_IMAGE, "-"], input=dockerfile, capture_output=True,
                       text=True, timeout=900, env={**os.environ, "DOCKER_BUILDKIT": "0"})
    assert r.returncode == 0, r.stderr[-3000:]
    yield MPI_IMAGE
    subprocess.run([docker_cli, "rmi", MPI_IMAGE], capture_output=True, timeout=300, check=False)


def run_keys(folder: Path) -> Path:
    """A fresh ed25519 key pair for this run, and the authorized_keys that lets it in."""
    folder.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / "id_ed25519")], check=True)
    (folder / "authorized_keys").write_text((folder / "id_ed25519.pub").read_text())
    return folder


@pytest.mark.parametrize("replicas", [2, 4], ids=["x2x2", "x4x2"])
def test_allreduce_under_real_mpirun(mpi_image: str, replicas: int, tmp_path: Path) -> None:
    nproc, world = 2, replicas * 2
    runner = ReplicaRunner(DockerEngine())
    shape = mpirun_job(replicas, nproc, runner.job, 29500)
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(shape.hostfile)
    keys = run_keys(tmp_path / "ssh")
    rank = [*inimage.command("launch", "--framework", "pytorch", "--", "python3", "-m", "trainimg_runtime",
                             "allreduce", "--framework", "pytorch", "--backend", "gloo", "--timeout", "120")]
    mpirun = ["mpirun", "--allow-run-as-root", "-np", str(world), *rank]
    # The image's venv reaches the ranks as the rendezvous does (Open MPI refuses -x beside the list).
    launcher = replace(shape.launcher, env={**shape.launcher.env,
                                            ENV_LIST: f"{shape.launcher.env[ENV_LIST]};PATH"})

    def command(spec: ReplicaSpec) -> list[str]:
        if spec.role == NODE:
            return ["sh", "-c", f"{INSTALL_KEY} && exec /usr/sbin/sshd -De"]
        return ["sh", "-c", f'{INSTALL_KEY} && exec "$@"', "launcher", *mpirun]

    job = ReplicaJob(image=mpi_image, specs=[*shape.nodes, launcher], command=command,
                     env={"PATH": inimage.PATH, "OMPI_MCA_plm_rsh_args": RSH_ARGS}, entrypoint=[],
                     volumes={**inimage.volumes(), str(keys): KEYS}, waits_for=("chief",),
                     spec_volumes=lambda s: {str(hostfile): HOSTFILE_PATH} if s is launcher else {})
    results = runner.run(job, timeout=300)
    check = judge_allreduce(f"allreduce_mpirun_x{replicas}x{nproc}", results, world, 0.0)
    ran = next(r for r in results if r.role == "chief")
    assert check.status == "passed", f"{check.reason}\n{ran.logs[-3000:]}"
    assert check.reason == f"sum {world * (world + 1) // 2} on all {world} ranks"
    lines = check.details["replicas"][ran.name]["results"]
    assert sorted(line["rank"] for line in lines) == list(range(world))
    # Every rank kept the rank mpirun gave it: trainimg-launch started no second layer.
    assert ran.logs.count("started by mpi") == world, ran.logs[-3000:]
