"""What each Kubeflow component does, as plain functions over duck-typed artifacts.

The kfp wrappers in :mod:`tfrecord_suite.kfp.components` hold no logic: each body imports one
function from here and calls it. These functions never import kfp; an "artifact" is anything with
``uri``, ``path`` and a ``metadata`` dict (kfp's artifact classes, or a stand-in in tests), and
metric artifacts also need ``log_metric`` / ``log_confusion_matrix``.

Where outputs go. Everything Kubeflow keeps (summaries, reports, the dataset's manifest, the
exported model and its checkpoints) is written to ``artifact.path``: the KFP launcher maps the
artifact's URI (``gs://``, ``minio://``, ``s3://``) to that local path and uploads it to whatever
pipeline root the cluster has. Big data (staged shards, dataset versions, registered models) lives
under ``registry_root`` and the artifact's metadata says where. Artifact URIs are never changed:
the launcher honours a changed URI only inside the pipeline root's own bucket and prefix (it
derives the upload key from the URI and fails the task otherwise).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from tfrecord_suite import images, tf_import
from tfrecord_suite.errors import RetryWillNotHelp, UserError
from tfrecord_suite.io import storage
from tfrecord_suite.kfp.mlmd import describe, log_metrics, step_metadata
from tfrecord_suite.markdown import code
from tfrecord_suite.podinfo import PodInfo

_LOG = logging.getLogger(__name__)
EXPORT_SUBDIR = "export"


def _setup_logging() -> None:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    tf_import.install()  # the lines TensorFlow's import prints at any log level


def running_image() -> str:
    """The image this step runs in, as compiled into its container's environment."""
    return os.environ.get(images.IMAGE_ENV) or images.COMPONENT_IMAGE


def running_images() -> images.ImageSet:
    """The image set of this step's image: where the images it starts come from.

    A component built with ``tfrecord_suite.components.build(image_registry=R, image_tag=T)``
    starts its distributed job's nodes and tf.data service workers from ``R`` and ``T``; a step
    on an image of the user's own falls back to the default set.
    """
    return images.ImageSet.find(running_image()) or images.DEFAULT_IMAGES


@contextlib.contextmanager
def _final_on_bad_input(step: str, *kinds: type[BaseException]) -> Iterator[None]:
    """Say plainly that a failure caused by the data or parameters will not pass on a retry.

    Kubeflow retries a failed step as its retry policy says; storage faults may pass, bad data
    does not, and the message says so (the original error is chained).
    """
    try:
        yield
    except (ValueError, *kinds) as exc:
        raise RetryWillNotHelp(
            f"{exc} -- bad input: retrying the {step} step will not help; fix the data or the "
            "parameters and start a new run"
        ) from exc


def _write_markdown(artifact: Any, text: str) -> None:
    storage.write_text(artifact.path, text)


def fingerprint_task(input_uri: str) -> str:
    """The digest over the names, sizes and contents of every input file."""
    from tfrecord_suite.shard import sources
    from tfrecord_suite.shard.step import input_fingerprint

    return input_fingerprint(sources.resolve_inputs(input_uri))["digest"]


def staging_uri(registry_root: str, dataset_name: str, run_key: str) -> str:
    """Where a pipeline run writes its shards: a new batch in the dataset's data folder.

    The version step then publishes them in place (the manifest is the only new object). Each
    attempt gets a folder of its own, so a retry never rewrites shards a version may already
    reference; what no version references is removed by ``version gc`` after its grace period.
    """
    import uuid

    from tfrecord_suite.registry.datasets import DATA
    from tfrecord_suite.registry.refs import check_name

    return storage.join(
        storage.normalize(registry_root),
        check_name(dataset_name),
        DATA,
        f"run-{run_key}-{uuid.uuid4().hex[:8]}",
    )


def _run_key(run_id: str, fallback: str) -> str:
    """A folder-safe key for this pipeline run (the fallback when there is no run id)."""
    import re

    key = re.sub(r"[^a-zA-Z0-9_.-]+", "-", run_id or "").strip("-.")
    return key or fallback or "run"


def shard_task(
    *,
    input_uri: str,
    registry_root: str,
    dataset_name: str,
    fingerprint: str,
    input_format: str,
    label: str,
    key_column: str,
    splits: str,
    num_shards: int,
    target_shard_mb: float,
    readers: int,
    workers: int,
    gzip: bool,
    max_bad_fraction: float,
    beam_args: Sequence[str],
    staged: Any,
    summary: Any,
    image_size: str = "",
    image_aspect: str = "stretch",
    image_quality: int = 90,
) -> None:
    """Shard ``input_uri`` into a staging folder under ``registry_root``; describe it.

    The shards go to :func:`staging_uri` (on the same storage as the registry, so publishing
    never crosses stores); ``staged`` records where in its metadata (``staged_uri``) and holds
    the step's ``summary.json`` and ``schema.json`` at its local path, which Kubeflow keeps.
    ``fingerprint`` (from :func:`fingerprint_task`) makes Kubeflow's cache key follow the input
    data; the step re-checks it so data that changed in between is caught, not sharded silently.
    The pipeline run (:class:`~tfrecord_suite.podinfo.PodInfo`) only names the staging folder.
    """
    from tfrecord_suite.shard.convert import parse_size
    from tfrecord_suite.shard.step import ShardConfig, ShardError, run_shard, summary_markdown
    from tfrecord_suite.shard.summary import SUMMARY_FILE

    _setup_logging()
    with _final_on_bad_input("shard", ShardError):
        target = staging_uri(
            registry_root, dataset_name, _run_key(PodInfo.from_env().run_id, fingerprint[:16])
        )
        if fingerprint and fingerprint_task(input_uri) != fingerprint:
            raise ShardError(
                f"input {input_uri} changed since it was fingerprinted; rerun the pipeline"
            )
        result = run_shard(
            ShardConfig(
                input=input_uri,
                output=target,
                format=input_format,
                label=label or None,
                key_column=key_column or None,
                splits=splits,
                num_shards=num_shards or None,
                target_shard_mb=target_shard_mb,
                readers=readers,
                workers=workers,
                gzip=gzip,
                max_bad_fraction=max_bad_fraction,
                overwrite=True,
                beam_args=list(beam_args),
                image_size=parse_size(image_size) if image_size else None,
                image_aspect=image_aspect,
                image_quality=image_quality,
            )
        )
    for name in (SUMMARY_FILE, "schema.json"):
        storage.copy(storage.join(target, name), storage.join(staged.path, name))
    describe(
        staged,
        {
            "staged_uri": target,
            "records": result.records,
            "bad_rows": result.bad_rows,
            "format": result.format,
            "input_digest": result.input_fingerprint["digest"],
            "splits": result.split_counts,
        },
    )
    _write_markdown(summary, summary_markdown(result))


def version_task(
    *,
    staged: Any,
    registry_root: str,
    dataset_name: str,
    bump: str,
    dataset: Any,
    card: Any,
    publish_mode: str = "new",
) -> tuple[str, str]:
    """Publish the staged shards; describe the version in ``dataset``.

    The version's folder is in ``dataset.metadata["version_uri"]``; a copy of its manifest and
    card goes to ``dataset.path`` for Kubeflow to keep.

    Returns:
        The exact version reference (``<root>/<name>@<MAJOR.MINOR.PATCH>``) and content digest.

    """
    from tfrecord_suite.registry.datasets import Registry, RegistryError
    from tfrecord_suite.shard.summary import SUMMARY_FILE

    _setup_logging()
    registry = Registry(registry_root)
    with _final_on_bad_input("version", RegistryError):
        if publish_mode not in ("new", "append"):
            raise RegistryError(f"publish_mode {publish_mode!r}: use new or append")
        staged_uri = staged.metadata.get("staged_uri") or staged.uri
        if not storage.exists(storage.join(staged_uri, SUMMARY_FILE)):
            # Kubeflow reused a cached shard result whose batch no version kept (version gc)
            raise RegistryError(
                f"the staged shards at {staged_uri} are gone: the shard step's result was "
                "probably taken from Kubeflow's cache after `version gc` removed its data; run "
                "again with caching off (tfrecord-suite submit --no-caching, or 'enable caching' "
                "unticked in the Kubeflow UI)"
            )
        result = registry.publish(
            staged_uri,
            dataset_name,
            bump,
            producer={
                "image": running_image(),
                "pipeline_run_id": PodInfo.from_env().run_id or None,
            },
            append=publish_mode == "append",
        )
    return _describe_version(
        registry, dataset_name, result.version, result.uri, result.manifest, dataset, card,
        created=result.created,
    )  # fmt: skip


def resolve_task(*, dataset_ref: str, dataset: Any, card: Any) -> tuple[str, str]:
    """Resolve ``dataset_ref`` (an alias, a partial or an exact version); describe the version.

    ``dataset`` gets the metadata and files the version step gives the version it publishes,
    so every step downstream of either reads the same artifact.

    Returns:
        The exact version reference and the version's content digest.

    """
    from tfrecord_suite.registry.datasets import Registry, RegistryError

    _setup_logging()
    with _final_on_bad_input("resolve_dataset", RegistryError):
        registry, name, version = Registry.resolve_ref(dataset_ref)
    _LOG.info("%s is %s@%s", dataset_ref, name, version)
    return _describe_version(
        registry, name, str(version), registry.version_dir(name, version),
        registry.manifest(name, version), dataset, card,
    )  # fmt: skip


def _describe_version(
    registry: Any,
    name: str,
    version: str,
    uri: str,
    m: Any,
    dataset: Any,
    card: Any,
    created: bool | None = None,
) -> tuple[str, str]:
    """Describe dataset version ``name@version`` (manifest ``m``) in ``dataset`` and ``card``.

    The metadata carries the version's exact reference, folder, content digest and counts;
    ``dataset.path`` gets a copy of the manifest and the card for Kubeflow to keep.

    Returns:
        The exact version reference and the content digest.

    """
    from tfrecord_suite.registry.card import dataset_card

    ref = f"{storage.join(registry.root, name)}@{version}"
    describe(
        dataset,
        {
            "name": name,
            "version": version,
            "ref": ref,
            "version_uri": uri,
            "digest": m.content_digest,
            "created": created,  # None (left out) where this step did not publish it
            "records": m.totals["records"],
            "splits": {k: v["records"] for k, v in m.splits.items()},
            "parent": m.parent,  # None (left out) for a dataset's first version
        },
    )
    parent = registry.manifest(name, m.parent) if m.parent else None
    card_text = dataset_card(m, parent)
    _write_markdown(card, card_text)
    storage.write_text(storage.join(dataset.path, "manifest.json"), m.to_json())
    storage.write_text(storage.join(dataset.path, "card.md"), card_text)
    return ref, m.content_digest


def train_task(
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

    _setup_logging()
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
        with _final_on_bad_input("train"):  # refused before anything is created
            launch = stack.enter_context(
                launching(config, workers, where, model.uri,
                          data_service_image or running_images().component)
            )  # fmt: skip
        config = stack.enter_context(cluster_input_service(config, launch))
        if launch is None or not launch.kinds:
            from tfrecord_suite.train.trainer import run_train

            with _final_on_bad_input("train"):  # a bad feature config or model function
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

    with _final_on_bad_input("train", TrainError):
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
        with _final_on_bad_input("train"):
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

    _write_markdown(report, storage.read_text(storage.join(model.path, REPORT_MD)))


def export_dir(model: Any) -> str:
    """The SavedModel inside a model artifact, at this step's local path of it."""
    return storage.join(model.path, model.metadata.get("export_subdir") or EXPORT_SUBDIR)


def _count(value: Any) -> Any:
    """A count as it was written: ML Metadata hands numbers on as doubles (1797 -> 1797.0)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def report_task(
    *,
    dataset: Any,
    model: Any,
    metrics: Any,
    summary: Any,
    decision: Any = None,
    registered: Any = None,
) -> str:
    """A closing Markdown summary: where the dataset version, the model and the metrics are.

    The metrics are the train step's own (:func:`~tfrecord_suite.kfp.mlmd.step_metadata`): on
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
    _write_markdown(summary, text)
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


def evaluate_task(
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

    _setup_logging()
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
    _write_markdown(decision, markdown(result))
    return result.decision


def register_task(
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

    _setup_logging()
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


def promote_task(
    *, registered: Any, decision: Any, model_registry: str, model_name: str, alias: str
) -> int:
    """Move ``alias`` to the registered model, only if it still points to the baseline evaluated.

    Raises:
        storage.PreconditionFailed: Another run promoted a model after this run's evaluation;
            this run's comparison is stale, so it does not overwrite that promotion.

    """
    from tfrecord_suite.registry.models import ModelRegistry

    _setup_logging()
    model_registry = model_registry or registered.metadata["model_registry"]
    model_name = model_name or registered.metadata["model"]
    baseline = decision.metadata.get("baseline_version")
    version = int(registered.metadata["version"])
    ModelRegistry(model_registry).set_alias(
        model_name, alias, version, expected=None if baseline is None else int(baseline)
    )
    _LOG.info("model %s: %s -> v%d (was %s)", model_name, alias, version, baseline)
    return version
