"""``python -m trainimg_runtime sbom [--write PATH]``: the image's bill of materials, CycloneDX 1.6 JSON.

Made at build time from inside the image, after the last install, so it lists what is really there, not what the
recipe asked for: every Python distribution of the interpreter (name, version, ``pkg:pypi`` purl and hashes), every
package dpkg installed (``pkg:deb/<distro>/...`` with its architecture and release) and the CUDA-side shared
libraries, each with the package that brought it (NCCL and cuDNN with the version their own library answers, as
the manifest and the probe read them; the others with the version their file name carries, else their package's).

A Python package's hashes say where they come from (the ``trainimg:hash-source`` property): ``lock`` when the
variant's requirements lock is in the image and pins that version (the sha256 of the wheels it allows, one of which
pip or uv checked at install), ``direct_url`` when the installer recorded the archive's hash, else ``record``: a
sha256 over the dist-info ``RECORD`` entries (path and hash of every installed file, bytecode left out), which
identifies the installed files whatever the installer.

The output is deterministic: components sorted, no timestamp, and the serial number derived from the content, so
two builds that installed the same things give the same bytes (reproducibility is measured on it).
Standard library only; the host imports it for the media type and to read documents back.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import platform
import sys
import uuid
from urllib.parse import quote

from . import libs
from .contract import (AUDIT_STATES, DPKG_STATUS_PATH, EXIT_USAGE, IMAGE_LOCK_PATH, LABELS_PATH, NOT_AUDITED,
                       OS_RELEASE_PATH, SBOM_PATH, VARIANT_LABEL)
from .lockpins import read_lock
from .manifest import distribution_key

SPEC_VERSION = "1.6"
MEDIA_TYPE = "application/vnd.cyclonedx+json"  # the document's media type, and the OCI artifactType it is pushed as
HASH_SOURCE = "trainimg:hash-source"
LOCK_HASHES, DIRECT_URL_HASHES, RECORD_HASHES = "lock", "direct_url", "record"
PATH_PROPERTY = "trainimg:path"
VERSION_SOURCE = "trainimg:version-source"
PACKAGE_PROPERTY = "trainimg:package"  # the purl of the package that brought a library file
AUDIT_PROPERTY = "trainimg:audit"  # the advisory audit the build followed: audited, skipped, not-audited
# Libraries whose version their own library answers through ctypes (libs.library_version's kinds).
ASKED_LIBRARIES = {"libnccl": "nccl", "libcudnn": "cudnn"}
_SERIAL_NAMESPACE = uuid.UUID("6f1c3a52-5b8e-4d0e-9a51-7d0b3c2e8f10")  # trainimg's SBOMs: content -> serial


# ----------------------------------------------------------------------------------------------------- purls


def _purl_part(text: str) -> str:
    """A purl segment: percent-encoded except the characters the spec leaves as they are."""
    return quote(text, safe=".-_~")


def pypi_purl(name: str, version: str) -> str:
    """``pkg:pypi/<name>@<version>``; the purl spec's PyPI names are lower case with ``-`` for ``_``."""
    return f"pkg:pypi/{_purl_part(distribution_key(name))}@{_purl_part(version)}"


def deb_purl(name: str, version: str, arch: str, distro: dict[str, str]) -> str:
    """``pkg:deb/debian/<name>@<version>?arch=<arch>&distro=<codename>`` (the spec's own example shape)."""
    namespace = _purl_part(distro.get("ID", "debian"))
    qualifiers = [f"arch={_purl_part(arch)}"] if arch else []
    if distro.get("VERSION_CODENAME"):
        qualifiers.append(f"distro={_purl_part(distro['VERSION_CODENAME'])}")
    query = "?" + "&".join(qualifiers) if qualifiers else ""
    return f"pkg:deb/{namespace}/{_purl_part(name)}@{_purl_part(version)}{query}"


# --------------------------------------------------------------------------------------------- Python packages


def lock_hashes(text: str | None) -> dict[str, tuple[str, list[str]]]:
    """A requirements lock (``name==version \\ --hash=sha256:...``) -> normalised name -> (version, hashes)."""
    return {name: (pin.version, list(pin.hashes)) for name, pin in read_lock(text).items()}


def _direct_url_hash(dist: importlib.metadata.Distribution) -> str | None:
    """The archive's sha256 an installer recorded in ``direct_url.json`` (PEP 610), if any."""
    try:
        info = json.loads(dist.read_text("direct_url.json") or "{}").get("archive_info") or {}
    except (ValueError, AttributeError):
        return None
    hashes = info.get("hashes") or {}
    if hashes.get("sha256"):
        return str(hashes["sha256"]).lower()
    algorithm, _, value = str(info.get("hash") or "").partition("=")
    return value.lower() if algorithm == "sha256" and value else None


def record_digest(record: str | None) -> str | None:
    """sha256 over a RECORD's ``path,hash`` lines of hashed files, sorted, bytecode left out (it is rewritten)."""
    if not record:
        return None
    lines = []
    for line in record.splitlines():
        path, _, rest = line.partition(",")
        file_hash = rest.split(",", 1)[0]
        if file_hash and not path.endswith(".pyc"):
            lines.append(f"{path},{file_hash}")
    return hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest() if lines else None


def _hashes(dist: importlib.metadata.Distribution, version: str,
            locked: tuple[str, list[str]] | None) -> tuple[list[str], str | None]:
    """(sha256 hex digests, where they come from) for one distribution, best source first."""
    if locked and locked[0].lower() == version.lower() and locked[1]:
        return locked[1], LOCK_HASHES
    direct = _direct_url_hash(dist)
    if direct:
        return [direct], DIRECT_URL_HASHES
    digest = record_digest(dist.read_text("RECORD"))
    return ([digest], RECORD_HASHES) if digest else ([], None)


def python_components(lock_text: str | None) -> list[dict]:
    """One component per installed distribution (the first on sys.path wins, as Python would import it)."""
    locked = lock_hashes(lock_text)
    seen: set[str] = set()
    components = []
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata else None
        if not name or distribution_key(name) in seen:
            continue
        seen.add(distribution_key(name))
        version = dist.version or ""
        purl = pypi_purl(name, version)
        hashes, source = _hashes(dist, version, locked.get(distribution_key(name)))
        component: dict = {"type": "library", "bom-ref": purl, "name": name, "version": version, "purl": purl}
        if hashes:
            component["hashes"] = [{"alg": "SHA-256", "content": h} for h in hashes]
            component["properties"] = [{"name": HASH_SOURCE, "value": source}]
        components.append(component)
    return components


# ------------------------------------------------------------------------------------------------ OS packages


def read_key_values(text: str | None) -> dict[str, str]:
    """``/etc/os-release``'s ``KEY=value`` lines (values unquoted)."""
    found = {}
    for line in (text or "").splitlines():
        key, eq, value = line.strip().partition("=")
        if eq and key and not key.startswith("#"):
            found[key] = value.strip().strip("\"'")
    return found


def dpkg_stanzas(text: str | None) -> list[dict[str, str]]:
    """dpkg's status file -> one dict per package stanza (continuation lines folded into their field)."""
    stanzas: list[dict[str, str]] = []
    current: dict[str, str] = {}
    key = ""
    for line in (text or "").splitlines():
        if not line.strip():
            if current:
                stanzas.append(current)
            current, key = {}, ""
        elif line[0] in " \t":
            if key:
                current[key] += "\n" + line.strip()
        else:
            key, _, value = line.partition(":")
            current[key] = value.strip()
    if current:
        stanzas.append(current)
    return stanzas


def deb_components(status_text: str | None, distro: dict[str, str]) -> list[dict]:
    """One component per package dpkg reports installed (``install ok installed``)."""
    components = []
    for stanza in dpkg_stanzas(status_text):
        name, version = stanza.get("Package"), stanza.get("Version")
        if not name or not version or not stanza.get("Status", "").endswith(" installed"):
            continue
        purl = deb_purl(name, version, stanza.get("Architecture", ""), distro)
        components.append({"type": "library", "bom-ref": purl, "name": name, "version": version, "purl": purl})
    return components


# ------------------------------------------------------------------------------------------ CUDA-side libraries


def library_files(roots: list[str]) -> dict[str, str]:
    """Real CUDA-side library files under `roots` (libs.DUPLICATE_SONAME), real path -> soname, each file once."""
    found: dict[str, str] = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root) if os.path.isdir(root) else ():
            dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", ".git"))
            for soname, name in ((libs.soname_of(n), n) for n in filenames):
                real = os.path.realpath(os.path.join(dirpath, name)) if soname else ""
                if soname and os.path.isfile(real):
                    found.setdefault(real, libs.soname_of(os.path.basename(real)) or soname)
    return found


def _file_version(path: str, soname: str) -> str | None:
    """``libcudart.so.13.0.96`` -> ``13.0.96``; None when the name carries only the soname's major."""
    rest = os.path.basename(path)[len(soname):].lstrip(".")
    return f"{soname.rsplit('.', 1)[1]}.{rest}" if rest else None


def python_owners(paths: set[str]) -> dict[str, tuple[str, str]]:
    """Real path -> (purl, version) of the Python distribution whose RECORD lists that library file."""
    owners: dict[str, tuple[str, str]] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata else None
        for file in dist.files or ():
            if name and libs.soname_of(os.path.basename(str(file))):
                real = os.path.realpath(str(dist.locate_file(file)))
                if real in paths:
                    owners.setdefault(real, (pypi_purl(name, dist.version), dist.version))
    return owners


def deb_owners(paths: set[str], status_text: str | None, distro: dict[str, str]) -> dict[str, tuple[str, str]]:
    """Real path -> (purl, version) of the dpkg package whose file list (``info/<package>.list``) names it."""
    installed = {s["Package"]: s for s in dpkg_stanzas(status_text) if s.get("Package") and s.get("Version")}
    info_dir = os.path.join(os.path.dirname(DPKG_STATUS_PATH), "info")
    owners: dict[str, tuple[str, str]] = {}
    for list_name in sorted(n for n in _listdir(info_dir) if n.endswith(".list")):
        stanza = installed.get(list_name[:-len(".list")].split(":", 1)[0])
        if stanza is None:
            continue
        purl = deb_purl(stanza["Package"], stanza["Version"], stanza.get("Architecture", ""), distro)
        for line in (_read(os.path.join(info_dir, list_name)) or "").splitlines():
            if libs.soname_of(os.path.basename(line)) and os.path.realpath(line) in paths:
                owners.setdefault(os.path.realpath(line), (purl, stanza["Version"]))
    return owners


def library_components(files: dict[str, str], owners: dict[str, tuple[str, str]]) -> list[dict]:
    """NCCL, cuDNN, the CUDA runtime, cuBLAS...: one component per real file (`library_files`), with its path,
    the package that brought it (`owners`) and its version: what the library answers (NCCL, cuDNN), else what
    its file name carries (``libcudart.so.12.9.79``), else its package's (CUDA 13's wheels name only the major)."""
    asked = {kind: libs.library_version(kind) for kind in ASKED_LIBRARIES.values()}
    components = []
    for path, soname in sorted(files.items()):
        base = soname.split(".so", 1)[0]
        answer = asked.get(ASKED_LIBRARIES.get(base, ""))
        owner = owners.get(path)
        if answer and answer["found"] and os.path.realpath(answer["path"]) == path:
            version, source = answer["version"], "ctypes"
        elif _file_version(path, soname):
            version, source = _file_version(path, soname), "filename"
        else:
            version, source = (owner[1], "package") if owner else (None, "")
        properties = [(PATH_PROPERTY, path), (PACKAGE_PROPERTY, owner[0] if owner else ""), (VERSION_SOURCE, source)]
        component: dict = {"type": "library", "bom-ref": f"file:{path}", "name": base,
                           "properties": [{"name": k, "value": v} for k, v in properties if v]}
        if version:
            component["version"] = version
        components.append(component)
    return components


# ------------------------------------------------------------------------------------------------- document


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def _subject(labels_text: str | None, distro: dict[str, str]) -> dict:
    """The document's own component: the image, named by its variant label when the build wrote labels.json."""
    try:
        labels = json.loads(labels_text) if labels_text else {}
    except ValueError:
        labels = {}
    name = labels.get(VARIANT_LABEL) if isinstance(labels, dict) else None
    subject: dict = {"type": "container", "bom-ref": "image", "name": name or "image"}
    properties = [("trainimg:os", distro.get("PRETTY_NAME", "")), ("trainimg:python", platform.python_version())]
    subject["properties"] = [{"name": k, "value": v} for k, v in properties if v]
    return subject


def read_audit(path: str | None) -> dict:
    """The audit document the build mounted (the host's builder/audit/vex.py wrote it): ``state`` (one of the
    contract's AUDIT_STATES) and ``vulnerabilities``, CycloneDX entries. No file: the image was not audited."""
    text = _read(path) if path else None
    doc = json.loads(text) if text else {}
    state = doc.get("state", NOT_AUDITED)
    if state not in AUDIT_STATES or not isinstance(doc.get("vulnerabilities", []), list):
        raise ValueError(f"{path}: not an audit document (state {state!r})")
    return {"state": state, "vulnerabilities": doc.get("vulnerabilities", [])}


def build_sbom(components: list[dict], subject: dict, audit: dict | None = None) -> dict:
    """The CycloneDX document: components sorted by purl/ref, the audit's state as a metadata property and its
    waived findings as `vulnerabilities` (the VEX), serial number derived from the content."""
    audit = audit or {"state": NOT_AUDITED, "vulnerabilities": []}
    ordered = sorted(components, key=lambda c: (c["bom-ref"], c.get("version", "")))
    body = {"metadata": {"component": subject,
                         "tools": {"components": [{"type": "application", "name": "trainimg-runtime sbom"}]},
                         "properties": [{"name": AUDIT_PROPERTY, "value": audit["state"]}]},
            "components": ordered}
    if audit["vulnerabilities"]:
        body["vulnerabilities"] = audit["vulnerabilities"]
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    return {"bomFormat": "CycloneDX", "specVersion": SPEC_VERSION,
            "serialNumber": f"urn:uuid:{uuid.uuid5(_SERIAL_NAMESPACE, digest)}", "version": 1, **body}


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def image_sbom(audit: dict | None = None) -> dict:
    """The SBOM of the image this runs in, from its installed files (the paths of the contract), with the audit
    the build followed (`read_audit`)."""
    distro = read_key_values(_read(OS_RELEASE_PATH))
    status = _read(DPKG_STATUS_PATH)
    files = library_files(libs.default_scan_roots())
    owners = {**deb_owners(set(files), status, distro), **python_owners(set(files))}
    components = (python_components(_read(IMAGE_LOCK_PATH)) + deb_components(status, distro)
                  + library_components(files, owners))
    return build_sbom(components, _subject(_read(LABELS_PATH), distro), audit)


def render(document: dict) -> str:
    return json.dumps(document, sort_keys=True, indent=2) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainimg_runtime sbom",
                                     description="Print (or write) the image's CycloneDX 1.6 SBOM.")
    parser.add_argument("--write", metavar="PATH", nargs="?", const=SBOM_PATH,
                        help=f"write it here (default {SBOM_PATH}; parents created) instead of stdout")
    parser.add_argument("--audit", metavar="FILE", default=None,
                        help="the advisory audit's document the build mounts: its state and VEX (default: none, "
                             "the SBOM says not audited)")
    args = parser.parse_args(argv)
    try:
        audit = read_audit(args.audit)
    except ValueError as err:
        print(f"sbom: {err}", file=sys.stderr)
        return EXIT_USAGE
    text = render(image_sbom(audit))
    if not args.write:
        sys.stdout.write(text)
        return 0
    os.makedirs(os.path.dirname(os.path.abspath(args.write)), exist_ok=True)
    tmp = f"{args.write}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, args.write)
    print(f"sbom: wrote {args.write}", file=sys.stderr)
    return 0
