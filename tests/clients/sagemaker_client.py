"""The sagemaker-training toolkit's own reading of a SageMaker container (protocol: clientio), in its venv.

A case is one host of a job: its ``env`` names the folder laid out like ``/opt/ml`` (``SAGEMAKER_BASE_DIR``) and a
PATH whose ``nvidia-smi`` lists the instance's GPUs (the toolkit counts GPUs with ``nvidia-smi --list-gpus``; this
machine has none). The toolkit reads its base dir when ``sagemaker_training.environment`` is imported, so the module
is reloaded under each case's environment, as a fresh container would import it. The answer: what its
``Environment`` settles (hosts, current host, GPUs, master, instance type, interface), the ``SM_*`` variables it
would give the user's program, and the torchrun command its ``TorchDistributedRunner`` builds for
``torch_distributed`` (``_create_command``, built, never run).
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from clientio import serve
from sagemaker_training import environment, runner

logging.disable(logging.CRITICAL)
SM_KEYS = ("SM_HOSTS", "SM_CURRENT_HOST", "SM_NUM_GPUS", "SM_CURRENT_INSTANCE_TYPE", "SM_NETWORK_INTERFACE_NAME")


def answer(case: dict[str, Any]) -> dict[str, Any]:
    importlib.reload(environment)
    env = environment.Environment()
    sm = env.to_env_vars()
    command = runner.get(runner.TorchDistributedRunnerType, user_entry_point=case["entry_point"], args=case["args"],
                         env_vars={})._create_command()
    return {"hosts": env.hosts, "current_host": env.current_host, "num_gpus": env.num_gpus,
            "master_hostname": env.master_hostname, "is_master": env.is_master,
            "current_instance_type": env.current_instance_type, "network_interface_name": env.network_interface_name,
            "sm_env": {key: sm[key] for key in SM_KEYS}, "torchrun": command}


if __name__ == "__main__":
    serve(answer)
