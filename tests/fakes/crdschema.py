"""Validate objects against a CRD's structural schema, as the API server does with strict field
validation: types, required fields, enums, patterns, and unknown fields as errors.

The schema is the CRD's own ``openAPIV3Schema`` (files in tests/fakes/schemas/, see SOURCE.md there),
checked with the ``jsonschema`` library after one change: every object schema that lists
properties and does not preserve unknown fields gets ``additionalProperties: false`` (the API
server prunes such fields; with ``fieldValidation=Strict`` it refuses them). CEL rules
(``x-kubernetes-validations``) are not evaluated; the TrainJob name rules are restated below.
"""

from __future__ import annotations

import copy
import functools
import os
import re
from typing import Any

import yaml

SCHEMAS = os.path.join(os.path.dirname(__file__), "schemas", "kubeflow-trainer-v2.3.0")
TRAINJOB_CRD = os.path.join(SCHEMAS, "trainer.kubeflow.org_trainjobs.yaml")
RUNTIME_CRD = os.path.join(SCHEMAS, "trainer.kubeflow.org_clustertrainingruntimes.yaml")
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def _strict(schema: Any) -> Any:
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (
            out.get("type") == "object"
            and "properties" in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
            and "additionalProperties" not in out
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@functools.cache
def _validator(crd_path: str) -> tuple[Any, str, str]:
    import jsonschema

    with open(crd_path) as fh:
        crd = yaml.safe_load(fh)
    (version,) = [v for v in crd["spec"]["versions"] if v.get("served")]
    schema = _strict(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
    group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
    return jsonschema.Draft7Validator(schema), f"{group}/{version['name']}", kind


def validate_crd(obj: dict[str, Any], crd_path: str) -> list[str]:
    """Problems of ``obj`` against the CRD in ``crd_path`` (empty when valid)."""
    validator, api_version, kind = _validator(crd_path)
    problems = [
        f".{'.'.join(str(p) for p in err.absolute_path)}: {err.message}"
        for err in sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path))
    ]
    if obj.get("apiVersion") != api_version or obj.get("kind") != kind:
        problems.append(f"apiVersion/kind must be {api_version} {kind}")
    name = (obj.get("metadata") or {}).get("name", "")
    if kind == "TrainJob" and (not _DNS_1035.match(name) or len(name) > 63):
        problems.append(f".metadata.name {name!r}: must be an RFC 1035 label of <= 63 characters")
    return problems
