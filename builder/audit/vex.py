"""The audit's findings as CycloneDX 1.6 ``vulnerabilities``: the VEX the image's SBOM carries.

Only a waived finding reaches an image (an open or expired one stops the build), so each entry states what the
team decided: ``analysis.state`` ``not_affected`` with the waiver's CycloneDX ``justification`` when it gives one,
else ``exploitable`` with the response ``will_not_fix`` (an accepted risk), the waiver's reason, approver and
expiry in ``analysis.detail`` and as properties, the advisory's aliases as references, the first fixed version as
the recommendation. ``affects`` names the SBOM's own component (its bom-ref is the package's purl), so a scanner
reading the SBOM joins the two.

The document the build's SBOM step reads (`audit_document`) holds the audit's state and these entries, nothing
that changes with the day the data was read: the same findings and waivers give the same bytes, so the SBOM layer
changes only when they do.
"""

from __future__ import annotations

import json
from typing import Any

from ..runtime.contract import AUDIT_STATES, NOT_AUDITED
from ..runtime.sbom import AUDIT_PROPERTY, pypi_purl
from ..runtime.waivers import WAIVED, Judged

#: Where an alias's record lives, by its prefix (a reference needs a source): NVD for CVEs, GitHub's database for
#: GHSA ids, OSV for the rest (PYSEC and the ecosystems' own ids are OSV ids).
ALIAS_SOURCES = {"CVE-": ("NVD", "https://nvd.nist.gov/vuln/detail/"),
                 "GHSA-": ("GitHub Advisory Database", "https://github.com/advisories/")}
OSV_SOURCE = ("OSV", "https://osv.dev/vulnerability/")


def _source(vid: str) -> dict[str, str]:
    name, url = next((v for k, v in ALIAS_SOURCES.items() if vid.startswith(k)), OSV_SOURCE)
    return {"name": name, "url": url + vid}


def vulnerability(judged: Judged) -> dict[str, Any]:
    """One waived finding as a CycloneDX vulnerability."""
    f, w = judged.finding, judged.waiver
    assert judged.state == WAIVED and w is not None, "only a waived finding reaches an image"
    purl = pypi_purl(f.package, f.version)
    analysis: dict[str, Any] = {"detail": f"waived until {w.expires.isoformat()} by {w.approved_by}: {w.reason}"}
    if w.justification:
        analysis.update(state="not_affected", justification=w.justification)
    else:
        analysis.update(state="exploitable", response=["will_not_fix"])
    entry: dict[str, Any] = {
        "bom-ref": f"{f.id}@{purl}", "id": f.id, "source": _source(f.id),
        "affects": [{"ref": purl, "versions": [{"version": f.version, "status": "affected"}]}],
        "analysis": analysis,
        "properties": [{"name": "trainimg:waiver:approved-by", "value": w.approved_by},
                       {"name": "trainimg:waiver:expires", "value": w.expires.isoformat()}],
    }
    if f.aliases:
        entry["references"] = [{"id": a, "source": _source(a)} for a in f.aliases]
    if f.summary:
        entry["description"] = f.summary
    if f.first_fixed:
        entry["recommendation"] = f"upgrade {f.package} to {f.first_fixed} or later"
    return entry


def audit_document(state: str, judged: list[Judged]) -> str:
    """What the build's SBOM step reads: the audit's state and its waived findings as CycloneDX entries."""
    entries = sorted((vulnerability(j) for j in judged if j.state == WAIVED), key=lambda e: e["bom-ref"])
    return document_text({"state": state, "vulnerabilities": entries})


def document_text(document: dict[str, Any]) -> str:
    """The bytes of an audit document (`{"state": ..., "vulnerabilities": [...]}`): one spelling, so the document
    a release recorded in its lockfile, or read back from a pushed SBOM, rebuilds the same SBOM layer."""
    assert document.get("state") in AUDIT_STATES, document
    return json.dumps({"state": document["state"], "vulnerabilities": list(document.get("vulnerabilities") or [])},
                      sort_keys=True, indent=1) + "\n"


def document_of_sbom(sbom: dict[str, Any]) -> str:
    """The audit document the build of the image whose SBOM is `sbom` mounted: the state it recorded (an SBOM from
    before the audit existed records none: not audited) and its VEX. `verify` rebuilds with it."""
    properties = (sbom.get("metadata") or {}).get("properties") or []
    state = next((p.get("value") for p in properties if p.get("name") == AUDIT_PROPERTY), NOT_AUDITED)
    return document_text({"state": state, "vulnerabilities": sbom.get("vulnerabilities") or []})
