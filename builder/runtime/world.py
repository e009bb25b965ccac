"""What a replica knows about its place in the training job, whichever platform told it: `ClusterInfo`.

Every platform module (`platforms/`) reads its own variables into this one shape, and the launcher, the ``cluster``
verb and the conformance checks read only the shape. The address grammar lives here too, because every platform
names hosts and each must be checked the same way before it reaches ``MASTER_ADDR``, ``TF_CONFIG`` or a shell.

Two worlds meet in a job: nodes (replicas, containers, pods) and processes (one per GPU). Some platforms start one
container per node and leave the processes to the image (`ClusterInfo.started_by` is None: the launcher maps
node to process level); others start every process themselves (Slurm's ``srun`` tasks, torchrun, a plain
``env://`` world): then `started_by` names who did, and `process_rank`/`local_rank` are this process's own, which
the launcher keeps as they are.

Standard library only: it runs in images and on the host alike.
"""

from __future__ import annotations

import copy
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Where a single local process "meets" itself: torch.distributed's customary default rendezvous.
DEFAULT_MASTER_ADDR = "127.0.0.1"
DEFAULT_MASTER_PORT = 29500

_PORT = re.compile(r"[0-9]{1,5}")
_INT = re.compile(r"[0-9]{1,9}")
# RFC 1123 host names: dot-separated labels of letters, digits and inner hyphens, 253 characters at most.
_HOSTNAME = re.compile(r"(?=.{1,253}\Z)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?")
_DOTTED_DIGITS = re.compile(r"[0-9.]+")
_ZONE = re.compile(r"[A-Za-z0-9_.-]{1,15}")


class ClusterError(ValueError):
    """A cluster variable this replica cannot trust; ``str(err)`` is one line naming `variable` and the fault."""

    def __init__(self, variable: str, fault: str) -> None:
        # Values quoted from JSON may hold newlines; the message must stay one line for logs and `trainimg: ...`.
        self.variable = variable
        self.fault = " ".join(fault.split())
        super().__init__(f"{variable}: {self.fault}")


@dataclass(frozen=True)
class ClusterInfo:
    """This replica's place in the job, in framework-neutral terms.

    `rank` and `world_size` count replicas (nodes) of the all-reduce group, chief first. The ``nproc_per_node``
    figures are filled once the processes per node are known: from the platform (`started_by`, or a count it
    asks for in `platform_nproc`) or from the caller.
    """

    platform: str  # vertex, aiplatform, tf_config, slurm, trainjob, pytorchjob, jaxjob, jobset, env, torchrun, local
    role: str  # chief, worker, ps or evaluator
    index: int  # the task index the platform gave, within its role or pool
    rank: int | None  # chief 0, workers after it; None for ps and evaluator, which are not in the group
    world_size: int  # chief plus workers
    master_addr: str  # the chief's host (worker 0's without a chief), IPv6 without brackets
    master_port: int
    trial: str | None  # hyperparameter-tuning trial id, None outside tuning
    tf_config: dict[str, Any] | None  # TF2-ready TF_CONFIG; None where the platform describes no TF cluster
    nnodes: int | None = None
    node_rank: int | None = None
    nproc_per_node: int | None = None
    world_size_processes: int | None = None
    variables: tuple[str, ...] = ()  # the environment variables this was read from
    started_by: str | None = None  # who started every process already (slurm, torchrun, env, trainimg-launch)
    process_rank: int | None = None  # with started_by: this process's global rank
    local_rank: int | None = None  # with started_by: this process's rank on its node
    platform_nproc: str | None = None  # processes per node the platform asks for ("4", "auto"), if it says
    jax_coordinator: str | None = None  # ``host:port`` where the platform puts JAX's coordinator, if it says

    def to_json(self) -> dict[str, Any]:
        """The stable JSON form the ``cluster --json`` verb prints and host-side checks compare against."""
        return {
            "platform": self.platform,
            "role": self.role,
            "index": self.index,
            "rank": self.rank,
            "world_size": self.world_size,
            "master_addr": self.master_addr,
            "master_port": self.master_port,
            "trial": self.trial,
            "tf_config": copy.deepcopy(self.tf_config),
            "nnodes": self.nnodes,
            "node_rank": self.node_rank,
            "nproc_per_node": self.nproc_per_node,
            "world_size_processes": self.world_size_processes,
            "variables": list(self.variables),
            "started_by": self.started_by,
            "process_rank": self.process_rank,
            "local_rank": self.local_rank,
            "jax_coordinator": self.jax_coordinator or format_address(self.master_addr, self.master_port),
        }


def local_world() -> ClusterInfo:
    """One process alone: the world of an environment that no platform made."""
    return ClusterInfo(platform="local", role="chief", index=0, rank=0, world_size=1,
                       master_addr=DEFAULT_MASTER_ADDR, master_port=DEFAULT_MASTER_PORT, trial=None, tf_config=None)


def node_role(node_rank: int) -> tuple[str, int]:
    """(role, index) of a node on platforms without roles: node 0 is the chief, node i worker i - 1."""
    return ("chief", 0) if node_rank == 0 else ("worker", node_rank - 1)


# -- reading variables ------------------------------------------------------------------------------------------
def present(env: Mapping[str, str], names: tuple[str, ...]) -> tuple[str, ...]:
    """The `names` set to something in `env`: an empty variable counts as unset (``docker run -e X=``)."""
    return tuple(name for name in names if env.get(name, "").strip())


def require(env: Mapping[str, str], platform: str, names: tuple[str, ...]) -> dict[str, str]:
    """`names` -> value; a missing one is the platform's fault, named: a half-set world is never guessed."""
    missing = [name for name in names if not env.get(name, "").strip()]
    if missing:
        raise ClusterError(missing[0], f"is not set, but {platform} sets it with "
                                       f"{', '.join(n for n in names if n not in missing) or 'the others'}")
    return {name: env[name].strip() for name in names}


def integer(variable: str, text: str, *, least: int = 0) -> int:
    """A non-negative decimal as platforms write counts and ranks; anything else is refused, naming it."""
    if not _INT.fullmatch(text.strip()):
        raise ClusterError(variable, f"{text!r} is not a whole number")
    value = int(text)
    if value < least:
        raise ClusterError(variable, f"{value} is below {least}")
    return value


def below(variable: str, value: int, limit: int, limit_name: str) -> None:
    """A rank or index must point inside its world: ``value < limit``."""
    if value >= limit:
        raise ClusterError(variable, f"{value} is outside the world of {limit} ({limit_name})")


def port(variable: str, text: str) -> int:
    value = integer(variable, text)
    if not 1 <= value <= 65535:
        raise ClusterError(variable, f"port {value} is outside 1..65535")
    return value


def host(variable: str, text: str) -> str:
    """A bare host (no port) as platforms give ``MASTER_ADDR``; IPv6 with or without brackets."""
    text = text.strip()
    bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    check_host(variable, text, bare, bracketed=":" in bare)
    return bare


# -- addresses --------------------------------------------------------------------------------------------------
def split_address(variable: str, address: object) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` -> (host, port); an unbracketed IPv6 address is ambiguous and refused."""
    if not isinstance(address, str) or not address:
        raise ClusterError(variable, f"cluster address {address!r} is not a 'host:port' string")
    if address.startswith("["):
        name, sep, rest = address[1:].partition("]")
        if not sep:
            raise ClusterError(variable, f"cluster address {address!r} has no closing ']'")
        if not rest.startswith(":"):
            raise ClusterError(variable, f"cluster address {address!r} has no port")
        port_text = rest[1:]
    else:
        name, sep, port_text = address.rpartition(":")
        if not sep:
            raise ClusterError(variable, f"cluster address {address!r} has no port")
        if ":" in name:
            raise ClusterError(variable, f"cluster address {address!r}: write an IPv6 host in brackets, [host]:port")
    if not name:
        raise ClusterError(variable, f"cluster address {address!r} has no host")
    check_host(variable, address, name, bracketed=address.startswith("["))
    if not _PORT.fullmatch(port_text):
        raise ClusterError(variable, f"cluster address {address!r}: port {port_text!r} is not an integer")
    number = int(port_text)
    if not 1 <= number <= 65535:
        raise ClusterError(variable, f"cluster address {address!r}: port {number} is outside 1..65535")
    return name, number


def check_host(variable: str, address: str, name: str, *, bracketed: bool) -> None:
    """A host is a DNS name, an IPv4 address, or (in brackets) an IPv6 address; nothing else reaches a framework.

    The host becomes ``MASTER_ADDR`` and part of ``TF_CONFIG``, which scripts and shells read: a newline or ``$(``
    in it must stop the replica here, not later in someone's command line.
    """
    if bracketed:
        try:
            address_part, _, zone = name.partition("%")
            if "%" in name and not _ZONE.fullmatch(zone):  # a link-local zone names an interface: eth0, 2
                raise ValueError(name)
            ipaddress.IPv6Address(address_part)
        except ValueError:
            raise ClusterError(variable, f"cluster address {address!r}: {name!r} in brackets is not an IPv6 address"
                               ) from None
        return
    if _DOTTED_DIGITS.fullmatch(name):
        try:
            ipaddress.IPv4Address(name)
        except ValueError:
            raise ClusterError(variable, f"cluster address {address!r}: {name!r} is not an IPv4 address") from None
        return
    if not _HOSTNAME.fullmatch(name):
        raise ClusterError(variable, f"cluster address {address!r}: {name!r} is not a host name, IPv4 address "
                                     "or [IPv6] address")


def format_address(name: str, number: int) -> str:
    """``host:port`` with an IPv6 host bracketed again, the form TF_CONFIG and JAX's coordinator expect."""
    return f"[{name}]:{number}" if ":" in name else f"{name}:{number}"
