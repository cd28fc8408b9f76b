"""The ``train`` command."""

from __future__ import annotations

from typing import Any

import click

from tfrecord_suite.cli import options
from tfrecord_suite.cli.common import emit, friendly_errors, json_option, stdout_for
from tfrecord_suite.io import storage


def _train_config_cls() -> type:
    from tfrecord_suite.train.trainer import TrainConfig

    return TrainConfig


@click.command()
@options.dataclass_options(_train_config_cls())
@json_option
@friendly_errors
def train(as_json: bool, **values: Any) -> None:
    """Train on a dataset version under tf.distribute and export a servable model."""
    from tfrecord_suite.train.trainer import TrainConfig, run_train

    with stdout_for(as_json):
        metrics = run_train(options.build(TrainConfig, values))
    emit(
        metrics.to_dict(),
        as_json,
        lambda m: (
            f"trained on {m['dataset']} ({m['strategy']}, {m['replicas']} replicas): "
            + ", ".join(
                f"{s} " + " ".join(f"{k}={v:.4f}" for k, v in e.items())
                for s, e in m["evaluation"].items()
            )
            + f"\nmodel: {m['model_dir']}\n  SavedModel: {m['export_dir']}"
            + f"\n  metrics: {storage.join(m['model_dir'], 'metrics.json')}"
            # the same on every node of a synchronous run: its logs show the nodes agreed
            + f"\n  weights: {m['weights_digest']}"
        ),
    )
