"""The train step's result, ``metrics.json``: one dataclass, one JSON form."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from tfrecord_suite.io import storage

#: The metrics' file name in the model folder.
METRICS_FILE = "metrics.json"


@dataclasses.dataclass
class TrainMetrics:
    """What one training run measured and where it put the model.

    Attributes:
        dataset: ``<name>@<version>`` trained on.
        dataset_digest: Its content digest (lineage).
        strategy: The tf.distribute strategy's class name.
        replicas: Replicas in sync.
        global_batch_size: Examples per step over all replicas.
        epochs: Epochs trained.
        steps_per_epoch: Steps in each.
        history: Keras's history: each metric per epoch.
        epoch_seconds: Wall time of each epoch.
        train_seconds: Wall time of ``fit``.
        examples_per_second: Training throughput over the epochs.
        evaluation: Keras metrics per evaluated split.
        input: The input-wait probe (empty when it did not run).
        bad_records_skipped: Records that failed verification and were skipped.
        weights_digest: Digest of the trained weights.
        chief: Whether this process was the chief.
        model_dir: The model folder.
        export_dir: The serving SavedModel's folder (the chief's; "" on another worker).
        serving_check: Accuracy and confusion matrix through the serving signature on the test
            split (classification, chief only; None otherwise).

    """

    dataset: str
    dataset_digest: str
    strategy: str
    replicas: int
    global_batch_size: int
    epochs: int
    steps_per_epoch: int
    history: dict[str, list[float]]
    epoch_seconds: list[float]
    train_seconds: float
    examples_per_second: float
    evaluation: dict[str, dict[str, float]]
    input: dict[str, Any]
    bad_records_skipped: int
    weights_digest: str
    chief: bool
    model_dir: str
    export_dir: str
    serving_check: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able form (``metrics.json``'s content; no ``serving_check`` key when None)."""
        out = dataclasses.asdict(self)
        if out["serving_check"] is None:
            del out["serving_check"]
        return out

    def to_json(self) -> str:
        """``metrics.json``'s text."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainMetrics:
        """Read :meth:`to_dict`'s form (keys it does not know are ignored)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    @classmethod
    def load(cls, model_dir: str) -> TrainMetrics:
        """The metrics in ``model_dir``."""
        return cls.from_dict(json.loads(storage.read_text(storage.join(model_dir, METRICS_FILE))))
