"""What a distributed job's chief leaves in the shared model folder at the end of a real run
(tests/integration/test_train.py runs one): complete metrics, a report and an export."""

import os

from tfrecord_suite.io import storage
from tfrecord_suite.train.metrics import METRICS_FILE, TrainMetrics


def write_chief_outputs(shared: str, replicas: int, accuracy: float, per_second: float) -> None:
    """Metrics as the trainer writes them, a report and a stand-in SavedModel under ``shared``."""
    metrics = TrainMetrics(
        dataset="digits@1.0.0",
        dataset_digest="d" * 64,
        strategy="MultiWorkerMirroredStrategy",
        replicas=replicas,
        global_batch_size=16 * replicas,
        epochs=1,
        steps_per_epoch=10,
        history={"loss": [1.0]},
        epoch_seconds=[1.0],
        train_seconds=1.0,
        examples_per_second=per_second,
        evaluation={"test": {"accuracy": accuracy}},
        input={},
        bad_records_skipped=0,
        weights_digest="w" * 64,
        chief=True,
        model_dir=shared,
        export_dir=os.path.join(shared, "export"),
    )
    storage.write_text(os.path.join(shared, METRICS_FILE), metrics.to_json())
    storage.write_text(os.path.join(shared, "report.md"), "# report")
    storage.write_text(os.path.join(shared, "export", "saved_model.pb"), "pb")
