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
* ``trainjob``, ``pytorchjob``, ``tfjob``, ``jaxjob``, ``jobset``: `topology_k8s`; ``slurm``: `topology_slurm`;
  ``sagemaker``: `topology_sagemaker`;
  ``azureml``: `topology_azureml`; ``mpi``: `topology_mpi` (every rank as ``mpirun`` starts it).

Unused pools are left out of the cluster. Replicas come back chief first, then workers, ps and evaluators (Slurm:
task by task). `process_start` says how the platform starts each replica's processes; `refusal` which frameworks
a platform cannot run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .contract import AIPLATFORM, AZUREML, JAXJOB, JOBSET, MPI, PLATFORMS, PYTORCHJOB, SAGEMAKER, SLURM, TFJOB, \
    TRAINJOB, UAI, VERTEX, VERTEX_POOLS
from .topology_k8s import DEFAULT_PORTS, jaxjob_replicas, jobset_replicas, pytorchjob_replicas, tfjob_replicas, \
    trainjob_replicas
from .platforms import azureml, who_starts
from .platforms.starts import PLATFORM as STARTED_BY_PLATFORM, SAYS as COUNT_SAID, TORCHRUN as STARTED_BY_TORCHRUN
from .topology_azureml import azureml_replicas
from .topology_mpi import mpi_ranks
from .topology_sagemaker import sagemaker_replicas
from .topology_slurm import job_number, slurm_tasks
from .topology_spec import CLUSTER_SPEC, TF_CONFIG, ReplicaSpec, tf_config_json
from .world import DEFAULT_MASTER_PORT, format_address

_VERTEX_POOL = {role: pool for pool, role in VERTEX_POOLS.items()}
TF_PORT = 2222  # the port of the cloud platforms' TF_CONFIG examples, where a caller names none
#: The roles outside the all-reduce group each platform has; the others run chief and workers only.
SIDE_ROLES = {VERTEX: ("ps", "evaluator"), AIPLATFORM: ("ps", "evaluator"), UAI: ("ps",), TFJOB: ("ps", "evaluator")}
#: Platforms that give TensorFlow no TF_CONFIG, and what to use instead.
NO_TF_CONFIG = {
    TRAINJOB: "Kubeflow Trainer v2 has no TensorFlow runtime",
    PYTORCHJOB: "a PyTorchJob gives TensorFlow no TF_CONFIG",
    JAXJOB: "a JAXJob gives TensorFlow no TF_CONFIG",
    MPI: "mpirun gives TensorFlow no TF_CONFIG",
}
#: The platforms whose own command starts every process of a node (for PyTorch): the launcher is started by them.
TORCHRUN = ("torchrun", "--no-python")  # a TrainJob torch runtime's command: torchrun, reading PET_* as defaults


def refusal(platform: str, framework: str) -> str | None:
    """Why `platform` cannot run a `framework` job (one line naming what can), or None when it can."""
    if framework == "tensorflow" and platform in NO_TF_CONFIG:
        return f"{NO_TF_CONFIG[platform]}: run TensorFlow with --platform {TFJOB} (Training Operator v1 TFJob)"
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
    if platform == SLURM and port is not None:
        raise ValueError("slurm derives its ports from the job id: pass job_id, not port")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int)
                             or not 1 <= port <= (65534 if platform == UAI else 65535)):
        raise ValueError(f"port must be an integer in 1..65535 (UAI also uses port + 1), got {port!r}")


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
    runtime. Raises ValueError for counts, ports or a framework the platform would refuse.
    """
    _check(platform, replicas, ps, evaluators, nproc_per_node, port)
    refused = refusal(platform, framework)
    if refused:
        raise ValueError(refused)
    if use_chief_in_tf_config and platform != AIPLATFORM:
        raise ValueError("use_chief_in_tf_config applies to aiplatform only: the others never send 'master' to TF2")
    if platform == SLURM:
        return slurm_tasks(replicas, nproc_per_node, job, job_number(job) if job_id is None else job_id)
    number = DEFAULT_PORTS.get(platform, TF_PORT) if port is None else port
    if platform == TRAINJOB:
        return trainjob_replicas(replicas, nproc_per_node, job, number, framework)
    if platform == PYTORCHJOB:
        return pytorchjob_replicas(replicas, nproc_per_node, job, number)
    if platform == JAXJOB:
        return jaxjob_replicas(replicas, job, number)
    if platform == MPI:
        return mpi_ranks(replicas, nproc_per_node, job, DEFAULT_MASTER_PORT if port is None else port)
    if platform == JOBSET:
        return jobset_replicas(replicas, job, number)
    if platform == AZUREML:
        return azureml_replicas(replicas, nproc_per_node, job, azureml.DEFAULT_MASTER_PORT if port is None else port,
                                framework)
    if platform == SAGEMAKER:
        return sagemaker_replicas(replicas, job)
    if platform == TFJOB:
        return tfjob_replicas(replicas, ps or 0, evaluators, job, number)
    named = hosts or (lambda role, index: f"{job}-{role}-{index}")
    if platform == UAI:
        return _uai(replicas, replicas if ps is None else ps, named, number, trial)
    return _cloud(platform, {"chief": 1, "worker": replicas - 1, "ps": ps or 0, "evaluator": evaluators}, named,
                  number, trial, use_chief_in_tf_config)


def _cloud(platform: str, counts: dict[str, int], hosts: Callable[[str, int], str], port: int, trial: str | None,
           use_chief_in_tf_config: bool) -> list[ReplicaSpec]:
    """Vertex AI and AI Platform: CLUSTER_SPEC in each one's dialect, and TF_CONFIG (see the module doc)."""
    names = {role: [hosts(role, i) for i in range(count)] for role, count in counts.items()}
    addresses = {role: [format_address(host, port) for host in names[role]] for role in counts}
    tf_chief = "master" if platform == AIPLATFORM and not use_chief_in_tf_config else "chief"
    tf_names = {"chief": tf_chief, "worker": "worker", "ps": "ps"}
    tf_cluster = {tf_names[role]: addresses[role] for role in tf_names if addresses[role]}
    send_tf_config = platform == AIPLATFORM or sum(counts.values()) > 1
    if platform == VERTEX:
        spec_cluster = {_VERTEX_POOL[role]: addresses[role] for role in counts if addresses[role]}
        spec_type = _VERTEX_POOL
    else:
        # AI Platform's CLUSTER_SPEC always says master; an evaluator's task type is not in its cluster.
        spec_type = {"chief": "master", "worker": "worker", "ps": "ps", "evaluator": "evaluator"}
        spec_cluster = {spec_type[role]: addresses[role] for role in tf_names if addresses[role]}
    specs = []
    for role in counts:
        for index, host in enumerate(names[role]):
            env = {CLUSTER_SPEC: tf_config_json(spec_cluster, spec_type[role], index, trial)}
            if send_tf_config:
                env[TF_CONFIG] = tf_config_json(tf_cluster, tf_names.get(role, role), index, trial)
            specs.append(ReplicaSpec(f"{role}-{index}", role, index, None, env, host))
    return specs


def _uai(replicas: int, ps: int, hosts: Callable[[str, int], str], port: int, trial: str | None) -> list[ReplicaSpec]:
    """UAI Train: one master or worker per node, and ps 0..ps-1 beside them on nodes 0..ps-1 at port + 1."""
    if ps > replicas:
        raise ValueError(f"uai places at most one ps per node: ps={ps} exceeds replicas={replicas}")
    node_hosts = [hosts("chief", 0)] + [hosts("worker", i) for i in range(replicas - 1)]
    cluster = {
        "master": [format_address(node_hosts[0], port)],
        "ps": [format_address(node_hosts[i], port + 1) for i in range(ps)],
        "worker": [format_address(host, port) for host in node_hosts[1:]],
    }
    cluster = {name: entries for name, entries in cluster.items() if entries}

    def spec(role: str, index: int, task_type: str, node: int) -> ReplicaSpec:
        return ReplicaSpec(f"{role}-{index}", role, index, node,
                           {TF_CONFIG: tf_config_json(cluster, task_type, index, trial)}, node_hosts[node])

    return [spec("chief", 0, "master", 0), *(spec("worker", i, "worker", i + 1) for i in range(replicas - 1)),
            *(spec("ps", i, "ps", i) for i in range(ps))]
