"""The cold-start figure: how long a replica's first `import <framework>` takes in a fresh container of an image,
with the bytecode each install step compiled (builder/runtime/bytecode.py) against the same image with its `.pyc`
deleted first, which is what every replica of an image without bytecode pays at every start.

`cold_import_ratio` is the worst image's median with bytecode / its median without. Each sample is a container of
its own (`docker run --rm`), the import timed inside it (container start and teardown are the same for both), the
two kinds alternated so a busy machine weighs on both alike.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence

from figures import ratio
from harness import Harness, log, on_matrix_images

SAMPLES = 3
# Timed inside the container: the first import of the framework's module, nothing else.
_TIMED = "import sys, time; t = time.perf_counter(); __import__(sys.argv[1]); print(time.perf_counter() - t)"
_STRIP = "find / -xdev -name '*.pyc' -delete"


def framework_module(bench: Harness, image: str) -> str:
    """The module an image's framework imports as, from its `trainimg.framework` label (runtime/frameworks.py)."""
    from trainimg.runtime.contract import FRAMEWORK_LABEL
    from trainimg.runtime.frameworks import FRAMEWORKS

    labels = json.loads(bench.docker("image", "inspect", "-f", "{{json .Config.Labels}}", image).stdout) or {}
    name = labels.get(FRAMEWORK_LABEL)
    if name not in FRAMEWORKS:
        raise ValueError(f"{image} has no framework label ({FRAMEWORK_LABEL}={name!r})")
    return FRAMEWORKS[name].module


def import_seconds(bench: Harness, image: str, module: str, strip: bool) -> float:
    """One fresh container's first import of `module`, timed inside it; `strip`: every `.pyc` deleted first."""
    script = f"{_STRIP} && " if strip else ""
    run = bench.docker("run", "--rm", "--network", "none", "--entrypoint", "/bin/sh", image, "-c",
                       f"{script}exec python -c '{_TIMED}' {module} 2>/dev/null", what=f"import {module} in {image}")
    return float(run.stdout.strip().splitlines()[-1])


def measure_images(bench: Harness, images: Sequence[str]) -> None:
    """cold_import_ratio over `images`: the worst (highest) ratio is the figure, every image's in the details."""
    rows = {}
    for image in images:
        module = framework_module(bench, image)
        timed: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(SAMPLES):
            for strip in (False, True):
                timed[strip].append(import_seconds(bench, image, module, strip))
        with_pyc, without = statistics.median(timed[False]), statistics.median(timed[True])
        rows[image] = {"module": module, "with_bytecode_s": with_pyc, "without_bytecode_s": without,
                       "ratio": ratio(with_pyc, without), "samples": {"with": timed[False], "without": timed[True]}}
        log(f"  {image}: import {module} {with_pyc:.2f} s with its bytecode, {without:.2f} s without")
    bench.details["coldstart"] = rows
    worst = max(rows, key=lambda image: rows[image]["ratio"])
    bench.set("cold_import_ratio", rows[worst]["ratio"],
              f"first `import {rows[worst]['module']}` in a fresh container of {worst}, median of {SAMPLES}: "
              f"{rows[worst]['with_bytecode_s']:.2f} s with the image's bytecode / "
              f"{rows[worst]['without_bytecode_s']:.2f} s with its .pyc deleted (worst of {len(rows)} images)")


def measure(bench: Harness) -> None:
    """The family in a full run: the CPU images the matrix family built and tested."""
    on_matrix_images(bench, "cold_import_ratio", lambda images: measure_images(bench, images))
