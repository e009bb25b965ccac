"""The CPU architectures trainimg builds images for, and every name each goes by: the one table.

Why a table: one architecture has four spellings that must never be mixed up. OCI and Docker call it ``arm64``
(the image config's ``architecture``, an index entry's ``platform``, ``docker build --platform linux/arm64``);
Python's wheel tags and uv's ``--python-platform`` call it ``aarch64`` (``manylinux_2_28_aarch64``); Debian's
packages ``arm64``. A recipe's ``arch`` key takes the OCI names. ``amd64`` is the default and keeps every path it
always had (``images/<variant>/Dockerfile``, ``requirements.lock``, the local tag ``<repository>:<tag>``); any
other architecture's files live in ``images/<variant>/<arch>/`` and its local image is ``<repository>:<tag>-<arch>``
(the registry holds every architecture under the one tag, as an OCI image index).

Sources: the OCI image index spec's ``platform.architecture`` values are Go's GOARCH
(https://github.com/opencontainers/image-spec/blob/v1.1.0/image-index.md); the manylinux machine names are
PEP 600's (``uname -m``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Arch:
    """One architecture: its OCI name, the machine name wheels and uv use, and whether an OCI platform names a
    variant for it (`variant` of an index entry: ``v8`` for arm64, as Docker and containerd write it)."""

    name: str
    machine: str  # PEP 600 / `uname -m`: x86_64, aarch64
    oci_variant: str | None = None

    @property
    def platform(self) -> str:
        """``linux/arm64``: what ``docker build --platform`` and ``docker run --platform`` take."""
        return f"linux/{self.name}"


AMD64 = Arch("amd64", "x86_64")
ARM64 = Arch("arm64", "aarch64", "v8")
ARCHES: dict[str, Arch] = {a.name: a for a in (AMD64, ARM64)}
DEFAULT_ARCH = AMD64.name
DEFAULT_ARCHES = (DEFAULT_ARCH,)
# How a (variant, architecture) pair is named where one name must say both: a lockfile entry, a test report, a
# stage part, a build row. amd64 keeps the bare variant name (every file written before architectures existed).
ARCH_SEPARATOR = "@"


def arch_of(name: str) -> Arch:
    """The architecture `name` (an OCI name: ``arm64``); KeyError for another (recipes are validated before)."""
    return ARCHES[name]


def ordered(names: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """`names` in the table's order (amd64 first), each once: a variant's architectures read the same however
    its recipe lists them."""
    return tuple(a for a in ARCHES if a in names)


def arch_key(variant: str, arch: str) -> str:
    """``pytorch-2.13.0-cpu-py3.11`` for amd64, ``pytorch-2.13.0-cpu-py3.11@arm64`` for arm64."""
    return variant if arch == DEFAULT_ARCH else f"{variant}{ARCH_SEPARATOR}{arch}"


def split_key(key: str) -> tuple[str, str]:
    """(variant, architecture) of an `arch_key`."""
    variant, sep, arch = key.rpartition(ARCH_SEPARATOR)
    return (variant, arch) if sep and arch in ARCHES else (key, DEFAULT_ARCH)


def local_tag(tag: str, arch: str) -> str:
    """The engine's name for a variant's image of `arch`: its tag, and ``-<arch>`` after it off amd64 (the engine
    holds one image per name; the registry holds them all under the tag, in an index)."""
    return tag if arch == DEFAULT_ARCH else f"{tag}-{arch}"


def arch_dir(arch: str) -> str:
    """The folder under ``images/<variant>/`` that holds an architecture's Dockerfile and lock ("" for amd64)."""
    return "" if arch == DEFAULT_ARCH else arch
