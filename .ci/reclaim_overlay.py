"""Delete the overlay2 folders dockerd 20.10 has forgotten, while dockerd is stopped.

Two things leave folders under `<root>/overlay2` that no record names, so no prune can ever free them (moby/moby
#45939, #21925): a build that dies on a full disk, and BuildKit's own `docker builder prune`, which drops a snapshot's
record and leaves its folder. On this CI machine they were 24.8 GB and then 12.4 GB of 100. A folder is kept when
the image store names it (`image/overlay2/layerdb`: a layer's cache-id, a container's mount and init ids), when
BuildKit's databases (`buildkit/*.db`) name it, or when a kept folder lists it as a lower layer (its `lower` file,
through the `l/` short names); everything else goes, with its short name. Run by `.ci/run` only, as root, with
dockerd stopped: a running dockerd may be creating a folder it has not recorded yet, so the script refuses then.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

ID_RUN = re.compile(rb"[0-9a-z]{25,}")
INIT = "-init"


def folder_ids(overlay: Path) -> set[str]:
    """Every layer id with a folder (an `<id>-init` folder counts as its id's)."""
    return {p.name.removesuffix(INIT) for p in overlay.iterdir() if p.name != "l"}


def image_store_ids(root: Path) -> set[str]:
    """The ids the image store names: each layer's cache-id, each container's mount and init ids."""
    layerdb = root / "image" / "overlay2" / "layerdb"
    files = [*layerdb.glob("sha256/*/cache-id"), *layerdb.glob("mounts/*/mount-id"), *layerdb.glob("mounts/*/init-id")]
    return {f.read_text().strip().removesuffix(INIT) for f in files}


def buildkit_named(root: Path, candidates: set[str]) -> set[str]:
    """The candidates BuildKit's databases name. Its snapshots' folders have 25-character ids, its layers' 64; both
    are runs of lowercase letters and digits in the files, so only such runs are searched."""
    runs = b" ".join(run for db in (root / "buildkit").glob("*.db") for run in ID_RUN.findall(db.read_bytes()))
    return {ident for ident in candidates if ident.encode() in runs}


def lowers_of(overlay: Path, kept: set[str]) -> set[str]:
    """The ids the kept folders stack on (their `lower` files name them by `l/<short>`)."""
    owner = {}
    for link in overlay.glob("*/link"):
        owner[link.read_text().strip()] = link.parent.name.removesuffix(INIT)
    below: set[str] = set()
    for ident in kept:
        for name in (ident, ident + INIT):
            lower = overlay / name / "lower"
            if lower.is_file():
                below.update(owner.get(entry.removeprefix("l/"), "") for entry in lower.read_text().strip().split(":"))
    return below - {""}


def forgotten(root: Path) -> list[Path]:
    overlay = root / "overlay2"
    ids = folder_ids(overlay)
    unnamed = ids - image_store_ids(root)
    unnamed -= buildkit_named(root, unnamed)
    unnamed -= lowers_of(overlay, ids - unnamed)
    return [p for i in sorted(unnamed) for p in (overlay / i, overlay / (i + INIT)) if p.exists()]


def dockerd_running() -> bool:
    """Whether a process named dockerd runs here (read from /proc: no tool needed)."""
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() == "dockerd":
                return True
        except OSError:
            continue  # the process ended meanwhile
    return False


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else "/var/lib/docker")
    if dockerd_running():
        print("reclaim-overlay: dockerd is running; stop it first", file=sys.stderr)
        return 2
    if not (root / "overlay2").is_dir():
        return 0
    folders = forgotten(root)
    freed = 0
    for folder in folders:
        freed += sum(f.lstat().st_size for f in folder.rglob("*") if f.is_file() and not f.is_symlink())
        link = folder / "link"
        if link.is_file():
            (root / "overlay2" / "l" / link.read_text().strip()).unlink(missing_ok=True)
        shutil.rmtree(folder)
    print(f"reclaim-overlay: {len(folders)} forgotten folders under {root / 'overlay2'}, {freed / 1e9:.1f} GB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
