"""Azure ML command jobs (`runtime.platforms.azureml`): its three distributions as Azure ML writes them, the rule that
the run's ``AZUREML_*`` variables make its claim a strict superset of the ``env://``, ``TF_CONFIG`` and Open MPI
ones, ``--platform azureml``, the launcher keeping the ranks Azure ML started (a real subprocess), and every refusal
one line, exit 2. The real clients' agreement over generated environments is tests/test_azureml_clients.py; the
gate's replicas tests/test_gate_platforms.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from test_platforms import PRINT_ENV, REPO, launch, printed

from trainimg.runtime.cluster import parse_cluster
from trainimg.runtime.platforms import FORCEABLE, PLATFORMS, azureml, envworld, mpi, tfconfig
from trainimg.runtime.topology import process_start, replica_specs
from trainimg.runtime.world import ClusterError

RUN = {"AZUREML_RUN_ID": "train_1700000000_ab12cd34", "AZUREML_NODE_COUNT": "2",
       "AZUREML_ARM_WORKSPACE_NAME": "ws", "AZUREML_EXPERIMENT_ID": "4f7c"}
# Node 1 of 2, 4 processes a node (process_count_per_instance: 4): process 6, local rank 2.
PYTORCH_PROCESS = {**RUN, "MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "6105", "WORLD_SIZE": "8", "NODE_RANK": "1",
                   "RANK": "6", "LOCAL_RANK": "2"}
TF_WORKER = {**RUN, "TF_CONFIG": json.dumps({"cluster": {"worker": ["10.0.0.4:2222", "10.0.0.5:2222"],
                                                         "ps": ["10.0.0.6:2222"]},
                                             "task": {"type": "worker", "index": 1}, "environment": "cloud"})}


def test_pytorch_distribution_keeps_every_process_rank() -> None:
    info = parse_cluster(PYTORCH_PROCESS)
    assert (info.platform, info.started_by, info.process_rank, info.local_rank, info.world_size_processes,
            info.nproc_per_node, info.node_rank, info.nnodes, info.master_addr, info.master_port) == (
        "azureml", "azureml", 6, 2, 8, 4, 1, 2, "10.0.0.4", 6105)
    assert "AZUREML_RUN_ID" in info.variables and "LOCAL_WORLD_SIZE" not in info.variables


def test_tensorflow_distribution_reads_tf_config() -> None:
    info = parse_cluster(TF_WORKER)
    assert (info.platform, info.role, info.index, info.rank, info.world_size, info.started_by) == (
        "azureml", "worker", 1, 1, 2, None)
    assert info.tf_config is not None and info.tf_config["environment"] == "cloud"
    assert info.tf_config["cluster"]["ps"] == ["10.0.0.6:2222"]


def test_the_azureml_claim_is_a_strict_superset() -> None:
    """Without the run's markers the same variables are the plain env:// or TF_CONFIG world; with them, Azure ML's.
    The plain env:// reading of the PyTorch process refuses its LOCAL_RANK: without Azure ML's node count it has
    no LOCAL_WORLD_SIZE beyond 1 to place local rank 2 in."""
    for env in (PYTORCH_PROCESS, TF_WORKER):
        assert set(azureml.claims(env)) > set(envworld.claims(env)) | set(tfconfig.claims(env))
        assert azureml.claims({k: v for k, v in env.items() if k not in azureml.MARKERS}) == ()
        assert parse_cluster(env).platform == "azureml"
    with pytest.raises(ClusterError) as refused:
        parse_cluster({k: v for k, v in PYTORCH_PROCESS.items() if k not in azureml.MARKERS})
    assert refused.value.variable == "LOCAL_RANK" and "outside the world of 1" in str(refused.value)
    assert parse_cluster({k: v for k, v in TF_WORKER.items() if k not in azureml.MARKERS}).platform == tfconfig.NAME


def test_platform_azureml_forces_the_reading() -> None:
    plain = {k: v for k, v in PYTORCH_PROCESS.items() if k not in ("AZUREML_RUN_ID", "AZUREML_EXPERIMENT_ID",
                                                                    "AZUREML_ARM_WORKSPACE_NAME")}
    assert parse_cluster({**plain, "AZUREML_NODE_COUNT": "2"}, platform="azureml").nproc_per_node == 4
    assert "azureml" in FORCEABLE and azureml in PLATFORMS


def test_a_run_without_distribution_is_one_process() -> None:
    info = parse_cluster({"AZUREML_RUN_ID": "r"})
    assert (info.platform, info.world_size, info.variables) == ("azureml", 1, ("AZUREML_RUN_ID",))


@pytest.mark.parametrize(("env", "variable", "fault"), [
    ({**PYTORCH_PROCESS, "AZUREML_NODE_COUNT": ""}, "AZUREML_NODE_COUNT", "how many processes each node runs"),
    ({**PYTORCH_PROCESS, "AZUREML_NODE_COUNT": "3"}, "AZUREML_NODE_COUNT", "do not divide WORLD_SIZE 8"),
    ({**PYTORCH_PROCESS, "LOCAL_RANK": "4"}, "LOCAL_RANK", "outside the world of 4"),
    ({**PYTORCH_PROCESS, "MASTER_ADDR": ""}, "MASTER_ADDR", "is not set"),
    ({**PYTORCH_PROCESS, "MASTER_ADDR": "10.0.0.4;reboot"}, "MASTER_ADDR", "not a host name"),
    ({**PYTORCH_PROCESS, "TF_CONFIG": TF_WORKER["TF_CONFIG"]}, "environment", "pytorch and tensorflow"),
    ({**TF_WORKER, "TF_CONFIG": '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}}'},
     "TF_CONFIG", "out of range"),
    ({}, "AZUREML_RUN_ID", "nothing says this is an Azure ML job"),
])
def test_what_an_azureml_process_cannot_trust(env: dict[str, str], variable: str, fault: str) -> None:
    with pytest.raises(ClusterError) as err:
        parse_cluster(env, platform="azureml" if not env else None)
    assert err.value.variable == variable and fault in str(err.value) and "\n" not in str(err.value)


def test_launcher_keeps_the_ranks_azureml_started() -> None:
    """Azure ML started process 6: the launcher execs CMD once as that process, never a second layer."""
    result = launch(["--framework", "jax", "--", sys.executable, "-c", PRINT_ENV], PYTORCH_PROCESS)
    assert result.returncode == 0, result.stderr
    (env,) = printed(result.stdout)
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"], env["MASTER_ADDR"],
            env["MASTER_PORT"], env["JAX_PROCESS_ID"], env["JAX_COORDINATOR_ADDRESS"], env["TRAINIMG_PLATFORM"],
            env["TRAINIMG_NODE_RANK"]) == ("6", "8", "2", "4", "10.0.0.4", "6105", "6", "10.0.0.4:6105", "azureml",
                                           "1")
    assert "started by azureml" in result.stderr
    refused = launch(["--nproc-per-node", "2", "--", "true"], PYTORCH_PROCESS)
    assert refused.returncode == 2 and "no second layer" in refused.stderr


def test_cli_refusal_is_one_line_exit_2() -> None:
    result = subprocess.run([sys.executable, "-m", "trainimg.cli.app", "cluster", "--json"], cwd=REPO,
                            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO),
                                 **PYTORCH_PROCESS, "AZUREML_NODE_COUNT": "3"},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "AZUREML_NODE_COUNT" in result.stderr


@pytest.mark.parametrize(("framework", "per_node", "count"), [("pytorch", 2, 4), ("tensorflow", 1, 2)])
def test_the_replayed_job_reads_back_as_azureml_started_it(framework: str, per_node: int, count: int) -> None:
    """Every replica the gate starts (2 nodes, 2 processes a node) is read back as its own process of the job."""
    specs = replica_specs("azureml", 2, nproc_per_node=2, framework=framework)
    infos = [parse_cluster(spec.env) for spec in specs]
    assert len(specs) == count and process_start("azureml", framework, 2).per_node == per_node
    assert {info.platform for info in infos} == {"azureml"}
    if framework == "pytorch":
        assert sorted(i.process_rank for i in infos) == [0, 1, 2, 3]
        assert [s.host for s in specs] == ["job-node0", "job-node0", "job-node1", "job-node1"]
        assert {i.master_port for i in infos} == {azureml.DEFAULT_MASTER_PORT}
    else:
        assert [(i.role, i.index, i.rank) for i in infos] == [("worker", 0, 0), ("worker", 1, 1)]


MPI_PROCESS = {**RUN, "OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
               "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "AZ_BATCH_MASTER_NODE": "10.0.0.4:6000"}


@pytest.mark.parametrize(("env", "expected"), [
    (MPI_PROCESS, ("10.0.0.4", azureml.DEFAULT_MASTER_PORT, 5, 1, 8, 4, 1)),
    ({**MPI_PROCESS, "MASTER_PORT": "29400"}, ("10.0.0.4", 29400, 5, 1, 8, 4, 1)),
    ({**{k: v for k, v in MPI_PROCESS.items() if k != "AZ_BATCH_MASTER_NODE"}, "OMPI_COMM_WORLD_SIZE": "4",
      "AZ_BATCHAI_MPI_MASTER_NODE": "10.0.0.9", "OMPI_COMM_WORLD_RANK": "1"},
     ("10.0.0.9", azureml.SINGLE_NODE_PORT, 1, 1, 4, 4, 0)),
], ids=["multi-node", "job-port", "one-node"])
def test_mpi_distribution_reads_open_mpi_with_azure_mls_master(env: dict[str, str],
                                                               expected: tuple[object, ...]) -> None:
    """mpirun's OMPI_* ranks (read by `platforms.mpi`), the master host from AZ_BATCH_MASTER_NODE (or, on one node,
    AZ_BATCHAI_MPI_MASTER_NODE) and the port Azure ML's cheatsheet gives torch; the ranks kept, never relaunched."""
    info = parse_cluster(env)
    assert (info.master_addr, info.master_port, info.process_rank, info.local_rank, info.world_size_processes,
            info.nproc_per_node, info.node_rank) == expected
    assert (info.platform, info.started_by) == ("azureml", "azureml")
    assert set(azureml.claims(env)) > set(mpi.claims(env)) and mpi.claims(env)  # Azure ML wins over plain mpirun


def test_mpi_distribution_without_its_master_names_it() -> None:
    with pytest.raises(ClusterError) as err:
        parse_cluster({k: v for k, v in MPI_PROCESS.items() if k != "AZ_BATCH_MASTER_NODE"})
    assert err.value.variable == "AZ_BATCH_MASTER_NODE" and "\n" not in str(err.value)
