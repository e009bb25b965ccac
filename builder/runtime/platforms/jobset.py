"""JobSet (``jobset.x-k8s.io/v1alpha2``): one pod per node, and nothing of its own in the environment.

Kubernetes gives an Indexed Job's pods ``JOB_COMPLETION_INDEX``; JobSet gives each pod the hostname
``<jobset>-<replicatedJob>-<jobIndex>-<podIndex>.<subdomain>`` (subdomain: the JobSet's name unless
``network.subdomain`` says) and labels (``jobset.sigs.k8s.io/jobset-name``, ``replicatedjob-name``, ``job-index``,
``replicatedjob-replicas``: kubernetes-sigs/jobset ``api/jobset/v1alpha2/jobset_types.go``). A pod sees its labels
only through the downward API, so the manifest ``trainimg spec --platform jobset`` writes sets the variables
below (the labels by ``fieldRef``, the Job's parallelism, subdomain and port as values); a hand-written JobSet sets
the same. Node rank = job index x pods per job + completion index; the rendezvous is pod 0 of job 0.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..contract import JOBSET
from ..shm import POD, NodeShm
from ..world import DEFAULT_MASTER_PORT, ClusterInfo, below, format_address, host, integer, node_role, port, present, \
    require
from ..topology_spec import Job, ReplicaSpec, node_spec

NAME = JOBSET
STARTS = None  # the launcher starts them
PORT = DEFAULT_MASTER_PORT  # what trainimg's JobSet manifest gives (torch.distributed's customary default)
NO_TF_CONFIG: str | None = None  # it runs TensorFlow
NOT_EMULATED: str | None = (  # why selftest cannot emulate it on 127.0.0.1: its hosts are DNS names, not variables
    "a JobSet's pods reach each other by DNS names (<jobset>-<job>-<i>-<pod>.<subdomain>) that no emulation can "
    "point at 127.0.0.1; run `trainimg test --platform jobset`, or `selftest --cluster` in the JobSet")
SHM: NodeShm = POD  # its /dev/shm: a pod's (`shm.POD`)
REPLICATED_JOB = "node"  # the one replicatedJob of trainimg's JobSet manifest
INDEX = "JOB_COMPLETION_INDEX"  # Kubernetes' own, in every Indexed Job pod (TrainJob's too)
# name -> the pod label the manifest copies into it (None: a value the manifest writes)
VARIABLES: dict[str, str | None] = {
    "JOBSET_NAME": "jobset.sigs.k8s.io/jobset-name",
    "JOBSET_REPLICATED_JOB": "jobset.sigs.k8s.io/replicatedjob-name",
    "JOBSET_JOB_INDEX": "jobset.sigs.k8s.io/job-index",
    "JOBSET_JOB_REPLICAS": "jobset.sigs.k8s.io/replicatedjob-replicas",
    "JOBSET_PODS_PER_JOB": None,
    "JOBSET_SUBDOMAIN": None,
    "JOBSET_PORT": None,
}
REQUIRED = (INDEX, *VARIABLES)
RECOGNISED = REQUIRED  # what `platforms.VARIABLES` gathers
#: A variable only a platform sets but that describes no world alone -> what would (`platforms.detect`'s rule 4).
STRAYS = {INDEX: "a JobSet's pods need the JOBSET_* variables (trainimg spec --platform jobset writes them)"}


def claims(env: Mapping[str, str]) -> tuple[str, ...]:
    """The JOBSET_ variables are the signature; JOB_COMPLETION_INDEX alone is any Indexed Job's."""
    return present(env, REQUIRED) if present(env, tuple(VARIABLES)) else ()


def hostname(jobset: str, replicated_job: str, job: int, pod: int, subdomain: str) -> str:
    """The name a JobSet pod is reachable at (with ``network.enableDNSHostnames``)."""
    return f"{jobset}-{replicated_job}-{job}-{pod}.{subdomain}"


def read(env: Mapping[str, str], *, reduction_server: bool = False) -> ClusterInfo:
    got = require(env, NAME, REQUIRED)
    pods = integer("JOBSET_PODS_PER_JOB", got["JOBSET_PODS_PER_JOB"], least=1)
    jobs = integer("JOBSET_JOB_REPLICAS", got["JOBSET_JOB_REPLICAS"], least=1)
    pod = integer(INDEX, got[INDEX])
    below(INDEX, pod, pods, "JOBSET_PODS_PER_JOB")
    job = integer("JOBSET_JOB_INDEX", got["JOBSET_JOB_INDEX"])
    below("JOBSET_JOB_INDEX", job, jobs, "JOBSET_JOB_REPLICAS")
    name, replicated, subdomain = got["JOBSET_NAME"], got["JOBSET_REPLICATED_JOB"], got["JOBSET_SUBDOMAIN"]
    number = port("JOBSET_PORT", got["JOBSET_PORT"])
    hosts = [hostname(name, replicated, j, p, subdomain) for j in range(jobs) for p in range(pods)]
    master = host("JOBSET_NAME", hosts[0])
    node = job * pods + pod
    role, index = node_role(node)
    return ClusterInfo(
        platform=NAME, role=role, index=index, rank=node, world_size=len(hosts), master_addr=master,
        master_port=number, trial=None,
        tf_config={"cluster": {"worker": [format_address(h, number) for h in hosts]},
                   "task": {"type": "worker", "index": node}},
        variables=REQUIRED,
    )


# -- the replay (`topology.replica_specs`) --------------------------------------------------------------------
def pod(job: str, replicated_job: str, index: int) -> tuple[str, tuple[str, ...]]:
    """(hostname, DNS aliases) of pod `index` of a JobSet's first Job, the subdomain being the JobSet's name."""
    name = hostname(job, replicated_job, 0, index, job)
    return name.partition(".")[0], (name,)


def replicas(job: Job) -> list[ReplicaSpec]:
    """trainimg's JobSet: one Job of `job.replicas` pods, each with its completion index and the ``JOBSET_*`` values."""
    name, replicated_job, job_index, job_replicas, pods, subdomain, port_variable = VARIABLES
    shared = {name: job.name, replicated_job: REPLICATED_JOB, job_index: "0", job_replicas: "1",
              pods: str(job.replicas), subdomain: job.name, port_variable: str(job.port)}
    return [node_spec(f"{REPLICATED_JOB}-0-{i}", i, {INDEX: str(i), **shared}, *pod(job.name, REPLICATED_JOB, i))
            for i in range(job.replicas)]


#: (label, env, expected facts) the probe's cluster-parsing check reads back (`probe_platform`).
SAMPLES: tuple[tuple[str, dict[str, str], dict[str, object]], ...] = (
    (NAME, {"JOB_COMPLETION_INDEX": "1", "JOBSET_NAME": "js", "JOBSET_REPLICATED_JOB": "node",
            "JOBSET_JOB_INDEX": "0", "JOBSET_JOB_REPLICAS": "1", "JOBSET_PODS_PER_JOB": "2",
            "JOBSET_SUBDOMAIN": "js", "JOBSET_PORT": "29500"},
     {"platform": NAME, "rank": 1, "world_size": 2, "master_addr": "js-node-0-0.js"}),
)
