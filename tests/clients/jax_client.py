"""JAX's own reading of a replica's environment, in the jax venv (protocol: clientio).

* ``detect``: ``ClusterEnv.auto_detect_unset_distributed_params`` with nothing given, what
  ``jax.distributed.initialize()`` does on Slurm and the other clusters JAX knows.
* ``initialize``: ``jax.distributed.initialize`` as trainimg's launcher documents a script calls it, with
  ``num_processes``/``process_id`` from ``JAX_NUM_PROCESSES``/``JAX_PROCESS_ID`` and the coordinator left to JAX
  (which reads ``JAX_COORDINATOR_ADDRESS`` itself). JAX's real ``State.initialize`` runs up to the point where it
  would open the coordinator service and connect its client: those two calls are recorded instead of made.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

from clientio import serve
from jax._src import clusters, distributed


class _Connecting(Exception):
    """Raised where JAX would connect: everything it decided is known by then."""


def _stub_runtime(made: dict[str, Any]) -> SimpleNamespace:
    def service(bind_address: str, num_processes: int, **_: Any) -> object:
        made["service"] = {"bind_address": bind_address, "num_processes": num_processes}
        return object()

    def client(coordinator_address: str, process_id: int, **_: Any) -> object:
        made["client"] = {"coordinator_address": coordinator_address, "process_id": process_id}
        raise _Connecting

    return SimpleNamespace(get_distributed_runtime_service=service, get_distributed_runtime_client=client)


def answer(case: dict[str, Any]) -> dict[str, Any]:
    if case["mode"] == "detect":
        coordinator, processes, process_id, local_ids = clusters.ClusterEnv.auto_detect_unset_distributed_params(
            coordinator_address=None, num_processes=None, process_id=None, local_device_ids=None,
            cluster_detection_method=None, initialization_timeout=None)
        return {"coordinator": coordinator, "num_processes": processes, "process_id": process_id,
                "local_device_ids": None if local_ids is None else list(local_ids)}
    made: dict[str, Any] = {}
    distributed._jax = _stub_runtime(made)
    state = distributed.State()
    try:
        state.initialize(num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
                         process_id=int(os.environ["JAX_PROCESS_ID"]))
    except _Connecting:
        pass
    return {"coordinator": state.coordinator_address, "num_processes": state.num_processes,
            "process_id": state.process_id, **made}


if __name__ == "__main__":
    serve(answer)
