"""The retraining pipeline: raw data to a promoted model in one DAG.

fingerprint -> shard -> version -> train -> evaluate -> register -> [gate] promote -> report.
``tfrecord-suite run`` executes it with ``kfp.local``; ``tfrecord-suite compile`` writes it as
``pipelines/retraining.yaml`` for the Kubeflow UI; ``submit`` and ``retrain`` upload it.
"""

from typing import Any

from kfp import dsl

from tfrecord_suite.kfp.step_policies import Steps
from tfrecord_suite.kfp.task_placement import Deployment
from tfrecord_suite.launch.placement import Placement
from tfrecord_suite.pipelines.stages import described, publish, train_and_gate
from tfrecord_suite.shard.step import ShardConfig
from tfrecord_suite.train.evaluate import GateConfig
from tfrecord_suite.train.trainer import TrainConfig

NAME = "tfrecord-suite"


def build_pipeline(placement: Placement | None = None, deployment: Deployment | None = None) -> Any:
    """The pipeline with the train step placed as ``placement`` says (default: CPU).

    ``deployment`` names the images (registry and tag), each step's CPU and memory requests and
    whether Kubeflow may cache. The train step's pod runs the image its hardware needs: the GPU
    build on GPUs, the TPU build on TPUs, the CPU image otherwise (or when it only launches a
    distributed job, whose nodes then get the accelerator image).
    """
    step = Steps(placement, deployment)

    @dsl.pipeline(
        name=NAME,
        description="Raw data -> sharded TFRecords (Beam) -> versioned dataset -> tf.distribute "
        "training -> evaluation against the stable model -> registered model, promoted if at "
        "least as good -> report.",
    )
    @described("Shard, version, train, evaluate, register, gate and report.")
    def retraining_pipeline(
        input_uri: str,
        registry_root: str,
        dataset_name: str,
        input_format: str = ShardConfig.format,
        label: str = "",
        key_column: str = "",
        splits: str = ShardConfig.splits,
        num_shards: int = 0,
        target_shard_mb: float = ShardConfig.target_shard_mb,
        readers: int = ShardConfig.readers,
        workers: int = 1,
        gzip: bool = ShardConfig.gzip,
        max_bad_fraction: float = ShardConfig.max_bad_fraction,
        beam_args: list = [],  # noqa: B006 - kfp takes the default from the signature
        image_size: str = "",
        image_aspect: str = ShardConfig.image_aspect,
        image_quality: int = ShardConfig.image_quality,
        bump: str = "auto",
        publish_mode: str = "new",
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
        report = train_and_gate(step, publish(step, locals()), locals())
        return report.outputs["Output"]

    return retraining_pipeline
