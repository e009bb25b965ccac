"""What an image's environment may not hold: the variables of one node (``data/node_env.yaml``, with sources).

Why: NCCL and gloo read the node's wiring from the environment (interfaces, InfiniBand adapters and GIDs, the
network plugin, the PCI topology). Set in an image, one cluster's wiring travels to every other: NCCL then binds an
interface the node does not have and hangs or fails at its first collective. The table is the one rule; `validate`
refuses a recipe (or an ``extends``) that sets one as image environment, ``trainimg test`` refuses an image whose
config sets one (a team's image built ``FROM`` trainimg's included), and ``trainimg spec --env`` is where they go.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from importlib import resources

import yaml
from pydantic import BaseModel, ConfigDict


class NodeVariable(BaseModel):
    """A node's variable: what its value names, and the page that says so."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    names: str
    source: str


class NodeEnvTable(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    source: str
    variables: dict[str, NodeVariable]


@cache
def node_env_table() -> NodeEnvTable:
    """``data/node_env.yaml``, parsed once."""
    text = resources.files(__package__).joinpath("data/node_env.yaml").read_text(encoding="utf-8")
    return NodeEnvTable.model_validate(yaml.safe_load(text))


def node_variables(names: Iterable[str]) -> list[str]:
    """The node variables among `names`, in the order given."""
    table = node_env_table().variables
    return [name for name in names if name in table]


def why_not_in_image(name: str) -> str:
    """One clause for a refusal of `name` in an image: what it names and where it goes instead."""
    row = node_env_table().variables[name]
    return (f"{name} names {row.names}: a node's fact, not an image's ({row.source}); set it where the job runs "
            f"(trainimg spec --env {name}=VALUE, the platform's job environment or the node's /etc/nccl.conf)")
