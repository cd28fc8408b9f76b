"""Kubeflow components of the model side: train and report (logic in ``tfrecord_suite.tasks``)."""

from kfp import dsl
from kfp.dsl import ClassificationMetrics, Dataset, Input, Markdown, Metrics, Model, Output

from tfrecord_suite.images import COMPONENT_IMAGE


@dsl.component(base_image=COMPONENT_IMAGE, install_kfp_package=False)
def train_op(
    dataset: Input[Dataset],
    strategy: str,
    cpu_devices: int,
    epochs: int,
    batch_size: int,
    learning_rate: float,
    model_fn: str,
    model: Output[Model],
    metrics: Output[Metrics],
    classification_metrics: Output[ClassificationMetrics],
    report: Output[Markdown],
):
    """Train under tf.distribute with the interleaved tf.data reader; export a SavedModel."""
    from tfrecord_suite.tasks import train_task

    train_task(
        dataset=dataset,
        strategy=strategy,
        cpu_devices=cpu_devices,
        epochs=epochs,
        batch_size=batch_size,
        learning_rate=learning_rate,
        model_fn=model_fn,
        model=model,
        metrics=metrics,
        classification_metrics=classification_metrics,
        report=report,
    )


@dsl.component(base_image=COMPONENT_IMAGE, install_kfp_package=False)
def report_op(
    dataset: Input[Dataset],
    model: Input[Model],
    metrics: Input[Metrics],
    summary: Output[Markdown],
) -> str:
    """Say where the dataset version, the model and the metrics are."""
    from tfrecord_suite.tasks import report_task

    return report_task(dataset=dataset, model=model, metrics=metrics, summary=summary)
