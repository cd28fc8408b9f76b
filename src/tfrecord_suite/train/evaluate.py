"""Evaluate a candidate model against the registered baseline on the same test split: the gate.

Both models are scored through their exported ``serving_default`` signatures on the raw serialized
test examples of one dataset version, so the comparison covers exactly what serving would do,
preprocessing included, and is fair (same records, same code path).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import tempfile
from collections.abc import Iterator
from typing import Any

from tfrecord_suite.errors import UserError
from tfrecord_suite.schema import Schema
from tfrecord_suite.train.reader import record_dataset

_LOG = logging.getLogger(__name__)

PROMOTE = "promote"
HOLD = "hold"


@dataclasses.dataclass
class GateConfig:
    """How the candidate is compared with the baseline.

    Attributes:
        dataset: Dataset version ref (``<root>/<name>@<selector>``) whose split is scored.
        export_dir: The candidate's SavedModel.
        model_registry: Model registry root.
        model_name: Registered model name.
        baseline_alias: Alias of the model to beat.
        split: Split both models are scored on.
        tolerance: How much worse than the baseline (in the metric's units) still promotes.

    """

    dataset: str
    export_dir: str
    model_registry: str
    model_name: str
    baseline_alias: str = "stable"
    split: str = "test"
    tolerance: float = 0.0

    def validate(self) -> None:
        """Raise ValueError for an impossible setting."""
        if self.tolerance < 0:
            raise UserError(f"--tolerance {self.tolerance}: must be >= 0")


def serving_evaluation(
    export_dir: str,
    files: list[str],
    schema: Schema,
    compression: str,
    skip_bad_records: bool = False,
) -> dict:
    """Accuracy and confusion matrix of the exported model on raw serialized examples."""
    import numpy as np
    import tensorflow as tf

    loaded = tf.saved_model.load(export_dir)
    serve = loaded.signatures["serving_default"]
    label_spec = {
        schema.label: tf.io.FixedLenFeature(
            [], tf.string if schema.feature(schema.label).dtype == "string" else tf.int64
        )
    }
    n = len(schema.label_classes)
    index = {c: i for i, c in enumerate(schema.label_classes)}
    matrix = np.zeros((n, n), dtype=np.int64)
    records = record_dataset(files, compression)
    if skip_bad_records:
        records = records.ignore_errors()
    for batch in records.batch(512):
        pred = serve(examples=batch)["class_id"].numpy()
        labels = tf.io.parse_example(batch, label_spec)[schema.label].numpy()
        for y, p in zip(labels, pred, strict=True):
            if schema.label_encoding == "index":
                t = int(y)
            else:
                t = index[y.decode() if isinstance(y, bytes) else str(int(y))]
            matrix[t, int(p)] += 1
    total = int(matrix.sum())
    return {
        "examples": total,
        "accuracy": float(np.trace(matrix) / max(total, 1)),
        "classes": list(schema.label_classes),
        "confusion_matrix": matrix.tolist(),
    }


@contextlib.contextmanager
def loadable_model(export_dir: str) -> Iterator[str]:
    """A folder TensorFlow loads the SavedModel at ``export_dir`` from.

    ``export_dir`` itself where TensorFlow opens the store (local, ``gs://``); elsewhere
    (``s3://``, a model registry on a self-hosted Kubeflow's store) a local copy, kept until
    the context ends.
    """
    from tfrecord_suite.io import storage
    from tfrecord_suite.train.staging import tensorflow_reads

    if tensorflow_reads(export_dir):
        yield export_dir
        return
    with tempfile.TemporaryDirectory(prefix="tfrs-model-") as folder:
        for info in storage.list_files(export_dir):
            rel = storage.relative_to(info.uri, export_dir)
            storage.download(info.uri, os.path.join(folder, *rel.split("/")))
        yield folder


def score(export_dir: str, files: list[str], schema: Schema, compression: str) -> dict[str, Any]:
    """The model's metric on the raw examples in ``files``.

    Classification: accuracy (higher is better), with the confusion matrix. Regression: mean
    squared error (lower is better).
    """
    with loadable_model(export_dir) as local:
        return _score(local, files, schema, compression)


def _score(export_dir: str, files: list[str], schema: Schema, compression: str) -> dict[str, Any]:
    if schema.label_classes:
        out = serving_evaluation(export_dir, files, schema, compression)
        return {**out, "metric": "accuracy", "value": out["accuracy"], "higher_is_better": True}
    import numpy as np
    import tensorflow as tf

    serve = tf.saved_model.load(export_dir).signatures["serving_default"]
    spec = {schema.label: tf.io.FixedLenFeature([], tf.float32)}
    squared, n = 0.0, 0
    for batch in record_dataset(files, compression).batch(512):
        pred = np.reshape(serve(examples=batch)["prediction"].numpy(), [-1])
        labels = tf.io.parse_example(batch, spec)[schema.label].numpy()
        squared += float(np.sum((pred - labels) ** 2))
        n += len(labels)
    mse = squared / max(n, 1)
    return {"examples": n, "metric": "mse", "value": mse, "higher_is_better": False}


def decide(
    candidate: float, baseline: float | None, higher_is_better: bool, tolerance: float
) -> tuple[str, str]:
    """``(promote|hold, why)`` for a candidate score against a baseline score (None: none)."""
    if baseline is None:
        return PROMOTE, "no baseline model yet"
    margin = candidate - baseline if higher_is_better else baseline - candidate
    if margin >= -tolerance:
        return (
            PROMOTE,
            f"candidate {candidate:.4f} vs baseline {baseline:.4f} (tolerance {tolerance})",
        )
    return (
        HOLD,
        f"candidate {candidate:.4f} is worse than baseline {baseline:.4f} (tolerance {tolerance})",
    )


@dataclasses.dataclass
class GateDecision:
    """The gate's decision and the scores behind it (``to_dict``/``from_dict``: its JSON form).

    Attributes:
        decision: ``promote`` or ``hold``.
        reason: Why, in one line.
        dataset: ``<name>@<version>`` scored on.
        dataset_digest: Its content digest.
        split: The split both models were scored on.
        metric: ``accuracy`` or ``mse``.
        higher_is_better: Whether a higher ``metric`` is better.
        candidate: The candidate's score (``value``, ``examples``; classification adds the
            confusion matrix).
        baseline_alias: The alias of the model to beat.
        baseline_version: Its version (None: no model had the alias yet).
        baseline: Its score, when it could be scored.

    """

    decision: str
    reason: str
    dataset: str
    dataset_digest: str
    split: str
    metric: str
    higher_is_better: bool
    candidate: dict[str, Any]
    baseline_alias: str
    baseline_version: int | None = None
    baseline: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able form."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GateDecision:
        """Read :meth:`to_dict`'s form back (unknown keys are ignored)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def run_gate(config: GateConfig) -> GateDecision:
    """Score the candidate and the ``baseline_alias`` model on one split and decide.

    Raises:
        UserError: The split does not exist or is empty.

    """
    config.validate()
    from tfrecord_suite.registry.datasets import resolve_dataset, shard_uris
    from tfrecord_suite.registry.models import ModelRegistry

    manifest, vdir = resolve_dataset(config.dataset)
    if not manifest.split_records(config.split):
        raise UserError(
            f"{manifest.ref} has no records in split "
            f"{config.split!r} to evaluate on (splits: {', '.join(manifest.splits)})"
        )
    schema = Schema.from_dict(manifest.schema)
    files = shard_uris(manifest, vdir, config.split)
    compression = manifest.compression
    candidate = score(config.export_dir, files, schema, compression)
    registry = ModelRegistry(config.model_registry)
    baseline_model = registry.resolve(config.model_name, config.baseline_alias)
    result = GateDecision(
        decision=HOLD,
        reason="",
        dataset=manifest.ref,
        dataset_digest=manifest.content_digest,
        split=config.split,
        metric=candidate["metric"],
        higher_is_better=candidate["higher_is_better"],
        candidate=candidate,
        baseline_alias=config.baseline_alias,
        baseline_version=baseline_model.version if baseline_model else None,
    )
    if baseline_model is not None:
        registry.verify(config.model_name, baseline_model.version)
        try:
            result.baseline = score(baseline_model.export_dir, files, schema, compression)
        except Exception as exc:
            result.reason = (
                f"baseline {config.model_name} v{baseline_model.version} cannot score "
                f"{result.dataset} ({type(exc).__name__}: {str(exc)[:300]}); promote by hand "
                "with `tfrecord-suite models promote` if the new model should replace it"
            )
            return result
    result.decision, result.reason = decide(
        candidate["value"],
        result.baseline["value"] if result.baseline else None,
        candidate["higher_is_better"],
        config.tolerance,
    )
    _LOG.info("gate: %s (%s)", result.decision, result.reason)
    return result


def markdown(result: GateDecision) -> str:
    """The gate's decision as Markdown for the Kubeflow UI."""
    base = result.baseline
    lines = [
        f"# Model gate: **{result.decision}**",
        "",
        result.reason,
        "",
        f"Scored on split `{result.split}` of `{result.dataset}` through each model's "
        "serving signature.",
        "",
        f"| model | {result.metric} | examples |",
        "|---|---:|---:|",
        f"| candidate | {result.candidate['value']:.4f} | {result.candidate['examples']} |",
    ]
    if base:
        lines.append(
            f"| baseline v{result.baseline_version} ({result.baseline_alias}) | "
            f"{base['value']:.4f} | {base['examples']} |"
        )
    return "\n".join(lines) + "\n"
