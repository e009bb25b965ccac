"""The replicas of a job as each platform lays them out, so the host can replay a platform locally.

Conformance runs start one container per replica and must give each exactly what the real platform would (its
env, its hostname, the DNS names its peers use) and start its processes the way the platform does, or a green
local run proves nothing about the cloud one. The cloud shapes follow the platforms' documentation (seeds 000-004):

* ``vertex``: pools ``workerpool0`` (one chief), ``workerpool1`` (``replicas - 1`` workers), ``workerpool2``
  (``ps``), ``workerpool3`` (``evaluators``) in ``CLUSTER_SPEC`` on every replica; ``TF_CONFIG`` (chief/worker/ps,
  evaluator never in the cluster) only when the job has more than one replica in total.
* ``aiplatform``: ``CLUSTER_SPEC`` with ``master``/``worker``/``ps`` and ``TF_CONFIG`` on every replica. A custom
  container's TF_CONFIG names the chief with the deprecated ``master`` (TensorFlow 2 rejects it) unless the job set
  ``useChiefInTfConfig`` (``use_chief_in_tf_config=True`` here): the service's default is replayed by default, since
  that is what an image meets when a job does not opt in (seed 001, "chief en comparación con master").
* ``uai``: ``TF_CONFIG`` only, nodes ``0..replicas-1``: node 0 runs the ``master``, node i >= 1 runs worker i-1,
  and every node also runs a ps (ps i on node i, same host, ``port + 1``) unless ``ps`` says how many (then ps
  0..ps-1 on nodes 0..ps-1). A ps shares its node's host, so its spec carries ``node`` for the caller to share the
  network namespace.
* every platform: its module in `platforms` lays its replicas out (``replicas(job)``, default ``PORT``,
  ``STARTS``) and says what is its own (the side roles it has, a port it cannot take, the one option only it
  reads); this module checks a job against those and dispatches (`REPLAYS`), naming no platform itself.

The Kubernetes platforms' replicas as their controllers lay them out: each pod's hostname, the DNS names its peers
use, and the env the controller writes into its training container.

Why a replay needs all three: a controller's env names hosts (``<job>-master-0``, ``<trainjob>-node-0-0.<trainjob>``,
``<job>-chief-0.<namespace>.svc``) that only resolve because Kubernetes made them resolvable (a pod's hostname and
subdomain, a headless Service); a local run that gives the containers other names proves nothing about the cluster.
Each platform module (`platforms`) lays out its own replicas beside reading them back; the sources:

* Kubeflow Trainer v2 ``TrainJob`` (kubeflow/trainer v2.3 ``pkg/runtime/framework/plugins/{torch,jax}``): a JobSet
  whose replicatedJob `TRAINER_NODE` runs pod ``i`` as ``<trainjob>-node-0-<i>``, subdomain ``<trainjob>``;
  Kubernetes adds ``JOB_COMPLETION_INDEX`` (an Indexed Job). The torch runtime writes torchrun's ``PET_*``, the JAX
  runtime ``JAX_*`` (one process per node); TensorFlow has no runtime.
* Training Operator v1 (kubeflow/training-operator v1.9 ``pkg/controller.v1``): pods and Services
  ``<job>-<role>-<i>`` with lower-case roles. ``PyTorchJob`` (``pytorch/envvar.go``): one master, workers after it,
  ``RANK`` the node index; ``TFJob`` (``tensorflow/tensorflow.go``): ``TF_CONFIG`` naming the Services'
  ``<job>-<role>-<i>.<namespace>.svc:<port>``, evaluators outside the cluster, only for more than one replica;
  ``JAXJob`` (``jax/envvar.go``): workers only, worker 0 the coordinator.
* JobSet (``jobset.x-k8s.io/v1alpha2``): the manifest ``trainimg spec --platform jobset`` writes, one replicatedJob
  `JOBSET_REPLICATED_JOB` of one Indexed Job, its pods given the ``JOBSET_*`` variables (`platforms.jobset`).


Unused pools are left out of the cluster. Replicas come back chief first, then workers, ps and evaluators (Slurm:
task by task). `process_start` says how the platform starts each replica's processes; `refusal` which frameworks
a platform cannot run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from .contract import PLATFORMS
from .platforms import BY_NAME, having, trait, who_starts
from .platforms.starts import PLATFORM as STARTED_BY_PLATFORM, SAYS as COUNT_SAID, TORCHRUN as STARTED_BY_TORCHRUN
from .topology_spec import Job, ReplicaSpec

#: Each platform the host replays -> the runtime module that reads its env and lays out its replicas
#: (``replicas(job)``, ``PORT``): the one registry `detect` and `replica_specs` both go through.
REPLAYS: dict[str, ModuleType] = BY_NAME
#: The roles outside the all-reduce group each platform has (its module's ``SIDE_ROLES``); the others run chief and
#: workers only.
SIDE_ROLES: dict[str, tuple[str, ...]] = having("SIDE_ROLES")
#: Platforms that give TensorFlow no TF_CONFIG, and why (each platform module's ``NO_TF_CONFIG``).
NO_TF_CONFIG: dict[str, str] = having("NO_TF_CONFIG")
#: Where those send a TensorFlow job: the platform whose module says it is TensorFlow's home (``TENSORFLOW_HOME``).
TENSORFLOW_HOMES: dict[str, str] = having("TENSORFLOW_HOME")
#: Platforms whose ports come from elsewhere than a port (``PORT_REFUSED``: why, and what to pass instead).
PORT_REFUSED: dict[str, str] = having("PORT_REFUSED")
#: Platforms that run a ps beside each node, at most one per node (``PS_PER_NODE``).
PS_PER_NODE: tuple[str, ...] = tuple(having("PS_PER_NODE"))
#: Platforms whose replicas share one folder (``SHARED_OUTPUT``: its path in every replica).
SHARED_OUTPUT: dict[str, str] = having("SHARED_OUTPUT")
#: The platforms whose TF_CONFIG may name the chief ``master``: `replica_specs` takes ``use_chief_in_tf_config``.
CHIEF_OPTIONAL: tuple[str, ...] = tuple(having("CHIEF_IN_TF_CONFIG_OPTIONAL"))
#: The platforms whose own command starts every process of a node (for PyTorch): the launcher is started by them.
TORCHRUN = ("torchrun", "--no-python")  # a TrainJob torch runtime's command: torchrun, reading PET_* as defaults


def refusal(platform: str, framework: str) -> str | None:
    """Why `platform` cannot run a `framework` job (one line naming what can), or None when it can."""
    if framework == "tensorflow" and platform in NO_TF_CONFIG:
        homes = " or ".join(f"--platform {name} ({what})" for name, what in TENSORFLOW_HOMES.items())
        return f"{NO_TF_CONFIG[platform]}: run TensorFlow with {homes}"
    return None


@dataclass(frozen=True)
class ProcessStart:
    """How a platform starts a replica's processes, for the host to replay around a program.

    `wrapper` is the platform's own command before the program (a TrainJob torch runtime's torchrun); `nproc` is
    the ``--nproc-per-node`` the launcher must be given, None where the platform started the processes or its env
    says how many; `per_node` counts each node's processes in the all-reduce.
    """

    wrapper: tuple[str, ...]
    nproc: int | None
    per_node: int


def process_start(platform: str, framework: str, nproc_per_node: int) -> ProcessStart:
    """Who starts them is each platform module's ``STARTS`` (`platforms.starts`). Slurm, mpirun and Azure ML's
    pytorch distribution start every process (one replica each, `nproc_per_node` on
    a node); a TrainJob's torch runtime runs torchrun, which starts the node's processes from ``PET_*``; a PyTorchJob
    says its count in ``PET_NPROC_PER_NODE``; elsewhere the launcher starts them (TensorFlow: one per replica,
    ``MultiWorkerMirroredStrategy`` drives the node's GPUs)."""
    how = who_starts(platform, framework)
    if how == STARTED_BY_PLATFORM:
        return ProcessStart((), None, nproc_per_node)
    if how == STARTED_BY_TORCHRUN:
        return ProcessStart(TORCHRUN, None, nproc_per_node)
    per_node = 1 if framework == "tensorflow" else nproc_per_node
    said = how == COUNT_SAID or nproc_per_node == 1
    return ProcessStart((), None if said else nproc_per_node, per_node)


def _check(platform: str, replicas: int, ps: int | None, evaluators: int, nproc_per_node: int,
           port: int | None) -> None:
    """Raise ValueError, one line, for counts or ports the platform would refuse."""
    for name, value, least in (("replicas", replicas, 1), ("ps", ps, 0), ("evaluators", evaluators, 0),
                               ("nproc_per_node", nproc_per_node, 1)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    if platform not in PLATFORMS:
        raise ValueError(f"unknown platform {platform!r}; expected one of {', '.join(PLATFORMS)}")
    for role, count, name in (("ps", ps, "ps"), ("evaluator", evaluators, "evaluators")):
        if count and role not in SIDE_ROLES.get(platform, ()):
            raise ValueError(f"{platform} has no {role} replicas; pass {name}=0")
    if platform in PORT_REFUSED and port is not None:
        raise ValueError(f"{platform} {PORT_REFUSED[platform]}")
    used: int = trait(platform, "PORTS_USED", 1)
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65536 - used):
        also = f" ({platform} also uses port + {used - 1})" if used > 1 else ""
        raise ValueError(f"port must be an integer in 1..{65536 - used}{also}, got {port!r}")


def replica_specs(
    platform: str,
    replicas: int,
    *,
    ps: int | None = None,
    evaluators: int = 0,
    job: str = "job",
    hosts: Callable[[str, int], str] | None = None,
    port: int | None = None,
    trial: str | None = None,
    use_chief_in_tf_config: bool = False,
    nproc_per_node: int = 1,
    framework: str = "pytorch",
    job_id: int | None = None,
) -> list[ReplicaSpec]:
    """Every replica of a `platform` job with `replicas` training replicas (nodes; Slurm: `nproc_per_node` tasks
    on each) named `job` (a DNS label: the Kubernetes platforms derive pod and Service names from it, Slurm its
    node names and, without `job_id`, its job id).

    `hosts(role, index)` names the host of a cloud platform's replica (role is chief, worker, ps or evaluator; UAI
    ps replicas reuse their node's host and never ask); by default ``<job>-<role>-<index>``. `port` defaults to the
    platform's own. `trial` goes into each task as the cloud platforms send it. `framework` picks a TrainJob's
    runtime. Raises ValueError for counts, ports or a framework the platform would refuse. The layout itself is
    the platform module's ``replicas(job)`` (`REPLAYS`), with its ``PORT`` where `port` is None.
    """
    _check(platform, replicas, ps, evaluators, nproc_per_node, port)
    refused = refusal(platform, framework)
    if refused:
        raise ValueError(refused)
    if use_chief_in_tf_config and platform not in CHIEF_OPTIONAL:
        raise ValueError(f"use_chief_in_tf_config applies to {', '.join(CHIEF_OPTIONAL)} only: the others never "
                         "send 'master' to TF2")
    module = REPLAYS[platform]
    number = module.PORT if port is None else port
    return module.replicas(Job(
        platform=platform, replicas=replicas, name=job, port=number or 0,
        hosts=hosts or (lambda role, index: f"{job}-{role}-{index}"), nproc=nproc_per_node, ps=ps,
        evaluators=evaluators, trial=trial, use_chief_in_tf_config=use_chief_in_tf_config, framework=framework,
        job_id=job_id))
