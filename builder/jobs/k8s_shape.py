"""The validated input of the Kubernetes manifest writers (`trainjob`, `pytorchjob`, `tfjob`, `jobset`).

Why its own type and not `shape.JobShape`: a Kubernetes job has no machine type, pools, regions or reducers; it has
a namespace, and nodes that each run the whole container command. Every field is checked when a `K8sJob` is made,
so a writer only lays out, and every refusal is one line (`kubernetes.ManifestInputError`) naming the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..recipe.loading import FRAMEWORKS as RECIPE_FRAMEWORKS
from ..runtime.shm import local_ranks, size_for
from .kubernetes import ManifestInputError, dns1035_label, dns1123_label
from .node import env_list

FRAMEWORKS = tuple(f for f in RECIPE_FRAMEWORKS if f != "none")


@dataclass(frozen=True, kw_only=True)
class K8sJob:
    """One distributed job: `nodes` pods (one per node), each running `command` with `gpus_per_node` GPUs
    (0: a CPU job). `command` is the container's full command (it replaces the image's ENTRYPOINT), kept as a
    tuple so the job stays immutable. `namespace` None: the one ``kubectl`` is using."""

    name: str
    image: str
    nodes: int
    gpus_per_node: int
    command: Sequence[str]
    framework: str
    namespace: str | None = None
    env: tuple[tuple[str, str], ...] = ()  # the job's environment (`node.job_env`): a node's variables go here

    def __post_init__(self) -> None:
        dns1035_label(self.name, "name")
        if self.namespace is not None:
            dns1123_label(self.namespace, "namespace")
        if not isinstance(self.image, str) or not self.image or self.image != self.image.strip():
            raise ManifestInputError(f"expected an image reference, got {self.image!r}", where="image")
        _count(self.nodes, "nodes", minimum=1)
        _count(self.gpus_per_node, "gpus_per_node", minimum=0)
        if self.framework not in FRAMEWORKS:
            raise ManifestInputError(f"expected one of {', '.join(FRAMEWORKS)}, got {self.framework!r}",
                                     where="framework")
        command = tuple(self.command) if isinstance(self.command, (list, tuple)) else None
        if not command or not all(isinstance(part, str) for part in command) or not command[0]:
            raise ManifestInputError(f"expected a non-empty list of strings, got {self.command!r}", where="command")
        object.__setattr__(self, "command", command)

    @property
    def nproc(self) -> int:
        """Processes per node: one per GPU, 1 on a CPU node."""
        return self.gpus_per_node or 1

    @property
    def shm(self) -> int:
        """Bytes of /dev/shm the pod asks for: `shm.size_for` its local ranks (one per GPU), 0 for one."""
        return size_for(local_ranks(1, self.gpus_per_node))

    @property
    def env_vars(self) -> list[dict[str, Any]]:
        """The job's environment as the container's ``env`` entries."""
        return env_list(self.env)


def _count(value: int, where: str, *, minimum: int) -> None:
    # bool is an int subclass; True nodes is a typo, not 1.
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ManifestInputError(f"expected an integer >= {minimum}, got {value!r}", where=where)
