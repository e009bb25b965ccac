"""A small OSV-compatible service for the tests (OSV's own API does not answer from here): the records of a folder
(the PyPA advisory database, real records) behind ``POST /v1/query`` (pip-audit's `--osv-url`), ``POST
/v1/querybatch`` and ``GET /v1/vulns/<id>`` (trainimg's URL mode), on 127.0.0.1.

Which records affect a version is decided here independently of trainimg's range evaluation: by the records'
``versions`` lists alone (the PyPA database enumerates every affected release there), so a test comparing the two
compares two readings of the same record. `silent` names packages the service leaves out of a batch answer (a
service that did not answer for them); every answer states the data's date as ``Last-Modified``.

`osv_proxy` puts the same service behind OSV's own address: an HTTPS proxy on 127.0.0.1 that answers a CONNECT to
``api.osv.dev:443`` itself, under a certificate for that name from a CA of its own (trusted through
``REQUESTS_CA_BUNDLE``), as a site's TLS-intercepting proxy would. trainimg's default source is then asked
unchanged, by name, through the proxy variables every HTTP client here reads.
"""

from __future__ import annotations

import datetime
import email.utils
import json
import socketserver
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version


def _rfc3339(value: object) -> str:
    """YAML's timestamps back to OSV's JSON form (``2023-08-03T19:36:12Z``), as the service would send them."""
    if not isinstance(value, datetime.datetime):
        return str(value)
    utc = value.astimezone(datetime.timezone.utc) if value.tzinfo else value
    return utc.replace(tzinfo=None).isoformat(timespec="microseconds" if utc.microsecond else "seconds") + "Z"


def _same(a: str, b: str) -> bool:
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


class Records:
    def __init__(self, folder: Path) -> None:
        self.by_id: dict[str, dict[str, Any]] = {}
        for path in sorted(folder.rglob("*.yaml")):
            record = yaml.load(path.read_text(encoding="utf-8"), Loader=yaml.CSafeLoader)
            self.by_id[record["id"]] = json.loads(json.dumps(record, default=_rfc3339))
        newest = max(datetime.datetime.fromisoformat(r["modified"].replace("Z", "+00:00"))
                     for r in self.by_id.values())
        self.last_modified = email.utils.format_datetime(newest.astimezone(datetime.timezone.utc), usegmt=True)

    def affecting(self, name: str, version: str) -> list[dict[str, Any]]:
        out = []
        for record in self.by_id.values():
            for entry in record.get("affected", []):
                pkg = entry.get("package", {})
                if pkg.get("ecosystem") == "PyPI" and canonicalize_name(pkg.get("name", "")) == canonicalize_name(name) \
                        and any(_same(str(v), version) for v in entry.get("versions", [])):
                    out.append(record)
                    break
        return out


def _handler(records: Records, silent: set[str]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _send(self, data: Any, status: int = 200) -> None:
            body = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Last-Modified", records.last_modified)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802
            vid = self.path.removeprefix("/v1/vulns/")
            if self.path.startswith("/v1/vulns/") and vid in records.by_id:
                self._send(records.by_id[vid])
            else:
                self._send({"code": 5, "message": "Bug not found."}, 404)

        def do_POST(self) -> None:  # noqa: N802
            query = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            if self.path == "/v1/query":
                pkg = query["package"]
                self._send({"vulns": records.affecting(pkg["name"], query["version"])} if
                           records.affecting(pkg["name"], query["version"]) else {})
            elif self.path == "/v1/querybatch":
                results = [{"vulns": [{"id": r["id"], "modified": r["modified"]}
                                      for r in records.affecting(q["package"]["name"], q["version"])]}
                           for q in query["queries"] if canonicalize_name(q["package"]["name"]) not in silent]
                self._send({"results": results})
            else:
                self._send({"code": 5}, 404)

    return Handler


@contextmanager
def osv_service(folder: Path, silent: set[str] = frozenset()) -> Iterator[str]:  # type: ignore[assignment]
    """Serve `folder`'s records; yields the base URL (``http://127.0.0.1:PORT``)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(Records(folder), set(silent)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


OSV_HOST = "api.osv.dev"


def _certificate(host: str, folder: Path) -> tuple[Path, Path, Path]:
    """A CA of the test's own and a certificate for `host` it signed: (CA file, certificate, key)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "trainimg test proxy CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = folder / "ca.pem", folder / "cert.pem", folder / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


class _ProxyServer(socketserver.ThreadingTCPServer):
    daemon_threads = True


@contextmanager
def osv_proxy(folder: Path, workdir: Path) -> Iterator[tuple[dict[str, str], list[str]]]:
    """`folder`'s records as ``https://api.osv.dev``, through an HTTPS proxy on 127.0.0.1: yields the variables
    that send a client through it (and trust its CA) and the CONNECT targets it was asked for, in order. A CONNECT
    to any other host is refused (403)."""
    ca, cert, key = _certificate(OSV_HOST, workdir)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    handler, asked = _handler(Records(folder), set()), []  # type: type[BaseHTTPRequestHandler], list[str]

    class Tunnel(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            words = self.rfile.readline().decode("latin-1").split()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # the CONNECT's headers
            if words[:2] != ["CONNECT", f"{OSV_HOST}:443"]:
                self.wfile.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                return
            asked.append(words[1])
            self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            with tls.wrap_socket(self.connection, server_side=True) as inner:
                handler(inner, self.client_address, self.server)  # type: ignore[arg-type]

    server = _ProxyServer(("127.0.0.1", 0), Tunnel)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield {"HTTPS_PROXY": url, "https_proxy": url, "NO_PROXY": "", "no_proxy": "",
               "REQUESTS_CA_BUNDLE": str(ca)}, asked
    finally:
        server.shutdown()
        server.server_close()
