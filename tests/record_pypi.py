#!/usr/bin/env python3
"""Record the real index's answers the upstream tests replay (tests/localindex.py): run once, where pypi.org and
deb.debian.org answer, and commit tests/data/upstream/.

    python3 tests/record_pypi.py            # needs the engine's trainimg/pytorch:2.13.0-cpu-py3.11 for its SBOM
    python3 tests/record_pypi.py --ranges-only   # only add the byte ranges a new read asks for

What is recorded, all through trainimg's own client (so the ranges are exactly those it asks for):
* the PEP 691 page of every project `outdated` and `compat add` read, trimmed to stay small but keep every answer
  the code derives the same: every version's earliest-uploaded file (so versions, yanked state and release dates
  are those of the whole page) plus every Linux wheel of the releases compat.yaml holds (so the Python versions,
  machines and the wheel whose metadata is read are too); the JSON's `versions` list is kept whole;
* the byte ranges `compat add` read of those wheels (zip tails, directory heads, METADATA and build_info.py
  members), each gzipped as `ranges/<wheel>/<start>-<end>.gz` with the wheel's `size`, for every release in
  compat.yaml (`reads_archs` says which with their GPU architectures);
* Debian's bookworm-security Packages index (amd64) cut to the packages of the CPU PyTorch image's SBOM and the
  OS-fix fixture's package (tests/osfixture.py), and that SBOM's dpkg components, under `raw/`
  (`python3 tests/record_pypi.py --security-index` records the index alone, for the committed SBOM).
"""

from __future__ import annotations

import datetime
import gzip
import json
import lzma
import subprocess
import sys
from pathlib import Path
from typing import Any

from packaging.version import Version

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trainimg.recipe.compat import load_compat  # noqa: E402
from trainimg.upstream.derive import derive  # noqa: E402
from trainimg.upstream.ossecurity import SECURITY_ARCHIVES, deb_packages  # noqa: E402
from trainimg.upstream.publishing import PUBLISHING  # noqa: E402
from trainimg.upstream.simpleapi import Http, SimpleIndex, parse_project  # noqa: E402
from trainimg.upstream.wheelfacts import linux_wheels  # noqa: E402

OUT = Path(__file__).parent / "data" / "upstream"
#: Every project `outdated` reads a page of, beside the frameworks' own.
PROJECTS = ("cloudml-hypertune", "uv", "cuda-toolkit", "nvidia-nccl-cu12", "nvidia-nccl-cu13", "nvidia-cudnn-cu12",
            "nvidia-cudnn-cu13", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime")
SBOM_IMAGE = "trainimg/pytorch:2.13.0-cpu-py3.11"


class RecordingHttp(Http):
    """trainimg's HTTP client, keeping every page and every range it read."""

    def __init__(self) -> None:
        super().__init__()
        self.pages: dict[str, dict[str, Any]] = {}
        self.ranges: dict[str, dict[tuple[int, int], bytes]] = {}
        self.sizes: dict[str, int] = {}

    def json_page(self, url: str) -> tuple[dict[str, Any], str]:
        data, page = super().json_page(url)
        self.pages[url.rstrip("/").rsplit("/", 1)[-1]] = data
        return data, page

    def range(self, url: str, start: int | None, end: int | None) -> tuple[bytes, int]:
        data, total = super().range(url, start, end)
        name = url.rsplit("/", 1)[-1]
        first = total - len(data) if start is None else start
        self.ranges.setdefault(name, {})[(first, first + len(data) - 1)] = data
        self.sizes[name] = total
        return data, total


def reads_archs(framework: str, version: str) -> bool:
    """Whether the recording holds the ranges of the release's GPU architectures: TensorFlow's newest only (its
    build_info.py sits mid-directory: the whole 3 MB directory is read, 0.5 MB gzipped); torch's come from the
    real wheel of this machine (16 MB of ranges: not recorded)."""
    return framework == "tensorflow" and version == load_compat().frameworks["tensorflow"].releases[0].version


def trimmed(name: str, data: dict[str, Any], keep: set[str]) -> dict[str, Any]:
    """The page with each version's earliest file and the Linux wheels of the `keep` versions."""
    project = parse_project(name, data, "https://pypi.org/simple/")
    wanted = {f.filename for f in linux_wheels(project.files) if str(f.version) in keep}
    earliest: dict[tuple[str, bool], tuple[str, str]] = {}
    for f in project.files:
        key = (str(f.version), f.yanked)
        stamp = f.uploaded.isoformat() if f.uploaded else ""
        if key not in earliest or stamp < earliest[key][0]:
            earliest[key] = (stamp, f.filename)
    wanted |= {filename for _, filename in earliest.values()}
    return {**data, "files": [e for e in data["files"] if e.get("filename") in wanted]}


def record_index(pages: bool = True) -> dict[str, set[str]]:
    http = RecordingHttp()
    index = SimpleIndex(http=http)
    compat = load_compat()
    keep: dict[str, set[str]] = {}
    for framework, fw in compat.frameworks.items():
        pub = PUBLISHING[framework]
        for rel in fw.releases:
            derive(index, framework, rel.version, archs=reads_archs(framework, rel.version))
            for project in {pub.project, pub.binary, pub.cpu_project, *(f"jax-cuda{n}-plugin" for n in (12, 13))}:
                if project:
                    keep.setdefault(project, set()).add(rel.version)
    for project in PROJECTS:
        index.project(project)
    for name, data in (http.pages.items() if pages else ()):
        page = gzip.compress(json.dumps(trimmed(name, data, keep.get(name, set())), sort_keys=True).encode(), mtime=0)
        (OUT / "pages").mkdir(parents=True, exist_ok=True)
        (OUT / "pages" / f"{name}.json.gz").write_bytes(page)
    for name, parts in http.ranges.items():
        folder = OUT / "ranges" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "size").write_text(str(http.sizes[name]))
        for (start, end), data in parts.items():
            (folder / f"{start}-{end}.gz").write_bytes(gzip.compress(data, mtime=0))
    return keep


def record_security() -> None:
    """The CPU image's SBOM (its dpkg components) and the security suite's entries for those packages."""
    text = subprocess.run(["docker", "run", "--rm", "--entrypoint", "cat", SBOM_IMAGE, "/etc/trainimg/sbom.cdx.json"],
                          check=True, capture_output=True, text=True, timeout=300).stdout
    sbom = json.loads(text)
    sbom["components"] = [c for c in sbom["components"] if str(c.get("purl", "")).startswith("pkg:deb/")]
    raw = OUT / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    (raw / "sbom.cdx.json").write_text(json.dumps(sbom, indent=1, sort_keys=True) + "\n")
    record_security_index(sbom)


def record_security_index(sbom: dict[str, Any]) -> None:
    """The security suite's Packages index of the image's architecture (where its `all` packages are listed too),
    cut to the stanzas of the SBOM's packages and of the pending fix tests/osfixture.py installs."""
    from osfixture import PACKAGE

    packages = deb_packages(sbom)
    url = SECURITY_ARCHIVES["debian"].format(codename=packages[0].codename, arch=packages[0].index_arch)
    index = lzma.decompress(Http().get(url)).decode()
    names = {p.name for p in packages} | {PACKAGE}
    stanzas = [s for s in index.split("\n\n") if s.startswith("Package: ") and s.split("\n", 1)[0][9:] in names]
    raw = OUT / "raw"
    (raw / "Packages.xz").write_bytes(lzma.compress(("\n\n".join(stanzas) + "\n").encode()))
    (raw / "SOURCES").write_text(f"sbom.cdx.json: /etc/trainimg/sbom.cdx.json of {SBOM_IMAGE}, dpkg components only\n"
                                 f"Packages.xz: {url}, the stanzas of those packages and of {PACKAGE} "
                                 f"(tests/osfixture.py), read {datetime.date.today()}\n")


def main() -> None:
    if sys.argv[1:] == ["--security-index"]:
        record_security_index(json.loads((OUT / "raw" / "sbom.cdx.json").read_text()))
        return
    if sys.argv[1:] == ["--ranges-only"]:  # a new read of `compat add` (another wheel's METADATA): its ranges are
        record_index(pages=False)  # added, the pages stay as recorded (the other tests' answers do not move)
        return
    keep = record_index()
    record_security()
    versions = {k: sorted(v, key=Version) for k, v in sorted(keep.items())}
    (OUT / "RECORDED").write_text(f"recorded from https://pypi.org/simple/ on {datetime.date.today()} by "
                                  f"tests/record_pypi.py; releases kept whole: {json.dumps(versions)}\n")


if __name__ == "__main__":
    main()
