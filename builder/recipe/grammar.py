"""The one image-reference grammar (github.com/distribution/reference, regexp.go), for recipes, specs and pushes.

Every pattern here is anchored with ``\\A``/``\\Z`` (``$`` would accept a trailing newline), ASCII-only (``\\w``
would otherwise accept any Unicode letter), and free of nested ambiguity: a path component's separator is
``[-]+`` where the upstream text has ``[-]*``, and the repeated groups are atomic, so a long near-miss such as
``localhost:5000/aaaa…a!`` is rejected in linear time instead of backtracking through every split (the upstream
spelling took seconds at 26 characters and doubled with each one more).
"""

from __future__ import annotations

import re

MAX_NAME = 255  # distribution's limit on a repository name, registry host included
MAX_TAG = 128

PATH_COMPONENT = r"[a-z0-9]++(?>(?>__|[._]|-++)[a-z0-9]++)*+"
DOMAIN_COMPONENT = r"(?>[a-zA-Z0-9](?>[a-zA-Z0-9-]*+(?<=[a-zA-Z0-9]))?)"
DOMAIN_NAME = rf"{DOMAIN_COMPONENT}(?>\.{DOMAIN_COMPONENT})*+"
PORT = r"[0-9]{1,5}"
TAG = rf"[A-Za-z0-9_][A-Za-z0-9_.-]{{0,{MAX_TAG - 1}}}"
DIGEST = r"sha256:[a-f0-9]{64}"
REPOSITORY = rf"{PATH_COMPONENT}(?>/{PATH_COMPONENT})*+"

PATH_COMPONENT_RE = re.compile(rf"\A{PATH_COMPONENT}\Z")
DOMAIN_NAME_RE = re.compile(rf"\A{DOMAIN_NAME}\Z")
PORT_RE = re.compile(rf"\A{PORT}\Z")
TAG_RE = re.compile(rf"\A{TAG}\Z")
DIGEST_RE = re.compile(rf"\A{DIGEST}\Z")
REPOSITORY_RE = re.compile(rf"\A(?=.{{1,{MAX_NAME}}}\Z){REPOSITORY}\Z")
REFERENCE_RE = re.compile(rf"\A(?:{DOMAIN_NAME}(?::{PORT})?/)?{REPOSITORY}(?::{TAG})?(?:@{DIGEST})?\Z")
# The tag trainimg gives a variant: <framework version>-<cpu|cuXYZ>-py<major.minor>; the groups feed moving tags.
VARIANT_TAG_RE = re.compile(r"\A([0-9]+)\.([0-9]+)((?:\.[0-9]+)*)-(cpu|cu[0-9]+)-py([0-9]+)\.([0-9]+)\Z")

PATH_COMPONENT_RULE = "must be lowercase letters and digits, optionally joined by '.', '_', '__' or '-'"
TAG_RULE = f"must be letters, digits, '_', '.' or '-' (at most {MAX_TAG}, not starting with '.' or '-')"


def is_reference(text: object) -> bool:
    """True for an image reference ``[host[:port]/]path[:tag][@sha256:…]`` as docker accepts it."""
    return isinstance(text, str) and REFERENCE_RE.match(text) is not None
