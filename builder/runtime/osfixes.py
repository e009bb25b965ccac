"""The OS packages of this image with a published security fix not yet applied (``trainimg-runtime os-fixes``, the
``os_security_fixes`` check of ``selftest --os-fixes`` and ``trainimg test --os-fixes``). Standard library only.

No CVE feed answers from where images are built and tested (Debian's security tracker, debsecan and OVAL do not;
../shared/reference/trust.md), but the release's security suite does: apt, pointed at a sources list holding only
that suite (`SECURITY_SUITES`, the distribution's own), simulates an upgrade (``apt-get -s upgrade``) and lists the
packages a published fix would replace: the suite's name is the finding's advisory id, with the installed version
and the fixed one. Nothing in the image changes: apt's lists and caches go to a temporary folder, the image's own
sources are not read, nothing is installed. The findings are judged with the advisory audit's waivers
(`waivers.judge`).

A check that could not look fails: an unknown distribution, an apt that cannot reach the suite, an answer that
leaves no package index behind (``apt-get update`` exits 0 when a fetch fails: the lists are what is checked). A
suite the mirror answers 404 for is a base past its security support: said as a warning, never passed silently.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from .contract import EXIT_FAILED, EXIT_OK, EXIT_USAGE, OS_RELEASE_PATH
from .sbom import read_key_values
from .waivers import Finding, Waiver, is_os_waiver, judge, parse_waivers, summary

#: ID of /etc/os-release -> (the security archive, the suite with {codename}, components). Sources: Debian's
#: security FAQ (www.debian.org/security/faq: "deb http://security.debian.org/debian-security bookworm-security
#: main"; deb.debian.org serves the same archive) and Ubuntu's archive layout (security.ubuntu.com/ubuntu
#: <codename>-security).
SECURITY_SUITES = {
    "debian": ("http://deb.debian.org/debian-security", "{codename}-security", "main"),
    "ubuntu": ("http://security.ubuntu.com/ubuntu", "{codename}-security", "main restricted universe multiverse"),
}
PASSED, FAILED, WARNING = "passed", "failed", "warning"
# ``Inst libc6 [2.36-9+deb12u7] (2.36-9+deb12u13 Debian-Security:12/stable-security [amd64])``
_INST = re.compile(r"^Inst (\S+) \[([^\]]+)\] \((\S+) ([^\[]*?)\s*(?:\[[^\]]*\])?\)")
Runner = Callable[[list[str]], "subprocess.CompletedProcess[str]"]


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False,
                          env={**os.environ, "LC_ALL": "C", "DEBIAN_FRONTEND": "noninteractive"})


def os_release(path: str = OS_RELEASE_PATH) -> dict[str, str]:
    """The distribution's ``ID`` and ``VERSION_CODENAME`` (and the rest of /etc/os-release), as the SBOM reads them."""
    try:
        with open(path, encoding="utf-8") as fh:
            return read_key_values(fh.read())
    except OSError:
        return {}


def suite_line(release: dict[str, str]) -> tuple[str, str] | None:
    """(suite name, sources.list line) for this distribution's security suite; None when no table row fits."""
    row = SECURITY_SUITES.get(release.get("ID", ""))
    codename = release.get("VERSION_CODENAME", "")
    if row is None or not codename:
        return None
    archive, suite, components = row
    name = suite.format(codename=codename)
    return name, f"deb {archive} {name} {components}"


def pending(output: str, suite: str, installed: Callable[[str], str] = lambda name: "") -> list[Finding]:
    """The packages an ``apt-get -s upgrade`` would replace, and those it keeps back (their fix needs a package
    the image lacks; `installed` gives their version), each a finding whose advisory id is the suite."""
    found = []
    kept = False
    for line in output.splitlines():
        m = _INST.match(line)
        if m:
            found.append(Finding(suite, m.group(1).split(":")[0], m.group(2), (m.group(3),), summary=m.group(4),
                                 source=suite))
        elif line.startswith("The following packages have been kept back"):
            kept = True
        elif kept and line.startswith(" "):
            found += [Finding(suite, name.split(":")[0], installed(name), (), summary="kept back", source=suite)
                      for name in line.split()]
        else:
            kept = False
    return sorted(found, key=lambda f: f.package)


def _installed(run: Runner) -> Callable[[str], str]:
    return lambda name: run(["dpkg-query", "-W", "-f", "${Version}", name]).stdout.strip() or "?"


def look(release: dict[str, str], run: Runner = _run) -> tuple[str, str, list[Finding]]:
    """(status, reason, findings) of one look at the security suite; status FAILED or WARNING when it could
    not look, with the reason."""
    line = suite_line(release)
    if line is None:
        return FAILED, (f"no security suite known for {release.get('ID') or 'this distribution'} "
                        f"{release.get('VERSION_CODENAME', '')}".rstrip() + f" (known: {', '.join(SECURITY_SUITES)})"), []
    suite, source = line
    with tempfile.TemporaryDirectory(prefix="trainimg-os-fixes-") as tmp:
        lists = os.path.join(tmp, "lists")
        os.makedirs(os.path.join(lists, "partial"))
        os.makedirs(os.path.join(tmp, "cache", "archives", "partial"))
        sources = os.path.join(tmp, "sources.list")
        with open(sources, "w", encoding="utf-8") as fh:
            fh.write(source + "\n")
        options = ["-o", f"Dir::Etc::SourceList={sources}", "-o", "Dir::Etc::SourceParts=/nonexistent",
                   "-o", f"Dir::State::Lists={lists}", "-o", f"Dir::Cache={tmp}/cache", "-o", "Debug::NoLocking=1",
                   "-o", "Acquire::Retries=1", "-q"]
        try:
            update = run(["apt-get", *options, "update"])
        except OSError as err:
            return FAILED, f"apt-get cannot run here: {err}", []
        said = update.stdout + update.stderr
        if not any("Packages" in name for name in os.listdir(lists)):
            if re.search(r"\b404\b", said):
                return WARNING, (f"{suite} is not served ({source.split()[1]} answers 404): this base is past its "
                                 "security support, no fix will be published for it"), []
            errors = [x.strip() for x in said.splitlines() if x.startswith(("E:", "W:", "Err"))]
            return FAILED, f"could not read {suite} from {source.split()[1]}: {'; '.join(errors[:3]) or 'no index'}", []
        simulated = run(["apt-get", *options, "-s", "upgrade"])
        if simulated.returncode != 0:
            return FAILED, f"apt-get -s upgrade failed (exit {simulated.returncode}): {simulated.stderr.strip()}", []
    return PASSED, suite, pending(simulated.stdout, suite, _installed(run))


def check(waivers: list[Waiver], today: datetime.date | None = None, release: dict[str, str] | None = None,
          run: Runner = _run) -> tuple[str, str, dict]:
    """The ``os_security_fixes`` check: (status, reason, details), findings judged with `waivers`."""
    status, said, findings = look(release if release is not None else os_release(), run)
    if status != PASSED:
        return status, said, {"suite": None, "findings": [], "unused_waivers": []}
    judged, unused = judge(findings, [w for w in waivers if is_os_waiver(w)], today or datetime.date.today())
    ok, line = summary(judged, unused, f"pending fix in {said}")
    details = {"suite": said, "findings": [j.to_json() for j in judged], "unused_waivers": [w.to_json() for w in unused]}
    return (PASSED if ok else FAILED), f"{said}: {line}", details


CHECK_NAME = "os_security_fixes"


def read_waivers(path: str | None) -> list[Waiver]:
    """The waivers the host hands an image: a JSON list in the committed file's schema (`waivers.parse_waivers`).
    Raises ValueError naming the file."""
    if not path:
        return []
    try:
        with open(path, encoding="utf-8") as fh:
            return parse_waivers(json.load(fh), path)
    except OSError as err:
        raise ValueError(f"{path}: {err.strerror or err}") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not JSON: {err}") from None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainimg_runtime os-fixes",
                                     description="List the OS packages with a published security fix not applied.")
    parser.add_argument("--waivers", default=None, metavar="FILE", help="a JSON list of waivers")
    args = parser.parse_args(argv)
    try:
        waivers = read_waivers(args.waivers)
    except ValueError as err:
        print(f"os-fixes: {err}", file=sys.stderr)
        return EXIT_USAGE
    start = time.monotonic()
    status, reason, details = check(waivers)
    print(json.dumps({"name": CHECK_NAME, "status": status, "reason": reason, "details": details,
                      "duration": round(time.monotonic() - start, 3)}, sort_keys=True))
    return EXIT_FAILED if status == FAILED else EXIT_OK
