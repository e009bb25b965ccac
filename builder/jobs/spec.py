"""Cloud job bodies: the JSON a team submits to Vertex AI (CustomJob) or AI Platform Training (TrainingInput).

Why this exists: the platform layouts are easy to get subtly wrong and the mistakes only show after a job has
queued for GPUs. Vertex reads a job's cluster from the *position* of each entry in ``workerPoolSpecs`` ([0] the
primary, [1] workers, [2] parameter servers or the Reduction Server, [3] evaluators; an unused pool that sits
before a used one must be ``{}``), and AI Platform from named fields (``masterConfig``, ``workerConfig``,
``parameterServerConfig``). `job_spec` builds either from one set of flags and refuses, before anything is
submitted, the combinations the platforms reject or that would silently run badly:

* Reduction Server: Vertex only; GPU workers only (reducers serve NCCL all-reduce between GPU replicas); at least
  two replicas; never together with parameter servers (both want pool 2); and, when the image's `Variant` is known,
  only for an image with NCCL >= ``compat.nccl.minimum`` (2.7) and ``google-reduction-server`` installed.
  ``"auto"`` sizes the reducer pool so the reducers' total egress matches the workers' (`reducers_for`, with the
  sourced figures in ``builder/data/bandwidth.yaml``).
* AI Platform has no evaluator pool and no Reduction Server.

The launcher: when a command is given, every replica runs it through trainimg's in-image launcher,
``trainimg-launch --nproc-per-node N [--framework F] -- CMD...``, with N the replica's accelerator count (1 without
one). The launcher turns the platform's ``CLUSTER_SPEC``/``TF_CONFIG`` into the framework's variables and starts N
processes per GPU replica (parameter servers and evaluators stay single processes). ``--framework`` is added only
when the image's variant is known, so TensorFlow images run one process per replica as ``MultiWorkerMirroredStrategy``
expects. Without a command the image's own ENTRYPOINT runs with the args, untouched.

``conformance=True`` replaces the program with trainimg's all-reduce check (``python -m trainimg_runtime allreduce``)
so a team can prove a tag on the real cluster, with its real interconnect, before promoting it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from fractions import Fraction
from functools import cache
from importlib import resources
from typing import Any

import yaml
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict

from ..recipe.compat import load_compat
from ..errors import UserInputError
from ..recipe.grammar import is_reference
from ..recipe.loading import Variant

PLATFORMS = ("vertex", "aiplatform")
DEFAULT_REDUCER_MACHINE = "n1-highcpu-16"
DEFAULT_AIPLATFORM_REGION = "us-central1"
REDUCTION_SERVER_IMAGE = "{prefix}-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"
# Vertex publishes the Reduction Server image in three multi-regions; a job picks the one nearest its region.
REDUCTION_SERVER_PREFIXES = ("us", "europe", "asia")
LAUNCHER = "trainimg-launch"
MAX_ACCELERATORS = 16  # the most GPUs one Google Cloud VM carries (a2-megagpu-16g)
BOOT_DISK = {"bootDiskType": "pd-ssd", "bootDiskSizeGb": 100}

_ACCELERATOR_RE = re.compile(r"^([A-Z0-9_]+):([0-9]{1,3})$")
_MACHINE_RE = re.compile(r"^[a-z][a-z0-9-]{0,62}$")
_REGION_RE = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
_JOB_ID_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,127}$")  # AI Platform: letters, digits, underscores


# --- bandwidth data ---------------------------------------------------------------------------------------------


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class WorkerBandwidth(_Frozen):
    """A GPU VM's documented maximum network bandwidth; N1 figures hold only for the stated GPU type and count."""

    gbps: int
    accelerators: tuple[str, ...] | None = None
    accelerator_count: int | None = None
    source: str

    def applies_to(self, accelerator: tuple[str, int] | None) -> bool:
        if self.accelerators is None:
            return True
        return (
            accelerator is not None
            and accelerator[0] in self.accelerators
            and (self.accelerator_count is None or accelerator[1] == self.accelerator_count)
        )

    def describe(self, machine_type: str) -> str:
        if self.accelerators is None:
            return machine_type
        count = f"{self.accelerator_count}x" if self.accelerator_count else ""
        return f"{machine_type} with {count}{'/'.join(self.accelerators)}"


class ReducerBandwidth(_Frozen):
    """A reducer VM's documented maximum egress bandwidth."""

    gbps: int
    source: str


class Bandwidth(_Frozen):
    gpu_workers: dict[str, WorkerBandwidth]
    reducers: dict[str, ReducerBandwidth]


@cache
def load_bandwidth() -> Bandwidth:
    """The sourced bandwidth table (``builder/data/bandwidth.yaml``), parsed once: data, not code, so it can be
    corrected against Google's pages without touching the logic."""
    text = resources.files(__package__).joinpath("data/bandwidth.yaml").read_text(encoding="utf-8")
    return Bandwidth.model_validate(yaml.safe_load(text))


# --- small parsers ----------------------------------------------------------------------------------------------


def parse_accelerator(accelerator: str | None) -> tuple[str, int] | None:
    """``NVIDIA_TESLA_V100:8`` -> ``("NVIDIA_TESLA_V100", 8)``; None stays None (a CPU job).

    One grammar for both platforms (they name accelerators the same way), checked here so a typo fails now rather
    than after the job has waited in the queue.
    """
    if accelerator is None:
        return None
    if not isinstance(accelerator, str):
        raise UserInputError(f"expected TYPE:COUNT, got {accelerator!r}", where="--accelerator")
    match = _ACCELERATOR_RE.match(accelerator)
    if not match:
        raise UserInputError(
            f"expected TYPE:COUNT such as NVIDIA_TESLA_V100:8 (TYPE in A-Z, 0-9, _), got {accelerator!r}",
            where="--accelerator",
        )
    count = int(match.group(2))
    if not 1 <= count <= MAX_ACCELERATORS:
        raise UserInputError(f"count must be 1..{MAX_ACCELERATORS}, got {count}", where="--accelerator")
    return match.group(1), count


def nproc_per_node(accelerator: str | None) -> int:
    """Processes the launcher starts per replica: one per GPU (the accelerator COUNT), 1 for a CPU replica.

    Data-parallel training runs one process per GPU; the count comes from the same flag that asks the platform
    for the GPUs, so the two can never disagree.
    """
    parsed = parse_accelerator(accelerator)
    return parsed[1] if parsed else 1


def reduction_server_image(region: str | None) -> str:
    """The Reduction Server image nearest `region` (us-central1 -> us-docker.pkg.dev/...); default ``us``.

    Vertex publishes it only in the us, europe and asia multi-regions; pulling from the nearest one keeps the
    reducers' start-up fast, and a region outside those three has no documented image, so it is refused.
    """
    if region is None:
        return REDUCTION_SERVER_IMAGE.format(prefix="us")
    prefix = _check_region(region).split("-", 1)[0]
    if prefix not in REDUCTION_SERVER_PREFIXES:
        raise UserInputError(
            f"no Reduction Server image for region {region!r}: Vertex publishes it in "
            f"{', '.join(REDUCTION_SERVER_PREFIXES)} (us-*, europe-*, asia-* regions)",
            where="--region",
        )
    return REDUCTION_SERVER_IMAGE.format(prefix=prefix)


def reducers_for(
    worker_machine_type: str,
    worker_count_incl_chief: int,
    accelerator: str | None,
    reducer_machine_type: str = DEFAULT_REDUCER_MACHINE,
) -> int:
    """How many reducers make the reducers' total egress match or exceed the workers' (primary included).

    That is Vertex's sizing rule for the Reduction Server: every worker sends its gradients to every reducer, so
    fewer reducers than the bandwidth calls for make the reducers the bottleneck. ``ceil(workers * worker_gbps /
    reducer_gbps)``: 5 n1-highmem-96 with 8 V100 (100 Gbps) over n1-highcpu-16 (32 Gbps) -> 16; 8 a2-megagpu-16g
    -> 25. Only sourced figures are used; an unlisted machine type is refused with the known ones listed.
    """
    if isinstance(worker_count_incl_chief, bool) or not isinstance(worker_count_incl_chief, int):
        raise UserInputError(f"expected an integer, got {worker_count_incl_chief!r}", where="--replicas")
    if worker_count_incl_chief < 1:
        raise UserInputError(f"must be at least 1, got {worker_count_incl_chief}", where="--replicas")
    table = load_bandwidth()
    parsed = parse_accelerator(accelerator)
    worker = table.gpu_workers.get(worker_machine_type)
    if worker is None or not worker.applies_to(parsed):
        known = ", ".join(w.describe(name) for name, w in sorted(table.gpu_workers.items()))
        shown = worker_machine_type + (f" with {accelerator}" if accelerator else "")
        raise UserInputError(
            f"auto cannot size reducers for {shown}: no sourced bandwidth figure; known: {known}; "
            "pass an explicit count instead",
            where="--reduction-servers",
        )
    reducer = table.reducers.get(reducer_machine_type)
    if reducer is None:
        raise UserInputError(
            f"no sourced egress figure for reducer machine {reducer_machine_type!r}; "
            f"known: {', '.join(sorted(table.reducers))}",
            where="--reduction-servers",
        )
    return math.ceil(Fraction(worker_count_incl_chief * worker.gbps, reducer.gbps))


# --- job bodies -------------------------------------------------------------------------------------------------


def job_spec(
    platform: str,
    *,
    image: str,
    replicas: int,
    machine_type: str,
    ps: int = 0,
    reduction_servers: int | str | None = None,
    evaluators: int = 0,
    accelerator: str | None = None,
    region: str | None = None,
    args: Sequence[str] = (),
    command: Sequence[str] | None = None,
    variant: Variant | None = None,
    conformance: bool = False,
    display_name: str | None = None,
) -> dict[str, Any]:
    """The request body for `platform` (``vertex``: a CustomJob; ``aiplatform``: a Job with ``trainingInput``).

    `replicas` counts the primary: 1 is a single-node job, N adds N-1 workers on the same machine and accelerator.
    `ps` parameter servers run the same image without accelerator. `reduction_servers` (Vertex only) is a count or
    ``"auto"``. `variant`, when given, is the recipe variant `image` was built from: it lets the Reduction Server
    checks and the launcher's ``--framework`` use what the image really contains. Every refusal is a
    `UserInputError` naming the flag, raised before any body is returned.
    """
    if platform not in PLATFORMS:
        raise UserInputError(f"expected one of {', '.join(PLATFORMS)}, got {platform!r}", where="--platform")
    _check_image(image)
    replicas = _count(replicas, "--replicas", minimum=1)
    ps = _count(ps, "--ps", minimum=0)
    evaluators = _count(evaluators, "--evaluators", minimum=0)
    if not isinstance(machine_type, str) or not _MACHINE_RE.match(machine_type):
        raise UserInputError(f"expected a machine type such as n1-highmem-96, got {machine_type!r}",
                             where="--machine-type")
    parsed = parse_accelerator(accelerator)
    if region is not None:
        _check_region(region)
    args = _strings(args, "args")
    command = None if command is None else _strings(command, "command")
    if command is not None and not command:
        raise UserInputError("an empty command; leave it out to run the image's ENTRYPOINT", where="command")
    if conformance:
        command = _conformance_command(variant, ps, evaluators, command, args)
    reducers = _reducer_count(platform, reduction_servers, replicas, ps, machine_type, accelerator, variant)
    if platform == "aiplatform":
        return _aiplatform(image, replicas, machine_type, ps, evaluators, parsed, region, args, command, variant,
                           display_name)
    return _vertex(image, replicas, machine_type, ps, reducers, evaluators, parsed, region, args, command, variant,
                   conformance, display_name)


def _vertex(image: str, replicas: int, machine_type: str, ps: int, reducers: int, evaluators: int,
            accelerator: tuple[str, int] | None, region: str | None, args: list[str], command: list[str] | None,
            variant: Variant | None, conformance: bool, display_name: str | None) -> dict[str, Any]:
    gpu_machine = _machine_spec(machine_type, accelerator)

    def pool(machine: dict[str, Any], count: int, nproc: int) -> dict[str, Any]:
        container: dict[str, Any] = {"imageUri": image}
        if command is not None:
            container["command"] = _launch(nproc, variant, command)
        container["args"] = list(args)
        return {"machineSpec": machine, "replicaCount": count, "diskSpec": dict(BOOT_DISK), "containerSpec": container}

    nproc = accelerator[1] if accelerator else 1
    pools: list[dict[str, Any]] = [pool(gpu_machine, 1, nproc), {}, {}, {}]
    if replicas > 1:
        pools[1] = pool(_machine_spec(machine_type, accelerator), replicas - 1, nproc)
    if ps:
        pools[2] = pool({"machineType": machine_type}, ps, 1)
    elif reducers:
        # Reducers run Google's image with its own entrypoint, on CPU machines: no command, args or accelerator.
        pools[2] = {
            "machineSpec": {"machineType": DEFAULT_REDUCER_MACHINE},
            "replicaCount": reducers,
            "containerSpec": {"imageUri": reduction_server_image(region)},
        }
    if evaluators:
        pools[3] = pool(_machine_spec(machine_type, accelerator), evaluators, nproc)
    while not pools[-1]:  # pools after the last used one are left out; earlier unused ones stay {}
        pools.pop()
    if display_name is None:
        display_name = "trainimg-" + (f"{variant.name}-" if variant else "") + ("conformance" if conformance else "job")
    if not isinstance(display_name, str) or not display_name.strip() or len(display_name.encode()) > 128:
        raise UserInputError(f"a Vertex display name is 1..128 bytes, got {display_name!r}", where="--display-name")
    return {"displayName": display_name, "jobSpec": {"workerPoolSpecs": pools}}


def _aiplatform(image: str, replicas: int, machine_type: str, ps: int, evaluators: int,
                accelerator: tuple[str, int] | None, region: str | None, args: list[str],
                command: list[str] | None, variant: Variant | None, display_name: str | None) -> dict[str, Any]:
    if evaluators:
        raise UserInputError(
            "AI Platform Training has no evaluator pool (TrainingInput has master, worker and parameter server "
            "replicas only); use --platform vertex",
            where="--evaluators",
        )
    nproc = accelerator[1] if accelerator else 1

    def config(gpu: bool, n: int) -> dict[str, Any]:
        cfg: dict[str, Any] = {"imageUri": image}
        if gpu and accelerator:
            cfg["acceleratorConfig"] = {"count": accelerator[1], "type": accelerator[0]}
        if command is not None:
            # ReplicaConfig.containerCommand; the args go in TrainingInput.args (containerArgs may not be set too).
            cfg["containerCommand"] = _launch(n, variant, command)
        return cfg

    training: dict[str, Any] = {
        "scaleTier": "CUSTOM",
        "masterType": machine_type,
        "masterConfig": config(True, nproc),
    }
    if replicas > 1:
        training["workerType"] = machine_type
        training["workerCount"] = replicas - 1
        training["workerConfig"] = config(True, nproc)
    if ps:
        training["parameterServerType"] = machine_type
        training["parameterServerCount"] = ps
        training["parameterServerConfig"] = config(False, 1)
    training["region"] = region or DEFAULT_AIPLATFORM_REGION
    training["args"] = list(args)
    body: dict[str, Any] = {}
    if display_name is not None:
        if not isinstance(display_name, str) or not _JOB_ID_RE.match(display_name):
            raise UserInputError(
                f"an AI Platform job id starts with a letter and holds only letters, digits and underscores "
                f"(at most 128), got {display_name!r}",
                where="--display-name",
            )
        body["jobId"] = display_name
    body["trainingInput"] = training
    return body


def _launch(nproc: int, variant: Variant | None, command: list[str]) -> list[str]:
    """The replica's container command: CMD behind the in-image launcher, with N processes per node."""
    head = [LAUNCHER, "--nproc-per-node", str(nproc)]
    if variant is not None and variant.framework != "none":
        head += ["--framework", variant.framework]
    return [*head, "--", *command]


def _conformance_command(variant: Variant | None, ps: int, evaluators: int, command: list[str] | None,
                         args: list[str]) -> list[str]:
    """The all-reduce check as the replicas' program; it replaces the user's program, so neither may be given."""
    if command is not None or args:
        raise UserInputError("runs trainimg's all-reduce check instead of your program; drop the command and args",
                             where="--conformance")
    if ps or evaluators:
        raise UserInputError("the all-reduce check runs on the primary and workers only; drop --ps/--evaluators",
                             where="--conformance")
    framework = variant.framework if variant is not None else "pytorch"
    if framework == "none":
        raise UserInputError(f"image {variant.tag if variant else ''} has no framework to run the all-reduce with",
                             where="--conformance")
    return ["python", "-m", "trainimg_runtime", "allreduce", "--framework", framework]


def _reducer_count(platform: str, reduction_servers: int | str | None, replicas: int, ps: int, machine_type: str,
                   accelerator: str | None, variant: Variant | None) -> int:
    """The reducer pool's size (0: none), after every reason to refuse a Reduction Server has been checked."""
    where = "--reduction-servers"
    if reduction_servers is None:
        return 0
    auto = reduction_servers == "auto"
    if not auto:
        if isinstance(reduction_servers, str) and reduction_servers.isdigit():
            reduction_servers = int(reduction_servers)
        if isinstance(reduction_servers, bool) or not isinstance(reduction_servers, int) or reduction_servers < 0:
            raise UserInputError(f"expected a count or 'auto', got {reduction_servers!r}", where=where)
        if reduction_servers == 0:
            return 0
    if platform != "vertex":
        raise UserInputError("the Reduction Server is a Vertex AI feature; AI Platform Training has no reducer pool",
                             where=where)
    if ps:
        raise UserInputError("worker pool 2 holds parameter servers or reducers, not both; drop --ps", where=where)
    if accelerator is None:
        raise UserInputError("the Reduction Server serves GPU workers (NCCL all-reduce); add --accelerator",
                             where=where)
    if replicas < 2:
        raise UserInputError(f"the Reduction Server reduces between replicas; needs --replicas >= 2, got {replicas}",
                             where=where)
    if variant is not None:
        minimum = load_compat().nccl.minimum
        if variant.nccl is None or _version(variant.nccl) < Version(minimum):
            found = f"NCCL {variant.nccl}" if variant.nccl else "no NCCL"
            raise UserInputError(f"image {variant.tag}: {found}; the Reduction Server needs NCCL >= {minimum}",
                                 where=where)
        if not variant.reduction_server:
            raise UserInputError(f"image {variant.tag}: built without google-reduction-server", where=where)
    return reducers_for(machine_type, replicas, accelerator) if auto else int(reduction_servers)


# --- checks -----------------------------------------------------------------------------------------------------


def _machine_spec(machine_type: str, accelerator: tuple[str, int] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"machineType": machine_type}
    if accelerator:
        spec["acceleratorType"] = accelerator[0]
        spec["acceleratorCount"] = accelerator[1]
    return spec


def _count(value: object, flag: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserInputError(f"expected an integer, got {value!r}", where=flag)
    if value < minimum:
        raise UserInputError(f"must be at least {minimum}, got {value}", where=flag)
    return value


def _strings(values: object, what: str) -> list[str]:
    if isinstance(values, str) or not isinstance(values, Sequence) or not all(isinstance(v, str) for v in values):
        raise UserInputError(f"expected a list of strings, got {values!r}", where=what)
    return list(values)


def _check_image(image: object) -> None:
    if not is_reference(image):
        raise UserInputError(f"not an image reference: {image!r}", where="--image")


def _check_region(region: object) -> str:
    if not isinstance(region, str) or not _REGION_RE.match(region):
        raise UserInputError(f"expected a region such as us-central1, got {region!r}", where="--region")
    return region


def _version(text: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        return Version("0")
