"""Kubeflow components of the model side: train and report (logic in ``tfrecord_suite.kfp.tasks``).

Component functions only; :func:`tfrecord_suite.kfp.components.build_components` gives them images.
"""

from kfp.dsl import ClassificationMetrics, Dataset, Input, Markdown, Metrics, Model, Output


def train_op(
    dataset_ref: str,
    dataset_digest: str,
    strategy: str,
    cpu_devices: int,
    epochs: int,
    batch_size: int,
    learning_rate: float,
    model_fn: str,
    feature_config: str,
    workers: int,
    placement: str,
    keep_failed_tfjob: bool,
    trainer_image: str,
    launcher: str,
    model: Output[Model],
    metrics: Output[Metrics],
    classification_metrics: Output[ClassificationMetrics],
    report: Output[Markdown],
):
    """Train under tf.distribute with the interleaved tf.data reader; export a SavedModel.

    One worker trains in this pod; more (or a placement compiled with ``--launch-job``) launch a
    TrainJob or TFJob, as ``launcher`` says.
    """
    from tfrecord_suite.kfp.tasks import train_task

    train_task(
        dataset_ref=dataset_ref,
        dataset_digest=dataset_digest,
        strategy=strategy,
        cpu_devices=cpu_devices,
        epochs=epochs,
        batch_size=batch_size,
        learning_rate=learning_rate,
        model_fn=model_fn,
        feature_config=feature_config,
        model=model,
        metrics=metrics,
        classification_metrics=classification_metrics,
        report=report,
        workers=workers,
        placement=placement,
        keep_failed_tfjob=keep_failed_tfjob,
        trainer_image=trainer_image,
        launcher=launcher,
    )


def report_op(
    dataset: Input[Dataset],
    model: Input[Model],
    metrics: Input[Metrics],
    evaluation: Input[Metrics],
    registered: Input[Model],
    summary: Output[Markdown],
) -> str:
    """Say where the dataset version, the model and the metrics are, and what the gate decided."""
    from tfrecord_suite.kfp.tasks import report_task

    return report_task(
        dataset=dataset,
        model=model,
        metrics=metrics,
        evaluation=evaluation,
        registered=registered,
        summary=summary,
    )


def evaluate_op(
    dataset: Input[Dataset],
    model: Input[Model],
    model_registry: str,
    model_name: str,
    baseline_alias: str,
    tolerance: float,
    evaluation: Output[Metrics],
    comparison: Output[Markdown],
) -> str:
    """Score the new model and the current baseline on the same test split; promote or hold."""
    from tfrecord_suite.kfp.tasks import evaluate_task

    return evaluate_task(
        dataset=dataset,
        model=model,
        model_registry=model_registry,
        model_name=model_name,
        baseline_alias=baseline_alias,
        tolerance=tolerance,
        evaluation=evaluation,
        comparison=comparison,
    )


def register_op(
    dataset: Input[Dataset],
    model: Input[Model],
    evaluation: Input[Metrics],
    model_registry: str,
    model_name: str,
    registered: Output[Model],
) -> int:
    """Register the model as a new numbered, checksummed version with its lineage."""
    from tfrecord_suite.kfp.tasks import register_task

    return register_task(
        dataset=dataset,
        model=model,
        evaluation=evaluation,
        model_registry=model_registry,
        model_name=model_name,
        registered=registered,
    )


def promote_op(
    registered: Input[Model],
    evaluation: Input[Metrics],
    model_registry: str,
    model_name: str,
    alias: str,
) -> int:
    """Point the alias at the new model if it still points to the baseline that was compared."""
    from tfrecord_suite.kfp.tasks import promote_task

    return promote_task(
        registered=registered,
        evaluation=evaluation,
        model_registry=model_registry,
        model_name=model_name,
        alias=alias,
    )
