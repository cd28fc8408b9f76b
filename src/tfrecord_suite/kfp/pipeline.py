"""The one pipeline: shard, version, train, evaluate, register, gate and promote, report.

``tfrecord-suite run`` executes it with ``kfp.local`` and ``tfrecord-suite compile`` writes it as
YAML for the Kubeflow UI; both use this function unchanged.
"""

import dataclasses
from typing import Any

from kfp import dsl, kubernetes

from tfrecord_suite import podinfo
from tfrecord_suite.kfp.components import build_components
from tfrecord_suite.kfp.placement import Deployment, apply_placement
from tfrecord_suite.launch.placement import Placement
from tfrecord_suite.shard.step import ShardConfig
from tfrecord_suite.train.evaluate import GateConfig
from tfrecord_suite.train.trainer import TrainConfig

PIPELINE_NAME = "tfrecord-suite"


@dataclasses.dataclass(frozen=True)
class StepPolicy:
    """How Kubeflow runs one step of the pipeline.

    Attributes:
        display_name: The step's name in the Kubeflow UI.
        retries: Retries of a failed step (its own failures on bad input are final, see
            :class:`tfrecord_suite.errors.RetryWillNotHelp`); 0 for none.
        backoff: Wait before the first retry, doubled for each next one.
        cache: Whether Kubeflow may reuse an earlier run's result.
        pod_info: Whether the step's pod is told its run, name, UID and service account
            (:mod:`tfrecord_suite.podinfo`, through the downward API: not inputs, so they stay
            out of the cache key).

    """

    display_name: str
    retries: int = 0
    backoff: str = "10s"
    cache: bool = True
    pod_info: bool = False


#: Every step's policy, and why where it is not the default.
STEPS = {
    # the input may have changed under the same URI: always look
    "fingerprint": StepPolicy("Fingerprint input", cache=False),
    # the run names its staging folder
    "shard": StepPolicy("Shard to TFRecords (Beam)", retries=2, backoff="30s", pod_info=True),
    # publishing is idempotent, but a cached result could name a version gc'ed since; the run
    # goes into the manifest's producer
    "version": StepPolicy("Publish dataset version", retries=3, cache=False, pod_info=True),
    # a distributed job is named after the run, owned by the step's pod, runs as its account
    "train": StepPolicy("Train (tf.distribute)", pod_info=True),
    "evaluate": StepPolicy("Evaluate against the stable model", retries=2),
    # a cached result would skip registering this run; a retry finds its run's registration
    "register": StepPolicy("Register model", retries=3, cache=False, pod_info=True),
    "promote": StepPolicy("Promote model", cache=False),
    "report": StepPolicy("Report"),
}


def build_pipeline(placement: Placement | None = None, deployment: Deployment | None = None):
    """The pipeline with the train step placed as ``placement`` says (default: CPU).

    ``deployment`` names the images (registry and tag) and each step's CPU and memory requests.
    The train step's pod runs the image its hardware needs: the GPU build on GPUs, the TPU build
    on TPUs, the CPU image otherwise (or when it only launches a distributed job, whose nodes then
    get the accelerator image).
    """
    placement = placement or Placement()
    deployment = deployment or Deployment()
    images = deployment.images
    ops = build_components(images, train_image=placement.step_image(images))

    def step(name: str, **inputs: Any) -> Any:
        """Step ``name`` on ``inputs``, run as its :data:`STEPS` policy and the deployment say."""
        policy = STEPS[name]
        task = getattr(ops, name)(**inputs).set_display_name(policy.display_name)
        if policy.retries:
            task.set_retry(num_retries=policy.retries, backoff_duration=policy.backoff,
                           backoff_factor=2)  # fmt: skip
        if not (policy.cache and deployment.caching):
            task.set_caching_options(False)
        if policy.pod_info:
            for env, field_path in podinfo.FIELDS.items():
                kubernetes.use_field_path_as_env(task, env, field_path)
        deployment.apply(name, task, placement)
        return task

    @dsl.pipeline(
        name=PIPELINE_NAME,
        description="Raw data -> sharded TFRecords (Beam) -> versioned dataset -> tf.distribute "
        "training -> evaluation against the stable model -> registered model, promoted if at "
        "least as good -> report.",
    )
    def tfrecord_suite_pipeline(
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
        launcher: str = placement.launcher,
        model_registry: str = "",
        model_name: str = "",
        promote_alias: str = GateConfig.baseline_alias,
        promote_tolerance: float = GateConfig.tolerance,
    ) -> str:
        """Shard, version, train and report.

        Args:
            input_uri: Raw data: a file, folder, glob or gs:// prefix.
            registry_root: Dataset registry root (folder or gs:// prefix).
            dataset_name: Dataset name in the registry.
            input_format: auto, csv, tsv, jsonl, parquet, images or text.
            label: Label column (tabular); auto-detected when empty.
            key_column: Column deciding the split; the record content when empty.
            splits: name=weight list.
            num_shards: Fixed shards per split; 0 plans them from the data size.
            target_shard_mb: Preferred shard size.
            readers: Hosts reading the data in parallel (shard plan).
            workers: Training workers: 1 trains in the step's own pod, more launch a TrainJob
                or TFJob of that many nodes (the shard count is a multiple).
            gzip: Compress shards.
            max_bad_fraction: Fail the shard step above this share of bad rows.
            beam_args: Extra Beam pipeline options, e.g. ["--runner=DataflowRunner", ...].
            bump: auto, major, minor or patch.
            publish_mode: new (a version of exactly this input) or append (the latest version's
                shards, referenced, plus this input's: a daily run adds its day of data).
            strategy: auto, one_device, mirrored, multi_worker or tpu.
            cpu_devices: Logical CPU devices (MirroredStrategy without GPUs).
            epochs: Training epochs.
            batch_size: Per-replica batch size.
            learning_rate: Adam learning rate.
            model_fn: module:function building the model; built-in when empty.
            feature_config: Feature transforms (YAML/JSON file or inline text); inferred from
                the schema when empty.
            keep_failed_tfjob: Leave a failed TrainJob or TFJob and its pods for inspection.
            launcher: How multi-node training is launched: auto (TrainJob when the cluster
                serves it, else TFJob), trainjob (Kubeflow Trainer v2) or tfjob.
            model_registry: Model registry root; ``<registry_root>/_models`` when empty.
            model_name: Registered model name; the dataset name when empty.
            promote_alias: Alias the gate compares against and moves on success.
            promote_tolerance: How much worse than the baseline still promotes.

        """
        fingerprint = step("fingerprint", input_uri=input_uri)
        shard = step(
            "shard",
            input_uri=input_uri,
            registry_root=registry_root,
            dataset_name=dataset_name,
            fingerprint=fingerprint.output,
            input_format=input_format,
            label=label,
            key_column=key_column,
            splits=splits,
            num_shards=num_shards,
            target_shard_mb=target_shard_mb,
            readers=readers,
            workers=workers,
            gzip=gzip,
            max_bad_fraction=max_bad_fraction,
            beam_args=beam_args,
        )
        version = step(
            "version",
            staged=shard.outputs["staged"],
            registry_root=registry_root,
            dataset_name=dataset_name,
            bump=bump,
            publish_mode=publish_mode,
        )
        # parameters, not the artifact: the cache key is then the exact version and its digest
        train = step(
            "train",
            dataset_ref=version.outputs["ref"],
            dataset_digest=version.outputs["digest"],
            strategy=strategy,
            cpu_devices=cpu_devices,
            epochs=epochs,
            batch_size=batch_size,
            learning_rate=learning_rate,
            model_fn=model_fn,
            feature_config=feature_config,
            workers=workers,
            placement=placement.to_json(),
            keep_failed_tfjob=keep_failed_tfjob,
            trainer_image=placement.trainer_image(images),
            launcher=launcher,
        )
        apply_placement(placement, train)
        trained = {"dataset": version.outputs["dataset"], "model": train.outputs["model"]}
        registries = {"model_registry": model_registry, "model_name": model_name}
        evaluate = step(
            "evaluate",
            **trained,
            **registries,
            baseline_alias=promote_alias,
            tolerance=promote_tolerance,
        )
        register = step(
            "register",
            **trained,
            **registries,
            evaluation=evaluate.outputs["evaluation"],
        )
        with dsl.If(evaluate.outputs["Output"] == "promote", name="gate-at-least-as-good"):
            step(
                "promote",
                **registries,
                registered=register.outputs["registered"],
                evaluation=evaluate.outputs["evaluation"],
                alias=promote_alias,
            )
        report = step(
            "report",
            **trained,
            metrics=train.outputs["metrics"],
            evaluation=evaluate.outputs["evaluation"],
            registered=register.outputs["registered"],
        )
        return report.outputs["Output"]

    return tfrecord_suite_pipeline


tfrecord_suite_pipeline = build_pipeline()
