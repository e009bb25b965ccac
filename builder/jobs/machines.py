"""Which accelerators a Google Cloud machine type carries: the check that a job's ``--accelerator`` can be
allocated on its ``--machine-type`` at all.

Why: the platforms accept the request body (the accelerator type is a valid enum value, the machine type a valid
name) and fail only when the machines are allocated, after the job has queued: ``n1-standard-8`` with H100s,
``a3-highgpu-8g`` with A100s, 16 V100s on N1, a TPU on an A2. The table is data (``data/machines.yaml``, each part
with its source page), so it can be corrected against Google's pages without touching the logic. Two kinds of
machine type:

* fixed: the machine type comes with its accelerators (A2, A3, A4, G2, G4: a fixed GPU type and count; the TPU
  machine types). The job must ask for exactly one of the listed ``TYPE:COUNT``; asking for none is refused too,
  since the launcher would start one process on a machine with eight GPUs.
* attached: GPUs attach to a series (N1) in listed counts, each count allowing at most so many vCPUs and GB.

A machine type in neither carries no accelerator. Platform enums (which names a platform accepts at all) are
`fields.accelerator_types`; this table is about the machines, the same for every platform that runs on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

import yaml
from pydantic import BaseModel, ConfigDict

from ..errors import UserInputError
from .gputable import section
from .nearest import did_you_mean
from .shape import SpecOptions

Accelerator = tuple[str, int]  # (type, count), as `fields.parse_accelerator` returns it


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FixedTable(_Frozen):
    """Machine types that come with their accelerators: name -> every ``TYPE:COUNT`` it can be given; `platforms`
    names the only platforms that run them (None: every platform)."""

    source: str
    platforms: tuple[str, ...] | None = None
    machine_types: dict[str, tuple[str, ...]]


class Shape(_Frozen):
    """A family's shapes: ``<family>-<vCPUs>`` for each listed vCPU count, with `gb_per_vcpu` GB per vCPU."""

    gb_per_vcpu: float
    vcpus: tuple[int, ...]


class Limit(_Frozen):
    """The largest machine a given number of accelerators attaches to."""

    vcpus: int
    memory_gb: float


class AttachedSeries(_Frozen):
    """A series GPUs attach to: its shapes, and per accelerator type the counts it takes with their limits."""

    source: str
    shapes: dict[str, Shape]
    accelerators: dict[str, dict[int, Limit]]


class MachineTable(_Frozen):
    fixed: tuple[FixedTable, ...]
    attached: tuple[AttachedSeries, ...]


@dataclass(frozen=True)
class Machine:
    """One machine type as the table describes it: what it comes with, or the series GPUs attach to."""

    name: str
    carries: tuple[Accelerator, ...] = ()
    platforms: tuple[str, ...] | None = None
    series: AttachedSeries | None = None
    vcpus: int = 0
    memory_gb: float = 0.0

    def runs_on(self, platform: str) -> bool:
        return self.platforms is None or platform in self.platforms


@cache
def load_machine_table() -> MachineTable:
    """``data/machines.yaml``, parsed once."""
    text = resources.files(__package__).joinpath("data/machines.yaml").read_text(encoding="utf-8")
    return MachineTable.model_validate(yaml.safe_load(text))


@cache
def machines() -> dict[str, Machine]:
    """Every machine type the table names, fixed and attached alike, by name."""
    table = load_machine_table()
    found: dict[str, Machine] = {}
    for fixed in table.fixed:
        for name, rows in fixed.machine_types.items():
            found[name] = Machine(name, carries=tuple(_accelerator(row) for row in rows), platforms=fixed.platforms)
    for series in table.attached:
        for family, shape in series.shapes.items():
            for vcpus in shape.vcpus:
                name = f"{family}-{vcpus}"
                found[name] = Machine(name, series=series, vcpus=vcpus, memory_gb=vcpus * shape.gb_per_vcpu)
    return found


def most_accelerators() -> int:
    """The most accelerators any one machine type carries (a2-megagpu-16g's 16)."""
    table = load_machine_table()
    return max([c for m in machines().values() for _, c in m.carries]
               + [c for s in table.attached for counts in s.accelerators.values() for c in counts])


def comes_with_accelerators(machine_type: str) -> bool:
    """True for a machine type whose accelerators are part of it (A2, A3, G2, TPU...): every replica on it, a
    parameter server included, has them, so its machine spec names them."""
    machine = machines().get(machine_type)
    return machine is not None and bool(machine.carries)


def check_machine_accelerator(machine_type: str, accelerator: Accelerator | None, platform: str) -> None:
    """Refuse `accelerator` (None: no accelerator) on `machine_type` unless the table says that machine carries it
    on `platform`.

    Raises `UserInputError` on ``--accelerator`` naming what the machine carries and where the accelerator runs
    (on ``--machine-type`` for a machine type of other platforms only).
    """
    machine = machines().get(machine_type)
    if machine is not None and not machine.runs_on(platform):
        raise UserInputError(f"{machine_type} is a machine type of {', '.join(machine.platforms or ())} only, not "
                             f"of {platform}", where="--machine-type")
    if machine is None:
        if accelerator is not None:
            raise UserInputError(f"{machine_type} carries no accelerators; {where_it_runs(accelerator, platform)}",
                                 where="--accelerator")
        return
    if machine.carries:
        if accelerator in machine.carries:
            return
        offered = " or ".join(_show(a) for a in machine.carries)
        if accelerator is None:
            raise UserInputError(f"{machine_type} comes with {offered}; add --accelerator {offered}",
                                 where="--accelerator")
        raise UserInputError(f"{machine_type} comes with {offered}, not {_show(accelerator)}; "
                             f"{where_it_runs(accelerator, platform)}", where="--accelerator")
    if accelerator is not None:
        _check_attached(machine, accelerator, platform)


def where_it_runs(accelerator: Accelerator, platform: str) -> str:
    """Where the table places `accelerator` on `platform`: the machine types that come with it, the series it
    attaches to, or the counts its type comes in; one clause for an error message."""
    name, count = accelerator
    table = load_machine_table()
    places = []
    fixed = [m.name for m in machines().values() if accelerator in m.carries and m.runs_on(platform)]
    if fixed:
        places.append(f"comes with {', '.join(fixed)}")
    for series in table.attached:
        limit = series.accelerators.get(name, {}).get(count)
        if limit is not None:
            families = ", ".join(f"{family}-*" for family in series.shapes)
            places.append(f"attaches to {families} of at most {limit.vcpus} vCPUs and {limit.memory_gb:g} GB")
    if places:
        return f"{_show(accelerator)} " + "; ".join(places)
    counts = sorted({c for m in machines().values() for t, c in m.carries if t == name and m.runs_on(platform)}
                    | {c for s in table.attached for c in s.accelerators.get(name, {})})
    if counts:
        return f"{name} comes in counts of {', '.join(map(str, counts))}"
    return f"no machine type carries {name} (Google Cloud's table: trainimg's jobs/data/machines.yaml)"


def _check_attached(machine: Machine, accelerator: Accelerator, platform: str) -> None:
    """An accelerator on a series it attaches to: a type the series takes, in a count it takes, within the count's
    vCPU and memory limits."""
    assert machine.series is not None
    name, count = accelerator
    limits = machine.series.accelerators.get(name)
    if limits is None:
        raise UserInputError(f"{machine.name} takes {', '.join(machine.series.accelerators)}, not {name}; "
                             f"{where_it_runs(accelerator, platform)}", where="--accelerator")
    limit = limits.get(count)
    if limit is None:
        raise UserInputError(f"{machine.name} takes {name} in counts of {', '.join(map(str, limits))}, not {count}",
                             where="--accelerator")
    if machine.vcpus > limit.vcpus or machine.memory_gb > limit.memory_gb:
        fitting = [f"{name}:{c}" for c, lim in limits.items()
                   if machine.vcpus <= lim.vcpus and machine.memory_gb <= lim.memory_gb]
        instead = f"use {' or '.join(fitting)}, or a smaller machine type" if fitting else "use a smaller machine type"
        raise UserInputError(f"{machine.name} ({machine.vcpus} vCPUs, {machine.memory_gb:g} GB) is larger than "
                             f"{count} {name} allow (at most {limit.vcpus} vCPUs and {limit.memory_gb:g} GB); "
                             f"{instead}", where="--accelerator")


def _accelerator(row: str) -> Accelerator:
    """A table row's ``TYPE:COUNT``."""
    name, _, count = row.partition(":")
    if not name or not count.isdigit():
        raise ValueError(f"data/machines.yaml: expected TYPE:COUNT, got {row!r}")
    return name, int(count)


def _show(accelerator: Accelerator) -> str:
    return f"{accelerator[0]}:{accelerator[1]}"


def google_gpu_of(accelerator: str) -> str | None:
    """The GPU behind a Vertex or AI Platform accelerator type (``data/gpus.yaml``'s ``google``), None for a TPU."""
    names: dict[str, str | None] = section("google", dict[str, str | None])
    return names.get(accelerator)


def google_gpu_request(opts: SpecOptions) -> tuple[str, str] | None:
    """``--accelerator TYPE:COUNT`` names the GPU of a Google Cloud job."""
    return ("--accelerator", opts.accelerator.partition(":")[0]) if isinstance(opts.accelerator, str) else None


def check_machine_series(opts: SpecOptions) -> None:
    """A Google machine type belongs to a series the machine table names or a CPU series training runs."""
    machine_type = opts.machine_type
    if not isinstance(machine_type, str):
        return
    known, other = machines(), section("google_other_series", tuple[str, ...])
    series = {name.partition("-")[0] for name in known} | set(other)
    if machine_type in known or machine_type.partition("-")[0] in series:
        return
    hint = did_you_mean(machine_type, [*known, *(f"{s}-standard-8" for s in other)])
    raise UserInputError(f"{machine_type!r} is no Google Cloud machine type training runs (series: "
                         f"{', '.join(sorted(series))}){'; ' + hint if hint else ''}", where="--machine-type")
