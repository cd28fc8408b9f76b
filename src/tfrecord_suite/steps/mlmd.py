"""The rule Kubeflow's launcher applies to artifact metadata, applied before the step ends.

After a step's code has succeeded, the KFP launcher stores every output artifact's metadata in
ML Metadata (``uploadOutputArtifacts`` in ``backend/src/v2/component/launcher_v2.go``),
converting each top-level field with ``StructValueToMLMDValue``
(``backend/src/v2/metadata/converter.go``, unchanged from KFP 2.0 to 2.17): a string, a number
(stored as a double), a boolean (stored as the integer 1 or 0), a list or a struct (stored
whole, nulls inside included) converts; a top-level null has no case there and fails the task
after its work is done ("unable to produce MLMD artifact for output ...: unknown/unsupported
value type *structpb.Value_NullValue"). ``kfp.local`` never converts, so a null passes every
local run. Steps set metadata through :func:`describe`, which leaves out fields that have no
value and refuses what the launcher would refuse, so a local run fails where a cluster run
would. (What a downstream step then reads back differs too: numbers come back as doubles,
booleans as 1.0 or 0.0, lists and structs wrapped; ``tests/fakes/launcher.py`` plays that.)
tests/integration/test_kfp.py checks this rule against KFP 2.17.0's own launcher.

Kept free of kfp: :mod:`tfrecord_suite.steps` and the tests use it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tfrecord_suite.errors import UserError


class MetadataError(UserError):
    """Artifact metadata that Kubeflow's launcher could not store in ML Metadata."""


def mlmd_problems(metadata: Mapping[str, Any]) -> list[str]:
    """What the launcher's conversion would refuse in ``metadata``, one line per field.

    Top-level values must be a string, a finite number, a boolean, a list or a struct (a
    mapping with string keys). Inside a list or struct anything JSON holds passes, a null
    included (the converter stores them whole); a value JSON cannot hold (NaN, infinity, a
    set, an object) fails anywhere, since the launcher reads the executor output as JSON.
    """
    problems = []
    for key, value in metadata.items():
        if not isinstance(key, str):
            problems.append(f"{key!r}: keys must be strings")
        elif value is None:
            problems.append(f"{key}: null (the launcher has no ML Metadata value for it)")
        else:
            problems += [f"{key}{where}: {why}" for where, why in _json_problems(value, "")]
    return problems


def _json_problems(value: Any, where: str) -> list[tuple[str, str]]:
    if value is None or isinstance(value, str | bool):
        return []
    if isinstance(value, int | float):
        return [] if math.isfinite(value) else [(where, f"{value} is not a JSON number")]
    if isinstance(value, Mapping):
        out = []
        for key, item in value.items():
            if not isinstance(key, str):
                out.append((f"{where}.{key!r}", "keys must be strings"))
            else:
                out += _json_problems(item, f"{where}.{key}")
        return out
    if isinstance(value, list | tuple):
        out = []
        for i, item in enumerate(value):
            out += _json_problems(item, f"{where}[{i}]")
        return out
    return [(where, f"{type(value).__name__} is not a JSON value")]


#: The custom properties the launcher adds to every output artifact it records, where the step
#: set none of that name (``RecordArtifact`` in ``backend/src/v2/metadata/client.go``): the
#: output's name and the bucket's session (a JSON string naming the store and its Secret). A
#: downstream step reads them back among the artifact's metadata; KFP's own scalar-metrics
#: reader (``FormatScalarMetricArtifacts``, the same file) and the UI's metrics table
#: (``frontend/src/lib/ReservedArtifactProperties.ts``, ``display_name`` as the title) skip them.
LAUNCHER_PROPERTIES = ("display_name", "store_session_info")
#: The type of kfp's ``dsl.Metrics``: its metadata is its metrics, each shown by the UI's run page
#: (``ScalarMetricsSection`` in ``frontend/src/components/viewers/MetricsVisualizations.tsx``)
#: and Compare runs (``getScalarTableProps`` in ``frontend/src/lib/v2/CompareUtils.ts``)
METRICS_SCHEMA = "system.Metrics"


def step_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """An input artifact's metadata as its producing step wrote it.

    That is, without :data:`LAUNCHER_PROPERTIES`, which the launcher added when it recorded the
    artifact.
    """
    return {k: v for k, v in metadata.items() if k not in LAUNCHER_PROPERTIES}


def check_metadata(metadata: Mapping[str, Any], artifact: str = "artifact") -> None:
    """Raise :class:`MetadataError` naming every field the launcher could not store."""
    problems = mlmd_problems(metadata)
    if problems:
        raise MetadataError(
            f"{artifact} metadata that Kubeflow's launcher cannot store in ML Metadata: "
            + "; ".join(problems)
        )


def describe(artifact: Any, fields: Mapping[str, Any]) -> None:
    """Add ``fields`` to ``artifact.metadata``, leaving out those whose value is None.

    A ``system.Metrics`` artifact takes none: its metadata is its metrics, numbers only
    (:func:`log_metrics`). Kubeflow's UI lists every field of it as a metric, a string quoted,
    and Compare runs lines them up across runs as numbers.

    Raises:
        MetadataError: The artifact's metadata, with these fields, could not be stored by the
            launcher (checked before anything is written, so a local run fails as a cluster
            run would), or the artifact is a ``system.Metrics``.

    """
    name = getattr(artifact, "name", "") or "artifact"
    if getattr(artifact, "schema_title", "") == METRICS_SCHEMA:
        raise MetadataError(
            f"{name}: a Metrics artifact carries numbers only (log_metrics); describe "
            f"{sorted(fields)} on an artifact of their own"
        )
    merged = {**artifact.metadata, **{k: v for k, v in fields.items() if v is not None}}
    check_metadata(merged, name)
    artifact.metadata.update(merged)


def log_metrics(artifact: Any, values: Mapping[str, Any]) -> None:
    """Log ``values`` on a metrics artifact with its ``log_metric``, all of them or none.

    kfp's ``log_metric`` writes into the artifact's metadata without :func:`describe`'s check,
    and the executor then writes a NaN or an infinity as bare ``NaN``/``Infinity``, which is
    not JSON: the launcher's ``protojson.Unmarshal`` of the executor output
    (``getExecutorOutputFile`` in ``launcher_v2.go``) refuses the whole file after the step's
    work is done, while ``kfp.local`` accepts it. Checked here first, so a diverged number fails
    the step with its name on every runner.

    Raises:
        MetadataError: A value is not a finite number (every such value is named).

    """
    bad = [
        f"{name}={value}"
        for name, value in values.items()
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
    ]
    if bad:
        raise MetadataError(
            f"{getattr(artifact, 'name', '') or 'metrics'}: metrics that are not finite numbers "
            f"({', '.join(bad)}); Kubeflow's launcher cannot read them back (bare NaN is not "
            "JSON)"
        )
    for name, value in values.items():
        artifact.log_metric(name, value)
