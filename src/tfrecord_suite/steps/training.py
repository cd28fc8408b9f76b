"""The training steps' bodies: train, evaluate against the gate, register, promote, report.

Called by the kfp wrappers of :mod:`tfrecord_suite.kfp.components.training`; kfp-free.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
from typing import Any

from tfrecord_suite.errors import RetryWillNotHelp, UserError
from tfrecord_suite.io import storage
from tfrecord_suite.markdown import code
from tfrecord_suite.podinfo import PodInfo
from tfrecord_suite.steps import (
    final_on_bad_input,
    running_image,
    running_images,
    setup_logging,
    write_markdown,
)
from tfrecord_suite.steps.mlmd import describe, log_metrics, step_metadata

_LOG = logging.getLogger(__name__)
EXPORT_SUBDIR = "export"


def train_step(
    *,
    dataset_ref: str,
    dataset_digest: str,
    strategy: str,
    cpu_devices: int,
    epochs: int,
    batch_size: int,
    learning_rate: float,
    model_fn: str,
    model: Any,
    metrics: Any,
    classification_metrics: Any,
    report: Any,
    workers: int = 1,
    placement: str = "",
    keep_failed_tfjob: bool = False,
    feature_config: str = "",
    trainer_image: str = "",
    launcher: str = "",
    input_service: str = "",
    data_service_image: str = "",
) -> None:
    """Train on the version ``dataset_ref`` names; fill the model, metrics and report artifacts.

    ``dataset_digest`` is the version's content digest: the kfp cache key of the step, and
    checked against the manifest here, so a cached model always belongs to the same data.

    ``workers == 1`` trains in this process (all of its GPUs through MirroredStrategy) into
    ``model.path``. ``workers > 1``, or a placement with ``launch_job``, launches a TrainJob or
    TFJob (``launcher``: ``auto``, ``trainjob`` or ``tfjob``; empty: the placement's) on
    ``trainer_image``, placed as ``placement`` (JSON of
    :class:`~tfrecord_suite.launch.placement.Placement`) says; its chief writes into a folder of
    the run under the dataset registry (the nodes cannot reach this pod's disk), and the export,
    metrics and report are then copied into ``model.path``.

    ``input_service="cluster:N"`` first starts a tf.data service of N worker pods (on
    ``data_service_image``) for the run, and deletes it when training ends.

    What the step creates on Kubernetes (the job, the service) names the step's lease as its
    owner (:mod:`tfrecord_suite.launch.lease`): cancelled (SIGTERM) the step deletes it all;
    killed, or its node lost, the lease ends within minutes and Kubernetes deletes it all. The
    pods get the Secrets the pipeline was compiled with (``--storage-secret``,
    ``--image-pull-secrets``: :mod:`tfrecord_suite.launch.credentials`).
    """
    from tfrecord_suite.launch.train_step import cluster_input_service, launching, train_in_job
    from tfrecord_suite.train.trainer import TrainConfig, copy_model_outputs

    setup_logging()
    _check_train_inputs(dataset_ref, dataset_digest, workers)
    config = TrainConfig(
        dataset=dataset_ref,
        model_dir=model.path,
        strategy=strategy,
        cpu_devices=cpu_devices,
        epochs=epochs,
        batch_size=batch_size,
        learning_rate=learning_rate,
        model_fn=model_fn or None,
        feature_config=feature_config,
        input_service=input_service,
    )
    where = _placement(placement, launcher)
    with contextlib.ExitStack() as stack:
        with final_on_bad_input("train"):  # refused before anything is created
            launch = stack.enter_context(
                launching(config, workers, where, model.uri,
                          data_service_image or running_images().component)
            )  # fmt: skip
        config = stack.enter_context(cluster_input_service(config, launch))
        if launch is None or not launch.kinds:
            from tfrecord_suite.train.trainer import run_train

            with final_on_bad_input("train"):  # a bad feature config or model function
                result = run_train(config)
        else:
            image = trainer_image or running_images().trainer(where.accelerator_resource)
            result = train_in_job(config, workers, where, launch, image, keep_failed_tfjob)
            copy_model_outputs(result.model_dir, model.path)
    _fill_train_artifacts(result, model, metrics, classification_metrics, report)


def _check_train_inputs(dataset_ref: str, dataset_digest: str, workers: int) -> None:
    """Refuse, as a final failure, a worker count below 1 or a reference to other data."""
    from tfrecord_suite.registry.datasets import resolve_dataset
    from tfrecord_suite.train.trainer import TrainError

    with final_on_bad_input("train", TrainError):
        if workers < 1:
            raise UserError(f"workers must be at least 1, got {workers}")
        if dataset_digest:
            manifest, _ = resolve_dataset(dataset_ref)
            if manifest.content_digest != dataset_digest:
                raise TrainError(
                    f"{dataset_ref} has content digest {manifest.content_digest[:16]}..., "
                    f"expected {dataset_digest[:16]}...: the reference no longer names the data "
                    "this run published"
                )


def _placement(text: str, launcher: str = "") -> Any:
    """The placement JSON says, with ``launcher`` (when given) in place of its own."""
    from tfrecord_suite.launch.placement import Placement

    where = Placement.from_json(text)
    if launcher and launcher != where.launcher:
        with final_on_bad_input("train"):
            where = dataclasses.replace(where, launcher=launcher)
    return where


def _fill_train_artifacts(
    result: Any, model: Any, metrics: Any, classification_metrics: Any, report: Any
) -> None:
    """Describe the model and log the metrics of a run (a ``TrainMetrics``) in its artifacts."""
    describe(
        model,
        {
            "dataset": result.dataset,
            "dataset_digest": result.dataset_digest,
            # relative: each step sees the artifact at its own local path
            "export_subdir": EXPORT_SUBDIR,
            "framework": "tensorflow",
            "strategy": result.strategy,
            "replicas": result.replicas,
        },
    )
    logged = {
        f"{split}_{name}": round(float(value), 6)
        for split, values in result.evaluation.items()
        for name, value in values.items()
    }
    logged["examples_per_second"] = round(result.examples_per_second, 1)
    if result.input.get("input_wait_share") is not None:
        logged["input_wait_share"] = round(result.input["input_wait_share"], 4)
    log_metrics(metrics, logged)
    check = result.serving_check
    if check:
        classification_metrics.log_confusion_matrix(check["classes"], check["confusion_matrix"])
    from tfrecord_suite.train.report import REPORT_MD

    write_markdown(report, storage.read_text(storage.join(model.path, REPORT_MD)))


def export_dir(model: Any) -> str:
    """The SavedModel inside a model artifact, at this step's local path of it."""
    return storage.join(model.path, model.metadata.get("export_subdir") or EXPORT_SUBDIR)


def _count(value: Any) -> Any:
    """A count as it was written: ML Metadata hands numbers on as doubles (1797 -> 1797.0)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def report_step(
    *,
    dataset: Any,
    model: Any,
    metrics: Any,
    summary: Any,
    decision: Any = None,
    registered: Any = None,
) -> str:
    """A closing Markdown summary: where the dataset version, the model and the metrics are.

    The metrics are the train step's own (:func:`~tfrecord_suite.steps.mlmd.step_metadata`): on
    Kubeflow the artifact arrives with the launcher's ``display_name`` and ``store_session_info``
    beside them, which are no metric.
    """
    gate = dict(decision.metadata) if decision is not None else {}
    logged = step_metadata(metrics.metadata)
    reg = dict(registered.metadata) if registered is not None else {}
    lines = [
        "# tfrecord-suite run",
        "",
        f"- Dataset version: `{dataset.metadata.get('ref')}` at "
        f"`{dataset.metadata.get('version_uri')}` "
        f"({_count(dataset.metadata.get('records'))} records, digest "
        f"`{str(dataset.metadata.get('digest', ''))[:16]}`)",
        f"- Model (SavedModel, serving_default takes serialized tf.Example): "
        f"`{storage.join(model.uri, model.metadata.get('export_subdir') or EXPORT_SUBDIR)}`",
        f"- Metrics: `{storage.join(model.uri, 'metrics.json')}`",
    ]
    if reg:
        lines.append(
            f"- Registered model: `{reg.get('model')}` v{int(reg.get('version') or 0)} "
            f"at `{reg.get('registered_uri')}`"
        )
    if gate:
        lines.append(f"- Gate: **{gate.get('decision')}** ({gate.get('reason')})")
    lines += [
        "",
        "| metric | value |",
        "|---|---:|",
    ]
    lines += [f"| {code(k)} | {v} |" for k, v in sorted(logged.items())]
    text = "\n".join(lines) + "\n"
    write_markdown(summary, text)
    return json.dumps(
        {
            "dataset_ref": dataset.metadata.get("ref"),
            "dataset_uri": dataset.metadata.get("version_uri"),
            "model_uri": model.uri,
            "export_dir": storage.join(
                model.uri, model.metadata.get("export_subdir") or EXPORT_SUBDIR
            ),
            "metrics_file": storage.join(model.uri, "metrics.json"),
            "metrics": logged,
            "registered_model": int(reg["version"]) if reg.get("version") is not None else None,
            "registered_model_uri": reg.get("registered_uri"),
            "gate": gate.get("decision"),
            "gate_reason": gate.get("reason"),
        }
    )


def default_model_registry(registry_root: str) -> str:
    """Where models are registered when no model registry is given: beside the datasets."""
    return storage.join(registry_root, "_models")


def dataset_reference(dataset: Any, step: str) -> str:
    """The exact version reference (``<root>/<name>@<version>``) a Dataset artifact names.

    The version and resolve_dataset steps put it in the artifact's ``ref`` metadata. A Dataset
    made by anything else (a ``dsl.importer``, a component of the user's) carries at most its
    URI, which is taken when it is a version folder, ``<registry>/<name>/<MAJOR.MINOR.PATCH>``
    holding ``manifest.json``.

    Raises:
        RetryWillNotHelp: The artifact names no dataset version; the message says what to pass.

    """
    from tfrecord_suite.registry.manifest import Manifest, RegistryError

    ref = dataset.metadata.get("ref")
    if ref:
        return str(ref)
    uri = storage.normalize(str(dataset.metadata.get("version_uri") or dataset.uri)).rstrip("/")
    manifest_uri = storage.join(uri, "manifest.json")
    try:
        if storage.exists(manifest_uri):
            m = Manifest.load(storage.read_text(manifest_uri), manifest_uri)
            name_dir = storage.parent(uri)
            if storage.basename(uri) == m.version and storage.basename(name_dir) == m.dataset:
                return f"{storage.join(storage.parent(name_dir), m.dataset)}@{m.version}"
    except RegistryError as exc:
        raise RetryWillNotHelp(f"{step}: the dataset input {uri}: {exc}") from exc
    raise RetryWillNotHelp(
        f"{step}: the dataset input {uri} names no dataset version: its metadata has no 'ref' "
        "and it is not a version folder (<registry>/<dataset>/<MAJOR.MINOR.PATCH>/ holding "
        "manifest.json). Pass the version or resolve_dataset step's 'dataset' output, or a "
        "dsl.importer of a version folder (or with metadata={'ref': "
        "'<registry>/<dataset>@<version>'})"
    )


def _model_target(dataset: Any, model_registry: str, model_name: str, step: str) -> tuple[str, str]:
    """The model registry and name, defaulting to ``<dataset registry>/_models`` and the dataset."""
    from tfrecord_suite.registry.refs import DatasetRef

    if model_registry and model_name:
        return model_registry, model_name
    ref = DatasetRef.parse(dataset_reference(dataset, step))
    return model_registry or default_model_registry(ref.root), model_name or ref.dataset


def evaluate_step(
    *,
    dataset: Any,
    model: Any,
    model_registry: str,
    model_name: str,
    baseline_alias: str,
    tolerance: float,
    evaluation: Any,
    decision: Any,
) -> str:
    """Score the new model and the ``baseline_alias`` model on the test split; return the decision.

    ``evaluation`` (a Metrics artifact) gets both scores and nothing else: the UI shows a
    metric's value as JSON and Compare runs lines them up as numbers. ``decision`` (Markdown,
    which the UI renders) gets the comparison, and in its metadata the decision (``promote`` or
    ``hold``), its reason, the scores and the baseline version compared against; the register,
    promote and report steps read them there.
    """
    from tfrecord_suite.train.evaluate import GateConfig, markdown, run_gate

    setup_logging()
    model_registry, model_name = _model_target(dataset, model_registry, model_name, "evaluate")
    result = run_gate(
        GateConfig(
            dataset=dataset_reference(dataset, "evaluate"),
            export_dir=export_dir(model),
            model_registry=model_registry,
            model_name=model_name,
            baseline_alias=baseline_alias,
            tolerance=tolerance,
        )
    )
    metric = result.metric
    scores = {f"candidate_{metric}": round(result.candidate["value"], 6)}
    if result.baseline:
        scores[f"baseline_{metric}"] = round(result.baseline["value"], 6)
    log_metrics(evaluation, scores)
    describe(
        decision,
        {
            "decision": result.decision,
            "reason": result.reason,
            "metric": metric,
            **scores,
            # None (left out) while no model holds the alias
            "baseline_version": result.baseline_version,
            "baseline_alias": baseline_alias,
            "dataset": result.dataset,
        },
    )
    write_markdown(decision, markdown(result))
    return result.decision


def register_step(
    *,
    dataset: Any,
    model: Any,
    decision: Any,
    model_registry: str,
    model_name: str,
    registered: Any,
) -> int:
    """Register the trained model (promoted or not) with its lineage; return its number.

    A retry of the step returns the version its first attempt registered: registering is keyed
    on the pipeline run (:class:`~tfrecord_suite.podinfo.PodInfo`) and the model's content.
    """
    from tfrecord_suite.registry.models import ModelRegistry

    setup_logging()
    model_registry, model_name = _model_target(dataset, model_registry, model_name, "register")
    ref = dataset_reference(dataset, "register")
    result = ModelRegistry(model_registry).register(
        model_name,
        storage.normalize(model.path),
        model.metadata.get("export_subdir") or EXPORT_SUBDIR,
        lineage={
            "dataset": ref,
            "dataset_uri": dataset.metadata.get("version_uri"),
            "model_artifact_uri": model.uri,
            "dataset_digest": dataset.metadata.get("digest"),
            "evaluation": step_metadata(decision.metadata),
            "pipeline_run_id": PodInfo.from_env().run_id or None,
            "image": running_image(),
        },
    )
    storage.write_text(
        storage.join(registered.path, "model.json"), json.dumps(result.manifest, indent=2)
    )
    describe(
        registered,
        {
            "registered_uri": result.uri,
            "model": model_name,
            "model_registry": model_registry,
            "version": result.version,
            "export_dir": result.export_dir,
            "content_digest": result.manifest["content_digest"],
            "dataset": ref,
        },
    )
    return result.version


def promote_step(
    *, registered: Any, decision: Any, model_registry: str, model_name: str, alias: str
) -> int:
    """Move ``alias`` to the registered model, only if it still points to the baseline evaluated.

    Raises:
        storage.PreconditionFailed: Another run promoted a model after this run's evaluation;
            this run's comparison is stale, so it does not overwrite that promotion.

    """
    from tfrecord_suite.registry.models import ModelRegistry

    setup_logging()
    model_registry = model_registry or registered.metadata["model_registry"]
    model_name = model_name or registered.metadata["model"]
    baseline = decision.metadata.get("baseline_version")
    version = int(registered.metadata["version"])
    ModelRegistry(model_registry).set_alias(
        model_name, alias, version, expected=None if baseline is None else int(baseline)
    )
    _LOG.info("model %s: %s -> v%d (was %s)", model_name, alias, version, baseline)
    return version
