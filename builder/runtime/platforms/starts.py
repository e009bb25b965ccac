"""Who starts a node's processes on a platform: the one fact both the replay (`topology.process_start`) and the
cluster job specs (`jobs.clusterspec`: is ``--nproc-per-node`` written) read. Each platform module says it in its
``STARTS`` attribute (None: trainimg's launcher starts them, told ``--nproc-per-node``).
"""

from __future__ import annotations

from dataclasses import dataclass

PLATFORM, TORCHRUN, SAYS = "platform", "torchrun", "says"


@dataclass(frozen=True)
class Starts:
    """`how`: ``platform`` (its own launcher, srun or mpirun, starts every process, one replica each),
    ``torchrun`` (its command is torchrun, which starts the node's processes from its env) or ``says`` (its env
    gives the count, which the launcher reads). `unless`: frameworks it runs otherwise, started by the launcher
    (Azure ML's tensorflow distribution, a TrainJob's JAX runtime)."""

    how: str
    unless: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.how not in (PLATFORM, TORCHRUN, SAYS):
            raise ValueError(f"Starts.how: {self.how!r}")
