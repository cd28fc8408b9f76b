"""The data pipeline: raw data to a published dataset version, no training.

fingerprint -> shard -> version. For a team that publishes datasets other pipelines train on
(the training pipeline, or their own, through the version's reference or an alias).
"""

from typing import Any, NamedTuple

from kfp import dsl
from kfp.dsl import Dataset

from tfrecord_suite.kfp.step_policies import Steps
from tfrecord_suite.kfp.task_placement import Deployment
from tfrecord_suite.launch.placement import Placement
from tfrecord_suite.pipelines.stages import described, publish
from tfrecord_suite.shard.step import ShardConfig

NAME = "tfrecord-suite-data"

Outputs = NamedTuple("Outputs", [("ref", str), ("digest", str), ("dataset", Dataset)])  # noqa: UP014 - the form kfp documents


def build_pipeline(placement: Placement | None = None, deployment: Deployment | None = None) -> Any:
    """The data pipeline on ``deployment``'s images (``placement`` is unused: no training)."""
    step = Steps(placement, deployment)

    @dsl.pipeline(
        name=NAME,
        description="Raw data -> sharded TFRecords (Beam) -> versioned dataset, published "
        "atomically with its manifest, statistics and lineage.",
    )
    @described("Shard and version; returns the version's exact reference, digest and artifact.")
    def data_pipeline(
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
    ) -> Outputs:
        version = publish(step, locals())
        return Outputs(
            version.outputs["ref"], version.outputs["digest"], version.outputs["dataset"]
        )

    return data_pipeline
