"""The grammar of `trainimg spec`'s flags, checked against what each platform's API accepts.

Why here and not at submission: a typo in an accelerator or region fails only after the job has queued for GPUs.
Accelerator types are checked against the platform's own enum (``data/accelerators.yaml``: Vertex's
``AcceleratorType`` proto and AI Platform's ``ml.v1.json`` list; a test asserts both equal their source), not just
the spelling pattern, so ``NVIDIA_TESLA_A1000`` or ``TPU_V2_POD`` on Vertex stops here with the accepted names.
Every refusal is a `UserInputError` naming the flag.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from importlib import resources

import yaml

from ..errors import UserInputError
from ..runtime.contract import CLOUD_PLATFORMS
from .flagdecl import Flag
from .machines import most_accelerators

_ACCELERATOR_RE = re.compile(r"^([A-Z0-9_]+):([0-9]{1,3})$")
_MACHINE_RE = re.compile(r"^[a-z][a-z0-9-]{0,62}$")
_REGION_RE = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
FORMATS = ("rest", "gcloud")

# The flags Vertex and AI Platform both read (`vertex.FLAGS`, `aiplatform.FLAGS`).
MACHINE_TYPE = Flag("--machine-type", "The replicas' Compute Engine machine type.", metavar="TYPE", required=True,
                    replaces=("--instance-type", "--vm-size"))
ACCELERATOR = Flag("--accelerator", "GPUs per replica, a type from the platform's enum (NVIDIA_H100_80GB:8).",
                   metavar="TYPE:COUNT", replaces=("--gpus",))
PS = Flag("--ps", "Parameter servers.", kind=int, default=0)
EVALUATORS = Flag("--evaluators", "Evaluators.", kind=int, default=0)
FORMAT = Flag("--format", "rest (default): the API request (JSON); gcloud: the YAML file gcloud's --config reads.",
              choices=FORMATS, dest="form")
REGION = Flag("--region", "Vertex: only picks the Reduction Server image's multi-region (us, europe, asia), the "
              "job's own region being gcloud's --region or the API URL's; AI Platform: trainingInput.region (default "
              "us-central1). Checked as a region name on both.", metavar="REGION")
GOOGLE_CLOUD_FLAGS = (MACHINE_TYPE, ACCELERATOR, PS, EVALUATORS, REGION, FORMAT)


@cache
def accelerator_types() -> dict[str, tuple[str, ...]]:
    """platform -> the accelerator type names its API accepts, in the source's order (read once)."""
    text = resources.files(__package__).joinpath("data/accelerators.yaml").read_text(encoding="utf-8")
    return {platform: tuple(names) for platform, names in yaml.safe_load(text).items()}


def parse_accelerator(accelerator: str | None, platform: str) -> tuple[str, int] | None:
    """``NVIDIA_TESLA_V100:8`` -> ``("NVIDIA_TESLA_V100", 8)`` when `platform` accepts the type; None stays None."""
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
    known = accelerator_types()[platform]
    if match.group(1) not in known:
        raise UserInputError(f"{platform} has no accelerator type {match.group(1)!r}; it accepts {', '.join(known)}",
                             where="--accelerator")
    count, most = int(match.group(2)), most_accelerators()
    if not 1 <= count <= most:
        raise UserInputError(f"count must be 1..{most}, got {count}", where="--accelerator")
    return match.group(1), count


def nproc_per_node(accelerator: str | None, platform: str) -> int:
    """Processes the launcher starts per replica: one per GPU (the accelerator COUNT), 1 for a CPU replica.

    The count comes from the same flag that asks the platform for the GPUs, so the two can never disagree.
    """
    parsed = parse_accelerator(accelerator, platform)
    return parsed[1] if parsed else 1


def check_platform(platform: object) -> str:
    if platform not in CLOUD_PLATFORMS:
        raise UserInputError(f"expected one of {', '.join(CLOUD_PLATFORMS)}, got {platform!r}", where="--platform")
    return str(platform)


def check_machine_type(machine_type: object) -> str:
    if not isinstance(machine_type, str) or not _MACHINE_RE.match(machine_type):
        raise UserInputError(f"expected a machine type such as n1-highmem-96, got {machine_type!r}",
                             where="--machine-type")
    return machine_type


def check_region(region: object) -> str:
    if not isinstance(region, str) or not _REGION_RE.match(region):
        raise UserInputError(f"expected a region such as us-central1, got {region!r}", where="--region")
    return region


def count(value: object, flag: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserInputError(f"expected an integer, got {value!r}", where=flag)
    if value < minimum:
        raise UserInputError(f"must be at least {minimum}, got {value}", where=flag)
    return value


def strings(values: object, what: str) -> list[str]:
    if isinstance(values, str) or not isinstance(values, Sequence) or not all(isinstance(v, str) for v in values):
        raise UserInputError(f"expected a list of strings, got {values!r}", where=what)
    return list(values)
