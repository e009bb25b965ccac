"""`trainimg outdated [--json]` against the real index's recorded answers (tests/localindex.py): what it reports
for the shipped recipes, its exit codes (0 nothing new, 1 something new or an index that cannot be read, naming
it, 2 bad input), the bases' end-of-life warnings generated from their data, NVIDIA's tag deletion dates from the
CUDA update releases, and the OS packages of a real image's SBOM with fixes in Debian's security archive, ordered
as dpkg itself orders versions.
"""

from __future__ import annotations

import datetime
import gzip
from dataclasses import replace
import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import ROOT
from localindex import RECORDED, LocalIndex
from packaging.version import Version

from trainimg.cli.app import main
from trainimg.recipe.compat import load_compat
from trainimg.recipe.loading import load_recipes
from trainimg.upstream.bases import add_months, cuda_items, eol_items, load_bases
from trainimg.upstream.ossecurity import SECURITY_ARCHIVES, SecurityArchive, debian_compare, deb_packages, pending
from trainimg.upstream.simpleapi import Http, IndexUnreadable, SimpleIndex

CURRENT = """framework: tensorflow
repository: trainimg-test/outdated
matrix:
  - version: ["2.21.0"]
    cuda: ["12.5"]
    os: [ubuntu24.04]
    python: ["3.12"]
"""


@pytest.fixture(scope="module")
def index() -> Iterator[LocalIndex]:
    with LocalIndex() as served:
        yield served


def recorded_versions(project: str) -> list[Version]:
    """The final releases the recorded page's own `versions` list (PEP 691 1.1) names: an independent reading."""
    data = json.loads(gzip.decompress((RECORDED / "pages" / f"{project}.json.gz").read_bytes()))
    return sorted(v for v in map(Version, data["versions"]) if not v.is_prerelease)


def outdated(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(["outdated", *args])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_the_shipped_recipes_items_each_have_a_source(index: LocalIndex, capsys: pytest.CaptureFixture[str]) -> None:
    """What the shipped recipes hold back, each item with its newest release and its source (that they are all
    held, with why, is tests/test_holds.py's)."""
    rc, out, err = outdated(capsys, "--recipes", str(ROOT / "recipes"), "--index-url", index.url, "--json")
    items = json.loads(out)
    assert rc == (1 if any(not i["held"] for i in items) else 0), err
    assert items and all(i["source"].startswith("http") for i in items), items
    frameworks = {(i["name"], i["current"]): i for i in items if i["kind"] == "framework"}
    compat = load_compat()
    # every framework version a shipped recipe pins below the recorded page's newest release, read from the
    # recipes and the page, not from what `outdated` printed
    newest = {fw.pip_name: recorded_versions(fw.pip_name)[-1] for fw in compat.frameworks.values()}
    behind = {(compat.frameworks[v.framework].pip_name, v.version) for v in load_recipes(ROOT / "recipes").variants
              if v.framework in compat.frameworks and not v.extends
              and Version(v.version or "0") < newest[compat.frameworks[v.framework].pip_name]}
    assert behind and set(frameworks) == behind, (sorted(frameworks), sorted(behind))
    for name, version in behind:
        assert frameworks[(name, version)]["newest"] == str(newest[name])
    eol = [i for i in items if i["kind"] == "base-eol"]
    assert all((i["warning"] or i["held"]) and i["date"] for i in eol)
    assert "item(s), " in err and "held by the recipes; read" in err


def test_nothing_new_is_exit_0(index: LocalIndex, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "current.yaml").write_text(CURRENT)
    rc, out, err = outdated(capsys, "--recipes", str(tmp_path / "recipes"), "--index-url", index.url)
    assert rc == 0, out + err
    assert out == "" and "0 item(s)" in err


def test_an_index_that_cannot_be_read_fails_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "current.yaml").write_text(CURRENT)
    dead = "http://127.0.0.1:9/simple/"
    rc, out, err = outdated(capsys, "--recipes", str(tmp_path / "recipes"), "--index-url", dead)
    assert rc == 1 and out == ""
    assert err.strip().splitlines()[-1].startswith(f"trainimg outdated: {dead}"), err


@pytest.mark.parametrize(("flags", "where"), [
    (("--index-url", "ftp://mirror.example/simple/"), "--index-url"),
    (("--security-archive", "debian"), "--security-archive"),
    (("--warn-days", "-1"), "--warn-days"),
])
def test_bad_input_is_exit_2(flags: tuple[str, ...], where: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = outdated(capsys, "--recipes", str(ROOT / "recipes"), *flags)
    assert rc == 2 and err.strip().splitlines()[-1].startswith(where), err


@pytest.mark.parametrize("os_name", sorted(load_bases().operating_systems))
@pytest.mark.parametrize("offset", [-400, -30, 0, 30])
def test_a_base_is_warned_within_warn_days_of_its_end_and_after(os_name: str, offset: int) -> None:
    end = load_bases().operating_systems[os_name].security_end
    today = end + datetime.timedelta(days=offset)
    v = replace(load_recipes(ROOT / "recipes").variants[0], name="v", os=os_name, held=())
    items = eol_items([v], today, warn_days=90)
    assert bool(items) == (offset >= -90)
    assert all(i.warning and i.date == str(end) and i.source for i in items)


@pytest.mark.parametrize(("day", "months", "then"), [
    ("2026-04-14", 6, "2026-10-14"), ("2026-08-31", 6, "2027-02-28"), ("2024-08-31", 6, "2025-02-28"),
    ("2027-12-15", 1, "2028-01-15"), ("2028-08-31", 6, "2029-02-28"), ("2027-08-31", 6, "2028-02-29"),
])
def test_add_months_clamps_to_the_month(day: str, months: int, then: str) -> None:
    assert add_months(datetime.date.fromisoformat(day), months) == datetime.date.fromisoformat(then)


def test_a_newer_cuda_update_dates_the_older_tags_deletion(index: LocalIndex) -> None:
    compat = load_compat()
    lines = {line: [f"v-{line}"] for line in compat.cuda}
    simple = SimpleIndex(index.url)
    items = {i.name: i for i in cuda_items(compat, lines, simple, datetime.date(2026, 11, 27), 90)}
    toolkit = recorded_versions("cuda-toolkit")
    page = simple.project("cuda-toolkit")
    for line, image in compat.cuda.items():
        newer = [v for v in toolkit if f"{v.major}.{v.minor}" == line and v > Version(image.image_version)]
        assert (f"CUDA {line}" in items) == bool(newer), line
        if newer:
            item = items[f"CUDA {line}"]
            released = page.released(max(newer))
            assert released is not None and item.date == str(released)
            assert str(add_months(released, load_bases().cuda_images.delete_after_months)) in item.action
    assert items, "the recorded index holds CUDA updates newer than compat.yaml's images (12.8.2, 13.2.2)"


# What the recorded SBOM's packages have pending in the recorded index (tests/data/upstream/raw/SOURCES): read by
# hand from the two files, the index being bookworm-security's binary-amd64 on 2026-12-02.
RECORDED_PENDING = [
    "apt 2.6.1 -> 2.6.2", "libapt-pkg6.0 2.6.1 -> 2.6.2", "liblzma5 5.4.1-1+deb12u1 -> 5.4.1-1+deb12u2",
    "libpam-modules 1.5.2-6+deb12u2 -> 1.5.2-6+deb12u3", "libpam-modules-bin 1.5.2-6+deb12u2 -> 1.5.2-6+deb12u3",
    "libpam-runtime 1.5.2-6+deb12u2 -> 1.5.2-6+deb12u3", "libpam0g 1.5.2-6+deb12u2 -> 1.5.2-6+deb12u3",
    "libpcre2-8-0 10.42-1 -> 10.42-1+deb12u2", "libzstd1 1.5.4+dfsg2-5 -> 1.5.4+dfsg2-5+deb12u1",
    "perl-base 5.36.0-7+deb12u3 -> 5.36.0-7+deb12u4", "tzdata 2026b-0+deb12u1 -> 2026f-0+deb12u1",
    "zlib1g 1:1.2.13.dfsg-1 -> 1:1.2.13.dfsg-1+deb12u1"]


def test_pending_security_fixes_of_a_real_sbom(index: LocalIndex) -> None:
    sbom = json.loads((RECORDED / "raw" / "sbom.cdx.json").read_text())
    packages = deb_packages(sbom)
    archive = SecurityArchive(SimpleIndex(index.url).http, {"debian": index.raw_url("Packages.xz")})
    lines, urls = pending(packages, archive)
    assert urls == {index.raw_url("Packages.xz")} and len(packages) > 100
    assert lines == RECORDED_PENDING, lines


def test_an_architecture_all_package_is_read_from_the_images_architectures_index() -> None:
    """tzdata and libpam-runtime are `all`: the security suite lists them in binary-amd64 (its Release names no
    `all`; its binary-all file lacks fixes, kitty-terminfo's among them), as apt reads them."""
    packages = {p.name: p for p in deb_packages(json.loads((RECORDED / "raw" / "sbom.cdx.json").read_text()))}
    archive = SecurityArchive(Http())
    for name in ("tzdata", "libpam-runtime", "zlib1g"):
        assert archive.url(packages[name]) == SECURITY_ARCHIVES["debian"].format(codename="bookworm", arch="amd64")
    assert packages["tzdata"].arch == "all" and packages["zlib1g"].arch == "amd64"
    alone = deb_packages({"components": [c for c in json.loads((RECORDED / "raw" / "sbom.cdx.json").read_text())[
        "components"] if "arch=all" in c["purl"]]})
    with pytest.raises(IndexUnreadable, match="no security index can be chosen"):
        archive.url(alone[0])


def versions_to_order() -> list[str]:
    """Real Debian versions (the recorded SBOM's and security suite's) and dpkg's hard cases (epochs, `~`, letters,
    revisions)."""
    sbom = json.loads((RECORDED / "raw" / "sbom.cdx.json").read_text())
    real = sorted({p.version for p in deb_packages(sbom)})[:40]
    hard = ["1.0~rc1", "1.0", "1.0-1", "1.0+deb12u1", "1.0a", "1:0.9", "2:1.0", "1.0~~", "1.0~", "1.0-1~bpo1",
            "20250419~deb12u2", "20230311", "2.36-9+deb12u10", "2.36-9+deb12u9", "3.0.17-1~deb12u2", "0.5.11+git1",
            "1.2.3-0ubuntu1", "1.2.3-0ubuntu1.1", "9:1", "1.0.0+dfsg-1", "1.0.0-1+b1"]
    return real + hard


def test_debian_order_is_dpkgs(host_tool: Callable[[str], str]) -> None:
    """Every pair of real and hard versions ordered as `dpkg --compare-versions` orders them."""
    dpkg = host_tool("dpkg")
    versions = versions_to_order()
    pairs = [(a, b) for i, a in enumerate(versions) for b in versions[i + 1:]]
    script = "\n".join(f"dpkg --compare-versions '{a}' lt '{b}' && echo -1 || "
                       f"{{ dpkg --compare-versions '{a}' eq '{b}' && echo 0 || echo 1; }}" for a, b in pairs)
    out = subprocess.run(["bash", "-s"], input=script, capture_output=True, text=True, timeout=600,
                         env={"PATH": f"{Path(dpkg).parent}:/usr/bin:/bin"}).stdout.split()
    wrong = [(a, b, want) for (a, b), want in zip(pairs, map(int, out)) if debian_compare(a, b) != want]
    assert len(out) == len(pairs) and not wrong, wrong[:10]
    print(f"{len(pairs)} pairs ordered as dpkg orders them")
