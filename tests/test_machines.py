"""Accelerators against the machine types that carry them (builder/jobs/machines.py, data/machines.yaml).

A generated matrix of every machine type the table names (and CPU machine types it does not) x every accelerator
type of each platform's enum x every count 1..16, plus no accelerator, goes through `job_spec`; what it accepts
must be exactly what the table, read raw, publishes, every accepted body must be taken by the platform's real
client (google-cloud-aiplatform's strict ``CustomJob`` parse, ``ml.v1.json`` through tests/mlschema.py), and rows
copied by hand from Google's pages (the issue's cases among them) must come out as published.
Fast: no Docker, no network.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import mlschema
import pytest
import yaml
from google.cloud import aiplatform_v1
from trainimg.errors import UserInputError
from trainimg.jobs.fields import accelerator_types
from trainimg.jobs.machines import load_machine_table, machines, most_accelerators
from trainimg.jobs.reducers import load_bandwidth
from trainimg.jobs.shape import SpecOptions
from trainimg.jobs.spec import job_spec

ROOT = Path(__file__).resolve().parents[1]
RAW = yaml.safe_load((ROOT / "builder" / "jobs" / "data" / "machines.yaml").read_text(encoding="utf-8"))
IMAGE = "us-docker.pkg.dev/proj/train/pytorch:2.9.1-cu128-py3.12"
# Machine types with no accelerator in Google Cloud's tables (general-purpose, compute- and memory-optimized).
CPU_MACHINES = ("e2-standard-8", "n2-standard-32", "n2d-highmem-16", "c2-standard-60", "n1-megamem-96",
                "n1-ultramem-40")
# Compute Engine machine types (some with GPUs or TPUs) that Vertex training's machine type list leaves out, so the
# table names none of them and every accelerator on them is refused.
NOT_TRAINING_MACHINES = ("n1-standard-1", "n1-standard-2", "n1-highcpu-2", "n1-highcpu-4", "n1-highcpu-8",
                         "a3-edgegpu-8g", "g4-standard-6", "g4-standard-24", "ct4p-hightpu-4t")
# Enum names the table places on no machine type of the platform: K80 ended on 2024-05-01; Vertex training lists no
# TPU v4 machine type (its configure-compute page, read 2026-11-24); AI Platform ran TPUs on its `cloud_tpu` worker
# type, which spec does not write.
UNCARRIED = {"vertex": {"NVIDIA_TESLA_K80", "TPU_V4_POD"},
             "aiplatform": {"NVIDIA_TESLA_K80", "TPU_V2", "TPU_V3", "TPU_V2_POD", "TPU_V3_POD", "TPU_V4_POD"}}

# Rows as Google's pages publish them, copied by hand: (machine type, accelerator, carried?).
PUBLISHED = [
    ("n1-highmem-96", "NVIDIA_TESLA_V100:8", True),  # seed 003's example
    ("n1-highmem-96", "NVIDIA_TESLA_V100:4", False),  # 4 V100: at most 48 vCPUs
    ("n1-highmem-96", "NVIDIA_TESLA_V100:16", False),  # N1 takes 1, 2, 4 or 8
    ("n1-standard-8", "NVIDIA_TESLA_V100:1", True),
    ("n1-standard-16", "NVIDIA_TESLA_V100:1", False),  # 1 V100: at most 12 vCPUs
    ("n1-standard-96", "NVIDIA_TESLA_T4:4", True),
    ("n1-standard-64", "NVIDIA_TESLA_T4:2", False),  # 2 T4: at most 48 vCPUs
    ("n1-standard-32", "NVIDIA_TESLA_T4:1", False),  # Vertex's GPU table: T4 in 2 or 4 on n1-standard-32
    ("n1-standard-32", "NVIDIA_TESLA_T4:2", True),
    ("n1-standard-16", "NVIDIA_TESLA_T4:1", True),
    ("n1-standard-64", "NVIDIA_TESLA_P100:4", False),  # Vertex: 4 P100 at most 64 vCPUs and 208 GB everywhere
    ("n1-highcpu-64", "NVIDIA_TESLA_P100:4", True),
    ("n1-standard-2", "NVIDIA_TESLA_T4:1", False),  # no Vertex training machine type
    ("a3-edgegpu-8g", "NVIDIA_H100_80GB:8", False),  # Compute Engine's A3 Edge: no Vertex training machine type
    ("n1-highcpu-96", "NVIDIA_TESLA_P4:4", True),
    ("n1-highmem-16", "NVIDIA_TESLA_P100:1", True),  # 16 vCPUs, 104 GB: exactly the limit
    ("n1-standard-8", "NVIDIA_TESLA_T4:3", False),
    ("n1-standard-8", "NVIDIA_H100_80GB:8", False),
    ("n1-standard-8", "NVIDIA_TESLA_K80:1", False),
    ("n1-standard-8", "NVIDIA_L4:1", False),
    ("a3-highgpu-8g", "NVIDIA_H100_80GB:8", True),
    ("a3-highgpu-8g", "NVIDIA_TESLA_A100:8", False),
    ("a3-highgpu-8g", "NVIDIA_H100_80GB:4", False),
    ("a3-highgpu-4g", "NVIDIA_H100_80GB:4", True),
    ("a3-megagpu-8g", "NVIDIA_H100_MEGA_80GB:8", True),
    ("a3-ultragpu-8g", "NVIDIA_H200_141GB:8", True),
    ("a4-highgpu-8g", "NVIDIA_B200:8", True),
    ("a4x-highgpu-4g", "NVIDIA_GB200:4", True),
    ("a2-highgpu-8g", "NVIDIA_H100_80GB:8", False),
    ("a2-highgpu-8g", "NVIDIA_TESLA_A100:8", True),
    ("a2-ultragpu-8g", "NVIDIA_A100_80GB:8", True),
    ("a2-megagpu-16g", "NVIDIA_TESLA_A100:16", True),
    ("a2-megagpu-16g", "NVIDIA_A100_80GB:16", False),
    ("a2-megagpu-16g", "TPU_V2:8", False),
    ("g2-standard-24", "NVIDIA_L4:2", True),
    ("g2-standard-24", "NVIDIA_L4:1", False),
    ("g2-standard-96", "NVIDIA_L4:8", True),
    ("g4-standard-384", "NVIDIA_RTX_PRO_6000:8", True),
    ("g4-standard-48", "NVIDIA_RTX_PRO_6000:1", True),
    ("g4-standard-192", "NVIDIA_RTX_PRO_6000:4", True),
    ("a3-highgpu-1g", "NVIDIA_H100_80GB:1", True),
    ("g2-standard-32", "NVIDIA_L4:1", True),
    ("g2-standard-48", "NVIDIA_L4:4", True),
    ("cloud-tpu", "TPU_V3:8", True),
    ("cloud-tpu", "TPU_V2:4", False),
    ("ct5lp-hightpu-4t", "TPU_V5_LITEPOD:4", True),
    ("ct4p-hightpu-4t", "TPU_V4_POD:4", False),  # no TPU v4 machine type on Vertex training
    ("e2-standard-8", "NVIDIA_TESLA_T4:1", False),
]


def published(platform: str) -> tuple[dict[str, set[tuple[str, int]]], set[str]]:
    """From the raw YAML: machine type -> every (type, count) it carries on `platform` (fixed machine types: their
    rows; N1 shapes: each count whose vCPU and memory limits hold the shape), and the machine types that come
    with their accelerators (never without one)."""
    carried: dict[str, set[tuple[str, int]]] = {}
    fixed: set[str] = set()
    for part in RAW["fixed"]:
        if platform in part.get("platforms", [platform]):
            for machine, rows in part["machine_types"].items():
                carried[machine] = {(row.split(":")[0], int(row.split(":")[1])) for row in rows}
                fixed.add(machine)
    for part in RAW["attached"]:
        for family, shape in part["shapes"].items():
            for vcpus in shape["vcpus"]:
                memory = vcpus * shape["gb_per_vcpu"]
                carried[f"{family}-{vcpus}"] = {
                    (name, count) for name, limits in part["accelerators"].items() for count, limit in limits.items()
                    if vcpus <= limit["vcpus"] and memory <= limit["memory_gb"]}
    return carried, fixed


def verdict(platform: str, machine: str, accelerator: str | None) -> dict | None:
    """The body `job_spec` writes for one combination, or None when it refuses it (one line, on a flag)."""
    try:
        return job_spec(SpecOptions(platform=platform, image=IMAGE, replicas=2, machine_type=machine,
                                    accelerator=accelerator, command=("python", "t.py")))
    except UserInputError as err:
        assert err.where in ("--accelerator", "--machine-type") and "\n" not in str(err), err
        return None


def other_platforms_machines(platform: str) -> set[str]:
    return {m for part in RAW["fixed"] if platform not in part.get("platforms", [platform])
            for m in part["machine_types"]}


@pytest.mark.parametrize("platform", ["vertex", "aiplatform"])
def test_machine_matrix_agrees_with_the_table(platform: str) -> None:
    carried, fixed = published(platform)
    foreign = other_platforms_machines(platform)
    names = accelerator_types()[platform]
    counts = range(1, most_accelerators() + 1)
    machine_types = sorted(carried) + sorted(foreign) + list(CPU_MACHINES) + list(NOT_TRAINING_MACHINES)
    cases = [(m, None) for m in machine_types] + [
        (m, f"{n}:{c}") for m, n, c in itertools.product(machine_types, names, counts)]
    disagree, accepted, placed = [], 0, set()
    for machine, accelerator in cases:
        body = verdict(platform, machine, accelerator)
        if accelerator is None:
            expected = machine not in fixed and machine not in foreign
        else:
            name, count = accelerator.split(":")
            expected = (name, int(count)) in carried.get(machine, set())
        if (body is not None) != expected:
            disagree.append(f"{platform} {machine} {accelerator}: spec {'accepts' if body else 'refuses'}")
            continue
        if body is None:
            continue
        accepted += 1
        placed.update([accelerator.split(":")[0]] if accelerator else [])
        if platform == "vertex":
            job = aiplatform_v1.CustomJob.from_json(json.dumps(body), ignore_unknown_fields=False)
            spec = job.job_spec.worker_pool_specs[0].machine_spec
            assert (spec.machine_type, spec.accelerator_count) == (machine, int(accelerator.split(":")[1])
                                                                   if accelerator else 0)
        else:
            assert mlschema.validate("Job", body) == [], body
    print(f"\n{platform}: {len(cases)} machine type x accelerator x count cases, {accepted} accepted (each taken by "
          f"the real client), {len(disagree)} disagree with the table")
    assert not disagree, "\n".join(disagree[:20])
    assert len(cases) > 10000
    assert set(names) - placed == UNCARRIED[platform]  # every other enum name runs somewhere


@pytest.mark.parametrize(("machine", "accelerator", "carried"), PUBLISHED)
def test_rows_copied_from_the_published_pages(machine: str, accelerator: str, carried: bool) -> None:
    assert (verdict("vertex", machine, accelerator) is not None) is carried


def test_a_machine_type_that_comes_with_gpus_needs_them() -> None:
    with pytest.raises(UserInputError, match="add --accelerator NVIDIA_H100_80GB:8") as info:
        job_spec(SpecOptions(platform="vertex", image=IMAGE, replicas=1, machine_type="a3-highgpu-8g"))
    assert info.value.where == "--accelerator"
    with pytest.raises(UserInputError, match="vertex only") as info:
        job_spec(SpecOptions(platform="aiplatform", image=IMAGE, replicas=1, machine_type="cloud-tpu"))
    assert info.value.where == "--machine-type"


def test_parameter_servers_on_a_gpu_machine_type_carry_its_gpus() -> None:
    """A parameter server on a2-highgpu-8g is the same machine, GPUs included: its spec names them (nproc 1);
    on N1, where GPUs attach, a parameter server gets none."""
    body = job_spec(SpecOptions(platform="vertex", image=IMAGE, replicas=2, ps=1, machine_type="a2-highgpu-8g",
                                accelerator="NVIDIA_TESLA_A100:8", command=("python", "t.py")))
    ps = body["jobSpec"]["workerPoolSpecs"][2]
    assert ps["machineSpec"] == {"machineType": "a2-highgpu-8g", "acceleratorType": "NVIDIA_TESLA_A100",
                                 "acceleratorCount": 8}
    assert ps["containerSpec"]["command"][:3] == ["trainimg-launch", "--nproc-per-node", "1"]
    aiplatform_v1.CustomJob.from_json(json.dumps(body), ignore_unknown_fields=False)
    ti = job_spec(SpecOptions(platform="aiplatform", image=IMAGE, replicas=2, ps=1, machine_type="a2-highgpu-8g",
                              accelerator="NVIDIA_TESLA_A100:8", command=("python", "t.py")))["trainingInput"]
    assert ti["parameterServerConfig"]["acceleratorConfig"] == {"count": "8", "type": "NVIDIA_TESLA_A100"}
    n1 = job_spec(SpecOptions(platform="vertex", image=IMAGE, replicas=2, ps=1, machine_type="n1-standard-16",
                              accelerator="NVIDIA_TESLA_T4:4"))["jobSpec"]["workerPoolSpecs"][2]
    assert n1["machineSpec"] == {"machineType": "n1-standard-16"}


def test_the_table_names_only_enum_types_and_cites_its_sources() -> None:
    table = load_machine_table()
    enum = set(accelerator_types()["vertex"]) | set(accelerator_types()["aiplatform"])
    named = {n for m in machines().values() for n, _ in m.carries} | {
        n for s in table.attached for n in s.accelerators}
    assert named <= enum, named - enum  # a typo in the table would be a type no platform accepts
    sources = [p.source for p in table.fixed] + [s.source for s in table.attached]
    assert all(s.startswith("https://cloud.google.com/") and "read 2026-11-24" in s for s in sources)
    assert most_accelerators() == 16  # a2-megagpu-16g


def test_bandwidth_figures_are_for_machines_the_table_knows() -> None:
    """bandwidth.yaml's GPU workers, a second transcription of Google's pages, fit this table."""
    for machine, worker in load_bandwidth().gpu_workers.items():
        assert machine in machines(), machine
        for name in worker.accelerators or ():
            accelerator = f"{name}:{worker.accelerator_count}"
            assert verdict("vertex", machine, accelerator) is not None, (machine, accelerator)
