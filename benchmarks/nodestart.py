"""The node-start family (issue 47): how long a node takes from `ctr images pull` of an image to the end of its
framework's first import, on the runtime Kubernetes nodes run, gzip against zstd.

For each image: trainimg's client pushes it twice to a fresh local registry (gzip and zstd, repositories of their
own); a containerd of its own (Debian's 1.6: own root, state and socket beside dockerd, tests/containerdnode.py) is
started anew for every sample, so each pull lands on an empty content store; a sample is the seconds from the start
of `ctr images pull` to the end of `ctr run --rm IMAGE python -c "import MODULE"`. The two compressions alternate,
gzip first then zstd first, so a busy machine weighs on both alike. `node_start_zstd_vs_gzip` is the worst image's
median with zstd / its median with gzip, in one run. Beside each median the physical floor: the unpacked bytes over
this disk's write speed (a file written and fsynced where containerd's root is), and the compressed bytes over the
decompressor's speed on one core (zlib, libzstd, the registry's blobs decompressed in process); the unpack cannot
be quicker than the larger of the two.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import uuid
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coldstart import framework_module
from figures import ratio
from harness import ROOT, Harness, log, on_matrix_images

SAMPLES = 3
COMPRESSIONS = ("gzip", "zstd")
_DISK_PROBE = 512 << 20  # bytes written (and fsynced) to time the disk


def disk_write_speed(folder: Path) -> float:
    """Bytes per second this disk takes a large file at, fsynced (containerd's unpack writes through the page cache,
    but a node's pull of gigabytes outruns it)."""
    probe = folder / "disk-probe"
    block = os.urandom(1 << 20)
    start = time.monotonic()
    with probe.open("wb") as fh:
        for _ in range(_DISK_PROBE >> 20):
            fh.write(block)
        fh.flush()
        os.fsync(fh.fileno())
    seconds = time.monotonic() - start
    probe.unlink()
    return _DISK_PROBE / seconds


def decompress_seconds(api: Any, repository: str, layers: Sequence[dict[str, Any]]) -> float:
    """Seconds one core takes to decompress the image's layer blobs (read from the registry, not timed)."""
    import zstandard

    total = 0.0
    for layer in layers:
        data = api.blob(repository, layer["digest"])
        start = time.monotonic()
        if layer["mediaType"].endswith("zstd"):
            with zstandard.ZstdDecompressor().stream_reader(data) as reader:
                while reader.read(1 << 20):
                    pass
        else:
            zlib.decompress(data, zlib.MAX_WBITS | 16)
        total += time.monotonic() - start
    return total


def one_start(folder: Path, ref: str, user: str, module: str) -> float:
    """Seconds from `ctr images pull` of `ref` on a fresh containerd to the end of `import module` in a container."""
    sys.path.insert(0, str(ROOT / "tests"))
    from containerdnode import containerd  # the one containerd-of-its-own runner (the tests' too)

    node = containerd(folder / f"node-{uuid.uuid4().hex[:8]}")  # a fresh content store for each sample
    with node as ctr:
        start = time.monotonic()
        pulled = ctr("images", "pull", "--plain-http", "--user", user, ref)
        if pulled.returncode != 0:
            raise RuntimeError(f"ctr pull {ref}: {pulled.stderr.strip()[-500:]}")
        ran = ctr("run", "--rm", *node.run_args(), ref, f"start-{uuid.uuid4().hex[:8]}", "python", "-c",
                  f"import {module}")
        seconds = time.monotonic() - start
        if ran.returncode != 0:
            raise RuntimeError(f"ctr run {ref}: {(ran.stderr or ran.stdout).strip()[-500:]}")
    return seconds


def measure_image(bench: Harness, api: Any, host: str, user: str, image: str) -> dict[str, Any]:
    """One image's row: sizes, pushes, samples, medians and floors of each compression."""
    import json

    from trainimg.engine.docker import DockerEngine
    from trainimg.options.compression import Compression
    from trainimg.registry.blobpush import push_saved

    module = framework_module(bench, image)
    size = int(bench.docker("image", "inspect", "-f", "{{.Size}}", image).stdout.strip())
    row: dict[str, Any] = {"module": module, "unpacked_bytes": size}
    refs = {}
    for how in COMPRESSIONS:
        start = time.monotonic()
        pushed = push_saved(DockerEngine(), image, api, f"nodestart/{how}", "t", compression=Compression.parse(how))
        body = json.loads(api.manifest_json(f"nodestart/{how}", "t")[0])
        row[how] = {"compressed_bytes": pushed.compressed_bytes, "push_s": round(time.monotonic() - start, 1),
                    "decompress_s": round(decompress_seconds(api, f"nodestart/{how}", body["layers"]), 2)}
        refs[how] = f"{host}/nodestart/{how}:t"
    speed = disk_write_speed(bench.tmp)
    row["disk_write_mb_s"] = round(speed / 1e6, 1)
    samples: dict[str, list[float]] = {how: [] for how in COMPRESSIONS}
    for i in range(SAMPLES):
        for how in (COMPRESSIONS if i % 2 == 0 else tuple(reversed(COMPRESSIONS))):
            samples[how].append(round(one_start(bench.tmp, refs[how], user, module), 2))
    for how in COMPRESSIONS:
        median = statistics.median(samples[how])
        floor = max(size / speed, row[how]["decompress_s"])
        row[how].update(samples=samples[how], median_s=median, floor_s=round(floor, 2))
        log(f"  {image} {how}: pull to `import {module}` {median:.2f} s (median of {SAMPLES}: {samples[how]}); "
            f"{row[how]['compressed_bytes'] / 1e6:.1f} MB compressed, {size / 1e6:.1f} MB unpacked; floor "
            f"{floor:.2f} s (disk {row['disk_write_mb_s']} MB/s, decompress {row[how]['decompress_s']} s)")
    row["zstd_vs_gzip"] = ratio(row["zstd"]["median_s"], row["gzip"]["median_s"])
    return row


def measure_images(bench: Harness, images: Sequence[str]) -> None:
    """node_start_zstd_vs_gzip over `images` (each built on this engine): the worst ratio is the figure."""
    from trainimg.registry.references import RegistryTarget
    from trainimg.registry.registryapi import RegistryAPI

    rows = {}
    with bench.fresh_registry() as info:
        api = RegistryAPI(RegistryTarget.parse(info.host), {"username": info.username, "password": info.password})
        for image in images:
            rows[image] = measure_image(bench, api, info.host, f"{info.username}:{info.password}", image)
    bench.details["nodestart"] = rows
    worst = max(rows, key=lambda image: rows[image]["zstd_vs_gzip"])
    w = rows[worst]
    bench.set("node_start_zstd_vs_gzip", w["zstd_vs_gzip"],
              f"`ctr images pull` to the end of `import {w['module']}` on a fresh containerd 1.6, median of "
              f"{SAMPLES} interleaved: {w['zstd']['median_s']:.2f} s zstd-3 / {w['gzip']['median_s']:.2f} s gzip-6 "
              f"for {worst} (floors {w['zstd']['floor_s']:.2f} s and {w['gzip']['floor_s']:.2f} s; worst of "
              f"{len(rows)} images)")


def measure(bench: Harness) -> None:
    """The family in a full run: the CPU images the matrix family built and tested."""
    on_matrix_images(bench, "node_start_zstd_vs_gzip", lambda images: measure_images(bench, images))
