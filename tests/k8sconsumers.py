"""The consumers of trainimg's Kubernetes manifests, run offline: a manifest is checked the way the cluster's API
server would check it on ``kubectl apply --validate=strict``, plus the Kubeflow SDK's own models.

* ``crd-schema``: the CRD's ``openAPIV3Schema`` (tests/data/crds/, vendored unmodified, sources in SOURCES.md)
  with `jsonschema`. The API server prunes unknown fields and strict field validation reports them as errors;
  jsonschema only refuses them where a schema says ``additionalProperties: false``, so `strict` says it on every
  object schema that lists ``properties`` and has neither ``x-kubernetes-preserve-unknown-fields`` nor an
  ``additionalProperties`` of its own. ``x-kubernetes-list-type`` ``set``/``map`` (unique items/keys) is checked too.
* ``cel``: every ``x-kubernetes-validations`` rule of the CRD on every value present, with cel-python; transition
  rules (those that read ``oldSelf``) apply only to updates and are not evaluated on create, as on the server.
* ``kubernetes-validate`` (the Kubernetes ``K8S_VERSION`` OpenAPI schemas that kubernetes-validate 1.37.0 ships,
  its newest, strict: unknown fields refused): the object's ``metadata`` as an ``ObjectMeta``, every embedded
  pod template as a ``v1`` ``PodTemplate`` and every embedded Job template as a ``batch/v1`` ``Job``. Templates are
  found by the CRD's schema (a value typed as a ``PodTemplateSpec`` or ``JobTemplateSpec``), not by guessing.
* ``trainer-api``: the pydantic models of ``kubeflow-trainer-api`` (the Kubeflow SDK's) for TrainJob,
  TrainingRuntime and JobSet. They are lenient (unknown keys are dropped silently), so the manifest must also come
  back unchanged from ``from_dict(...).to_dict()``: a dropped key is a field the SDK does not know.

`check` runs every consumer that applies and returns what ran, so a test can prove none was skipped.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import kubernetes_validate
import pydantic
import yaml
from kubeflow_trainer_api import models as trainer_api

CRD_DIR = Path(__file__).resolve().parent / "data" / "crds"
K8S_VERSION = "1.37"
PRESERVE_UNKNOWN = "x-kubernetes-preserve-unknown-fields"
TRAINER_API_MODELS: dict[tuple[str, str], type[pydantic.BaseModel]] = {
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): trainer_api.TrainerV1alpha1TrainJob,
    ("trainer.kubeflow.org/v1alpha1", "TrainingRuntime"): trainer_api.TrainerV1alpha1TrainingRuntime,
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): trainer_api.JobsetV1alpha2JobSet,
}

Path_ = tuple[str | int, ...]
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when PyYAML has it: the CRDs are 4 MB


class Refused(Exception):
    """A consumer refused a manifest: `consumer` names which one; the message says where and why."""

    def __init__(self, consumer: str, path: Path_, reason: str) -> None:
        super().__init__(f"{consumer}: {'.'.join(map(str, path)) or '<root>'}: {reason}")
        self.consumer = consumer


@cache
def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> ``openAPIV3Schema`` of every served version of every CRD in `CRD_DIR`."""
    found = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        crd = yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER)
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if version.get("served"):
                found[(f"{group}/{version['name']}", kind)] = version["schema"]["openAPIV3Schema"]
    return found


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of `schema` that refuses unknown fields wherever the API server's strict validation would."""
    schema = copy.deepcopy(schema)
    # The API server allows these at the root of every custom resource whether its schema lists them or not (a
    # structural schema "implicitly" has them; kubernetes.io, "Specifying a structural schema"): some CRDs
    # (policy-controller's) list only spec and status.
    for key, kind in (("apiVersion", "string"), ("kind", "string"), ("metadata", "object")):
        schema.setdefault("properties", {}).setdefault(key, {"type": kind})

    def close(node: Any) -> None:
        if isinstance(node, dict):
            if "properties" in node and PRESERVE_UNKNOWN not in node and "additionalProperties" not in node:
                node["additionalProperties"] = False
            for key, child in node.items():
                if key in ("properties", "patternProperties"):
                    for sub in child.values():
                        close(sub)
                elif key not in ("enum", "default", "example", "x-kubernetes-validations"):
                    close(child)
        elif isinstance(node, list):
            for child in node:
                close(child)

    close(schema)
    return schema


def schema_for(manifest: dict[str, Any]) -> dict[str, Any]:
    """The CRD schema of `manifest`'s apiVersion and kind (KeyError: no vendored CRD serves it)."""
    return crd_schemas()[(manifest["apiVersion"], manifest["kind"])]


@cache
def _validator(api_version: str, kind: str) -> jsonschema.Draft4Validator:
    # OpenAPI 3.0 schema objects are JSON Schema draft 4 with extensions (x-kubernetes-*), which draft 4 ignores.
    return jsonschema.Draft4Validator(strict(crd_schemas()[(api_version, kind)]))


def check_crd_schema(manifest: dict[str, Any]) -> None:
    """``crd-schema``: the strict CRD schema, then the list types."""
    error = jsonschema.exceptions.best_match(_validator(manifest["apiVersion"], manifest["kind"]).iter_errors(manifest))
    if error is not None:
        raise Refused("crd-schema", tuple(error.absolute_path), error.message)
    for schema, value, path in walk(schema_for(manifest), manifest):
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "set" and len({yaml.safe_dump(v) for v in value}) != len(value):
            raise Refused("crd-schema", path, "duplicate items in a list of type set")
        if list_type == "map":
            keys = [tuple(item.get(k) for k in schema["x-kubernetes-list-map-keys"]) for item in value]
            if len(set(keys)) != len(keys):
                raise Refused("crd-schema", path, f"duplicate keys {schema['x-kubernetes-list-map-keys']}")


def walk(schema: dict[str, Any], value: Any, path: Path_ = ()) -> Iterator[tuple[dict[str, Any], Any, Path_]]:
    """Every (schema, value, path) of `value` that `schema` types, root first; unknown keys are not visited."""
    yield schema, value, path
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, child in value.items():
            sub = properties.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                yield from walk(sub, child, (*path, key))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, child in enumerate(value):
            yield from walk(schema["items"], child, (*path, index))


@cache
def _cel_program(rule: str) -> celpy.Runner:
    env = celpy.Environment()
    return env.program(env.compile(rule))


def check_cel(manifest: dict[str, Any]) -> int:
    """``cel``: every create-time rule of the CRD on the values present; returns how many rules were evaluated."""
    evaluated = 0
    for schema, value, path in walk(schema_for(manifest), manifest):
        for rule in schema.get("x-kubernetes-validations", []):
            if "oldSelf" in rule["rule"]:
                continue
            try:
                result: Any = _cel_program(rule["rule"]).evaluate({"self": celpy.json_to_cel(value)})
            except celpy.CELEvalError as error:
                result = error
            if result != celpy.celtypes.BoolType(True):
                raise Refused("cel", path, f"{rule.get('message', rule['rule'])} (rule {rule['rule']!r}: {result!r})")
            evaluated += 1
    return evaluated


def _is_pod_template(schema: dict[str, Any]) -> bool:
    spec = schema.get("properties", {}).get("spec", {})
    return "metadata" in schema.get("properties", {}) and "containers" in spec.get("properties", {})


def _is_job_template(schema: dict[str, Any]) -> bool:
    spec = schema.get("properties", {}).get("spec", {}).get("properties", {})
    return "completionMode" in spec and _is_pod_template(spec.get("template", {}))


def embedded(manifest: dict[str, Any]) -> list[tuple[str, Path_, dict[str, Any]]]:
    """("PodTemplate" or "Job", path, value) for each template the CRD's schema types as one."""
    found = []
    for schema, value, path in walk(schema_for(manifest), manifest):
        if path and _is_pod_template(schema):
            found.append(("PodTemplate", path, value))
        elif _is_job_template(schema):
            found.append(("Job", path, value))
    return found


def check_core(manifest: dict[str, Any]) -> int:
    """``kubernetes-validate``: the object's metadata and every embedded template; returns the templates checked."""
    _core({"apiVersion": "v1", "kind": "PodTemplate", "metadata": manifest["metadata"]}, ("metadata",))
    templates = embedded(manifest)
    for kind, path, value in templates:
        if kind == "PodTemplate":
            wrapped = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "check"}, "template": value}
        else:
            wrapped = {"apiVersion": "batch/v1", "kind": "Job",
                       "metadata": {"name": "check", **value.get("metadata", {})}, "spec": value["spec"]}
        _core(wrapped, path)
    return len(templates)


def _core(document: dict[str, Any], where: Path_) -> None:
    error = _core_error(json.dumps(document, sort_keys=True))
    if error is not None:
        raise Refused("kubernetes-validate", (*where, f"<as {document['kind']}>", *error[0]), error[1])


@cache
def _core_error(document: str) -> tuple[Path_, str] | None:
    """kubernetes-validate's verdict on one document (as JSON text: a matrix repeats many templates exactly)."""
    try:
        kubernetes_validate.validate(json.loads(document), K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        return tuple(error.path), error.message
    return None


def check_trainer_api(manifest: dict[str, Any]) -> None:
    """``trainer-api``: the SDK's model parses the manifest and gives it back unchanged."""
    model = TRAINER_API_MODELS[(manifest["apiVersion"], manifest["kind"])]
    try:
        parsed = model.from_dict(manifest)  # type: ignore[attr-defined]
    except pydantic.ValidationError as error:
        first = error.errors()[0]
        raise Refused("trainer-api", tuple(first["loc"]), first["msg"]) from None
    difference = first_difference(manifest, parsed.to_dict())
    if difference is not None:
        raise Refused("trainer-api", difference, "not what the model gives back (a field it does not know?)")


def first_difference(a: Any, b: Any, path: Path_ = ()) -> Path_ | None:
    """The path of the first place where `a` and `b` differ, or None."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in [*a, *(k for k in b if k not in a)]:
            if key not in a or key not in b:
                return (*path, key)
            found = first_difference(a[key], b[key], (*path, key))
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return next((p for p in (first_difference(x, y, (*path, i)) for i, (x, y) in enumerate(zip(a, b)))
                     if p is not None), None)
    return None if a == b and type(a) is type(b) else path


def check(manifest: dict[str, Any]) -> list[str]:
    """Every consumer that applies to `manifest`; returns ``consumer[:detail]`` for each check that ran."""
    check_crd_schema(manifest)
    ran = ["crd-schema", f"cel:{check_cel(manifest)}", f"kubernetes-validate:{check_core(manifest)}"]
    if (manifest["apiVersion"], manifest["kind"]) in TRAINER_API_MODELS:
        check_trainer_api(manifest)
        ran.append("trainer-api")
    return ran
