"""Amazon SageMaker training: one container per instance (host), told its place by a file, not by variables.

SageMaker writes ``/opt/ml/input/config/resourceconfig.json`` into every training container ("How Amazon SageMaker
Provides Training Information"): ``current_host`` (``algo-2``), ``hosts`` (every host, sorted: ``algo-1`` ..
``algo-N``), ``current_instance_type``, ``network_interface_name``; the hosts reach each other by those names. The
sagemaker-training toolkit (aws/sagemaker-training-toolkit ``environment.py``) reads that file under
``SAGEMAKER_BASE_DIR`` (default ``/opt/ml``) and, when it runs a user's script, adds ``SM_HOSTS`` (JSON),
``SM_CURRENT_HOST``, ``SM_NUM_GPUS``, ``SM_CURRENT_INSTANCE_TYPE``, ``SM_NETWORK_INTERFACE_NAME``. Both are read
here: the file first, then the variables, and where both speak and disagree the replica stops, naming both.

Who starts the processes: for ``torch_distributed`` the toolkit runs ``torchrun --nnodes N --nproc_per_node G
--master_addr hosts[0] --master_port 7777 --node_rank i`` (``torch_distributed.py``); its workers are read by the
`torchrun` layer and keep torchrun's ranks. Otherwise the container holds one process per host and the launcher
maps host to processes: ``SM_NUM_GPUS`` where the toolkit says it (0 GPUs is one process, as the toolkit's
runner counts), else ``--nproc-per-node``; rendezvous ``hosts[0]:7777``, and for TensorFlow a ``TF_CONFIG`` of every
host as a worker on port 2222, the worker port of sagemaker-tensorflow-training's ``_build_tf_config``.

The signature `claims` reports is the variables above and the resource config file where it exists: SageMaker's
own signal is that file, so `detect` keeps one rule for file- and variable-backed platforms alike. Only one
instance group is read: a heterogeneous cluster (several ``instance_groups``) is refused, naming the file.

The replay: a SageMaker training job as SageMaker lays it out: one container per instance, hosts ``algo-1`` ..
``algo-N``, and in each container ``/opt/ml/input/config/resourceconfig.json`` naming its host and every host,
sorted as SageMaker sorts them (``algo-10`` before ``algo-2``).

Why the file and the names both: the launcher reads the file (`read`) and the peers reach each other
by the names it lists, so a replay that mounts another file or gives other names proves nothing about SageMaker.
Containers are named ``<job>-algo-<i>`` (unique to the run) and answer to ``algo-<i>`` on the run's network, as
SageMaker's hosts do on theirs. SageMaker also sets ``TRAINING_JOB_NAME``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..contract import SAGEMAKER
from ..shm import NodeShm
from ..world import ClusterError, ClusterInfo, format_address, host, integer, node_role, present, require
import posixpath
from ..topology_spec import Job, ReplicaSpec

NAME = SAGEMAKER
STARTS = None  # the launcher starts them
PORT = None  # a replay names no port: the launcher reads the hosts from the file
NO_TF_CONFIG: str | None = None  # it runs TensorFlow
NOT_EMULATED: str | None = (  # why selftest cannot emulate it on 127.0.0.1: its hosts are names, not variables
    "SageMaker's hosts are the names algo-1..algo-N its resourceconfig.json lists, which no emulation can point at "
    "127.0.0.1; run `trainimg test --platform sagemaker`, or `selftest --cluster` in the job")
#: Its /dev/shm (`shm.NodeShm`): a CreateTrainingJob request has no field for it and AWS states no size.
SHM = NodeShm(default=None, default_said="not documented: SageMaker states no /dev/shm size for training containers",
              setting=None,
              source="botocore's CreateTrainingJob model has no such field; "
                     "https://github.com/aws/sagemaker-python-sdk/issues/937 and "
                     "https://github.com/aws/sagemaker-pytorch-training-toolkit/issues/117 (no --shm-size to give)")
BASE_DIR_VARIABLE = "SAGEMAKER_BASE_DIR"  # sagemaker_training.environment.BASE_PATH_ENV
DEFAULT_BASE_DIR = "/opt/ml"  # sagemaker_training.environment.SAGEMAKER_BASE_PATH
RESOURCE_CONFIG = "input/config/resourceconfig.json"  # under the base dir
HOSTS, CURRENT_HOST, NUM_GPUS, INSTANCE_TYPE, INTERFACE = (
    "SM_HOSTS", "SM_CURRENT_HOST", "SM_NUM_GPUS", "SM_CURRENT_INSTANCE_TYPE", "SM_NETWORK_INTERFACE_NAME")
TOOLKIT = (HOSTS, CURRENT_HOST, NUM_GPUS, INSTANCE_TYPE, INTERFACE)
VARIABLES = (BASE_DIR_VARIABLE, *TOOLKIT)
RECOGNISED = VARIABLES  # what `platforms.VARIABLES` gathers
#: The file's keys and the toolkit variable that repeats each one.
SAME_FACT = {"hosts": HOSTS, "current_host": CURRENT_HOST, "current_instance_type": INSTANCE_TYPE,
             "network_interface_name": INTERFACE}
NO_BASE_DIR = "/nonexistent/trainimg"  # a base dir without a resource config (`elsewhere`)
MASTER_PORT = 7777  # sagemaker_training.torch_distributed.MASTER_PORT
TF_PORT = 2222  # sagemaker_tensorflow_container.training._build_tf_config's worker port


@dataclass(frozen=True)
class Hosts:
    """What SageMaker says of the cluster, from the file or the toolkit's variables: `facts` holds the file's keys
    (hosts as a list) for the comparison with the toolkit's variables."""

    hosts: list[str]
    current: str
    facts: dict[str, Any]
    source: str  # the file's path, or the variables, as messages name it


def resource_config_path(env: Mapping[str, str]) -> str:
    """Where the resource config is: under ``SAGEMAKER_BASE_DIR`` when set, as the toolkit reads it."""
    return os.path.join(env.get(BASE_DIR_VARIABLE, "").strip() or DEFAULT_BASE_DIR, RESOURCE_CONFIG)


def claims(env: Mapping[str, str]) -> tuple[str, ...]:
    """The toolkit's variables and the resource config file; ``SAGEMAKER_BASE_DIR`` only says where to look."""
    path = resource_config_path(env)
    return (*present(env, TOOLKIT), *((path,) if os.path.isfile(path) else ()))


def elsewhere(env: Mapping[str, str]) -> dict[str, str]:
    """`env` read as if no resource config lay on this machine: a sample of another platform's variables parsed
    inside a SageMaker container (the probe's) must not meet the container's own file."""
    return {**env, BASE_DIR_VARIABLE: NO_BASE_DIR}


def read(env: Mapping[str, str], *, reduction_server: bool = False) -> ClusterInfo:
    path = resource_config_path(env)
    from_env = _toolkit_facts(env)
    if os.path.isfile(path):
        view = _from_file(path)
        _agree(view, from_env)
    else:
        require(env, f"{NAME} (without {path})", (HOSTS, CURRENT_HOST))
        view = _checked(f"{HOSTS}/{CURRENT_HOST}", from_env["hosts"], from_env["current_host"], from_env)
    node = view.hosts.index(view.current)
    role, index = node_role(node)
    gpus = integer(NUM_GPUS, env[NUM_GPUS]) if present(env, (NUM_GPUS,)) else None
    return ClusterInfo(
        platform=NAME, role=role, index=index, rank=node, world_size=len(view.hosts), master_addr=view.hosts[0],
        master_port=MASTER_PORT, trial=None,
        tf_config={"cluster": {"worker": [format_address(h, TF_PORT) for h in view.hosts]},
                   "task": {"type": "worker", "index": node}},
        variables=(*((path,) if view.source == path else ()), *present(env, VARIABLES)),
        platform_nproc=None if gpus is None else str(max(gpus, 1)),
    )


def _from_file(path: str) -> Hosts:
    try:
        with open(path, encoding="utf-8") as fh:
            config = json.load(fh)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise ClusterError(path, f"cannot be read as JSON: {err}") from None
    if not isinstance(config, dict):
        raise ClusterError(path, "is not a JSON object")
    groups = config.get("instance_groups")
    if isinstance(groups, list) and len(groups) > 1:
        raise ClusterError(path, f"describes a heterogeneous cluster ({len(groups)} instance groups); trainimg "
                                 "reads one instance group")
    for key in ("current_instance_type", "network_interface_name"):
        if key in config and not isinstance(config[key], str):
            raise ClusterError(path, f"{key!r} must be a string")
    hosts = _host_list(path, config.get("hosts"))
    current = config.get("current_host")
    return _checked(path, hosts, current, {k: config[k] for k in SAME_FACT if k in config})


def _toolkit_facts(env: Mapping[str, str]) -> dict[str, Any]:
    """The file's facts as the toolkit's variables repeat them, those that are set (hosts parsed and checked)."""
    facts: dict[str, Any] = {key: env[name].strip() for key, name in SAME_FACT.items() if env.get(name, "").strip()}
    if "hosts" in facts:
        try:
            listed = json.loads(facts["hosts"])
        except (ValueError, RecursionError):
            raise ClusterError(HOSTS, f"{facts['hosts']!r} is not a JSON list of host names") from None
        facts["hosts"] = _host_list(HOSTS, listed)
    return facts


def _host_list(variable: str, listed: object) -> list[str]:
    """A non-empty list of distinct host names, each passing the address grammar."""
    if not isinstance(listed, list) or not listed or not all(isinstance(h, str) for h in listed):
        raise ClusterError(variable, "'hosts' must be a non-empty list of host names")
    hosts = [host(variable, name) for name in listed]
    if len(set(hosts)) != len(hosts):
        raise ClusterError(variable, f"'hosts' names a host twice: {listed}")
    return hosts


def _checked(source: str, hosts: list[str], current: object, facts: dict[str, Any]) -> Hosts:
    if not isinstance(current, str) or not current:
        raise ClusterError(source, "has no current host ('current_host')")
    if current not in hosts:
        raise ClusterError(source, f"current host {current!r} is not one of the hosts {hosts}")
    return Hosts(hosts, current, facts, source)


def _agree(from_file: Hosts, from_env: Mapping[str, Any]) -> None:
    """The file and the toolkit's variables describe one cluster, or the replica stops naming both."""
    for key, variable in SAME_FACT.items():
        if key in from_file.facts and key in from_env and from_file.facts[key] != from_env[key]:
            raise ClusterError(variable, f"{from_env[key]!r} disagrees with {key} {from_file.facts[key]!r} in "
                                         f"{from_file.source}")


# -- the replay (`topology.replica_specs`) --------------------------------------------------------------------
GROUP = "homogeneousCluster"  # the one instance group of a job without instance groups
REPLAY_INSTANCE_TYPE = "ml.c5.xlarge"  # what a replay's resource config says it runs on: a CPU instance
REPLAY_INTERFACE = "eth0"
JOB_NAME = "TRAINING_JOB_NAME"
CONFIG_PATH = posixpath.join(DEFAULT_BASE_DIR, RESOURCE_CONFIG)


def resource_config(current: str, hosts: list[str]) -> str:
    """The file as SageMaker writes it for host `current` (AWS's "How Amazon SageMaker Provides Training
    Information"; the instance group keys as sagemaker-training reads them)."""
    return json.dumps({"current_host": current, "current_instance_type": REPLAY_INSTANCE_TYPE,
                       "current_group_name": GROUP,
                       "hosts": hosts, "instance_groups": [{"instance_group_name": GROUP,
                                                            "instance_type": REPLAY_INSTANCE_TYPE, "hosts": hosts}],
                       "network_interface_name": REPLAY_INTERFACE}, sort_keys=True)


def replicas(job: Job) -> list[ReplicaSpec]:
    """Every instance of a `job.replicas`-instance job, in SageMaker's host order (node rank order)."""
    hosts = sorted(f"algo-{i}" for i in range(1, job.replicas + 1))
    specs = []
    for node, name in enumerate(hosts):
        role, index = node_role(node)
        specs.append(ReplicaSpec(name, role, index, None, {JOB_NAME: job.name}, f"{job.name}-{name}", (name,),
                                 {CONFIG_PATH: resource_config(name, hosts)}))
    return specs
