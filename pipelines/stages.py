"""The two halves the ready pipelines are made of, each a chain of configured tasks.

``publish``: fingerprint -> shard -> version. ``train_and_gate``: train -> evaluate -> register
-> [gate] promote -> report. Called inside a ``@dsl.pipeline`` function, they add their tasks
to it; ``step`` is the pipeline's :class:`~tfrecord_suite.kfp.step_policies.Steps`.
"""

import inspect
import textwrap
from collections.abc import Callable
from typing import Any

from kfp import dsl

from tfrecord_suite.kfp.step_policies import Steps

#: Every ready pipeline's parameters, described once (the compiled YAML carries these
#: descriptions, and the Kubeflow UI shows them beside each parameter).
PARAMETERS = {
    "input_uri": "Raw data: a file, folder, glob, or a gs:// or s3:// prefix.",
    "registry_root": "Dataset registry root (a folder, or a gs:// or s3:// prefix on a cluster).",
    "dataset_name": "Dataset name in the registry.",
    "dataset_ref": "The dataset version to train on: <registry root>/<dataset>@<selector>, "
    "the selector an exact version (1.2.0), a partial one (1, 1.2) or an alias (latest, stable).",
    "input_format": "auto, csv, tsv, jsonl, parquet, images or text.",
    "label": "Label column (tabular); detected when empty.",
    "key_column": "Column deciding each row's split; the row's content when empty.",
    "splits": "Split names and weights, e.g. train=80,validation=10,test=10.",
    "num_shards": "Shards per split; 0 plans them from the data size.",
    "target_shard_mb": "Preferred shard size in MiB.",
    "readers": "Hosts reading the data in parallel (the shard plan).",
    "workers": "Training workers: 1 trains in the step's own pod, more launch a TrainJob or "
    "TFJob of that many nodes (and the shard count is a multiple).",
    "gzip": "Compress the shards.",
    "max_bad_fraction": "Fail the shard step above this share of bad rows.",
    "beam_args": 'Extra Beam pipeline options, e.g. ["--runner=DataflowRunner", ...].',
    "image_size": "HEIGHTxWIDTH images are resized to while sharding (e.g. 224x224); empty: "
    "stored as they are.",
    "image_aspect": "With image_size: stretch, or crop (keep the aspect ratio, central window).",
    "image_quality": "JPEG quality of the JPEG images image_size re-encodes.",
    "bump": "auto, major, minor or patch.",
    "publish_mode": "new (a version of exactly this input) or append (the latest version's "
    "shards, referenced, plus this input's: a daily run adds its day).",
    "strategy": "auto, one_device, mirrored, multi_worker or tpu.",
    "cpu_devices": "Logical CPU devices (MirroredStrategy without GPUs).",
    "epochs": "Training epochs.",
    "batch_size": "Batch size per replica.",
    "learning_rate": "Adam learning rate.",
    "model_fn": "module:function building the model; the built-in models when empty.",
    "feature_config": "Feature transforms (a YAML/JSON file or inline text); inferred from the "
    "schema when empty.",
    "keep_failed_tfjob": "Leave a failed TrainJob or TFJob and its pods for inspection.",
    "launcher": "How multi-node training is launched: auto (TrainJob where the cluster serves "
    "it, else TFJob), trainjob (Kubeflow Trainer v2) or tfjob.",
    "input_service": "Read and decode the training data on tf.data service workers: "
    "grpc://HOST:PORT of a running dispatcher (k8s/data-service), cluster:N (N worker pods "
    "started for the run) or local:N (N worker processes beside each trainer); empty: in the "
    "trainer.",
    "model_registry": "Model registry root; <registry root>/_models when empty.",
    "model_name": "Registered model name; the dataset's name when empty.",
    "promote_alias": "Alias the gate compares against and moves on success.",
    "promote_tolerance": "How much worse than the baseline still promotes.",
}


def described(summary: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a pipeline function the docstring kfp compiles from.

    The docstring is ``summary`` and the descriptions of the function's parameters from
    :data:`PARAMETERS`; apply it below ``@dsl.pipeline``.
    """

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        args = "\n".join(
            textwrap.fill(
                f"{name}: {PARAMETERS[name]}",
                width=96,
                initial_indent="    ",
                subsequent_indent="        ",
            )
            for name in inspect.signature(fn).parameters
        )
        fn.__doc__ = f"{summary}\n\nArgs:\n{args}\n"
        return fn

    return decorate


#: The pipeline parameters each stage takes, by the name its step's input has.
SHARD_INPUTS = ("input_format", "label", "key_column", "splits", "num_shards", "target_shard_mb",
                "readers", "workers", "gzip", "max_bad_fraction", "beam_args", "image_size",
                "image_aspect", "image_quality")  # fmt: skip
TRAIN_INPUTS = ("strategy", "cpu_devices", "epochs", "batch_size", "learning_rate", "model_fn",
                "feature_config", "workers", "keep_failed_tfjob", "launcher",
                "input_service")  # fmt: skip


def publish(step: Steps, params: dict[str, Any]) -> Any:
    """Fingerprint, shard and version ``params["input_uri"]``; returns the version task.

    ``params`` are the pipeline's parameters (its ``locals()``): the input, the registry, the
    bump and publish mode, and the shard step's :data:`SHARD_INPUTS`.
    """
    registry = {k: params[k] for k in ("registry_root", "dataset_name")}
    fingerprint = step("fingerprint", input_uri=params["input_uri"])
    shard = step(
        "shard",
        input_uri=params["input_uri"],
        fingerprint=fingerprint.output,
        **registry,
        **{k: params[k] for k in SHARD_INPUTS},
    )
    return step(
        "version",
        staged=shard.outputs["staged"],
        bump=params["bump"],
        publish_mode=params["publish_mode"],
        **registry,
    )


def train_and_gate(step: Steps, version: Any, params: dict[str, Any]) -> Any:
    """Train on the version ``version`` (a task with outputs ref, digest, dataset); gate; report.

    Training takes the version's exact reference and content digest as parameters, not its
    artifact (which every run mints anew), so Kubeflow caches it on the data itself and the
    training parameters. ``params`` are the pipeline's parameters (its ``locals()``): the train
    step's :data:`TRAIN_INPUTS`, the model registry and the gate's alias and tolerance. Returns
    the report task, whose output is the run's summary as JSON.
    """
    train = step(
        "train",
        dataset_ref=version.outputs["ref"],
        dataset_digest=version.outputs["digest"],
        placement=step.placement.to_json(),
        trainer_image=step.trainer_image,
        data_service_image=step.deployment.images.component,
        **{k: params[k] for k in TRAIN_INPUTS},
    )
    trained = {"dataset": version.outputs["dataset"], "model": train.outputs["model"]}
    registries = {k: params[k] for k in ("model_registry", "model_name")}
    evaluate = step(
        "evaluate",
        **trained,
        **registries,
        baseline_alias=params["promote_alias"],
        tolerance=params["promote_tolerance"],
    )
    register = step(
        "register",
        **trained,
        **registries,
        decision=evaluate.outputs["decision"],
    )
    with dsl.If(evaluate.outputs["Output"] == "promote", name="gate-at-least-as-good"):
        step(
            "promote",
            **registries,
            registered=register.outputs["registered"],
            decision=evaluate.outputs["decision"],
            alias=params["promote_alias"],
        )
    return step(
        "report",
        **trained,
        metrics=train.outputs["metrics"],
        decision=evaluate.outputs["decision"],
        registered=register.outputs["registered"],
    )
