"""Rebuild, from cache, every image the suite's session fixtures build, with the fixtures' own arguments, so that
their build-cache records are the most recently used on this engine; `.ci/run` then prunes what no build used in
the last minutes: the records each run's own test builds leave behind (cold rebuilds, test variants, releases:
about 8 GB a run here), never the warm chains that keep a run short (a pruned GPU chain is a cold build of ~30 GB).

The arguments are the fixtures' constants, imported from the test modules that define them; a build that is not
cached (a fresh machine) is the cold build the suite would run anyway. Run from the checkout's root.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path("tests").resolve()))

from conftest import CPU_BUILD  # noqa: E402
from conftest_images import FRAMEWORK_BUILD, GPU_BUILD, WHEELHOUSES  # noqa: E402
from test_arm64 import JAX, JAX_BASES  # noqa: E402

BUILDS = [CPU_BUILD, GPU_BUILD, FRAMEWORK_BUILD,
          [JAX, "--arch", "arm64", *JAX_BASES, *WHEELHOUSES]]  # the last: test_arm64.jax_arm64


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="trainimg-touch-") as state:
        env = {**os.environ, "TRAINIMG_STATE_DIR": state}
        for args in BUILDS:
            start = time.monotonic()
            r = subprocess.run(["trainimg", "build", *args, "--progress", "quiet"], env=env, capture_output=True,
                               text=True)
            if r.returncode != 0:
                print(f"touch: trainimg build {args[0]} failed: {r.stderr.strip()[-2000:]}", file=sys.stderr)
                return 1
            print(f"touch: {args[0]} and its group in {time.monotonic() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
