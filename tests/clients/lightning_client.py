"""Lightning's ``SLURMEnvironment`` (lightning-fabric, in the torch venv) on each case's env (protocol: clientio):
the ranks, the world and the rendezvous a Lightning job would use. Its constructor validates the srun variables
itself and may refuse; that refusal is the answer.
"""

from __future__ import annotations

import warnings
from typing import Any

from clientio import serve
from lightning_fabric.plugins.environments.slurm import SLURMEnvironment


def answer(case: dict[str, Any]) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "srun is available but not used" concerns the host, not the case
        slurm = SLURMEnvironment()
    return {"detect": SLURMEnvironment.detect(), "world_size": slurm.world_size(), "global_rank": slurm.global_rank(),
            "local_rank": slurm.local_rank(), "node_rank": slurm.node_rank(), "main_address": slurm.main_address,
            "main_port": slurm.main_port}


if __name__ == "__main__":
    serve(answer)
