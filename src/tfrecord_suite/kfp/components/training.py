"""Kubeflow components of the model side: train, evaluate, register, promote, report.

Component functions only (each body imports one function of
:mod:`tfrecord_suite.steps.training` and calls it);
:func:`tfrecord_suite.kfp.components.build_components` gives them images. Their docstrings are
the components' documentation (see :mod:`.data`).
"""

from kfp.dsl import ClassificationMetrics, Dataset, Input, Markdown, Metrics, Model, Output


def train(
    dataset_ref: str,
    model: Output[Model],
    metrics: Output[Metrics],
    classification_metrics: Output[ClassificationMetrics],
    report: Output[Markdown],
    dataset_digest: str = "",
    strategy: str = "auto",
    cpu_devices: int = 1,
    epochs: int = 5,
    batch_size: int = 64,
    learning_rate: float = 0.001,
    model_fn: str = "",
    feature_config: str = "",
    workers: int = 1,
    placement: str = "",
    keep_failed_tfjob: bool = False,
    trainer_image: str = "",
    launcher: str = "auto",
    input_service: str = "",
    data_service_image: str = "",
):
    """Train a Keras model under tf.distribute on a dataset version; export a SavedModel.

    Reads the version's shards with the suite's interleaved, parallel tf.data reader. One
    worker trains in this step's pod (all its GPUs through MirroredStrategy); more, or a
    placement compiled with launch_job, launch a TrainJob (Kubeflow Trainer v2) or TFJob of that
    many nodes and wait for it. Cached on dataset_ref, dataset_digest and the parameters.

    Args:
        dataset_ref: The exact version to train on, <registry root>/<dataset>@<version> (the
            version or resolve_dataset step's ref).
        dataset_digest: The version's content digest (their digest output); checked against
            the manifest, so a cached model always belongs to the same data. Empty: not checked.
        strategy: auto, one_device, mirrored, multi_worker or tpu.
        cpu_devices: Logical CPU devices, for MirroredStrategy on a machine without GPUs
            (1: the one CPU device).
        epochs: Training epochs.
        batch_size: Batch size per replica.
        learning_rate: Adam's learning rate.
        model_fn: module:function that builds the compiled Keras model (it must be in the
            image); the built-in models when empty.
        feature_config: Feature transforms, as a YAML or JSON file or inline text; inferred
            from the schema when empty.
        workers: Training nodes: 1 trains in this pod, more launch a TrainJob or TFJob.
        placement: The trainer's Kubernetes placement as JSON (accelerators, node selector,
            tolerations, /dev/shm; what `tfrecord-suite compile` bakes in); empty: CPU.
        keep_failed_tfjob: Leave a failed TrainJob or TFJob and its pods for inspection.
        trainer_image: Image of the job's nodes; empty: the suite's trainer image for the
            placement's accelerator.
        launcher: How a multi-node job is launched: auto (TrainJob where the cluster serves it,
            else TFJob), trainjob or tfjob.
        input_service: Read and decode the training data on tf.data service workers:
            grpc://HOST:PORT of a running dispatcher (k8s/data-service deploys one with its
            workers), cluster:N (N worker pods this step starts for the run and deletes after),
            or local:N (N worker processes beside each trainer). Empty: in the trainer.
        data_service_image: Image of cluster:N's pods; empty: the suite's component image.

    Returns:
        model: The model folder: export/ (a SavedModel whose serving_default takes serialized
            tf.Example records), metrics.json, reports; metadata dataset, dataset_digest,
            export_subdir, framework, strategy, replicas.
        metrics: Evaluation on validation and test (loss, accuracy), examples per second and
            the input pipeline's wait share.
        classification_metrics: The confusion matrix of the serving signature on the raw test
            examples (classification only).
        report: The training report (curves, metrics) as Markdown.

    """
    from tfrecord_suite.steps.training import train_step

    train_step(
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
        input_service=input_service,
        data_service_image=data_service_image,
    )


def evaluate(
    dataset: Input[Dataset],
    model: Input[Model],
    evaluation: Output[Metrics],
    decision: Output[Markdown],
    model_registry: str = "",
    model_name: str = "",
    baseline_alias: str = "stable",
    tolerance: float = 0.0,
) -> str:
    """Score the new model and the baseline through their serving signatures on the same test split.

    Both models see the raw serialized test examples of the dataset version (accuracy for
    classification, mean squared error for regression). The decision is promote when the new
    model is at least as good (within tolerance) or no model holds baseline_alias, else hold.

    Args:
        dataset: The dataset version (the version or resolve_dataset step's dataset).
        model: The trained model (the train step's model).
        model_registry: Model registry root; <registry root>/_models when empty.
        model_name: Registered model name; the dataset's name when empty.
        baseline_alias: The alias whose model is the baseline, e.g. stable.
        tolerance: How much worse than the baseline still promotes.

    Returns:
        evaluation: Both scores as metrics (numbers only: candidate_<metric>, and
            baseline_<metric> when a model holds the alias), which the UI compares across runs.
        decision: The gate's decision and the comparison behind it, as Markdown; metadata
            decision, reason, metric, the scores, baseline_alias, dataset and baseline_version
            (absent when no model holds the alias).
        Output: The decision, promote or hold.

    """
    from tfrecord_suite.steps.training import evaluate_step

    return evaluate_step(
        dataset=dataset,
        model=model,
        model_registry=model_registry,
        model_name=model_name,
        baseline_alias=baseline_alias,
        tolerance=tolerance,
        evaluation=evaluation,
        decision=decision,
    )


def register(
    dataset: Input[Dataset],
    model: Input[Model],
    decision: Input[Markdown],
    registered: Output[Model],
    model_registry: str = "",
    model_name: str = "",
) -> int:
    """Register the model as a new numbered, checksummed version with its lineage.

    Every trained model is registered, promoted or not. A retry of the same run returns the
    version its first attempt registered. Do not cache this step (a cached result would skip
    registering the run).

    Args:
        dataset: The dataset version the model was trained on.
        model: The trained model.
        decision: The evaluate step's decision (its metadata is stored in the lineage).
        model_registry: Model registry root; <registry root>/_models when empty.
        model_name: Registered model name; the dataset's name when empty.

    Returns:
        registered: model.json (files with sha256, lineage) at its path; metadata
            registered_uri, model, model_registry, version, export_dir, content_digest, dataset.
        Output: The registered version number.

    """
    from tfrecord_suite.steps.training import register_step

    return register_step(
        dataset=dataset,
        model=model,
        decision=decision,
        model_registry=model_registry,
        model_name=model_name,
        registered=registered,
    )


def promote(
    registered: Input[Model],
    decision: Input[Markdown],
    model_registry: str = "",
    model_name: str = "",
    alias: str = "stable",
) -> int:
    """Move the alias to the registered model, if it still points to the baseline evaluated.

    A compare-and-swap: a run whose comparison went stale (another run promoted meanwhile)
    fails instead of overwriting a better model. Run it behind the evaluate step's decision
    (dsl.If(decision == "promote")). Do not cache it.

    Args:
        registered: The register step's registered model.
        decision: The evaluate step's decision (its baseline_version is the expected one).
        model_registry: Model registry root; the registered model's when empty.
        model_name: Model name; the registered model's when empty.
        alias: The alias to move, e.g. stable.

    Returns:
        Output: The version the alias now points to.

    """
    from tfrecord_suite.steps.training import promote_step

    return promote_step(
        registered=registered,
        decision=decision,
        model_registry=model_registry,
        model_name=model_name,
        alias=alias,
    )


def report(
    dataset: Input[Dataset],
    model: Input[Model],
    metrics: Input[Metrics],
    decision: Input[Markdown],
    registered: Input[Model],
    summary: Output[Markdown],
) -> str:
    """Summarize a run: where the dataset version, the model and its metrics are; the decision.

    Args:
        dataset: The dataset version.
        model: The trained model.
        metrics: The train step's metrics.
        decision: The evaluate step's decision.
        registered: The register step's registered model.

    Returns:
        summary: The run summary as Markdown.
        Output: The same as JSON: dataset_ref, dataset_uri, model_uri, export_dir,
            metrics_file, metrics, registered_model, registered_model_uri, gate, gate_reason.

    """
    from tfrecord_suite.steps.training import report_step

    return report_step(
        dataset=dataset,
        model=model,
        metrics=metrics,
        decision=decision,
        registered=registered,
        summary=summary,
    )
