"""Kubeflow's cache key, computed for the tasks of ``kfp.local`` runs.

A KFP v2 driver looks a task up in its cache by a fingerprint of the task's *resolved* inputs
(``backend/src/v2/cacheutils/cache.go`` ``GenerateCacheKey`` and ``GenerateFingerPrint``,
called by ``backend/src/v2/driver/cache.go``; the same fields from KFP 2.0 to 2.17):

* ``inputParameterValues``: the parameter values the driver resolved (placeholders such as
  ``{{$.pipeline_job_uuid}}`` already replaced, component defaults not added);
* ``inputArtifactNames``: each input artifact's ML Metadata id, so an artifact is the same only
  when its producer's execution is the same, i.e. when the producer was itself a cache hit;
* ``outputArtifactsSpec``: each output's type (and ``executor-logs``, which 2.5.0+ adds);
* ``outputParametersSpec``: each output parameter's type name;
* ``containerSpec``: the image and the command and args as compiled, placeholders unresolved.

The fingerprint is the sha256 of that key as protojson re-encoded by Go's ``encoding/json``
(sorted keys, HTML-escaped, Go's float formatting); :func:`fingerprint` reproduces both test
vectors of upstream's ``cache_test.go``. :class:`Recorder` captures what ``kfp.local`` resolved
for each task (the same values the driver resolves) so two runs' keys can be compared.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from google.protobuf import json_format

# ----------------------------------------------------------------- Go's encoding/json, in Python


def _go_float(f: float) -> str:
    """``strconv.AppendFloat(f, 'f', -1, 64)``, or 'e' notation below 1e-6 and from 1e21."""
    if math.isnan(f) or math.isinf(f):
        raise ValueError("json: unsupported value")
    if f == 0:
        return "-0" if math.copysign(1.0, f) < 0 else "0"
    if abs(f) < 1e-6 or abs(f) >= 1e21:
        mantissa, exp = repr(f).split("e")
        exp_i = int(exp)
        return f"{mantissa}e-{abs(exp_i)}" if exp_i < 0 else f"{mantissa}e+{exp_i:02d}"
    text = format(Decimal(repr(f)), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _go_str(s: str) -> str:
    out = json.dumps(s, ensure_ascii=False)
    return (
        out.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def go_json(value: Any) -> str:
    """``json.Marshal`` of an ``interface{}`` decoded from JSON, as Go writes it."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int | float):
        return _go_float(float(value))
    if isinstance(value, str):
        return _go_str(value)
    if isinstance(value, list):
        return "[" + ",".join(go_json(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(_go_str(k) + ":" + go_json(value[k]) for k in sorted(value)) + "}"
    raise TypeError(type(value))


def _prune(d: dict[str, Any]) -> dict[str, Any]:
    """protojson leaves out empty strings, lists and maps."""
    return {k: v for k, v in d.items() if v not in ("", None, [], {})}


def fingerprint(cache_key: dict[str, Any]) -> str:
    """``GenerateFingerPrint``: sha256 of the key in Go's JSON."""
    return hashlib.sha256(go_json(cache_key).encode()).hexdigest()


def cache_key(
    parameters: dict[str, Any],
    artifact_ids: dict[str, list[str]],
    component_spec: Any,
    container: Any,
) -> dict[str, Any]:
    """``GenerateCacheKey`` for one task (its component spec and container as compiled)."""
    outputs = component_spec.output_definitions
    artifacts = {
        name: {"type": _prune(json_format.MessageToDict(spec.artifact_type))}
        for name, spec in outputs.artifacts.items()
    }
    # provisionOutputs adds the launcher's log artifact (KFP 2.5.0 and later, publish_logs)
    artifacts["executor-logs"] = {"type": {"schemaTitle": "system.Artifact"}}
    from kfp.pipeline_spec import pipeline_spec_pb2

    enum = pipeline_spec_pb2.ParameterType.ParameterTypeEnum
    parameter_types = {
        name: enum.Name(spec.parameter_type) for name, spec in outputs.parameters.items()
    }
    return _prune(
        {
            "inputArtifactNames": {k: {"artifactNames": v} for k, v in artifact_ids.items()},
            "inputParameterValues": parameters,
            "outputArtifactsSpec": artifacts,
            "outputParametersSpec": parameter_types,
            "containerSpec": _prune(
                {
                    "image": container.image,
                    "cmdArgs": [*container.command, *container.args],
                }
            ),
        }
    )


# -------------------------------------------------------------- the tasks of kfp.local runs


class Recorder:
    """Records every container task ``kfp.local`` runs: its resolved inputs and its outputs.

    ``runs`` holds one list per pipeline run (a new run starts each time a task of an already
    seen component runs again), each entry ``(component name, component spec, container,
    arguments, outputs)``.
    """

    def __init__(self) -> None:
        self.runs: list[list[tuple[str, Any, Any, dict[str, Any], dict[str, Any]]]] = []

    @contextlib.contextmanager
    def recording(self) -> Iterator[Recorder]:
        """Patch ``kfp.local``'s task dispatcher for the duration."""
        from kfp.local import task_dispatcher

        real = task_dispatcher.run_single_task_implementation

        def record(**kwargs: Any) -> Any:
            outputs, task_status = real(**kwargs)
            name = kwargs["component_name"]
            if not self.runs or any(entry[0] == name for entry in self.runs[-1]):
                self.runs.append([])
            self.runs[-1].append(
                (
                    name,
                    kwargs["component_spec"],
                    kwargs["executor_spec"].container,
                    dict(kwargs["arguments"]),
                    dict(outputs or {}),
                )
            )
            return outputs, task_status

        task_dispatcher.run_single_task_implementation = record
        try:
            yield self
        finally:
            task_dispatcher.run_single_task_implementation = real


def fingerprints(
    runs: list[list[tuple[str, Any, Any, dict[str, Any], dict[str, Any]]]],
    cached: set[str],
) -> list[dict[str, str]]:
    """Each run's ``component name -> fingerprint``, in order, as a backend would compute them.

    An input artifact is named by an ML Metadata id. A producer that was a cache hit (in
    ``cached``, with the same fingerprint as in an earlier run) hands on that earlier run's
    artifact, so its id is the earlier one; any other execution makes a new artifact.
    """
    from kfp import dsl

    seen: dict[tuple[str, str], str] = {}  # (component, fingerprint) -> first run's prefix
    result = []
    for index, run in enumerate(runs):
        keys: dict[str, str] = {}
        artifact_id: dict[str, str] = {}  # uri -> the id a backend would have given it
        for name, spec, container, arguments, outputs in run:
            parameters, ids = {}, {}
            for key, value in arguments.items():
                if isinstance(value, dsl.Artifact):
                    ids[key] = [artifact_id.get(value.uri, f"run{index}:{value.uri}")]
                elif isinstance(value, list) and value and isinstance(value[0], dsl.Artifact):
                    ids[key] = [artifact_id.get(v.uri, f"run{index}:{v.uri}") for v in value]
                else:
                    parameters[key] = value
            keys[name] = fingerprint(cache_key(parameters, ids, spec, container))
            producer = f"run{index}"
            if name in cached:
                producer = seen.setdefault((name, keys[name]), producer)
            for output_name, value in outputs.items():
                if isinstance(value, dsl.Artifact):
                    artifact_id[value.uri] = f"{producer}:{name}:{output_name}"
        result.append(keys)
    return result
