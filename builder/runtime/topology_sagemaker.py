"""A SageMaker training job as SageMaker lays it out: one container per instance, hosts ``algo-1`` .. ``algo-N``,
and in each container ``/opt/ml/input/config/resourceconfig.json`` naming its host and every host, sorted as
SageMaker sorts them (``algo-10`` before ``algo-2``).

Why the file and the names both: the launcher reads the file (`platforms.sagemaker`) and the peers reach each other
by the names it lists, so a replay that mounts another file or gives other names proves nothing about SageMaker.
Containers are named ``<job>-algo-<i>`` (unique to the run) and answer to ``algo-<i>`` on the run's network, as
SageMaker's hosts do on theirs. SageMaker also sets ``TRAINING_JOB_NAME``. Standard library only.
"""

from __future__ import annotations

import json
import posixpath

from .platforms import sagemaker
from .topology_spec import ReplicaSpec
from .world import node_role

GROUP = "homogeneousCluster"  # the one instance group of a job without instance groups
INSTANCE_TYPE = "ml.c5.xlarge"  # what a replay's resource config says it runs on: a CPU instance
INTERFACE = "eth0"
JOB_NAME = "TRAINING_JOB_NAME"
CONFIG_PATH = posixpath.join(sagemaker.DEFAULT_BASE_DIR, sagemaker.RESOURCE_CONFIG)


def resource_config(current: str, hosts: list[str]) -> str:
    """The file as SageMaker writes it for host `current` (AWS's "How Amazon SageMaker Provides Training
    Information"; the instance group keys as sagemaker-training reads them)."""
    return json.dumps({"current_host": current, "current_instance_type": INSTANCE_TYPE, "current_group_name": GROUP,
                       "hosts": hosts, "instance_groups": [{"instance_group_name": GROUP,
                                                            "instance_type": INSTANCE_TYPE, "hosts": hosts}],
                       "network_interface_name": INTERFACE}, sort_keys=True)


def sagemaker_replicas(replicas: int, job: str) -> list[ReplicaSpec]:
    """Every instance of a `replicas`-instance job named `job`, in SageMaker's host order (node rank order)."""
    hosts = sorted(f"algo-{i}" for i in range(1, replicas + 1))
    specs = []
    for node, name in enumerate(hosts):
        role, index = node_role(node)
        specs.append(ReplicaSpec(name, role, index, None, {JOB_NAME: job}, f"{job}-{name}", (name,),
                                 {CONFIG_PATH: resource_config(name, hosts)}))
    return specs
