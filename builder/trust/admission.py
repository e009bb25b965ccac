"""The admission policies a cluster needs to run only images signed by the release key, with their provenance:
a Kyverno ``ClusterPolicy`` and a sigstore policy-controller ``ClusterImagePolicy``, each covering exactly the
repositories given (every tag and digest in them), checked against the CRDs their projects publish (vendored in
tests/data/crds).

Each asks for what trainimg writes: a signature by the public key (no transparency log: the key is the trust, as
with NVIDIA's NGC keys) and SLSA v1 provenance signed by the same key. Kyverno also checks the signed repository
(the signature's REPOSITORY_ANNOTATION, one image entry per repository) and the provenance's build type;
policy-controller has no check of the signed repository, so a signed image copied into a covered repository passes
it (its `policy` language sees the attestation, not the signature's payload).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..options.trust import POLICY_KINDS
from .provenance import BUILD_TYPE, PREDICATE_TYPE
from .simplesigning import REPOSITORY_ANNOTATION

KYVERNO_API = "kyverno.io/v1"
POLICY_CONTROLLER_API = "policy.sigstore.dev/v1beta1"


def _keys(public_pem: str) -> dict[str, Any]:
    """Kyverno's static key attestor: the key, and no Rekor or SCT lookup (none was written)."""
    return {"publicKeys": public_pem, "rekor": {"ignoreTlog": True}, "ctlog": {"ignoreSCT": True}}


def kyverno(name: str, identities: Sequence[str], public_pem: str) -> dict[str, Any]:
    """A ClusterPolicy refusing a Pod whose image in `identities` (HOST/REPO) lacks the signature or provenance."""
    images = []
    for identity in identities:
        images.append({
            "imageReferences": [f"{identity}:*", f"{identity}@*"],
            "type": "Cosign", "failureAction": "Enforce", "required": True, "verifyDigest": True,
            "mutateDigest": True,
            "attestors": [{"count": 1, "entries": [{"keys": _keys(public_pem),
                                                    "annotations": {REPOSITORY_ANNOTATION: identity}}]}],
            "attestations": [{
                "type": PREDICATE_TYPE,
                "attestors": [{"count": 1, "entries": [{"keys": _keys(public_pem)}]}],
                "conditions": [{"all": [{"key": "{{ buildDefinition.buildType }}", "operator": "Equals",
                                         "value": BUILD_TYPE}]}],
            }],
        })
    rule = {"name": "signed-by-the-release-key-with-provenance",
            "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}, "verifyImages": images}
    return {"apiVersion": KYVERNO_API, "kind": "ClusterPolicy", "metadata": {"name": name},
            "spec": {"background": False, "webhookTimeoutSeconds": 30, "rules": [rule]}}


def policy_controller(name: str, identities: Sequence[str], public_pem: str) -> dict[str, Any]:
    """A ClusterImagePolicy admitting images of `identities` only with the signature and the provenance."""
    globs = [{"glob": f"{identity}{sep}**"} for identity in identities for sep in (":", "@")]
    authority = {"name": "release-key", "key": {"data": public_pem, "hashAlgorithm": "sha256"},
                 "attestations": [{"name": "provenance", "predicateType": PREDICATE_TYPE}]}
    return {"apiVersion": POLICY_CONTROLLER_API, "kind": "ClusterImagePolicy", "metadata": {"name": name},
            "spec": {"images": globs, "authorities": [authority], "mode": "enforce"}}


WRITERS = dict(zip(POLICY_KINDS, (kyverno, policy_controller)))  # by `trainimg trust policy KIND`
