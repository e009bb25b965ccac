"""Vertex AI Reduction Server: the reducer pool's image and size, from sourced bandwidth figures.

Vertex's sizing rule (seed 003): the reducers' total egress must match or exceed the workers' (primary included),
because every worker sends its gradients to every reducer. The figures are data (``data/bandwidth.yaml``, each with
its source), so they can be corrected against Google's pages without touching the logic; a machine type without a
sourced figure is refused rather than guessed.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import cache
from importlib import resources

import yaml
from pydantic import BaseModel, ConfigDict

from ..errors import UserInputError
from .fields import check_region, parse_accelerator

DEFAULT_REDUCER_MACHINE = "n1-highcpu-16"
REDUCTION_SERVER_IMAGE = "{prefix}-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"
# Vertex publishes the Reduction Server image in three multi-regions; a job picks the one nearest its region.
REDUCTION_SERVER_PREFIXES = ("us", "europe", "asia")

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



def reduction_server_image(region: str | None) -> str:
    """The Reduction Server image nearest `region` (us-central1 -> us-docker.pkg.dev/...); default ``us``.

    Vertex publishes it only in the us, europe and asia multi-regions; pulling from the nearest one keeps the
    reducers' start-up fast, and a region outside those three has no documented image, so it is refused.
    """
    if region is None:
        return REDUCTION_SERVER_IMAGE.format(prefix="us")
    prefix = check_region(region).split("-", 1)[0]
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
    *,
    platform: str,
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
    parsed = parse_accelerator(accelerator, platform)  # the job's platform: its accelerator names
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
