"""The advisory audit (`trainimg audit`, builder/audit/): OSV ranges as the schema defines them, waivers that expire,
a source that could not be read or is too old never passing, the same answer from a folder and from a service,
and the PyPA's own client (pip-audit --strict) agreeing with it against the same service.

Real data: the PyPA advisory database in ../shared/advisories (OSV YAML, 2024-10-10; its README). The shipped locks
are audited against it with an explicit allowance for its age (`ALLOWANCE`): the snapshot is older than any
sensible --max-age, and saying so in one place keeps the age check itself tested (one day less fails).
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, trainimg
from osvserver import osv_proxy, osv_service

from trainimg.audit.osv import Advisory
from trainimg.options import OSV_API
from trainimg.audit.vex import audit_document, document_of_sbom, document_text
from trainimg.imagebuild.builder import VariantBuild
from trainimg.publish.lockfile import lock_entry, read_lock, write_lock
from trainimg.runtime.contract import AUDIT_STATES, AUDITED
from trainimg.runtime.sbom import build_sbom, pypi_purl, read_audit
from trainimg.runtime.waivers import EXPIRED, OPEN, WAIVED, Finding, Waiver, judge

DATA = Path(__file__).parent / "data" / "audit"
SNAPSHOT = datetime.date(2024, 10, 10)  # ../shared/advisories/README.md: the database as of this day
DB_CANDIDATES = [Path(os.environ.get("TRAINIMG_ADVISORY_DATA", "/nonexistent")),
                 ROOT.parent / "shared" / "advisories" / "pypa-advisory-database",
                 Path("/work/shared/advisories/pypa-advisory-database")]
VARIANT = "team-certifi"  # framework none, extras certifi==2022.12.7 (tests/data/audit)
TODAY = datetime.date.today()
ALLOWANCE = str((TODAY - SNAPSHOT).days + 1)  # the snapshot's age in days, and one for the clock


@pytest.fixture(scope="module")
def db() -> Path:
    found = next((p for p in DB_CANDIDATES if (p / "vulns").is_dir()), None)
    if found is None:
        pytest.fail("the PyPA advisory database is not beside the checkout (../shared/advisories): the audit's tests "
                    "need real records")
    return found


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recipes folder with the certifi variant and its committed lock."""
    root = tmp_path_factory.mktemp("audit")
    (root / "recipes").mkdir()
    shutil.copyfile(DATA / "team-certifi.yaml", root / "recipes" / "team.yaml")
    (root / "images" / VARIANT).mkdir(parents=True)
    shutil.copyfile(DATA / "team-certifi.lock", root / "images" / VARIANT / "requirements.lock")
    return root / "recipes"


@pytest.fixture(scope="module")
def service(db: Path) -> Iterator[str]:
    """The whole database behind an OSV-compatible service on 127.0.0.1."""
    with osv_service(db / "vulns") as url:
        yield url


def waivers(path: Path, **changes: Any) -> Path:
    waiver = {"id": "PYSEC-2023-135", "package": "certifi", "version": "2022.12.7",
              "reason": "the image reads the system CA bundle", "approved-by": "security@example.com",
              "expires": (TODAY + datetime.timedelta(days=30)).isoformat(), **changes}
    path.write_text(json.dumps({"waivers": [{k: v for k, v in waiver.items() if v is not None}]}), encoding="utf-8")
    return path


def audit(recipes: Path, source: str, *args: str) -> subprocess.CompletedProcess[str]:
    return trainimg("--recipes", str(recipes), "audit", VARIANT, "--advisories", source, "--max-age", ALLOWANCE,
                    *args, timeout=120)


# -- OSV evaluation: a table of ranges, every row a case ------------------------------------------------------------

# (affected entry: ranges and versions, version, expected first fixed or None for "not affected", "" for "no fix")
RANGES = [
    ({"ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "2.0"}]}]}, "1.9", "2.0"),
    ({"ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "2.0"}]}]}, "2.0", None),
    ({"ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "1.0"}, {"fixed": "2.0"}]}]}, "0.9", None),
    ({"ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "1.0"}, {"fixed": "2.0"}]}]}, "1.0", "2.0"),
    ({"ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "1.0"}]}]}, "99", ""),
    ({"ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "1.0"}, {"last_affected": "1.5"}]}]}, "1.5", ""),
    ({"ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "1.0"}, {"last_affected": "1.5"}]}]}, "1.5.1", None),
    # two intervals in one range, events out of order: sorted before the walk
    ({"ranges": [{"type": "ECOSYSTEM", "events": [{"fixed": "4.0"}, {"introduced": "3.0"}, {"fixed": "2.0"},
                                                   {"introduced": "1.0"}]}]}, "2.5", None),
    ({"ranges": [{"type": "ECOSYSTEM", "events": [{"fixed": "4.0"}, {"introduced": "3.0"}, {"fixed": "2.0"},
                                                   {"introduced": "1.0"}]}]}, "3.1", "4.0"),
    # two ranges: the first fixed version is the one above the version
    ({"ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "1.2"}]},
                 {"type": "ECOSYSTEM", "events": [{"introduced": "2.0"}, {"fixed": "2.3"}]}]}, "2.1", "2.3"),
    # an introduced and a fixed at one version: empty
    ({"ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "1.0"}, {"fixed": "1.0"}]}]}, "1.0", None),
    # PEP 440: 2015.04.28 is 2015.4.28, pre-releases come before the release, local labels after it
    ({"versions": ["2015.04.28"]}, "2015.4.28", ""),
    ({"ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "2.0"}]}]}, "2.0rc1", "2.0"),
    ({"ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "2.0"}]}]}, "1.9+cpu", "2.0"),
    ({"ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "2.0"}]}]}, "2.0+cpu", None),
    # a versions list without a range; a GIT range is not evaluated; a legacy version in a list is compared as written
    ({"versions": ["1.0", "1.1"]}, "1.1", ""),
    ({"versions": ["1.0", "1.1"]}, "1.2", None),
    ({"ranges": [{"type": "GIT", "repo": "x", "events": [{"introduced": "0"}, {"fixed": "abc"}]}]}, "1.0", None),
    ({"versions": ["0.7.10p1", "1.0"]}, "1.0", ""),
]


@pytest.mark.parametrize("entry,version,fixed", RANGES, ids=[f"{i}-{r[1]}" for i, r in enumerate(RANGES)])
def test_osv_range_evaluation(entry: dict[str, Any], version: str, fixed: str | None) -> None:
    record = {"id": "TEST-1", "modified": "2024-01-01T00:00:00Z",
              "affected": [{"package": {"ecosystem": "PyPI", "name": "Some_Pkg"}, **entry}]}
    got = Advisory.from_json(record, "table").fixes("some-pkg", version)
    assert (None if got is None else (got[0] if got else "")) == fixed
    withdrawn = Advisory.from_json({**record, "withdrawn": "2024-02-01T00:00:00Z"}, "table")
    assert withdrawn.fixes("some-pkg", version) is None  # a withdrawn record is no advisory
    other = Advisory.from_json({**record, "affected": [{**record["affected"][0],  # type: ignore[dict-item]
                                                        "package": {"ecosystem": "npm", "name": "some-pkg"}}]}, "t")
    assert other.fixes("some-pkg", version) is None  # another ecosystem's package of the same name


# -- waivers: every waiver state x every kind of finding ----------------------------------------------------------

FINDINGS = {
    "pypi": Finding("PYSEC-2023-135", "certifi", "2022.12.7", ("2023.7.22",), ("CVE-2023-37920",)),
    "os": Finding("bookworm-security", "libc6", "2.36-9", ("2.36-9+deb12u13",)),
}
LATER, EARLIER = TODAY + datetime.timedelta(days=1), TODAY - datetime.timedelta(days=1)
# name -> (how the waiver differs from one naming the finding exactly, expected state, used)
WAIVER_STATES = {
    "none": (None, OPEN, False),
    "holding": ({}, WAIVED, True),
    "expires-today": ({"expires": TODAY}, WAIVED, True),
    "expired": ({"expires": EARLIER}, EXPIRED, True),
    "by-alias": ({"id": "alias"}, WAIVED, True),
    "other-version": ({"version": "0.0.1"}, OPEN, False),
    "other-package": ({"package": "other"}, OPEN, False),
    "other-advisory": ({"id": "PYSEC-0000-1"}, OPEN, False),
}


@pytest.mark.parametrize("kind", sorted(FINDINGS))
@pytest.mark.parametrize("state", sorted(WAIVER_STATES))
def test_waiver_states(kind: str, state: str) -> None:
    finding = FINDINGS[kind]
    change, expected, used = WAIVER_STATES[state]
    waivers_ = []
    if change is not None:
        fields = {"id": finding.id, "package": finding.package, "version": finding.version, "expires": LATER, **change}
        if fields["id"] == "alias":
            fields["id"] = finding.aliases[0] if finding.aliases else finding.id
        waivers_ = [Waiver(fields["id"], fields["package"], fields["version"], "why", "who", fields["expires"])]
    judged, unused = judge([finding], waivers_, TODAY)
    assert judged[0].state == expected
    assert (not unused) == used if waivers_ else unused == []


BAD_WAIVERS = [
    ({"expires": "next week"}, "waivers[0].expires: 'next week' is not a date"),
    ({"approved-by": None}, "waivers[0].approved-by: missing"),
    ({"reason": " "}, "waivers[0].reason: missing"),
    ({"owner": "me"}, "waivers[0].owner: unknown key"),
    ({"justification": "fine"}, "waivers[0].justification: 'fine' is not one of"),
]


@pytest.mark.parametrize("change,line", BAD_WAIVERS, ids=[b[1].split(":")[0] + str(i) for i, b in enumerate(BAD_WAIVERS)])
def test_a_bad_waiver_is_one_line_and_exit_2(change: dict[str, Any], line: str, team: Path, db: Path,
                                             tmp_path: Path) -> None:
    r = audit(team, str(db), "--waivers", str(waivers(tmp_path / "w.yaml", **change)))
    assert r.returncode == 2 and line in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


# -- the done-when cases, through the CLI --------------------------------------------------------------------------


def test_certifi_is_refused_naming_the_advisory_and_the_fix(team: Path, db: Path, tmp_path: Path) -> None:
    r = audit(team, str(db), "--json", str(tmp_path / "a.json"), "--junit", str(tmp_path / "a.xml"))
    assert r.returncode == 1, r.stderr
    assert "PYSEC-2023-135" in r.stderr and "certifi 2022.12.7" in r.stderr and "fixed in 2023.7.22" in r.stderr
    check = json.loads((tmp_path / "a.json").read_text())["suites"][0]["checks"][0]
    assert check["name"] == "advisories" and check["status"] == "failed"
    assert check["details"]["findings"][0]["fixed"][0] == "2023.7.22"
    assert 'failures="1"' in (tmp_path / "a.xml").read_text()


def test_a_holding_waiver_passes_and_is_reported_waived(team: Path, db: Path, tmp_path: Path) -> None:
    r = audit(team, str(db), "--waivers", str(waivers(tmp_path / "w.yaml")), "--json", str(tmp_path / "a.json"))
    assert r.returncode == 0, r.stderr
    assert "WAIVED PYSEC-2023-135" in r.stderr
    finding = json.loads((tmp_path / "a.json").read_text())["suites"][0]["checks"][0]["details"]["findings"][0]
    assert finding["state"] == "waived" and finding["waiver"]["approved-by"] == "security@example.com"


def test_an_expired_waiver_fails(team: Path, db: Path, tmp_path: Path) -> None:
    r = audit(team, str(db), "--waivers", str(waivers(tmp_path / "w.yaml", expires=EARLIER.isoformat())))
    assert r.returncode == 1 and "EXPIRED" in r.stderr and EARLIER.isoformat() in r.stderr, r.stderr


def test_an_unused_waiver_is_reported(team: Path, db: Path, tmp_path: Path) -> None:
    r = audit(team, str(db), "--waivers", str(waivers(tmp_path / "w.yaml", version="2023.7.22")))
    assert r.returncode == 1 and "unused waiver: PYSEC-2023-135 (certifi 2023.7.22" in r.stderr, r.stderr


@pytest.mark.parametrize("source", ["http://127.0.0.1:9/", "https://osv.invalid/"])
def test_an_unreachable_source_fails(team: Path, source: str) -> None:
    r = audit(team, source)
    assert r.returncode == 1 and "could not be reached" in r.stderr and source.rstrip("/") in r.stderr, r.stderr


def test_data_older_than_max_age_fails_naming_its_date(team: Path, db: Path) -> None:
    r = trainimg("--recipes", str(team), "audit", VARIANT, "--advisories", str(db), "--max-age",
                 str(int(ALLOWANCE) - 2), timeout=120)
    assert r.returncode == 1 and "its data is from 2024-10-10" in r.stderr and "older than --max-age" in r.stderr


def test_an_empty_folder_fails(team: Path, tmp_path: Path) -> None:
    r = audit(team, str(tmp_path))
    assert r.returncode == 1 and "no OSV record" in r.stderr, r.stderr


def test_the_shipped_locks_pass_on_the_shipped_data(db: Path) -> None:
    """Every shipped variant's every pin, against the 2024-10-10 snapshot, with the snapshot's age allowed (a lock
    that is "not lockable here" pins nothing: `build` and `release` refuse it, and so does the audit)."""
    locks = sorted(ROOT.glob("images/*/requirements.lock"))
    names = [p.parent.name for p in locks if "# not lockable here" not in p.read_text(encoding="utf-8")]
    assert len(names) >= 9
    r = trainimg("audit", *names, "--advisories", str(db), "--max-age", ALLOWANCE, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"{len(names)} variant(s)" in r.stderr and "data of 2024-10-10" in r.stderr


# -- the same through an OSV-compatible service, and pip-audit against the same service ----------------------------


def test_the_service_gives_the_folders_answer(team: Path, service: str, db: Path, tmp_path: Path) -> None:
    url = service
    r = audit(team, url, "--json", str(tmp_path / "a.json"))
    assert r.returncode == 1 and "PYSEC-2023-135" in r.stderr and "fixed in 2023.7.22" in r.stderr, r.stderr
    details = json.loads((tmp_path / "a.json").read_text())["suites"][0]["checks"][0]["details"]
    assert details["dated_by"] == "the service's Last-Modified" and details["source"] == url
    # The same database read as a folder: the same findings, each with the same state and fixes (and its source).
    folder = audit(team, str(db), "--json", str(tmp_path / "f.json"))
    assert folder.returncode == 1, folder.stderr
    read = json.loads((tmp_path / "f.json").read_text())["suites"][0]["checks"][0]["details"]
    assert {f.pop("source") for f in details["findings"]} == {url}
    assert {f.pop("source") for f in read["findings"]} == {str(db)}
    assert details["findings"] and details["findings"] == read["findings"]


def test_a_package_the_service_did_not_answer_for_fails(team: Path, db: Path) -> None:
    with osv_service(db / "vulns", silent={"cloudml-hypertune"}) as url:
        r = audit(team, url)
    assert r.returncode == 1 and "did not answer" in r.stderr and "cloudml-hypertune" in r.stderr, r.stderr


def test_pip_audit_strict_agrees_through_the_same_service(team: Path, service: str, tmp_path: Path,
                                                          host_tool: Any) -> None:
    """The PyPA's client, --strict (through this machine's PyPI proxy without it, it passes what it could not
    look up), finds what trainimg finds in the same lock, from the same service."""
    lock = team.parent / "images" / VARIANT / "requirements.lock"
    r = subprocess.run([host_tool("pip-audit"), "--strict", "--no-deps", "--disable-pip", "-r", str(lock),
                        "-s", "osv", "--osv-url", f"{service}/v1/query", "-f", "json", "-o", str(tmp_path / "p.json")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stderr  # a vulnerability found
    deps = {d["name"]: d for d in json.loads((tmp_path / "p.json").read_text())["dependencies"]}
    assert [(v["id"], v["fix_versions"][0]) for v in deps["certifi"]["vulns"]] == [("PYSEC-2023-135", "2023.7.22")]
    assert deps["cloudml-hypertune"]["vulns"] == [] and all("skip_reason" not in d for d in deps.values())


# -- the VEX in the SBOM ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("justification", [None, "code_not_reachable"])
def test_a_waived_finding_is_a_vex_cyclonedx_validates(justification: str | None, tmp_path: Path) -> None:
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    waiver = Waiver("CVE-2023-37920", "certifi", "2022.12.7", "system CA bundle", "sec", LATER, justification)
    judged, _ = judge([FINDINGS["pypi"]], [waiver], TODAY)
    doc_path = tmp_path / "audit.json"
    doc_path.write_text(audit_document(AUDITED, judged))
    purl = pypi_purl("certifi", "2022.12.7")
    sbom = build_sbom([{"type": "library", "bom-ref": purl, "name": "certifi", "version": "2022.12.7",
                        "purl": purl}], {"type": "container", "bom-ref": "image", "name": "t"}, read_audit(str(doc_path)))
    errors = JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(sbom))
    assert errors is None, errors
    vuln = sbom["vulnerabilities"][0]
    assert vuln["id"] == "PYSEC-2023-135" and vuln["affects"][0]["ref"] == purl
    assert vuln["analysis"]["state"] == ("not_affected" if justification else "exploitable")
    assert {"name": "trainimg:audit", "value": "audited"} in sbom["metadata"]["properties"]


@pytest.mark.parametrize("state", AUDIT_STATES)
def test_the_audit_document_comes_back_from_the_sbom_and_the_lockfile(state: str, tmp_path: Path) -> None:
    """`verify` rebuilds with the document read back from the pushed SBOM, `build --locked` with the one the
    lockfile recorded: both must be the bytes the release's SBOM step mounted, or the SBOM layer differs."""
    waiver = Waiver("CVE-2023-37920", "certifi", "2022.12.7", "system CA bundle", "sec", LATER, None)
    judged, _ = judge([FINDINGS["pypi"]], [waiver], TODAY) if state == AUDITED else ([], [])
    mounted = audit_document(state, judged)
    doc_path = tmp_path / "audit.json"
    doc_path.write_text(mounted)
    sbom = build_sbom([], {"type": "container", "bom-ref": "image", "name": "t"}, read_audit(str(doc_path)))
    assert document_of_sbom(json.loads(json.dumps(sbom))) == mounted
    build = VariantBuild(name="v", tag="t/v:1", image_id="sha256:" + "1" * 64, size=1, seconds=0.0, steps=1,
                         cached=1, shared_parents=[], base_image="b", absent=[], manifest={})
    lock = tmp_path / "images.lock"
    write_lock(lock, [lock_entry(build, recipe="r.yaml", base_digest="sha256:" + "2" * 64, audit=mounted)])
    recorded = read_lock(lock)["v"].audit
    assert recorded is not None and document_text(recorded) == mounted


# -- release's default source: OSV's public API ------------------------------------------------------------------


def no_engine(**env: str) -> dict[str, str]:
    """The environment of a run that must fail before it reaches an engine: none answers at DOCKER_HOST."""
    return {**os.environ, "DOCKER_HOST": "unix:///nonexistent/trainimg-audit.sock", **env}


def closed_port() -> int:
    """A local port nothing listens on (bound, then released): a connection to it is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_release_and_audit_without_a_source_flag_audit_against_osvs_public_api(team: Path, db: Path,
                                                                               tmp_path: Path) -> None:
    """No --advisories: both ask https://api.osv.dev (here the real records behind a proxy answering for it); the
    release stops on the finding before any engine is reached, its report naming the source."""
    with osv_proxy(db / "vulns", tmp_path) as (proxy, asked):
        r = trainimg("--recipes", str(team), "release", VARIANT, "--registry", "localhost:5000", "--max-age",
                     ALLOWANCE, "--json", str(tmp_path / "r.json"), env=no_engine(**proxy), timeout=120)
        a = trainimg("--recipes", str(team), "audit", VARIANT, "--max-age", ALLOWANCE, env=no_engine(**proxy),
                     timeout=120)
    assert r.returncode == 1 and "PYSEC-2023-135" in r.stderr and "fixed in 2023.7.22" in r.stderr, r.stderr
    assert a.returncode == 1 and "PYSEC-2023-135" in a.stderr, a.stderr
    assert asked and set(asked) == {"api.osv.dev:443"}, asked
    details = json.loads((tmp_path / "r.json").read_text())["suites"][0]["checks"][0]["details"]
    assert details["source"] == OSV_API == "https://api.osv.dev" and details["state"] == AUDITED, details


def test_release_fails_naming_the_default_source_and_the_two_choices_when_it_does_not_answer(team: Path) -> None:
    """The default source refused (a proxy port nothing listens on): exit 1 before anything is built, one line."""
    port = closed_port()
    env = no_engine(HTTPS_PROXY=f"http://127.0.0.1:{port}", https_proxy=f"http://127.0.0.1:{port}", NO_PROXY="",
                    no_proxy="")
    r = trainimg("--recipes", str(team), "release", VARIANT, "--registry", "localhost:5000", env=env, timeout=120)
    assert (r.returncode, r.stdout) == (1, ""), r.stderr
    assert r.stderr.splitlines() == [
        "trainimg release: https://api.osv.dev/v1/querybatch: the advisory service could not be reached: ProxyError; "
        "https://api.osv.dev is the default advisory source (OSV's public API): give --advisories DIR|URL to audit "
        "against another source, or --skip-audit to release without an audit (recorded)"], r.stderr
    a = trainimg("--recipes", str(team), "audit", VARIANT, env=env, timeout=120)
    assert a.returncode == 1 and a.stderr.splitlines() == [
        "trainimg audit: https://api.osv.dev/v1/querybatch: the advisory service could not be reached: ProxyError; "
        "https://api.osv.dev is the default advisory source (OSV's public API): give --advisories DIR|URL to audit "
        "against another source"], a.stderr


def test_a_given_source_that_does_not_answer_fails_as_before(team: Path) -> None:
    """--advisories keeps its own line: the choices are the default's."""
    source = f"http://127.0.0.1:{closed_port()}"
    r = trainimg("--recipes", str(team), "release", VARIANT, "--registry", "localhost:5000", "--advisories", source,
                 env=no_engine(), timeout=120)
    assert r.returncode == 1 and r.stderr.splitlines() == [
        f"trainimg release: {source}/v1/querybatch: the advisory service could not be reached: ConnectionError"], \
        r.stderr


@pytest.mark.parametrize("argv, line", [
    (("build", VARIANT, "--waivers", "W"), "--waivers: build audits only with --advisories: no finding to waive"),
    (("build", VARIANT, "--max-age", "3"), "--max-age: build audits only with --advisories: no advisory data to date"),
    (("release", VARIANT, "--registry", "localhost:5000", "--skip-audit", "--waivers", "W"),
     "--waivers: --skip-audit skips the audit: no finding to waive"),
    (("release", VARIANT, "--registry", "localhost:5000", "--skip-audit", "--max-age", "3"),
     "--max-age: --skip-audit skips the audit: no advisory data to date"),
], ids=["build-waivers", "build-max-age", "skip-waivers", "skip-max-age"])
def test_an_audit_flag_with_no_audit_to_serve_is_refused_not_dropped(team: Path, tmp_path: Path,
                                                                       argv: tuple[str, ...], line: str) -> None:
    w = waivers(tmp_path / "w.yaml")
    r = trainimg("--recipes", str(team), *[str(w) if a == "W" else a for a in argv], env=no_engine(), timeout=120)
    assert (r.returncode, r.stderr.splitlines()) == (2, [line]), r.stderr

