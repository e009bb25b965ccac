"""SLSA v1 provenance of one image, as an in-toto Statement v1 (https://slsa.dev/spec/v1.0/provenance,
https://github.com/in-toto/attestation/blob/main/spec/v1/statement.md).

It claims what trainimg knows and nothing more: the parameters it was run with, the resources the image was made
from with their digests (what the caller passes: the image's own labels, the checkout's files, the base by
digest), the artifacts pushed beside the image (SBOM, release record) as byproducts, the times only where this run
saw them, and who built it: the CI's workflow or runner from its own variables where one ran the build, else a
local builder. A verifier assigns the SLSA Build level by the builder id it trusts; trainimg signs inside the build
job with a key that job holds, which is Build L1 (provenance exists) wherever it runs: L2 asks that the build
platform, not the job, generate and sign it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
# Read as well: v0.1, which `cosign attest` 2.5 still writes; its subject, predicateType and predicate are v1's
# (in-toto attestation spec, "Statement layer": v1 is backwards compatible with v0.1 parsers).
READ_STATEMENT_TYPES = (STATEMENT_TYPE, "https://in-toto.io/Statement/v0.1")
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
COSIGN_TYPE = "slsaprovenance1"  # the name `cosign verify-attestation --type` gives PREDICATE_TYPE
# What a trainimg release is, as SLSA's buildType: it fixes the meaning of the parameters below.
BUILD_TYPE = "urn:trainimg:buildtype:release:v1"
LOCAL_BUILDER = "urn:trainimg:builder:local"
# Each CI a build may run in: (the variable it sets to "true", its builder id, its invocation id), as its own
# provenance names them: GitHub's artifact attestations (actions/attest-build-provenance) the workflow file at its
# ref; GitLab's runner provenance the runner (docs.gitlab.com, "SLSA provenance"). Variables from their docs'
# predefined-variable lists; a missing one means the build is not known to be theirs.
CI_BUILDERS = (
    ("GITHUB_ACTIONS", "{GITHUB_SERVER_URL}/{GITHUB_WORKFLOW_REF}",
     "{GITHUB_SERVER_URL}/{GITHUB_REPOSITORY}/actions/runs/{GITHUB_RUN_ID}/attempts/{GITHUB_RUN_ATTEMPT}"),
    ("GITLAB_CI", "{CI_SERVER_URL}/{CI_PROJECT_PATH}/-/runners/{CI_RUNNER_ID}", "{CI_JOB_URL}"),
)


@dataclass(frozen=True)
class Resource:
    """An in-toto ResourceDescriptor: a dependency or byproduct, named, with its digest(s)."""

    name: str
    digest: Mapping[str, str]
    uri: str | None = None
    media_type: str | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "digest": dict(self.digest)}
        if self.uri:
            out["uri"] = self.uri
        if self.media_type:
            out["mediaType"] = self.media_type
        return out


@dataclass(frozen=True)
class Build:
    """What is known of how one image was made (see the module doc): each field only where it is known."""

    parameters: Mapping[str, str]
    dependencies: tuple[Resource, ...] = ()
    byproducts: tuple[Resource, ...] = ()
    started: str | None = None
    finished: str | None = None
    extra: Mapping[str, str] = field(default_factory=dict)  # internal parameters (trainimg's own choices)


def builder(env: Mapping[str, str]) -> tuple[str, str | None]:
    """(builder id, invocation id or None) of the CI this runs in (CI_BUILDERS), else the local builder."""
    for marker, builder_id, invocation in CI_BUILDERS:
        if env.get(marker) == "true":
            try:
                return builder_id.format_map(env), invocation.format_map(env)
            except KeyError:
                continue
    return LOCAL_BUILDER, None


def trainimg_version() -> str:
    try:
        return version("trainimg")
    except PackageNotFoundError:
        return "unknown"


def statement(subject: str, digest: str, build: Build, env: Mapping[str, str]) -> bytes:
    """The statement's bytes: `digest` (``sha256:...``) of repository `subject` (HOST/REPO), made as `build` says."""
    builder_id, invocation = builder(env)
    metadata = {key: value for key, value in (("invocationId", invocation), ("startedOn", build.started),
                                                ("finishedOn", build.finished)) if value}
    run: dict[str, Any] = {"builder": {"id": builder_id, "version": {"trainimg": trainimg_version()}}}
    if metadata:
        run["metadata"] = metadata
    if build.byproducts:
        run["byproducts"] = [r.as_json() for r in build.byproducts]
    definition: dict[str, Any] = {"buildType": BUILD_TYPE, "externalParameters": dict(build.parameters),
                                  "resolvedDependencies": [r.as_json() for r in build.dependencies]}
    if build.extra:
        definition["internalParameters"] = dict(build.extra)
    algorithm, _, hexpart = digest.partition(":")
    doc = {"_type": STATEMENT_TYPE, "subject": [{"name": subject, "digest": {algorithm: hexpart}}],
           "predicateType": PREDICATE_TYPE,
           "predicate": {"buildDefinition": definition, "runDetails": run}}
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Claims:
    """What a statement says, as far as a verifier reads it."""

    predicate_type: str
    subjects: tuple[tuple[str, str], ...]  # (name, "sha256:...")
    builder_id: str
    parameters: Mapping[str, Any]


def read_statement(body: bytes) -> Claims | str:
    """The claims of an in-toto Statement v1, else why it is not one (one phrase)."""
    try:
        doc: Any = json.loads(body)
        if doc["_type"] not in READ_STATEMENT_TYPES:
            return f"a statement of type {doc['_type']!r}, not {STATEMENT_TYPE}"
        subjects = tuple((str(s["name"]), f"{algo}:{value}") for s in doc["subject"]
                         for algo, value in sorted(s["digest"].items()))
        predicate = doc.get("predicate") or {}
        builder_id = str(((predicate.get("runDetails") or {}).get("builder") or {}).get("id", ""))
        parameters = (predicate.get("buildDefinition") or {}).get("externalParameters") or {}
        return Claims(str(doc["predicateType"]), subjects, builder_id, dict(parameters))
    except (ValueError, KeyError, TypeError, AttributeError):
        return "not an in-toto statement"
