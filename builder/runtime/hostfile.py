"""Open MPI's hostfile, both ways: ``<host> slots=N`` lines <-> ``[(host, N), ...]``.

``mpirun`` places ranks on the hosts of its hostfile in file order, filling each host's slots before the next
(``--map-by slot``, Open MPI's default), so rank 0 runs on the first host: that host is the rendezvous when a job
names none. Kubeflow Trainer's MPI runtime writes one ``<host> slots=<numProcPerNode>`` line per node into
``/etc/mpi/hostfile`` (kubeflow/trainer ``pkg/runtime/framework/plugins/mpi/mpi.go``) and points
``OMPI_MCA_orte_default_hostfile`` at it; the gate writes the same file for its replay. The grammar is Open MPI's
(``mpirun(1)``, "Specifying Hosts"): one host a line, optional ``slots=N`` and ``max_slots=N`` (``max-slots``
too), ``#`` comments, blank lines. Standard library only.
"""

from __future__ import annotations

import re

from .world import ClusterError, host, integer

MAX_HOSTS = 100_000  # more than any cluster; a file that names more is not a hostfile
_KEYWORD = re.compile(r"(slots|max_slots|max-slots)[=:](.*)")


def parse_hostfile(text: str, variable: str) -> list[tuple[str, int | None]]:
    """(host, slots or None) per host line, in file order; anything else is a `ClusterError` naming `variable`."""
    hosts: list[tuple[str, int | None]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        words = raw.partition("#")[0].split()
        if not words:
            continue
        slots: int | None = None
        for word in words[1:]:
            match = _KEYWORD.fullmatch(word)
            if match is None:
                raise ClusterError(variable, f"line {number}: {word!r} is not slots=N or max_slots=N")
            if match.group(1) == "slots":
                slots = integer(f"{variable} line {number} slots", match.group(2), least=1)
        name = words[0].rpartition("@")[2]  # Open MPI takes user@host; the user is ssh's business
        hosts.append((host(f"{variable} line {number}", name), slots))
        if len(hosts) > MAX_HOSTS:
            raise ClusterError(variable, f"names more than {MAX_HOSTS} hosts")
    if not hosts:
        raise ClusterError(variable, "names no host")
    return hosts


def read_hostfile(path: str, variable: str) -> list[tuple[str, int | None]] | None:
    """The hostfile at `path` parsed, or None where this node cannot read it (Kubeflow mounts it in the launcher
    only); a file that is there but wrong is a `ClusterError`."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read(16 * 1024 * 1024)
    except (OSError, UnicodeDecodeError):
        return None
    return parse_hostfile(text, variable)


def format_hostfile(hosts: list[str], slots: int) -> str:
    """The file Kubeflow Trainer's MPI runtime writes: one ``<host> slots=<slots>`` line per node."""
    return "".join(f"{name} slots={slots}\n" for name in hosts)
