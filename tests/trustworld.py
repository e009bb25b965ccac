"""The world trainimg's signatures meet their consumers in (tests/test_trust_consumers.py, test_trust_promote.py):
Debian's docker-registry 2.8 (the `LocalRegistry` binary, htpasswd; no referrers API) behind a FaultProxy (so a
test can make the registry refuse one request), a key pair made by `trainimg trust keygen` and one by `cosign
generate-key-pair`, the credentials in a docker config as `docker login` writes it, tiny images pushed through
trainimg's registry client, and each consumer's verdict on a reference: `trainimg verify --key`, `cosign verify`
(plain, and told the signed repository with `-a`), `cosign verify-attestation` and trixie's skopeo with a
`sigstoreSigned` policy (`.ci/setup-host` puts cosign and skopeo in its tools folder).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from faultproxy import FaultProxy

from trainimg.registry.localregistry import LocalRegistry
from trainimg.registry.references import RegistryTarget
from trainimg.registry.referrers import OCI_MANIFEST
from trainimg.registry.registryapi import RegistryAPI, sha256_digest
from trainimg.trust import attached, keys, provenance, simplesigning
from trainimg.trust.signer import Signer

TOOLS = Path(os.environ.get("TRAINIMG_TOOLS_DIR", "/opt/trainimg-tools")) / "bin"  # .ci/setup-host's
PASSWORD = "trust-consumers"
CONSUMERS = ("trainimg", "cosign", "cosign-identity", "cosign-attestation", "skopeo")
# A SLSA v1 predicate as a person would hand it to `cosign attest --type slsaprovenance1`.
HAND_PREDICATE = {"buildDefinition": {"buildType": "https://example.com/by-hand/v1", "externalParameters": {},
                                      "resolvedDependencies": []},
                  "runDetails": {"builder": {"id": "https://example.com/by-hand"}}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Consumers:
    """The consumers of the signatures on registry `host`: a docker config with its login (as `docker login` writes
    it: trainimg and cosign read it, skopeo as its authfile), skopeo's registries.d, a key pair by trainimg."""

    def __init__(self, folder: Path, host: str, username: str, password: str) -> None:
        self.folder, self.host, self.user, self.password = folder, host, username, password
        self.docker_config = folder / "docker"
        self.docker_config.mkdir()
        auth = base64.b64encode(f"{username}:{password}".encode()).decode()
        (self.docker_config / "config.json").write_text(json.dumps({"auths": {host: {"auth": auth}}}))
        self.env = {**os.environ, "DOCKER_CONFIG": str(self.docker_config), "TRAINIMG_SIGN_PASSWORD": PASSWORD,
                    "COSIGN_PASSWORD": PASSWORD}
        (folder / "registries.d").mkdir()
        (folder / "registries.d" / "default.yaml").write_text("default-docker:\n  use-sigstore-attachments: true\n")
        self.ours = self.keygen_trainimg()

    def run(self, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), cwd=cwd or self.folder, env=self.env, capture_output=True, text=True,
                              timeout=120)

    def keygen_trainimg(self) -> tuple[Path, Path]:
        r = self.run("trainimg", "trust", "keygen", "--output-key-prefix", "ours")
        assert r.returncode == 0, r.stderr
        return self.folder / "ours.key", self.folder / "ours.pub"

    # -- the consumers --------------------------------------------------------------------------------------------

    def verdicts(self, ref: str, key: Path, only: tuple[str, ...] = CONSUMERS) -> dict[str, tuple[bool, str]]:
        """{consumer: (accepted, what it said)} for `ref` checked with public key `key`, by the consumers `only`
        names (skopeo copies the image's layers: a big image is better left to the others)."""
        identity = ref.rsplit(":", 1)[0]
        cosign = (str(TOOLS / "cosign"), "--key", str(key), "--insecure-ignore-tlog=true", "--allow-http-registry")
        commands = {
            "trainimg": ("trainimg", "verify", ref, "--key", str(key)),
            "cosign": (cosign[0], "verify", *cosign[1:], ref),
            "cosign-identity": (cosign[0], "verify", *cosign[1:], "-a",
                                f"{simplesigning.REPOSITORY_ANNOTATION}={identity}", ref),
            "cosign-attestation": (cosign[0], "verify-attestation", "--type", provenance.COSIGN_TYPE, *cosign[1:],
                                   ref),
            "skopeo": (str(TOOLS / "skopeo"), "--policy", str(self.skopeo_policy(key)), "--registries.d",
                       str(self.folder / "registries.d"), "copy", "--src-tls-verify=false", "--src-authfile",
                       str(self.docker_config / "config.json"), f"docker://{ref}",
                       f"dir:{self.folder / ('copy-' + secrets.token_hex(4))}"),
        }
        out = {}
        for consumer in only:
            r = self.run(*commands[consumer])
            out[consumer] = (r.returncode == 0, (r.stdout + r.stderr).strip()[-600:])
        return out

    def skopeo_policy(self, key: Path) -> Path:
        """containers-policy.json(5): this registry's images only signed by `key` for the repository pulled."""
        path = self.folder / f"policy-{key.stem}.json"
        requirement = {"type": "sigstoreSigned", "keyPath": str(key), "signedIdentity": {"type": "matchRepository"}}
        path.write_text(json.dumps({"default": [{"type": "reject"}],
                                    "transports": {"docker": {self.host: [requirement]}}}))
        return path


class World(Consumers):
    """Consumers of a registry of their own behind a FaultProxy, with a second key pair (cosign's), and the cases
    of tests/test_trust_consumers.py."""

    def __init__(self, folder: Path, proxy: FaultProxy, username: str, password: str) -> None:
        super().__init__(folder, proxy.address, username, password)
        self.proxy = proxy
        self.api = RegistryAPI(RegistryTarget.parse(self.host), {"username": username, "password": password})
        self.cosigns = self.keygen_cosign()

    def keygen_cosign(self) -> tuple[Path, Path]:
        folder = self.folder / "cosign-made"
        folder.mkdir()
        r = self.run(str(TOOLS / "cosign"), "generate-key-pair", cwd=folder)
        assert r.returncode == 0, r.stderr
        return folder / "cosign.key", folder / "cosign.pub"

    def push(self, repository: str, tag: str, labels: dict[str, str] | None = None) -> str:
        """A tiny image of its own (one random layer, `labels` in its config) under `repository:tag`; its digest."""
        layer = b"trainimg trust test layer " + secrets.token_bytes(16)
        config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Labels": labels or {}},
                             "rootfs": {"type": "layers", "diff_ids": [sha256_digest(layer)]}}).encode()
        return self.push_manifest(repository, tag, config, layer)

    def push_manifest(self, repository: str, tag: str, config: bytes, layer: bytes) -> str:
        for blob in (config, layer):
            self.api.put_blob(repository, blob)
        manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "size": len(config),
                               "digest": sha256_digest(config)},
                    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "size": len(layer),
                                "digest": sha256_digest(layer)}]}
        return self.api.put_manifest(repository, tag, json.dumps(manifest).encode(), OCI_MANIFEST)

    def sign(self, key: Path, repository: str, digest: str) -> None:
        build = provenance.Build({"variant": "trust-test"}, (provenance.Resource("recipe", {"sha256": "0" * 64}),))
        Signer(keys.load_signing_key(key, self.env), self.env).sign(self.api, repository, digest, lambda: build)

    def copy_attached(self, source: str, digest: str, repository: str, to_digest: str) -> None:
        """The `.sig` and `.att` images of `source@digest`, written as `repository@to_digest`'s."""
        for tag_of in (attached.signature_tag, attached.attestation_tag):
            attached.write(self.api, repository, tag_of(to_digest), attached.read(self.api, source, tag_of(digest)))

    # -- the cases: each returns (the reference checked, the public key it is checked with) ------------------------

    def signed(self, repository: str) -> tuple[str, Path]:
        self.sign(self.ours[0], repository, self.push(repository, "v1"))
        return f"{self.host}/{repository}:v1", self.ours[1]

    def signed_cosign_key(self, repository: str) -> tuple[str, Path]:
        self.sign(self.cosigns[0], repository, self.push(repository, "v1"))
        return f"{self.host}/{repository}:v1", self.cosigns[1]

    def signed_by_cosign(self, repository: str) -> tuple[str, Path]:
        ref = f"{self.host}/{repository}@{self.push(repository, 'v1')}"
        (self.folder / "predicate.json").write_text(json.dumps(HAND_PREDICATE))
        common = ("--key", str(self.cosigns[0]), "--tlog-upload=false", "--allow-http-registry", "-y")
        for argv in (("sign", "-a", f"{simplesigning.REPOSITORY_ANNOTATION}={self.host}/{repository}"),
                     ("attest", "--type", provenance.COSIGN_TYPE, "--predicate", "predicate.json")):
            r = self.run(str(TOOLS / "cosign"), *argv, *common, ref)
            assert r.returncode == 0, r.stderr
        return f"{self.host}/{repository}:v1", self.cosigns[1]

    def unsigned(self, repository: str) -> tuple[str, Path]:
        self.push(repository, "v1")
        return f"{self.host}/{repository}:v1", self.ours[1]

    def another_digest(self, repository: str) -> tuple[str, Path]:
        signed = self.push(repository, "signed")
        self.sign(self.ours[0], repository, signed)
        self.copy_attached(repository, signed, repository, self.push(repository, "v1"))
        return f"{self.host}/{repository}:v1", self.ours[1]

    def tag_moved(self, repository: str) -> tuple[str, Path]:
        self.sign(self.ours[0], repository, self.push(repository, "v1"))
        self.push(repository, "v1")  # another manifest under the same tag, never signed
        return f"{self.host}/{repository}:v1", self.ours[1]

    def another_key(self, repository: str) -> tuple[str, Path]:
        self.sign(self.cosigns[0], repository, self.push(repository, "v1"))
        return f"{self.host}/{repository}:v1", self.ours[1]

    def another_repository(self, repository: str) -> tuple[str, Path]:
        layer = b"the same image in two repositories " + secrets.token_bytes(16)
        config = json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                             "rootfs": {"type": "layers", "diff_ids": [sha256_digest(layer)]}}).encode()
        other = repository + "-elsewhere"
        digest = self.push_manifest(other, "v1", config, layer)
        assert self.push_manifest(repository, "v1", config, layer) == digest
        self.sign(self.ours[0], other, digest)
        self.copy_attached(other, digest, repository, digest)
        return f"{self.host}/{repository}:v1", self.ours[1]


@contextmanager
def world_of(folder: Path) -> Iterator[World]:
    """A World in `folder`: its registry started on a free port behind a FaultProxy, stopped at the end."""
    for tool in ("cosign", "skopeo"):
        if not os.access(TOOLS / tool, os.X_OK):
            raise AssertionError(f"{TOOLS / tool} is missing: .ci/setup-host fetches it from Debian trixie")
    registry = LocalRegistry(folder / "registry", port=_free_port())
    info = registry.start()
    try:
        port = int(info.host.rsplit(":", 1)[1])
        with FaultProxy(upstream=("127.0.0.1", port), lifetime=1800.0) as proxy:
            yield World(folder, proxy, info.username, info.password)
    finally:
        registry.stop()
