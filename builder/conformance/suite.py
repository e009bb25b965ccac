"""`trainimg test`: prove an image in containers before anyone pushes it.

Two parts, both run by the in-image runtime (`builder.runtime`, mounted when the image lacks it):
1. the probe, in one container without network: versions against the labels (Python, framework and its CUDA
   build, NCCL through ctypes, cuDNN), the Reduction Server's files (or their declared absence), hypertune
   really writing a metric, the runtime parsing every platform's env, GPUs, duplicate CUDA libraries;
2. the all-reduce: N containers on a fresh network with exactly the env the chosen platform injects and the
   hostnames it gives, each starting its processes as the platform does (Slurm one container per task, a
   TrainJob's torchrun, else `trainimg-launch`) and running a tiny framework all-reduce; the exact sum is checked
   on every rank. A framework the platform cannot run (TensorFlow without TF_CONFIG) is refused before anything
   starts.
On machines whose engine has GPUs, the NCCL path runs one container per GPU; elsewhere it is skipped, with the
reason. With `--os-fixes`, a third container (the only one with a way out) looks for the OS packages whose
security fix is published and not applied (conformance/osfixes.py). A passing run is recorded by image ID: the
record is what `push` asks for. The probe's and the all-reduce's processes record the image's files they read
(runtime/reads.py, conformance/startreads.py): the suite's `prefetch`, the order an eStargz push puts first.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..engine.base import ContainerSpec, Engine, GpuRequest
from ..errors import UserInputError
from ..options import TestOptions
from ..recipe.compat import load_compat
from ..runtime.cause import reason as cause_of
from ..runtime.contract import PLATFORMS, VARIANT_LABEL
from ..runtime.expect import expectations as image_expectations
from ..runtime.report import Check, Suite
from ..runtime.gpus import gpu_count, too_many_processes
from ..runtime.platforms import trait
from ..runtime.shm import CONTAINER_DEFAULT, local_ranks, size_for
from ..runtime.topology import process_start, refusal, replica_specs
from ..runtime.verdict import judge_allreduce
from . import inimage
from .imageenv import image_env_check
from .osfixes import os_fixes_check
from .replicas import ReplicaJob, ReplicaRunner, reapable
from .startreads import StartReads
from .structure import structure_checks


def expectations(labels: Mapping[str, str]) -> dict[str, Any]:
    """The runtime's expectations (one derivation, shared with the in-image selftest); an image from before
    its NCCL floor label is held to today's compatibility data."""
    return image_expectations(labels, nccl_minimum=load_compat().nccl.minimum)


def gpu_ready(engine: Engine) -> tuple[int, str]:
    """(GPU count, reason when 0)."""
    n = gpu_count()
    if n == 0:
        return 0, "no GPU"
    if not engine.gpu_runtime():
        return 0, f"{n} GPU(s) but the engine has no NVIDIA runtime (install nvidia-container-toolkit)"
    return n, ""


def refuse_too_many_processes(engine: Engine, cuda_variant: bool, nproc_per_node: int) -> None:
    """`gpus.too_many_processes` on the host, before any container starts: a node here is this engine's machine,
    its GPUs those the engine can hand out (`gpu_ready`); NCCL is the backend only for a CUDA variant on an
    engine with GPUs (as `Conformance._gpu_allreduce` picks it), else gloo and any count goes.
    Raises UserInputError (one line naming both numbers)."""
    gpus = gpu_ready(engine)[0] if cuda_variant and nproc_per_node > 1 else 0
    refused = too_many_processes(nproc_per_node, gpus, "nccl" if gpus else "gloo", where="this engine's machine")
    if refused:
        raise UserInputError(refused)


def gate_shm(platform: str, ranks: int, asked: int | None) -> int:
    """The /dev/shm the gate gives each container of a `platform` node running `ranks` local ranks: `asked`
    (``--shm-size``, a node's size replayed), else what trainimg's job asks the platform for (`shm.size_for`),
    else, for one rank, the platform's default where it states one and the container runtime's 64 MiB where not."""
    if asked is not None:
        return asked
    row = trait(platform, "SHM") if platform in PLATFORMS else None  # a job of no platform (`run`): one container
    return size_for(ranks) or (row.default if row else None) or CONTAINER_DEFAULT


def gpu_device_requests(index: int) -> GpuRequest:
    """`--gpus device=<index>`: one GPU per replica container."""
    return GpuRequest((index,))


class Conformance:
    def __init__(self, engine: Engine, on_log: Callable[[str, str], None] | None = None) -> None:
        self.engine = engine
        self.on_log = on_log

    def run(self, image: str, opts: TestOptions, name: str | None = None) -> Suite:
        info = self.engine.image(image)
        if info is None:
            raise UserInputError(f"no image {image!r} on this engine: build it (`trainimg build`) or pull it")
        expect = expectations(info.labels)
        refused = refusal(opts.platform, str(expect.get("framework")))
        if refused:
            raise UserInputError(refused, where="--platform")
        refuse_too_many_processes(self.engine, bool(expect.get("cuda")), opts.nproc_per_node)
        framework = str(expect.get("framework") or "none")
        ranks = local_ranks(process_start(opts.platform, framework, opts.nproc_per_node).per_node, 0)
        expect = {**expect, "local_ranks": ranks, "platform": opts.platform, "shm_replayed": True}
        shm = gate_shm(opts.platform, ranks, opts.shm_size)
        suite = Suite(name or info.labels.get(VARIANT_LABEL) or image, image, info.id, opts.platform,
                      opts.replicas)
        suite.checks.append(image_env_check(info))
        # The in-image checks run in a container of their own beside the replicas' all-reduce: neither reads the
        # other, and a gate waits for the longer of the two, not their sum (a TensorFlow image: 22 s -> 14 s here).
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="trainimg-probe") as pool, StartReads() as reads:
            probed = pool.submit(self._probe, info.id, expect, shm, reads)
            os_fixes = pool.submit(os_fixes_check, self.engine, info.id, opts.waivers) if opts.os_fixes else None
            allreduce = self._allreduce(info.id, expect, opts, shm, reads)
            suite.checks.extend(probed.result())
            if os_fixes is not None:
                suite.checks.append(os_fixes.result())
            suite.checks.append(allreduce)
            suite.checks.extend(self._gpu_allreduce(info.id, expect, opts, reads))
            suite.prefetch = reads.order()
        if opts.structure_tests:
            suite.checks.extend(structure_checks(info.id, opts.structure_tests))
        return suite

    # -- plumbing -------------------------------------------------------------------------------------------
    def _probe(self, image_id: str, expect: dict[str, Any], shm: int, reads: StartReads) -> list[Check]:
        """The in-image checks, in a container given the /dev/shm the replicas get: the shm check reads the
        replicas' node."""
        start = time.monotonic()
        cmd = inimage.command("probe", "--json", "--expect", json.dumps(expect))
        out = self.engine.run_command(ContainerSpec(image=image_id, command=tuple(cmd), ro_mounts=inimage.volumes(),
                                                    mounts=reads.mount("probe"),
                                                    env={"PATH": inimage.PATH, **reads.env}, shm_size=shm,
                                                    labels=reapable("probe")))
        try:
            results = json.loads(out.stdout)
        except json.JSONDecodeError:
            return [Check("probe", "failed", f"the probe did not run (exit {out.exit_code}): {cause_of(out.stderr)}",
                          time.monotonic() - start)]
        return [Check(r["name"], r["status"], r.get("reason", ""), round(r.get("duration", 0.0), 3),
                      r.get("details", {})) for r in results]

    def _job(self, image_id: str, expect: dict[str, Any], opts: TestOptions, runner: ReplicaRunner,
             shm: int, reads: StartReads, gpus: bool = False) -> ReplicaJob:
        """The platform's replicas, each starting its processes as the platform does (`topology.process_start`):
        the launcher as the container command, behind the platform's own command where it has one (a TrainJob's
        torchrun), given ``--nproc-per-node`` only where the platform neither started the processes nor says
        how many."""
        framework = str(expect.get("framework"))
        specs = replica_specs(opts.platform, opts.replicas, job=runner.job, hosts=runner.host,
                              nproc_per_node=opts.nproc_per_node, framework=framework)
        start = process_start(opts.platform, framework, opts.nproc_per_node)
        backend = "nccl" if gpus else "gloo"
        # --framework tells the launcher how to start N local processes (torchrun, itself, or one TF worker).
        worker = ["allreduce", "--framework", framework, "--backend", backend,
                  "--timeout", str(max(5, int(opts.timeout) - 10))]
        nproc = ["--nproc-per-node", str(start.nproc)] if start.nproc else []
        # The launcher execs the worker with the same PYTHONPATH, so a mounted runtime works for both.
        command = [*start.wrapper, *inimage.command("launch", *nproc, "--framework", framework, "--",
                                                    "python3", "-m", "trainimg_runtime", *worker)]
        return ReplicaJob(
            image=image_id, specs=specs, command=lambda _spec: list(command), env={"PATH": inimage.PATH, **reads.env},
            entrypoint=[], volumes={**inimage.volumes(), **reads.mount("nccl" if gpus else "allreduce")}, shm_size=shm,
            gpus=(lambda s: gpu_device_requests(specs.index(s))) if gpus else None,
        )

    def _allreduce(self, image_id: str, expect: dict[str, Any], opts: TestOptions, shm: int,
                   reads: StartReads) -> Check:
        framework = str(expect.get("framework") or "none")
        name = f"allreduce_{opts.platform}_x{opts.replicas}" + (f"x{opts.nproc_per_node}"
                                                                if opts.nproc_per_node > 1 else "")
        if framework == "none":
            return Check(name, "skipped", "no framework in this image (no trainimg.framework label)")
        runner = ReplicaRunner(self.engine, self.on_log)
        start = time.monotonic()
        results = runner.run(self._job(image_id, expect, opts, runner, shm, reads), opts.timeout)
        # TensorFlow runs one worker per replica with all its GPUs (MultiWorkerMirroredStrategy) wherever the
        # launcher starts the processes; Slurm starts one per task whatever the framework.
        world = opts.replicas * process_start(opts.platform, framework, opts.nproc_per_node).per_node
        return judge_allreduce(name, results, world, time.monotonic() - start)

    def _gpu_allreduce(self, image_id: str, expect: dict[str, Any], opts: TestOptions,
                       reads: StartReads) -> list[Check]:
        names = ("allreduce_nccl_containers", "allreduce_nccl_single_container")
        if not expect.get("cuda"):
            return [Check(n, "skipped", "CPU variant: no NCCL all-reduce") for n in names]
        n, reason = gpu_ready(self.engine)
        if n == 0:
            return [Check(n_, "skipped", reason) for n_ in names]
        runner = ReplicaRunner(self.engine, self.on_log)
        gpu_opts = TestOptions(platform=opts.platform, replicas=n, timeout=opts.timeout)
        start = time.monotonic()
        shm = gate_shm(opts.platform, 1, opts.shm_size)  # one GPU, one rank, per container
        results = runner.run(self._job(image_id, expect, gpu_opts, runner, shm, reads, gpus=True), opts.timeout)
        across = judge_allreduce(names[0], results, n, time.monotonic() - start)
        start = time.monotonic()
        bench = self._single_container_bench(image_id, n)
        return [across, Check(names[1], bench[0], bench[1], time.monotonic() - start, bench[2])]

    def _single_container_bench(self, image_id: str, n: int) -> tuple[str, str, dict]:
        from ..runtime.allreduce_bench import benchmark_command, parse_benchmark_output

        cmd = inimage.command(*benchmark_command(64 * 1024 * 1024, 20)[3:])
        run = self.engine.run_command(ContainerSpec(image=image_id, command=tuple(cmd), ro_mounts=inimage.volumes(),
                                                    gpus=GpuRequest()))
        if run.exit_code != 0:
            return ("failed", f"single-container NCCL all-reduce failed (exit {run.exit_code}): "
                              f"{cause_of(run.stderr)}", {})
        result = parse_benchmark_output(run.stdout)
        figures = (f"busbw {result.get('busbw_gbps', 0):.1f} GB/s (a copy on one GPU: "
                   f"{result.get('copy_gbps', 0):.1f} GB/s)" if result.get("communicated")
                   else "one rank, nothing communicated: no bandwidth figure")
        return "passed" if result.get("ok") else "failed", f"{n} GPU(s): {figures}", result
