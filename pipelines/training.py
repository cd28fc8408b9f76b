"""The training pipeline: train on a dataset version that is already published.

resolve_dataset -> train -> evaluate -> register -> [gate] promote -> report. The version may
be another team's, named exactly (``gs://b/registry/penguins@1.2.0``) or by an alias that moves
(``@stable``, ``@latest``): the resolve step pins it for the run, so training is cached on the
exact version and its digest.
"""

from typing import Any

from kfp import dsl

from tfrecord_suite.kfp.step_policies import Steps
from tfrecord_suite.kfp.task_placement import Deployment
from tfrecord_suite.launch.placement import Placement
from tfrecord_suite.pipelines.stages import described, train_and_gate
from tfrecord_suite.train.evaluate import GateConfig
from tfrecord_suite.train.trainer import TrainConfig

NAME = "tfrecord-suite-training"


def build_pipeline(placement: Placement | None = None, deployment: Deployment | None = None) -> Any:
    """The training pipeline, its train step placed as ``placement`` says (default: CPU)."""
    step = Steps(placement, deployment)

    @dsl.pipeline(
        name=NAME,
        description="A published dataset version -> tf.distribute training -> evaluation "
        "against the stable model -> registered model, promoted if at least as good -> report.",
    )
    @described("Resolve the version, train, evaluate, register, gate and report.")
    def training_pipeline(
        dataset_ref: str,
        workers: int = 1,
        strategy: str = TrainConfig.strategy,
        cpu_devices: int = TrainConfig.cpu_devices,
        epochs: int = TrainConfig.epochs,
        batch_size: int = TrainConfig.batch_size,
        learning_rate: float = TrainConfig.learning_rate,
        model_fn: str = "",
        feature_config: str = TrainConfig.feature_config,
        keep_failed_tfjob: bool = False,
        launcher: str = step.placement.launcher,
        input_service: str = TrainConfig.input_service,
        model_registry: str = "",
        model_name: str = "",
        promote_alias: str = GateConfig.baseline_alias,
        promote_tolerance: float = GateConfig.tolerance,
    ) -> str:
        version = step("resolve_dataset", dataset_ref=dataset_ref)
        return train_and_gate(step, version, locals()).outputs["Output"]

    return training_pipeline
