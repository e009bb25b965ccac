"""Open MPI's hostfile and ``mpirun``'s rank variables: what is read, and what is refused as one line naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import trainimg

from trainimg.runtime.cluster import parse_cluster
from trainimg.runtime.hostfile import format_hostfile, parse_hostfile
from trainimg.runtime.launch import choose_mode
from trainimg.runtime.platforms import mpi
from trainimg.runtime.world import ClusterError

RANKS = {mpi.RANK: "5", mpi.SIZE: "8", mpi.LOCAL_RANK: "1", mpi.LOCAL_SIZE: "4",
         mpi.HNP_URI: "3846701056.0;tcp://172.22.0.4:48903"}


def test_hostfile_both_ways() -> None:
    text = format_hostfile(["job-node-0-0.job", "job-node-0-1.job"], 4)
    assert text == "job-node-0-0.job slots=4\njob-node-0-1.job slots=4\n"
    assert parse_hostfile(text, "H") == [("job-node-0-0.job", 4), ("job-node-0-1.job", 4)]
    assert parse_hostfile("# cluster\n\nroot@10.0.0.7 max_slots=8 slots=2  # gpu\nn2\n", "H") == \
        [("10.0.0.7", 2), ("n2", None)]


@pytest.mark.parametrize(("text", "words"), [
    ("", "names no host"), ("n1 slots=two\n", "'two' is not a whole number"), ("n1 cpus=2\n", "'cpus=2'"),
    ("n1;reboot slots=1\n", "is not a host name"),
])
def test_hostfile_refusals(text: str, words: str) -> None:
    with pytest.raises(ClusterError) as err:
        parse_hostfile(text, mpi.HOSTFILE)
    assert words in str(err.value) and str(err.value).startswith(mpi.HOSTFILE) and "\n" not in str(err.value)


def test_ranks_kept_and_rank_zero_from_the_hostfile(tmp_path: Path) -> None:
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(format_hostfile(["a.job", "b.job"], 4))
    info = parse_cluster({**RANKS, mpi.HOSTFILE: str(hostfile)})
    assert (info.platform, info.started_by, info.process_rank, info.local_rank) == ("mpi", "mpi", 5, 1)
    assert (info.node_rank, info.nnodes, info.role, info.index, info.master_addr, info.master_port) == \
        (1, 2, "worker", 0, "a.job", 29500)
    # JAX's own port rule (jax._src.clusters.ompi_cluster) on rank 0's host, not on mpirun's.
    assert info.jax_coordinator == f"a.job:{3846701056 // 4096 % 4096 + 61440}"
    assert choose_mode(info, "pytorch", True) == "exec"
    with pytest.raises(ClusterError, match="already started 4"):
        parse_cluster({**RANKS, mpi.HOSTFILE: str(hostfile)}, 2)


@pytest.mark.parametrize(("extra", "variable", "words"), [
    ({mpi.HOSTFILE: "/etc/mpi/hostfile"}, "MASTER_ADDR", "names /etc/mpi/hostfile, which this node cannot read"),
    ({}, "MASTER_ADDR", "OMPI_MCA_orte_default_hostfile is not set"),
    ({"MASTER_ADDR": "n0", mpi.LOCAL_SIZE: "3"}, mpi.LOCAL_SIZE, "do not divide"),
    ({"MASTER_ADDR": "n0", mpi.LOCAL_RANK: "0"}, mpi.LOCAL_RANK, "not laid out node by node"),
    ({"MASTER_ADDR": "n0", mpi.RANK: "8"}, mpi.RANK, "outside the world of 8"),
    ({"MASTER_ADDR": "n0", mpi.LOCAL_RANK: ""}, mpi.LOCAL_RANK, "is not set"),
])
def test_refusals_name_the_variable(extra: dict[str, str], variable: str, words: str) -> None:
    with pytest.raises(ClusterError) as err:
        parse_cluster({**RANKS, **extra})
    assert err.value.variable == variable and words in str(err.value), str(err.value)


def test_one_node_meets_on_loopback_and_cli_refuses_in_one_line(state_env: dict[str, str]) -> None:
    one = {**RANKS, mpi.RANK: "1", mpi.SIZE: "4", mpi.LOCAL_SIZE: "4"}
    assert parse_cluster(one).master_addr == "127.0.0.1"
    r = trainimg("cluster", "--json", env={**state_env, **one})
    assert r.returncode == 0 and json.loads(r.stdout)["platform"] == "mpi", r.stderr
    r = trainimg("cluster", "--json", env={**state_env, **RANKS, mpi.HOSTFILE: "/etc/mpi/hostfile"})
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "mpirun -x MASTER_ADDR" in r.stderr
