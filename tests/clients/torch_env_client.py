"""torch.distributed's own ``env://`` rendezvous on each case's env (protocol: clientio), in the torch venv.

``init_process_group(init_method="env://")`` calls ``torch.distributed.rendezvous("env://")``, whose handler
(``torch/distributed/rendezvous.py`` ``_env_rendezvous_handler``) reads ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT`` and then opens the TCPStore on the master. The handler runs for real; only the store it would open on
the master's host (a host of the generated job, not this machine) is replaced by a ``HashStore``, after the handler
has handed it the figures it read, which are the answer.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch.distributed as dist
from clientio import serve

_rendezvous = importlib.import_module("torch.distributed.rendezvous")  # the module, not the function of that name
_seen: dict[str, Any] = {}


def _record_store(hostname: str, port: int, rank: int, world_size: int, *_args: Any, **_kwargs: Any) -> dist.Store:
    _seen.update(master_addr=hostname, master_port=port, rank=rank, world_size=world_size)
    return dist.HashStore()


_rendezvous._create_c10d_store = _record_store


def answer(case: dict[str, Any]) -> dict[str, Any]:
    _seen.clear()
    _store, rank, world_size = next(dist.rendezvous("env://"))
    assert (rank, world_size) == (_seen["rank"], _seen["world_size"])
    return dict(_seen)


if __name__ == "__main__":
    serve(answer)
