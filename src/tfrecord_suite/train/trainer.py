"""The train step as one plain function: a dataset version in, a servable model and metrics out.

``run_train`` is what the kfp component and ``tfrecord-suite train`` call. Under any
``tf.distribute`` strategy it reads the version with :mod:`tfrecord_suite.train.reader`, trains
with checkpoints and ``BackupAndRestore`` (a killed trainer rerun with the same arguments resumes),
exports a SavedModel whose ``serving_default`` signature takes serialized ``tf.Example``s, and
writes ``metrics.json`` and a report. Only the chief writes exports and metrics.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

from tfrecord_suite import flags
from tfrecord_suite.errors import UserError
from tfrecord_suite.io import storage
from tfrecord_suite.registry.datasets import resolve_dataset, shard_uri, shard_uris
from tfrecord_suite.registry.manifest import Manifest
from tfrecord_suite.schema import Schema
from tfrecord_suite.train import model_fns
from tfrecord_suite.train import strategy as strategy_lib
from tfrecord_suite.train.allocator import allocator_advice
from tfrecord_suite.train.evaluate import serving_evaluation
from tfrecord_suite.train.feature_decoder import FeatureDecoder, ImageFeed
from tfrecord_suite.train.input_probe import input_wait_probe
from tfrecord_suite.train.metrics import METRICS_FILE, TrainMetrics
from tfrecord_suite.train.reader import make_dataset
from tfrecord_suite.train.reader_config import ReaderConfig
from tfrecord_suite.train.saved_model import export_serving_model
from tfrecord_suite.train.served import ShareOptions
from tfrecord_suite.train.service import (
    InputService,
    LocalDataService,
    StallWatchdog,
    check_files_per_worker,
)

_LOG = logging.getLogger(__name__)
EXPORT_DIR = "export"
KERAS_FILE = "model.keras"
#: What is kept of a model folder where a model is handed on (a Kubeflow artifact, a store
#: TensorFlow cannot write): the SavedModel, metrics and reports; checkpoints, backups and logs
#: stay where they were written
MODEL_OUTPUTS = (EXPORT_DIR, "metrics.json", "report.md", "report.html", "transforms.json",
                 "training_curves.png", "feature_config.yaml")  # fmt: skip


class TrainError(UserError, RuntimeError):
    """Training cannot start or failed; the message says why."""


@dataclasses.dataclass
class TrainConfig:
    """Everything the train step takes.

    Attributes:
        dataset: ``<registry>/<dataset>@<version|alias>``, or a version folder.
        model_dir: Where checkpoints, logs, the export and metrics go: a local folder (on
            Kubeflow, the model artifact's) or ``gs://`` (TensorFlow writes them itself, and
            has no ``s3://`` filesystem).
        strategy: ``auto``, ``one_device``, ``mirrored``, ``multi_worker`` or ``tpu``.
        cpu_devices: Split the CPU into this many logical devices (no-GPU testing).
        tpu: TPU name for the resolver.
        epochs: Passes over the training split.
        batch_size: Per-replica batch; the global batch is this times the replicas.
        learning_rate: Adam learning rate.
        hidden_units: Width of the built-in models' dense layers.
        model_fn: ``module:function`` building a compiled Keras model, or None for built-in.
        feature_config: Feature transforms of the built-in model: a YAML/JSON file (local or
            gs://) or inline text; empty infers them from the schema. Ignored with model_fn.
        seed: Random seed (file order, shuffles, weights).
        reproducible: Train reproducibly: TensorFlow's op determinism on for the run
            (``tf.config.experimental.enable_op_determinism``) and the reader's element order
            kept (its ``deterministic``), so that the same seed, version, strategy and machine
            give the same weights (``weights_digest``), bit for bit. Slower: the input pipeline
            keeps its order and some ops give up their parallel algorithm.
        reader: The tf.data reader's knobs (flat flags: ``--cycle-length``, ``--shuffle-buffer``,
            ``--cache``...); the batch size, the seed and repeating are set per input pipeline.
        checkpoint_every_steps: Also back up every N steps (0: each epoch only).
        profile_steps: ``"start,stop"`` batch range traced by the TensorBoard profiler.
        verify: Check every shard's checksum before training.
        probe_steps: Steps of the input-wait probe after training (0: off).
        input_service: Read, parse and decode the training split on tf.data service workers:
            ``local:N`` starts a dispatcher and N worker processes on this host for the run;
            ``grpc://HOST:PORT`` uses a running dispatcher (``k8s/data-service`` runs one and
            its workers); ``cluster:N`` (the pipeline's train step only) starts N worker pods
            beside the trainers for the run. Empty: in this process. Evaluation reads here.
        input_service_stall_seconds: With an input service, end the run (exit 75, for the job
            to restart and resume) when no step completes for this long: a worker lost for good
            stalls the service forever.
        publish_to: Where the chief copies the model's outputs (the export, metrics and reports)
            when training ends, for a store TensorFlow cannot write itself (``s3://``) while
            model_dir stays local; empty: nowhere.

    """

    dataset: str
    model_dir: str
    strategy: str = "auto"
    cpu_devices: int = 1
    tpu: str | None = None
    epochs: int = 5
    batch_size: int = 64
    learning_rate: float = 1e-3
    hidden_units: int = 64
    model_fn: str | None = None
    feature_config: str = ""
    seed: int = 42
    reproducible: bool = False
    reader: ReaderConfig = dataclasses.field(
        default_factory=ReaderConfig,
        # flags of their own for its fields, except those set per input pipeline
        metadata={
            flags.UNFLAGGED: (
                "batch_size",
                "seed",
                "repeat",
                "shuffle_files",
                "drop_remainder",
                "file_buffer_bytes",
            )
        },
    )
    checkpoint_every_steps: int = 0
    profile_steps: str = ""
    verify: bool = True
    probe_steps: int = 30
    input_service: str = ""
    input_service_stall_seconds: float = 600.0
    publish_to: str = ""

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first absurd parameter."""
        from tfrecord_suite.train.staging import tensorflow_reads

        if not tensorflow_reads(storage.check_reachable(self.model_dir, "--model-dir")):
            raise UserError(
                f"--model-dir {self.model_dir}: TensorFlow writes checkpoints, logs and the "
                "export itself and cannot write there; give a local folder (the model registry "
                "on s3:// copies it there) or gs://"
            )
        if self.epochs < 1:
            raise UserError(f"--epochs must be at least 1, got {self.epochs}")
        if self.batch_size < 1:
            raise UserError(f"--batch-size must be at least 1, got {self.batch_size}")
        if not self.learning_rate > 0:
            raise UserError(f"--learning-rate must be positive, got {self.learning_rate}")
        if self.cpu_devices < 1:
            raise UserError("--cpu-devices must be at least 1")
        if self.checkpoint_every_steps < 0 or self.probe_steps < 0:
            raise UserError("--checkpoint-every-steps and --probe-steps must be >= 0")
        if self.feature_config and not self.model_fn:
            from tfrecord_suite.train.features import load_feature_config

            load_feature_config(self.feature_config)
        if self.strategy not in strategy_lib.STRATEGIES:
            raise UserError(f"--strategy {self.strategy!r}: one of {strategy_lib.STRATEGIES}")
        self.reader_config(self.batch_size)
        if InputService.parse(self.input_service) and self.reader.cache:
            raise UserError("--cache and --input-service: the workers decode every pass; pick one")
        if self.input_service_stall_seconds <= 0:
            raise UserError("--input-service-stall-seconds must be positive")

    def reader_config(self, batch_size: int, training: bool = True) -> ReaderConfig:
        """Reader knobs for one input pipeline."""
        return dataclasses.replace(
            self.reader,
            batch_size=batch_size,
            seed=self.seed,
            deterministic=self.reader.deterministic or self.reproducible,
            shuffle_buffer=self.reader.shuffle_buffer if training else 0,
            cache=self.reader.cache if training else "",
            repeat=training,
        )


class _EpochTimer:
    """Keras callback recording wall time per epoch."""

    def __new__(cls) -> Any:
        import keras

        class Timer(keras.callbacks.Callback):
            def __init__(self) -> None:
                super().__init__()
                self.times: list[float] = []
                self._start = 0.0

            def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
                self._start = time.perf_counter()

            def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
                self.times.append(time.perf_counter() - self._start)

        return Timer()


@dataclasses.dataclass
class _Input:
    """What the run reads, resolved once: the version, its splits' files and the batch sizes."""

    manifest: Manifest
    version_dir: str
    schema: Schema
    files: dict[str, list[str]]
    compression: str
    bad_records: int
    strategy: Any
    global_batch: int
    steps_per_epoch: int

    @property
    def splits(self) -> dict[str, Any]:
        """The manifest's splits."""
        return self.manifest.splits

    @property
    def statistics(self) -> dict[str, Any]:
        """The manifest's statistics."""
        return self.manifest.statistics

    def records(self, split: str) -> int:
        """Records in ``split`` (0 when it does not exist)."""
        return self.manifest.split_records(split)


@dataclasses.dataclass
class _Model:
    """The model and what feeds it: decoder, feature preprocessor, transform and augmentation."""

    model: Any
    decoder: FeatureDecoder
    probe_reader: ReaderConfig
    num_classes: int | None
    preprocessor: Any = None
    transform: Any = None
    augment: Any = None
    feature_state: tuple[Any, Any] | None = None  # (feature config, fitted state)
    image: ImageFeed | None = None  # the model's resize and crop, which the decoder may do


def run_train(config: TrainConfig) -> TrainMetrics:
    """Train, evaluate and export; return the metrics (also in ``<model_dir>/metrics.json``).

    Reads as its phases: resolve the input -> build the model -> fit -> evaluate -> export.

    Raises:
        TrainError: The version fails verification (without ``skip_bad_records``) or has no
            label or training split.
        ValueError: A parameter is absurd.

    """
    config.validate()
    # a user's model factory that cannot be loaded fails in a second, before TensorFlow starts
    # and the data is read
    model_fn = model_fns.load_model_fn(config.model_fn) if config.model_fn else None
    with _op_determinism(config.reproducible):
        return _train(config, model_fn)


@contextlib.contextmanager
def _op_determinism(on: bool) -> Iterator[None]:
    """TensorFlow's op determinism on for the block where ``on``.

    The switch is process-wide: it is put back as it was after, for the next run in the same
    process.
    """
    from tensorflow.python.framework import config as tf_config

    was = tf_config.is_op_determinism_enabled()
    if on and not was:
        tf_config.enable_op_determinism()
    try:
        yield
    finally:
        if on and not was:
            tf_config.disable_op_determinism()


def _train(config: TrainConfig, model_fn: Callable[[Any], Any] | None) -> TrainMetrics:
    """:func:`run_train`'s phases, on a validated config (``model_fn``: the user's, loaded)."""
    data = _resolve_input(config)
    built = _build_model(config, data, model_fn)
    model_dir = storage.normalize(config.model_dir)
    chief = strategy_lib.is_chief()
    started = time.perf_counter()
    history, epoch_seconds, service_info = _fit(config, data, built, model_dir, chief)
    train_seconds = time.perf_counter() - started
    evaluation = _evaluate(config, data, built)
    check_finite(history, evaluation, config.learning_rate)
    trained_digest = weights_digest(built.model)  # before the probe's steps change the weights
    export_dir = _export(data, built, model_dir, chief)
    probe: dict[str, Any] = {}
    if config.probe_steps and strategy_lib.cluster_workers() <= 1:
        probe = input_wait_probe(
            built.model,
            data.files["train"],
            data.schema,
            data.statistics,
            built.probe_reader,
            data.compression,
            config.probe_steps,
            built.transform,
            built.image,
        )
    manifest = data.manifest
    metrics = TrainMetrics(
        dataset=manifest.ref,
        dataset_digest=manifest.content_digest,
        strategy=type(data.strategy).__name__,
        replicas=data.strategy.num_replicas_in_sync,
        global_batch_size=data.global_batch,
        epochs=config.epochs,
        steps_per_epoch=data.steps_per_epoch,
        history={k: [float(x) for x in v] for k, v in history.items()},
        epoch_seconds=epoch_seconds,
        train_seconds=train_seconds,
        examples_per_second=data.steps_per_epoch
        * data.global_batch
        * len(epoch_seconds)
        / max(sum(epoch_seconds), 1e-9),
        evaluation=evaluation,
        input={**probe, **({"service": service_info} if service_info else {})},
        bad_records_skipped=data.bad_records,
        weights_digest=trained_digest,
        chief=chief,
        model_dir=model_dir,
        export_dir=export_dir,
    )
    if chief and built.num_classes and data.records("test"):
        metrics.serving_check = serving_evaluation(
            export_dir,
            data.files["test"],
            data.schema,
            data.compression,
            config.reader.skip_bad_records,
        )
    if chief:
        storage.write_text(storage.join(model_dir, METRICS_FILE), metrics.to_json())
        from tfrecord_suite.train import report

        report.write_report(model_dir, metrics, data.schema)
        if config.publish_to:
            copy_model_outputs(model_dir, config.publish_to)
    return metrics


def copy_model_outputs(src: str, dst: str) -> None:
    """Copy what :data:`MODEL_OUTPUTS` names of the model folder ``src`` to ``dst``."""
    for info in storage.list_files(src):
        rel = storage.relative_to(info.uri, src)
        if rel.split("/")[0] in MODEL_OUTPUTS:
            storage.copy(info.uri, storage.join(dst, rel))


def check_finite(
    history: dict[str, list[Any]], evaluation: dict[str, dict[str, float]], learning_rate: float
) -> None:
    """Fail a run whose loss or metrics became NaN or infinite: the model diverged.

    Keras's ``TerminateOnNaN`` stops ``fit`` at the first such batch; this names what went
    wrong, before anything is exported, registered or logged (Kubeflow's launcher cannot even
    read a NaN metric back, see :func:`tfrecord_suite.steps.mlmd.log_metrics`).

    Raises:
        TrainError: The first non-finite value of the history (by epoch) or the evaluation.

    """
    found = [
        (epoch, name, value)
        for name, values in history.items()
        for epoch, value in enumerate(values, 1)
        if not math.isfinite(float(value))
    ]
    if found:
        epoch, name, value = min(found, key=lambda f: f[0])
        where = f"{name} was {value} in epoch {epoch}"
    else:
        bad = [
            f"{split} {name} was {value}"
            for split, scores in evaluation.items()
            for name, value in scores.items()
            if not math.isfinite(float(value))
        ]
        if not bad:
            return
        where = bad[0]
    raise TrainError(
        f"training diverged: {where} (learning rate {learning_rate:g}); lower --learning-rate, "
        "or look for extreme values in the data"
    )


def _resolve_input(config: TrainConfig) -> _Input:
    """The version (verified), its files by split, the strategy and the batch sizes."""
    manifest, vdir = resolve_dataset(config.dataset)
    strategy = strategy_lib.make_strategy(config.strategy, config.cpu_devices, config.tpu)
    import keras

    keras.utils.set_random_seed(config.seed)
    schema = Schema.from_dict(manifest.schema)
    name = manifest.ref
    if schema.label is None:
        raise TrainError(f"{name} has no label to train on")
    bad_records = _verify(manifest, vdir, config)
    splits = manifest.splits
    if "train" not in splits or not splits["train"]["records"]:
        raise TrainError(f"{name} has no training records")
    replicas = strategy.num_replicas_in_sync
    global_batch = config.batch_size * replicas
    steps_per_epoch = max(1, splits["train"]["records"] // global_batch)
    _LOG.info(
        "%d replicas, global batch %d, %d steps per epoch", replicas, global_batch, steps_per_epoch
    )
    advice = allocator_advice()
    if advice:
        _LOG.info(advice)
    return _Input(
        manifest=manifest,
        version_dir=vdir,
        schema=schema,
        files={s: shard_uris(manifest, vdir, s) for s in splits},
        compression=manifest.compression,
        bad_records=bad_records,
        strategy=strategy,
        global_batch=global_batch,
        steps_per_epoch=steps_per_epoch,
    )


def _build_model(
    config: TrainConfig, data: _Input, model_fn: Callable[[Any], Any] | None
) -> _Model:
    """The user's ``--model-fn`` model, or the built-in one from the feature config (fitted)."""
    import tensorflow as tf

    from tfrecord_suite.train import features

    schema, statistics = data.schema, data.statistics
    probe_reader = config.reader_config(config.batch_size)
    feature_config = None
    image = None
    if model_fn is None:
        feature_config = (
            features.load_feature_config(config.feature_config)
            if config.feature_config
            else features.infer_feature_config(schema)
        )
        image = features.image_feed(feature_config)
    # every decoder of the run (the readers' and the serving signature's) gets the same feed, so
    # all decode whole images alike
    decoder = FeatureDecoder(schema, statistics, probe_reader, image)
    num_classes = len(schema.label_classes) if schema.label_classes else None
    ctx = model_fns.ModelContext(
        schema=schema,
        statistics=statistics,
        vocabularies={},
        image_shape=decoder.image_shape,
        num_classes=num_classes,
        learning_rate=config.learning_rate,
        hidden_units=config.hidden_units,
    )
    built = _Model(None, decoder, probe_reader, num_classes)
    if feature_config is None:
        if schema.source_format != "images":
            ctx.vocabularies = features.vocabularies(data.files["train"], schema, data.compression)
        build = model_fn
    else:
        fitted = features.fit(
            feature_config, schema, statistics, data.files["train"], data.compression
        )
        built.preprocessor = features.build_preprocessor(
            feature_config, fitted, schema, decoder.image_shape
        )
        built.transform = features.transform_fn(built.preprocessor)
        built.augment = features.augment_fn(feature_config)
        built.feature_state = (feature_config, fitted)
        built.image = features.image_feed(feature_config, built.preprocessor)

        def build(ctx: Any) -> Any:
            return features.build_model(feature_config, fitted, built.preprocessor, ctx)

    with data.strategy.scope():
        built.model = build(ctx)
    if isinstance(data.strategy, tf.distribute.MultiWorkerMirroredStrategy):
        strategy_lib.patch_keras_for_multi_worker(
            built.model,
            data.strategy,
            make_dataset(
                data.files["train"],
                schema,
                probe_reader,
                statistics=statistics,
                compression=data.compression,
                transform=built.transform,
                image=built.image,
            ),
        )
    return built


def _input_fn(
    config: TrainConfig,
    data: _Input,
    built: _Model,
    split: str,
    training: bool,
    service: str = "",
) -> Any:
    """A distributed dataset of ``split``: each input pipeline reads its share of the files.

    ``service``: a tf.data service dispatcher the reading and decoding go through.
    """

    def fn(ctx: Any) -> Any:
        reader = config.reader_config(ctx.get_per_replica_batch_size(data.global_batch), training)
        if not training:
            reader = dataclasses.replace(reader, repeat=True)
        return make_dataset(
            data.files[split],
            data.schema,
            reader,
            statistics=data.statistics,
            input_context=ctx,
            compression=data.compression,
            training=training,
            transform=built.transform,
            augment=built.augment,
            image=built.image,
            service=service,
        )

    return data.strategy.distribute_datasets_from_function(fn)


def _callbacks(
    config: TrainConfig, strategy: Any, model_dir: str, chief: bool, timer: Any
) -> list[Any]:
    """Backup and restore on every worker; TensorBoard and per-epoch checkpoints on the chief."""
    import keras

    callbacks = [
        keras.callbacks.BackupAndRestore(
            backup_dir=storage.join(model_dir, "backup", *strategy_lib.task_id()),
            save_freq=config.checkpoint_every_steps or "epoch",
            delete_checkpoint=True,
        ),
        # a NaN loss only gets worse: stop at once (check_finite then fails the run)
        keras.callbacks.TerminateOnNaN(),
        timer,
    ]
    if chief:
        callbacks.append(
            keras.callbacks.TensorBoard(
                log_dir=storage.join(model_dir, "logs"),
                profile_batch=_profile_range(config.profile_steps),
            )
        )
        if strategy_lib.cluster_workers() <= 1:
            storage.makedirs(storage.join(model_dir, "checkpoints"))
            callbacks.append(
                keras.callbacks.ModelCheckpoint(
                    storage.join(model_dir, "checkpoints", "epoch-{epoch:03d}.weights.h5"),
                    save_weights_only=True,
                )
            )
    return callbacks


def _fit(
    config: TrainConfig, data: _Input, built: _Model, model_dir: str, chief: bool
) -> tuple[dict[str, list[Any]], list[float], dict[str, Any]]:
    """``model.fit`` on the train split, validated on the validation split when it has records.

    Returns:
        Keras's history, the seconds of each epoch and what to report of the input service.

    """
    val_split = "validation" if data.records("validation") else None
    timer = _EpochTimer()
    callbacks = _callbacks(config, data.strategy, model_dir, chief, timer)
    check_files_per_worker(
        InputService.parse(config.input_service),
        len(data.files["train"]),
        strategy_lib.cluster_workers() or 1,
    )
    with served_input(config, data) as (served, address, watchdog, service_info):
        if watchdog is not None:
            callbacks.append(watchdog.callback())
        history = built.model.fit(
            _input_fn(served, data, built, "train", True, service=address),
            epochs=config.epochs,
            steps_per_epoch=data.steps_per_epoch,
            shuffle=False,  # the reader shuffles; Keras would only warn that it cannot
            validation_data=(
                _input_fn(config, data, built, val_split, False) if val_split else None
            ),
            validation_steps=(
                max(1, data.records(val_split) // data.global_batch) if val_split else None
            ),
            callbacks=callbacks,
            verbose=2,
        )
    return history.history, timer.times, service_info


@contextlib.contextmanager
def served_input(
    config: TrainConfig, data: _Input | None = None
) -> Iterator[tuple[TrainConfig, str, StallWatchdog | None, dict[str, Any]]]:
    """The config training reads with, its dispatcher (``""``: none), watchdog and report.

    The report is filled in when the block ends (the local workers' restarts). ``local:N``
    starts the dispatcher and workers here for the run and stops them after; where the shards
    would be staged (``s3://``), each worker first stages its share and the config names their
    copies (:mod:`~tfrecord_suite.train.served`).
    """
    wanted = InputService.parse(config.input_service)
    if wanted is None:
        yield config, "", None, {}
        return
    if wanted.cluster_workers:
        raise UserError(
            f"--input-service {config.input_service}: worker pods are started by the pipeline's "
            "train step; here use local:N, or grpc://HOST:PORT of k8s/data-service's dispatcher"
        )
    info: dict[str, Any] = {"input_service": config.input_service}
    with contextlib.ExitStack() as stack:
        address, local = wanted.address, None
        if wanted.local_workers:
            stage = None
            if data is not None and config.reader.stages(data.files["train"]):
                stage = ShareOptions(
                    stage_dataset=data.version_dir,
                    stage_pipelines=strategy_lib.cluster_workers() or 1,
                )
            local = stack.enter_context(LocalDataService(wanted.local_workers, stage=stage))
            address = local.address
            if local.served_copies:
                reader = dataclasses.replace(config.reader, served_copies=local.served_copies)
                config = dataclasses.replace(config, reader=reader)
        _LOG.info("training input through the tf.data service at %s", address)
        watchdog = stack.enter_context(StallWatchdog(config.input_service_stall_seconds))
        try:
            yield config, address, watchdog, info
        finally:
            if local is not None:
                info.update(workers=local.workers, worker_restarts=local.restarts)


def _evaluate(config: TrainConfig, data: _Input, built: _Model) -> dict[str, dict[str, float]]:
    """Keras metrics on the validation and test splits (those with records)."""
    evaluation = {}
    for split in ("validation", "test"):
        if data.records(split):
            steps = max(1, math.ceil(data.records(split) / data.global_batch))
            scores = built.model.evaluate(
                _input_fn(config, data, built, split, False),
                steps=steps,
                return_dict=True,
                verbose=0,
            )
            evaluation[split] = {k: float(v) for k, v in scores.items()}
    return evaluation


def _export(data: _Input, built: _Model, model_dir: str, chief: bool) -> str:
    """Export the serving SavedModel, the Keras file and the fitted feature state.

    Every worker exports: saving under a multi-worker strategy is collective. The chief's copy
    is the one kept; another worker's goes to a temporary folder it deletes, and its export
    folder is then "".
    """
    from tfrecord_suite.train import features

    if not chief:
        with tempfile.TemporaryDirectory(prefix="tfrs-worker-export-") as scratch:
            export_serving_model(
                built.model, built.decoder, data.schema, storage.join(scratch, EXPORT_DIR),
                built.preprocessor,
            )  # fmt: skip
        return ""
    export_dir = storage.join(model_dir, EXPORT_DIR)
    export_serving_model(built.model, built.decoder, data.schema, export_dir, built.preprocessor)
    # the trainable part as a Keras file, for fine-tuning and for checking train/serve parity
    built.model.save(storage.join(model_dir, KERAS_FILE))
    if built.feature_state is not None:
        features.save(model_dir, *built.feature_state)
    return export_dir


def weights_digest(model: Any) -> str:
    """SHA-256 over every weight of the model: equal on workers that trained in sync."""
    import hashlib

    digest = hashlib.sha256()
    for w in model.weights:
        digest.update(w.numpy().tobytes())
    return digest.hexdigest()


def _verify(manifest: Manifest, vdir: str, config: TrainConfig) -> int:
    from tfrecord_suite.registry.datasets import Registry, VerificationError

    if not config.verify:
        return 0
    reg = Registry(storage.parent(storage.parent(vdir)))
    try:
        reg.verify(manifest.dataset, manifest.version)
    except VerificationError as exc:
        if not config.reader.skip_bad_records:
            raise TrainError(
                f"refusing to train on a version that fails verification: {exc}. Pass "
                "--skip-bad-records to train anyway, skipping unreadable records"
            ) from None
        lost = sum(
            s["records"] - _readable_records(shard_uri(manifest, vdir, s), manifest)
            for s in exc.bad_shards
        )
        _LOG.warning(
            "training despite failed verification (--skip-bad-records), %d records unreadable: %s",
            lost,
            exc,
        )
        return lost
    return 0


def _readable_records(uri: str, manifest: Manifest) -> int:

    if not storage.exists(uri):
        return 0
    from tfrecord_suite.train.reader import record_dataset

    ds = record_dataset([uri], manifest.compression)
    return int(ds.ignore_errors().reduce(0, lambda n, _: n + 1))


def _profile_range(spec: str) -> Any:
    if not spec:
        return 0
    start, _, stop = spec.partition(",")
    return (int(start), int(stop or start))
