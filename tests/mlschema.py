"""A strict validator for AI Platform Training request bodies, over the discovery document the real client ships.

google-api-python-client carries ``googleapiclient/discovery_cache/documents/ml.v1.json``: the ml v1 API's own
schema (``GoogleCloudMlV1__Job``, ``__TrainingInput``, ``__ReplicaConfig``, ...). The client itself checks only
query parameters, not bodies, so this module checks a body the way the service would have:

* every key must be a property of its schema (unknown fields are errors), and "Output only." or ``readOnly``
  properties may not be sent;
* JSON types as the document gives them, int64 as a decimal string (its ``format``), int32 as an integer;
* ``enum`` values;
* the rules the field descriptions state in prose, read from the document (not written here by hand):
  "this field and [S.f] are mutually exclusive", "Only one of `a` and `b` should be set", "If you set this value,
  you must also set `x`", "can only be used when `x` is set to `V`", "You must specify this field when `x` is set
  to `V`", "must be present when ... `x` is greater than zero".

`rules()` lists the prose rules found, so a test can assert the ones it relies on were really read.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

PREFIX = "GoogleCloudMlV1__"
_EXCLUSIVE = re.compile(r"this field and \[(\w+)\.(\w+)\] are mutually exclusive")
_ONLY_ONE = re.compile(r"Only one of `([\w.]+)` and `([\w.]+)` should be set")
_ALSO_SET = re.compile(r"If you set this value, you must also set `(\w+)`")
_ONLY_WHEN = re.compile(r"can only be used when `(\w+)` is set to `(\w+)`")
_SPECIFY_WHEN = re.compile(r"You must specify this field when `(\w+)` is set to `(\w+)`")
_PRESENT_WHEN = re.compile(r"must be present when `(\w+)` is set to `(\w+)` and `(\w+)` is greater than zero")


@dataclass(frozen=True)
class Rule:
    kind: str  # exclusive-with-ancestor, only-one, also-set, only-when, required-when, present-when
    schema: str
    field: str
    args: tuple[str, ...]


def document_path() -> str:
    import googleapiclient

    return os.path.join(os.path.dirname(googleapiclient.__file__), "discovery_cache", "documents", "ml.v1.json")


@cache
def schemas() -> dict[str, Any]:
    with open(document_path(), encoding="utf-8") as fh:
        return json.load(fh)["schemas"]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


@cache
def rules() -> tuple[Rule, ...]:
    """Every prose rule of the document's schemas, as data."""
    found = []
    for schema, body in schemas().items():
        for field, prop in body.get("properties", {}).items():
            text = prop.get("description", "")
            for m in _EXCLUSIVE.finditer(text):
                found.append(Rule("exclusive-with-ancestor", schema, field, (PREFIX + m.group(1), m.group(2))))
            for m in _ONLY_ONE.finditer(text):
                found.append(Rule("only-one", schema, field, (m.group(1), m.group(2))))
            for m in _ALSO_SET.finditer(text):
                found.append(Rule("also-set", schema, field, (_camel(m.group(1)),)))
            for m in _ONLY_WHEN.finditer(text):
                found.append(Rule("only-when", schema, field, (_camel(m.group(1)), m.group(2))))
            for m in _SPECIFY_WHEN.finditer(text):
                found.append(Rule("required-when", schema, field, (_camel(m.group(1)), m.group(2))))
            for m in _PRESENT_WHEN.finditer(text):
                found.append(Rule("present-when", schema, field,
                                  (_camel(m.group(1)), m.group(2), _camel(m.group(3)))))
    return tuple(found)


def validate(schema: str, value: Any) -> list[str]:
    """Every fault of `value` as a request body of ``GoogleCloudMlV1__<schema>``; [] when the service would take it."""
    errors: list[str] = []
    _object(PREFIX + schema, value, schema, [], errors)
    return errors


def _object(schema: str, value: Any, path: str, ancestors: list[tuple[str, dict]], errors: list[str]) -> None:
    if not isinstance(value, dict):
        errors.append(f"{path}: expected an object, got {type(value).__name__}")
        return
    props = schemas()[schema].get("properties", {})
    for key, item in value.items():
        prop = props.get(key)
        if prop is None:
            errors.append(f"{path}.{key}: unknown field of {schema}")
            continue
        if prop.get("readOnly") or prop.get("description", "").startswith("Output only."):
            errors.append(f"{path}.{key}: output only, not part of a request")
        _value(prop, item, f"{path}.{key}", [*ancestors, (schema, value)], errors)
    _prose_rules(schema, value, path, ancestors, errors)


def _value(prop: dict[str, Any], item: Any, path: str, ancestors: list[tuple[str, dict]], errors: list[str]) -> None:
    if "$ref" in prop:
        _object(prop["$ref"], item, path, ancestors, errors)
        return
    kind, fmt = prop.get("type"), prop.get("format")
    if kind == "string":
        if not isinstance(item, str):
            errors.append(f"{path}: expected a string, got {item!r}")
        elif fmt in ("int64", "uint64") and not re.fullmatch(r"-?[0-9]+", item):
            errors.append(f"{path}: expected an {fmt} as a decimal string, got {item!r}")
        elif "enum" in prop and item not in prop["enum"]:
            errors.append(f"{path}: {item!r} is not one of {prop['enum']}")
    elif kind == "integer":
        if isinstance(item, bool) or not isinstance(item, int):
            errors.append(f"{path}: expected an integer, got {item!r}")
    elif kind == "number":
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            errors.append(f"{path}: expected a number, got {item!r}")
    elif kind == "boolean":
        if not isinstance(item, bool):
            errors.append(f"{path}: expected a boolean, got {item!r}")
    elif kind == "array":
        if not isinstance(item, list):
            errors.append(f"{path}: expected an array, got {item!r}")
        else:
            for i, element in enumerate(item):
                _value(prop["items"], element, f"{path}[{i}]", ancestors, errors)
    elif kind == "object" and "additionalProperties" in prop:
        if not isinstance(item, dict):
            errors.append(f"{path}: expected an object, got {item!r}")
        else:
            for key, element in item.items():
                _value(prop["additionalProperties"], element, f"{path}.{key}", ancestors, errors)
    else:
        errors.append(f"{path}: the validator does not know type {kind!r}")


def _present(obj: dict[str, Any], dotted: str) -> bool:
    for part in dotted.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return False
        obj = obj[part]
    return True


def _prose_rules(schema: str, value: dict, path: str, ancestors: list[tuple[str, dict]], errors: list[str]) -> None:
    for rule in rules():
        if rule.schema != schema or rule.field not in value:
            continue
        if rule.kind == "exclusive-with-ancestor":
            other_schema, other_field = rule.args
            for name, obj in ancestors:
                if name == other_schema and other_field in obj:
                    errors.append(f"{path}.{rule.field}: mutually exclusive with {other_schema}.{other_field}")
        elif rule.kind == "only-one" and all(_present(value, p) for p in rule.args):
            errors.append(f"{path}: only one of {rule.args[0]} and {rule.args[1]} may be set")
        elif rule.kind == "also-set" and rule.args[0] not in value:
            errors.append(f"{path}.{rule.field}: needs {rule.args[0]}")
        elif rule.kind == "only-when" and value.get(rule.args[0]) != rule.args[1]:
            errors.append(f"{path}.{rule.field}: only when {rule.args[0]} is {rule.args[1]}")
    for rule in rules():
        if (rule.schema == schema and rule.kind == "required-when" and value.get(rule.args[0]) == rule.args[1]
                and rule.field not in value):
            errors.append(f"{path}.{rule.field}: required when {rule.args[0]} is {rule.args[1]}")
        if rule.schema == schema and rule.kind == "present-when":
            tier, tier_value, count_field = rule.args
            count = str(value.get(count_field, "0"))
            if value.get(tier) == tier_value and count.isdigit() and int(count) > 0 and rule.field not in value:
                errors.append(f"{path}.{rule.field}: required when {tier} is {tier_value} and {count_field} > 0")
