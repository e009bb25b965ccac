"""An image with a known pending OS security fix, for the tests of the OS-fix checks (test_audit_image: the in-image
`os-fixes` gate, apt against the real security suite; test_mirror: `outdated --lock` on a released image's SBOM;
test_upstream_outdated: the recorded index).

The fix: Debian's kitty-terminfo (Architecture: all, no dependencies, one terminfo file), installed at 0.26.5-5,
bookworm's own version, from the .deb committed beside the data (tests/data/osfix/, fetched from Debian's pool; its
SHA256 is the one bookworm's Packages index lists, checked here before it is installed). bookworm-security carries
0.26.5-5+deb12u1 (DSA for kitty), so every check of pending fixes must name it: package kitty-terminfo, installed
0.26.5-5, fixed 0.26.5-5+deb12u1 or later, advisory bookworm-security. The .deb is committed rather than fetched
because the pool drops a version once no suite lists it: bookworm's next point release may.

Each image is one `docker build` layer over a suite image (the local base, or the CPU image), built once per run
(tests/onceperrun.py) under a name of this module's own and pinned there for the run.
"""

from __future__ import annotations

import hashlib
import io
import lzma
import tarfile
from pathlib import Path

import docker
import pytest
from onceperrun import once_per_run

DATA = Path(__file__).resolve().parent / "data" / "osfix"
PACKAGE, INSTALLED = "kitty-terminfo", "0.26.5-5"
DEB = DATA / f"{PACKAGE}_{INSTALLED}_all.deb"
DEB_SHA256 = "8a202416a1187523f0380070b66cf652455fe0df0082bc1b0dfb261b653bad30"  # bookworm main's Packages index
SUITE = "bookworm-security"
FIXED_AT_LEAST = "0.26.5-5+deb12u1"  # bookworm-security's version on 2026-12-02
REPOSITORY = "trainimg-test/osfix"


def index_versions(packages_xz: bytes) -> dict[str, str]:
    """Package -> version of a Packages index (xz), read stanza by stanza, apart from trainimg's parser (an index of
    one suite and architecture lists one version of each package)."""
    out = {}
    for stanza in lzma.decompress(packages_xz).decode("utf-8", "replace").split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line)
        if "Package" in fields and "Version" in fields:
            out[fields["Package"]] = fields["Version"]
    return out


def security_version(packages_xz: bytes, package: str = PACKAGE) -> str | None:
    """The version a Packages index (xz) lists for `package`."""
    return index_versions(packages_xz).get(package)


def _context(base: str) -> bytes:
    """A build context: the committed .deb and a Dockerfile installing it with dpkg over `base`."""
    data = DEB.read_bytes()
    assert hashlib.sha256(data).hexdigest() == DEB_SHA256, f"{DEB} is not the .deb bookworm's index lists"
    dockerfile = (f"FROM {base}\nCOPY {DEB.name} /tmp/\n"
                  f"RUN dpkg -i /tmp/{DEB.name} && rm /tmp/{DEB.name} "
                  f"&& test \"$(dpkg-query -W -f '${{Version}}' {PACKAGE})\" = {INSTALLED}\n").encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, body in (("Dockerfile", dockerfile), (DEB.name, data)):
            member = tarfile.TarInfo(name)
            member.size = len(body)
            tar.addfile(member, io.BytesIO(body))
    return out.getvalue()


def with_pending_fix(factory: pytest.TempPathFactory, base: str, name: str) -> str:
    """`base` with kitty-terminfo 0.26.5-5 installed, built once per run as `trainimg-test/osfix:<name>`."""
    tag = f"{REPOSITORY}:{name}"

    def build() -> str:
        client = docker.from_env(timeout=600)
        try:  # the base's labels (a variant's) stay: the image config inherits them
            try:
                before = client.images.get(tag).id
            except docker.errors.ImageNotFound:
                before = None
            image, _ = client.images.build(fileobj=io.BytesIO(_context(base)), custom_context=True, tag=tag, rm=True,
                                           forcerm=True)
            if before not in (None, image.id):  # the last run's, on a base since rebuilt: no litter
                try:
                    client.api.remove_image(before)
                except docker.errors.APIError:
                    pass  # named or used elsewhere: kept, as `docker rmi` keeps it
            return str(image.id)
        finally:
            client.close()

    once_per_run(factory, f"osfix-{name}", build)
    return tag


@pytest.fixture(scope="session")
def osfix_base(docker_engine: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The local base with the pending fix: a base a release builds on (test_mirror pushes it as the upstream)."""
    from conftest_images import LOCAL_BASE

    return with_pending_fix(tmp_path_factory, LOCAL_BASE, "base")


@pytest.fixture(scope="session")
def osfix_cpu_image(pinned_cpu_image: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The suite's CPU image with the pending fix: trainimg's runtime and gate in it (test_audit_image)."""
    return with_pending_fix(tmp_path_factory, pinned_cpu_image, "cpu")
