"""The lazy node-start family (issue 58): how long a node takes from the start of a pull to the end of `import
FRAMEWORK`, and to the end of a one-process all-reduce, when it pulls the image lazily (eStargz, stargz-snapshotter)
against pulling the whole gzip image, on the same containerd; and what the gate's prefetch order is worth.

For each image: the gate runs (`trainimg test IMAGE`, whose pass record holds the files the start read), then
trainimg's client pushes it three times to a fresh local registry with its access log on, each kind under a
repository of its own: gzip (`whole`), eStargz with the gate's order (`lazy`), eStargz without one (`unordered`).
A sample is a fresh lazy node (tests/containerdnode.py's lazy_node: containerd 1.6 with the snapshotter as its proxy
`stargz`, empty root and caches, the snapshotter's default settings): `whole` is `ctr images pull` and `ctr run` on
overlayfs, the others `ctr-remote image rpull` and `ctr run --snapshotter stargz`. One shell in the container says
when it started, runs `python -c "import MODULE"`, says so, runs the image's own one-process all-reduce
(`trainimg-runtime launch -- trainimg-runtime allreduce`) and says so, as the chief of a one-replica Vertex AI job
the gate replays (its CLUSTER_SPEC; an /etc/hosts naming its host name, as a pod's: JAX's gloo resolves it, and
`ctr run` writes none); each line is timed on the host as it arrives
(one clock, from the pull's start). At the import's line the registry's access log is read: the blob bytes served so
far are what the node fetched before it could import (requests still in flight are not yet logged). The kinds
rotate, so a busy machine weighs on each alike; each figure is a ratio of medians of SAMPLES, in one run.

Beside each lazy figure, two bounds from the same samples. The floor: the lazy pull itself (manifest and config)
plus the time the whole sample's container took from its start to the end of the import, every byte already on local
disk; a lazy start cannot be quicker, however little it fetches. The bytes bound: the floor plus the bytes the lazy
start fetched before its import ended, at the rate this node pulled and unpacked the whole gzip image (its
compressed bytes over its pull's seconds): what a lazy start costs when fetching and unpacking, not the lazy
machinery, is what it waits on.

An image needs room for a push's `docker save` of it, its three pushes in the registry and a whole pull (its
compressed bytes again and its unpacked files). One that would leave less than DISK_RESERVE free goes without the unordered push (the GPU image on
a small disk), and one without room even for that is refused before its first push, naming the numbers.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from figures import ratio
from harness import FAMILY, ROOT, Harness, StepFailed, log, on_matrix_images

SAMPLES = 3
KINDS = ("whole", "lazy", "unordered")  # gzip pulled whole; eStargz with the gate's order; eStargz without one
MARK = "trainimg-lazystart:"
STARTED, IMPORTED, REDUCED = (f"{MARK} {what}" for what in ("started", "imported", "reduced"))
RUN_TIMEOUT = 1800
DISK_RESERVE = 10 << 30  # bytes left free on the bench's disk at an image's peak


@dataclass(frozen=True)
class Start:
    """One sample, in seconds from the start of the pull; `fetched_bytes`: blob bytes the registry had served when
    the import ended."""

    pull_s: float
    started_s: float
    import_s: float
    allreduce_s: float
    fetched_bytes: int


@dataclass(frozen=True)
class Subject:
    """An image under measurement: its framework, the module that imports it, and whether it is a CUDA build."""

    image: str
    framework: str
    module: str
    cuda: bool


def subject(bench: Harness, image: str) -> Subject:
    """What the image's labels say (trainimg.framework, trainimg.version.cuda: runtime/contract.py)."""
    from trainimg.runtime.contract import FRAMEWORK_LABEL
    from trainimg.runtime.frameworks import FRAMEWORKS

    labels = json.loads(bench.docker("image", "inspect", "-f", "{{json .Config.Labels}}", image).stdout) or {}
    name = labels.get(FRAMEWORK_LABEL)
    if name not in FRAMEWORKS:
        raise ValueError(f"{image} has no framework label ({FRAMEWORK_LABEL}={name!r})")
    return Subject(image, name, FRAMEWORKS[name].module, labels.get("trainimg.version.cuda", "none") != "none")


def start_script(s: Subject) -> str:
    """The container's shell: a line when it starts, after the import, after the all-reduce (its output to stderr)."""
    reduce = (f"trainimg-runtime launch --framework {s.framework} -- trainimg-runtime allreduce --framework "
              f"{s.framework} --backend gloo")
    return (f"echo '{STARTED}' && python -c 'import {s.module}' && echo '{IMPORTED}' && {reduce} >&2 && "
            f"echo '{REDUCED}'")


def served_bytes(log_path: Any, offset: int) -> int:
    """Blob bytes the registry logged serving after `offset` of its access log (GETs, whole or ranges)."""
    from trainimg.registry.accesslog import requests_since

    return sum(r.size for r in requests_since(log_path, offset) if r.blob and r.method == "GET" and r.status < 300)


def one_start(bench: Harness, info: Any, kind: str, ref: str, s: Subject) -> Start:
    """One sample of `kind` on a fresh lazy node (see the module docstring)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from containerdnode import STARGZ, lazy_node, one_replica  # the tests' lazy node, the one runner of both

    from trainimg.registry.accesslog import log_offset

    user = f"{info.username}:{info.password}"
    folder = bench.tmp / f"lazy-{uuid.uuid4().hex[:8]}"
    with lazy_node(folder, {info.host: (info.username, info.password)}) as node:
        offset = log_offset(bench.registry_log)
        start = time.monotonic()
        pulled = (node.ctr("images", "pull", "--plain-http", "--user", user, ref) if kind == "whole" else
                  node.ctr_remote("image", "rpull", "--plain-http", "--user", user, ref))
        if pulled.returncode != 0:
            raise StepFailed(f"pull of {ref} ({kind}): {pulled.stderr.strip()[-500:]}")
        pull_s = time.monotonic() - start
        snapshotter = [] if kind == "whole" else ["--snapshotter", STARGZ]
        argv = node.containerd.argv("run", "--rm", *snapshotter, *node.containerd.run_args(),
                                    *one_replica(bench.tmp, s.framework), ref, f"start-{uuid.uuid4().hex[:8]}", "sh",
                                    "-c", start_script(s))
        stamps, fetched = stream_stamps(argv, lambda: served_bytes(bench.registry_log, offset), start,
                                        bench.tmp / f"{folder.name}.stderr")
    return Start(round(pull_s, 2), stamps[STARTED], stamps[IMPORTED], stamps[REDUCED], fetched)


def stream_stamps(argv: Sequence[str], fetched: Callable[[], int], start: float,
                  stderr_path: Any) -> tuple[dict[str, float], int]:
    """Run `argv`, timing each of its marker lines as it arrives (seconds since `start`); `fetched()` read at the
    import's line."""
    stamps: dict[str, float] = {}
    served = 0
    with open(stderr_path, "w+", encoding="utf-8") as err:
        proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=err, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.strip()
            if line.startswith(MARK):
                stamps[line] = round(time.monotonic() - start, 2)
                if line == IMPORTED:
                    served = fetched()
        code = proc.wait(timeout=RUN_TIMEOUT)
        err.seek(0)
        tail = err.read()[-500:]
    if code != 0 or len(stamps) != 3:
        raise StepFailed(f"the start in the container exited {code} after {sorted(stamps)}: {tail}")
    return stamps, served


def push_kinds(bench: Harness, api: Any, host: str, s: Subject, tag: str,
               kinds: Sequence[str]) -> tuple[dict[str, str], dict[str, Any]]:
    """The gate, then a push of each of `kinds`: kind -> reference, and each push's bytes and seconds."""
    from trainimg.conformance import records
    from trainimg.engine.docker import DockerEngine
    from trainimg.options.compression import Compression
    from trainimg.registry.blobpush import push_saved

    image_id = bench.docker("image", "inspect", "-f", "{{.Id}}", s.image).stdout.strip()
    if not records.prefetch_order(image_id, bench.env):  # not gated in this run yet (the matrix family gates its own)
        bench.trainimg("test", s.image, "--progress", "quiet", timeout=3600)
    order = records.prefetch_order(image_id, bench.env)
    if not order:
        raise StepFailed(f"the gate of {s.image} recorded no prefetch order (an image built before trainimg recorded "
                         "what the start reads runs its own older runtime: rebuild it)")
    how = {"whole": Compression.parse("gzip"), "lazy": Compression.parse("estargz").ordered(order),
           "unordered": Compression.parse("estargz")}
    refs, row = {}, {"prefetch_files": len(order)}
    for kind in kinds:
        start = time.monotonic()
        pushed = push_saved(DockerEngine(), s.image, api, f"lazystart/{kind}", tag, compression=how[kind])
        row[kind] = {"compressed_bytes": pushed.compressed_bytes, "push_s": round(time.monotonic() - start, 1)}
        refs[kind] = f"{host}/lazystart/{kind}:{tag}"
    return refs, row


def kinds_with_room(bench: Harness, s: Subject, unpacked: int) -> tuple[str, ...]:
    """The kinds this disk has room for, leaving DISK_RESERVE free: a push's `docker save` of the image, each push in
    the registry and a whole pull (compressed: half the unpacked size, a generous guess for gzip of binaries; the GPU
    PyTorch image took the free space from 29 to 11 GB before its first push had ended). All, or without `unordered`
    (said in the log), or none: refused, naming the numbers."""
    free = shutil.disk_usage(bench.tmp).free
    for kinds in (KINDS, KINDS[:2]):
        need = (len(kinds) + 1) * unpacked // 2 + 2 * unpacked
        if free - need >= DISK_RESERVE:
            if kinds != KINDS:
                log(f"  {s.image}: room for {', '.join(kinds)} only ({free / 1e9:.1f} GB free): no unordered push")
            return kinds
    raise StepFailed(f"{s.image} needs about {need / 1e9:.1f} GB here (its save, two pushes, a whole pull) and "
                     f"{free / 1e9:.1f} GB are free: that leaves less than {DISK_RESERVE / 1e9:.0f} GB")


def measure_image(bench: Harness, api: Any, info: Any, s: Subject, tag: str) -> dict[str, Any]:
    """One image's row: its pushes, every sample, the medians and the ratios."""
    unpacked = bench.image_size(s.image)
    kinds = kinds_with_room(bench, s, unpacked)
    refs, row = push_kinds(bench, api, info.host, s, tag, kinds)
    row.update(module=s.module, cuda=s.cuda, unpacked_bytes=unpacked)
    samples: dict[str, list[Start]] = {kind: [] for kind in kinds}
    for i in range(SAMPLES):
        for kind in kinds[i % len(kinds):] + kinds[:i % len(kinds)]:
            samples[kind].append(one_start(bench, info, kind, refs[kind], s))
            log(f"  {s.image} {kind}: {samples[kind][-1]}")
    for kind in kinds:
        row[kind].update({field: statistics.median(getattr(x, field) for x in samples[kind])
                          for field in ("pull_s", "started_s", "import_s", "allreduce_s", "fetched_bytes")},
                         samples=[asdict(x) for x in samples[kind]])
    whole, lazy, unordered = row["whole"], row["lazy"], row.get("unordered", {"import_s": None})
    floor = lazy["pull_s"] + whole["import_s"] - whole["started_s"]
    bytes_bound = floor + lazy["fetched_bytes"] / whole["compressed_bytes"] * whole["pull_s"]
    row.update(import_vs_whole=ratio(lazy["import_s"], whole["import_s"]),
               allreduce_vs_whole=ratio(lazy["allreduce_s"], whole["allreduce_s"]),
               order_vs_none=ratio(lazy["import_s"], unordered["import_s"]),
               bytes_before_import=ratio(lazy["fetched_bytes"], lazy["compressed_bytes"]),
               floor_s=round(floor, 2), floor_vs_whole=ratio(floor, whole["import_s"]),
               bytes_bound_s=round(bytes_bound, 2), bytes_bound_vs_whole=ratio(bytes_bound, whole["import_s"]))
    log(f"  {s.image}: pull to `import {s.module}` lazily {lazy['import_s']:.2f} s, without the order "
        f"{unordered['import_s']} s, whole {whole['import_s']:.2f} s (medians of {SAMPLES}; floor {floor:.2f} s, "
        f"bytes bound {bytes_bound:.2f} s); "
        f"to the all-reduce {lazy['allreduce_s']:.2f} s / {whole['allreduce_s']:.2f} s; fetched "
        f"{lazy['fetched_bytes'] / 1e6:.0f} of {lazy['compressed_bytes'] / 1e6:.0f} MB before the import ended")
    return row


def measure_images(bench: Harness, images: Sequence[str]) -> None:
    """The lazy figures over `images` (each built on this engine, CPU or GPU)."""
    from trainimg.registry.references import RegistryTarget
    from trainimg.registry.registryapi import RegistryAPI

    subjects = [subject(bench, image) for image in images]
    rows: dict[str, dict[str, Any]] = {}
    with bench.fresh_registry(access_log=True) as info:
        api = RegistryAPI(RegistryTarget.parse(info.host), {"username": info.username, "password": info.password})
        for n, s in enumerate(subjects):
            rows[s.image] = measure_image(bench, api, info, s, f"image{n}")
    bench.details["lazystart"] = rows
    set_figures(bench, subjects, rows)


def set_figures(bench: Harness, subjects: Sequence[Subject], rows: dict[str, dict[str, Any]]) -> None:
    """The CPU and the GPU PyTorch image's import figures, and the worst image's of the others."""
    for name, cuda in (("lazy_import_vs_whole", False), ("lazy_import_gpu_vs_whole", True)):
        torch = [s.image for s in subjects if s.framework == "pytorch" and s.cuda is cuda]
        if not torch:
            bench.skip(name, f"skipped: no {'GPU' if cuda else 'CPU'} PyTorch image among {len(subjects)}")
            continue
        r = rows[torch[0]]
        bench.set(name, r["import_vs_whole"],
                  f"pull start to the end of `import torch` on a fresh containerd 1.6 + stargz-snapshotter, median of "
                  f"{SAMPLES} interleaved: {r['lazy']['import_s']:.2f} s eStargz lazily with the gate's order / "
                  f"{r['whole']['import_s']:.2f} s gzip whole for {torch[0]} (floor {r['floor_vs_whole']:.3f} of "
                  f"whole: the lazy pull plus the import from local disk; bytes bound {r['bytes_bound_vs_whole']:.3f}: "
                  f"that plus the {r['lazy']['fetched_bytes'] / 1e6:.0f} MB fetched first at this node's whole-pull "
                  "rate)")
    worst_of(bench, rows, "lazy_allreduce_vs_whole", "allreduce_vs_whole",
             lambda r: f"to the end of a one-process all-reduce {r['lazy']['allreduce_s']:.2f} s lazily / "
                       f"{r['whole']['allreduce_s']:.2f} s whole")
    worst_of(bench, rows, "lazy_order_vs_none", "order_vs_none",
             lambda r: f"to the end of `import {r['module']}` lazily {r['lazy']['import_s']:.2f} s with the gate's "
                       f"order ({r['prefetch_files']} files) / {r['unordered']['import_s']:.2f} s without one")
    worst_of(bench, rows, "lazy_bytes_before_import", "bytes_before_import",
             lambda r: f"{r['lazy']['fetched_bytes'] / 1e6:.0f} MB served by the registry (its access log) before "
                       f"`import {r['module']}` ended / {r['lazy']['compressed_bytes'] / 1e6:.0f} MB of eStargz layers")


def worst_of(bench: Harness, rows: dict[str, dict[str, Any]], name: str, key: str,
             how: Callable[[dict[str, Any]], str]) -> None:
    measured = [image for image in rows if rows[image][key] is not None]
    if not measured:
        bench.skip(name, "skipped: no image had room for it")
        return
    worst = max(measured, key=lambda image: rows[image][key])
    bench.set(name, rows[worst][key], f"{how(rows[worst])} for {worst}, medians of {SAMPLES} interleaved "
                                      f"(worst of {len(measured)} images)")


def measure(bench: Harness) -> None:
    """The family in a full run: the CPU images the matrix family built and tested (no GPU image: its figure is
    skipped; `bench.py --lazystart IMAGE...` measures one). A failure or skip marks every figure alike."""
    first, *others = FAMILY["lazystart"].figures
    on_matrix_images(bench, first, lambda images: measure_images(bench, images))
    for name in others:
        if not bench.figures[name]["how"]:
            bench.set(name, None, bench.figures[first]["how"], status=bench.figures[first]["status"])
