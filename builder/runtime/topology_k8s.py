"""The Kubernetes platforms' replicas as their controllers lay them out: each pod's hostname, the DNS names its
peers use, and the env the controller writes into its training container.

Why a replay needs all three: a controller's env names hosts (``<job>-master-0``, ``<trainjob>-node-0-0.<trainjob>``,
``<job>-chief-0.<namespace>.svc``) that only resolve because Kubernetes made them resolvable (a pod's hostname and
subdomain, a headless Service); a local run that gives the containers other names proves nothing about the cluster.
The variable names come from the runtime's platform modules (`platforms`), which read them back; the sources:

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

Standard library only.
"""

from __future__ import annotations

from .contract import JAXJOB, JOBSET, PYTORCHJOB, TFJOB, TRAINJOB
from .platforms import jaxjob, jobset, pytorchjob, trainjob
from .topology_spec import TF_CONFIG, ReplicaSpec, tf_config_json
from .world import DEFAULT_MASTER_PORT, format_address, node_role

TRAINER_NODE = "node"  # kubeflow/trainer pkg/constants Node: the trainer's replicatedJob (and container)
JOBSET_REPLICATED_JOB = "node"  # the one replicatedJob of trainimg's JobSet manifest
NAMESPACE = "default"  # where a replayed TFJob's Services live
#: Each platform's port where the job does not name one: Trainer's ContainerTrainerPort and the port trainimg's
#: JobSet manifest gives (both torch.distributed's customary default), Training Operator's PyTorchJob, TFJob and
#: JAXJob default ports.
DEFAULT_PORTS = {TRAINJOB: DEFAULT_MASTER_PORT, JOBSET: DEFAULT_MASTER_PORT, PYTORCHJOB: 23456, TFJOB: 2222,
                 JAXJOB: 6666}
UNBUFFERED = {"PYTHONUNBUFFERED": "1"}  # what the Training Operator adds to every PyTorchJob and JAXJob container


def _pod(job: str, replicated_job: str, index: int) -> tuple[str, tuple[str, ...]]:
    """(hostname, DNS aliases) of pod `index` of a JobSet's first Job, the subdomain being the JobSet's name."""
    name = jobset.hostname(job, replicated_job, 0, index, job)
    return name.partition(".")[0], (name,)


def _node_spec(name: str, index: int, env: dict[str, str], host: str, aliases: tuple[str, ...]) -> ReplicaSpec:
    """A replica of a platform without roles: node 0 is the chief, node i worker i - 1 (`world.node_role`)."""
    role, role_index = node_role(index)
    return ReplicaSpec(name, role, role_index, None, env, host, aliases)


def trainjob_replicas(replicas: int, nproc: int, job: str, port: int, framework: str) -> list[ReplicaSpec]:
    """A TrainJob of `replicas` nodes: the torch runtime's ``PET_*`` (`nproc` per node), or for a JAX image the JAX
    runtime's ``JAX_*``; pod i's completion index is its node rank."""
    pods = [_pod(job, TRAINER_NODE, i) for i in range(replicas)]
    master = pods[0][1][0]
    nnodes, node_rank, master_addr, master_port = trainjob.TORCH
    (nproc_per_node,) = trainjob.TORCH_OPTIONAL
    processes, process_id, coordinator = trainjob.JAX
    specs = []
    for i, (host, aliases) in enumerate(pods):
        if framework == "jax":
            env = {processes: str(replicas), process_id: str(i), coordinator: format_address(master, port)}
        else:
            env = {nnodes: str(replicas), nproc_per_node: str(nproc), node_rank: str(i), master_addr: master,
                   master_port: str(port)}
        specs.append(_node_spec(f"{TRAINER_NODE}-0-{i}", i, {**env, jobset.INDEX: str(i)}, host, aliases))
    return specs


def pytorchjob_replicas(replicas: int, nproc: int, job: str, port: int) -> list[ReplicaSpec]:
    """A PyTorchJob: ``<job>-master-0`` and workers ``<job>-worker-<i>``, `nproc` processes per node."""
    master_addr, master_port, world_size, rank, nnodes = pytorchjob.REQUIRED
    node_rank, nproc_per_node, pet_master_addr, pet_master_port = pytorchjob.OPTIONAL
    names = ["master-0", *(f"worker-{i}" for i in range(replicas - 1))]
    master = f"{job}-{names[0]}"
    specs = []
    for node, name in enumerate(names):
        env = {**UNBUFFERED, master_addr: master, pet_master_addr: master, master_port: str(port),
               pet_master_port: str(port), world_size: str(replicas * nproc), rank: str(node), node_rank: str(node),
               nnodes: str(replicas), nproc_per_node: str(nproc)}
        specs.append(_node_spec(name, node, env, f"{job}-{name}", ()))
    return specs


def jaxjob_replicas(replicas: int, job: str, port: int) -> list[ReplicaSpec]:
    """A JAXJob: workers ``<job>-worker-<i>``, worker 0 the coordinator (a host without port, and the port)."""
    address, coordinator_port, processes, process_id = jaxjob.REQUIRED
    specs = []
    for i in range(replicas):
        env = {**UNBUFFERED, coordinator_port: str(port), address: f"{job}-worker-0", processes: str(replicas),
               process_id: str(i)}
        specs.append(_node_spec(f"worker-{i}", i, env, f"{job}-worker-{i}", ()))
    return specs


def jobset_replicas(replicas: int, job: str, port: int) -> list[ReplicaSpec]:
    """trainimg's JobSet: one Job of `replicas` pods, each with its completion index and the ``JOBSET_*`` values."""
    name, replicated_job, job_index, job_replicas, pods, subdomain, port_variable = jobset.VARIABLES
    shared = {name: job, replicated_job: JOBSET_REPLICATED_JOB, job_index: "0", job_replicas: "1",
              pods: str(replicas), subdomain: job, port_variable: str(port)}
    return [_node_spec(f"{JOBSET_REPLICATED_JOB}-0-{i}", i, {jobset.INDEX: str(i), **shared},
                       *_pod(job, JOBSET_REPLICATED_JOB, i))
            for i in range(replicas)]


def tfjob_replicas(replicas: int, ps: int, evaluators: int, job: str, port: int) -> list[ReplicaSpec]:
    """A TFJob: one chief, `replicas - 1` workers, `ps`, `evaluators`; ``TF_CONFIG`` names every Service but the
    evaluators', and only when the job has more than one replica of any role."""
    counts = {"chief": 1, "worker": replicas - 1, "ps": ps, "evaluator": evaluators}
    hosts = {role: [f"{job}-{role}-{i}" for i in range(count)] for role, count in counts.items()}

    def service(host: str) -> str:
        return f"{host}.{NAMESPACE}.svc"

    cluster = {role: [format_address(service(h), port) for h in hosts[role]]
               for role in ("chief", "worker", "ps") if hosts[role]}
    distributed = sum(counts.values()) > 1
    return [ReplicaSpec(f"{role}-{i}", role, i, None,
                        {TF_CONFIG: tf_config_json(cluster, role, i, None)} if distributed else {},
                        host, (service(host),))
            for role, names in hosts.items() for i, host in enumerate(names)]
