"""The gate's look at the image's OS: `trainimg test --os-fixes` (and `release --os-fixes`) runs the runtime's
`os-fixes` verb (runtime/osfixes.py: `apt-get -s upgrade` against the release's security suite alone) in one
container of the image, the only container of the gate that reaches the outside, and turns its answer into the
`os_security_fixes` check: a pending fix fails unless the committed waivers (the advisory audit's file,
audit/waiverfile.py) waive it. A look that could not be made fails, as everywhere in the gate.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from ..audit.waiverfile import read_waivers
from ..engine.base import ContainerSpec, Engine
from ..runtime.cause import reason as cause_of
from ..runtime.osfixes import CHECK_NAME
from ..runtime.report import Check
from .replicas import reapable
from . import inimage

WAIVERS_IN_CONTAINER = "/run/trainimg-waivers.json"  # where the container reads the waivers, as a JSON list


def os_fixes_check(engine: Engine, image_id: str, waivers: Path | None) -> Check:
    """The `os_security_fixes` check of `image_id`, its pending fixes judged with the waivers in `waivers`."""
    start = time.monotonic()
    listed = [w.to_json() for w in read_waivers(waivers)]
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="trainimg-waivers-") as fh:
        json.dump(listed, fh)
        fh.flush()
        out = engine.run_command(ContainerSpec(
            image=image_id, command=tuple(inimage.command("os-fixes", "--waivers", WAIVERS_IN_CONTAINER)),
            ro_mounts={**inimage.volumes(), fh.name: WAIVERS_IN_CONTAINER}, env={"PATH": inimage.PATH},
            outbound=True, labels=reapable("os-fixes")))
    try:
        got = json.loads(out.stdout)
    except json.JSONDecodeError:
        return Check(CHECK_NAME, "failed", f"the OS check did not run (exit {out.exit_code}): {cause_of(out.stderr)}",
                     round(time.monotonic() - start, 3))
    return Check(CHECK_NAME, got["status"], got.get("reason", ""), round(time.monotonic() - start, 3),
                 got.get("details", {}))
