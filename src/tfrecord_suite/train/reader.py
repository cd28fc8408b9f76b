"""The tf.data reader: a dataset version's shards to batches of parsed features, fast.

::

    files (manifest order) -> shuffle files (seeded) -> shard by input context (FILE policy)
      -> interleave(TFRecordDataset -> blocks of block_length records, cycle_length,
                    num_parallel_calls=AUTOTUNE, deterministic)
      -> [shard blocks (DATA policy)] -> [repeat] -> shuffle (blocks; shuffle_buffer records)
      -> windows of parse_window records, each permuted (seeded) -> vectorized parse_example
      -> batch -> parallel decode map -> [cache] -> prefetch(AUTOTUNE)

The CPU prepares batch n+1 while the accelerator trains on batch n (prefetch), many files are read
at once (interleave) and parsing is one vectorized op over many records (batch before parse).

Three choices set it apart from the textbook
``interleave(TFRecordDataset) -> shuffle -> batch -> map(parse_example)`` with tf.data's runtime
autotuning (``python -m benchmarks`` measures both side by side; the figures live in its results):

* Every tf.data element costs about a microsecond of bookkeeping, so small records travel in
  blocks (one element per ``block_length`` records, batched by the parallel interleave workers),
  and the shuffle buffer shuffles blocks.
* ``parse_example`` costs less per record on thousands of records than on a batch of 256 (its
  fixed cost per call is shared by more records), so a window of records is permuted
  (``stateless_shuffle``, seeded: every batch mixes many blocks and files) and parsed at once,
  then cut into batches (``rebatch``).
* AUTOTUNE knobs are resolved once when the input starts; tf.data's runtime model
  (``ReaderConfig.retune``) re-tunes while it runs and on small hosts can settle on a much slower
  setting.

Both sizes follow the record size (:func:`block_and_window`): records of 64 KiB and more go one by
one and are parsed per batch, the classic pipeline, since copying, not bookkeeping, bounds them.

Encoded images are decoded per batch in the decode map (:class:`FeatureDecoder`). When the
version's statistics say every stored image is a JPEG, :mod:`tfrecord_suite.train.decode` decodes
large ones at a reduced DCT scale and, while training with a random crop (:class:`ImageFeed`),
only each crop's window; the model's ``TrainingCrop`` lets such pre-cropped batches through and
still centre-crops whole images at evaluation and serving.
Public: call :func:`make_dataset` or :func:`dataset_for_split` from your own training code.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from tfrecord_suite.errors import UserError
from tfrecord_suite.schema import Schema
from tfrecord_suite.train.feature_decoder import FeatureDecoder, ImageFeed
from tfrecord_suite.train.reader_config import (
    AUTOTUNE,
    MAX_AUTO_CYCLE,
    MAX_AUTO_STAGED_CYCLE,
    SERVICE_COMPRESSIONS,
    ReaderConfig,
)
from tfrecord_suite.train.served import files_by_pipeline

_LOG = logging.getLogger(__name__)


def estimate_record_bytes(files: Sequence[str], compression: str = "", sample: int = 64) -> float:
    """Mean serialized size of the first ``sample`` records (of the first non-empty files)."""
    import tensorflow as tf

    from tfrecord_suite.train.staging import tensorflow_reads

    if files and not tensorflow_reads(files[0]):
        return _record_bytes_through_storage(files, compression, sample)
    sizes: list[int] = []
    for path in files[:4]:
        ds = tf.data.TFRecordDataset(path, compression_type=compression).take(sample - len(sizes))
        try:
            for record in ds.as_numpy_iterator():
                sizes.append(len(record))
        except tf.errors.OpError:
            pass  # a damaged shard is reported by verification or the reader, not here
        if len(sizes) >= sample:
            break
    return sum(sizes) / len(sizes) if sizes else 1024.0


def record_dataset(
    files: Sequence[str], compression: str = "", config: ReaderConfig | None = None
) -> Any:
    """Every record of ``files``, file after file, in order.

    ``tf.data.TFRecordDataset`` where TensorFlow opens the files, staged to local disk first
    where it cannot (``s3://``). For the one-pass reads around training (feature statistics,
    evaluation), not the training input (:func:`make_dataset`).
    """
    import tensorflow as tf

    files = list(files)
    config = config or ReaderConfig()
    if not config.stages(files):
        return tf.data.TFRecordDataset(files, compression_type=compression)
    from tfrecord_suite.train import staging

    stager = _stager(config)
    tickets = staging.staged_files(
        tf.data.Dataset.from_tensor_slices(files), stager, config.stage_ahead
    )

    def read(path: Any) -> Any:
        return tf.data.TFRecordDataset(path, compression_type=compression)

    empty = tf.constant(b"")
    return tickets.interleave(
        lambda t: staging.staged_records(t, stager, read, empty), cycle_length=1
    )


def _record_bytes_through_storage(files: Sequence[str], compression: str, sample: int) -> float:
    """:func:`estimate_record_bytes` for stores TensorFlow cannot open.

    The first records are streamed through the storage layer: the first bytes of a shard are
    read, not the whole shard.
    """
    import gzip
    import io

    from tfrecord_suite.io import framing, storage

    sizes: list[int] = []
    for uri in files[:4]:
        with storage.open_read(uri) as fh:
            stream: Any = io.BufferedReader(fh, 1 << 20)  # type: ignore[arg-type]
            if compression:
                stream = gzip.GzipFile(fileobj=stream)
            try:
                while len(sizes) < sample and (record := framing.read_record(stream)) is not None:
                    sizes.append(len(record))
            except (ValueError, OSError, EOFError):
                pass  # a damaged shard is reported by verification or the reader, not here
        if len(sizes) >= sample:
            break
    return sum(sizes) / len(sizes) if sizes else 1024.0


def block_and_window(config: ReaderConfig, record_bytes: float) -> tuple[int, int]:
    """``(block_length, parse_window)`` in records, resolving 0 (auto) by the record size.

    Small records travel and parse in bulk (per-element and per-call overhead dominate them);
    records of 64 KiB and more go one by one and are parsed per batch (copying dominates them).
    """
    block = config.block_length or max(1, min(64, round(64 * 1024 / max(record_bytes, 1))))
    window = config.parse_window or min(2048, round(2 * 1024 * 1024 / max(record_bytes, 1)))
    return block, max(window, config.batch_size)


def shuffle_buffer_records(config: ReaderConfig, record_bytes: float) -> int:
    """Records the shuffle buffer holds: ``shuffle_buffer``, bounded by ``shuffle_buffer_bytes``."""
    if not config.shuffle_buffer_bytes:
        return config.shuffle_buffer
    fits = max(1, int(config.shuffle_buffer_bytes // max(record_bytes, 1)))
    return min(config.shuffle_buffer, fits)


def _autotune(value: int) -> int:
    import tensorflow as tf

    return tf.data.AUTOTUNE if value == AUTOTUNE else value


@dataclasses.dataclass(frozen=True)
class _Layout:
    """How one input pipeline is cut, resolved once from the config and the record size.

    Attributes:
        block: Records per element after reading (1: record by record).
        window: Records parsed by one ``parse_example`` call.
        shuffle_records: Records in the shuffle buffer (0: no shuffle).
        cycle: Files read at once.
        shard_records: ``(pipelines, index)`` when blocks, not files, are sharded (DATA policy).
        reads: Files read in parallel (``num_parallel_reads`` resolved).
        pipeline: This input pipeline's index (0 without an input context).
        repeat_files: The file list repeats before the interleave (``interleave_epochs``).
        staged: The shards are copied to local disk ahead of the reader (``remote_read``).

    """

    block: int
    window: int
    shuffle_records: int
    cycle: int
    shard_records: tuple[int, int] | None
    reads: int = AUTOTUNE
    pipeline: int = 0
    repeat_files: bool = False
    staged: bool = False


def make_dataset(
    files: Sequence[str],
    schema: Schema,
    config: ReaderConfig,
    *,
    statistics: dict[str, Any] | None = None,
    input_context: Any = None,
    compression: str = "",
    training: bool = True,
    transform: Any = None,
    augment: Any = None,
    image: ImageFeed | None = None,
    service: str = "",
) -> Any:
    """The input pipeline over ``files``, in four stages (as tf-models' input reader reads).

    files (order, sharding) -> read (interleaved blocks, repeat, shuffle) -> parse (windows or
    batches) -> finish (transform, cache, augment, prefetch).

    Args:
        files: Shard URIs (local, ``gs://`` or ``s3://``).
        schema: The dataset's feature spec.
        config: Reader knobs.
        statistics: The manifest's statistics (image sizes).
        input_context: ``tf.distribute.InputContext`` when called from
            ``strategy.distribute_datasets_from_function``; the reader shards by it.
        compression: ``""`` or ``"GZIP"``.
        training: Shuffle (files and records); evaluation reads in order.
        transform: ``features -> features`` on each parsed batch (the feature-config
            preprocessor), run in parallel before cache and prefetch.
        augment: ``features -> features``, random, applied after the cache (training only).
        image: What the model does to images after decoding (its resize and training crop), so
            the decoder can do it cheaper: DCT-scaled JPEG decodes, and, while training, crops
            decoded alone (then ``image.cropped_transform`` replaces ``transform``).
        service: A tf.data service dispatcher (``grpc://host:port``): its workers run the
            files, read and parse stages, each on its share of the files (static sharding, see
            :mod:`tfrecord_suite.train.service`); the finish stage runs here. Not with ``cache``.

    Returns:
        A ``tf.data.Dataset`` of ``(features, label)`` batches (``features`` alone without label).

    """
    files = list(files)
    if not files:
        raise UserError("no files to read")
    image = image or ImageFeed()
    layout = _layout(files, config, input_context, compression, training)
    decoder = FeatureDecoder(schema, statistics, config, image)
    fused = (
        training
        and decoder.fuses_crop
        and not config.cache
        and (transform is None or image.cropped_transform is not None)
    )
    if fused:
        _LOG.info(
            "JPEG images: training crops %s decoded alone (fused decode and crop)", image.crop
        )
        transform = image.cropped_transform
    if decoder.scales_jpeg:
        _LOG.info(
            "JPEG images: decoded at 1/2, 1/4 or 1/8 scale where that covers the model's size"
        )
    if service and config.cache:
        raise UserError(
            "cache with an input service: the workers decode every pass; cache or serve, not both"
        )
    if service:  # each service worker repeats its own share of the files (its local copies)
        files = config.served_files(files)
        layout = dataclasses.replace(layout, repeat_files=False, staged=False)
    files_ds = _file_stage(files, config, input_context, training, layout, served=bool(service))

    def read_and_parse(seed: Any = None) -> Any:
        """The read and parse stages over the files, seeded by ``seed`` (default: config's)."""
        ds = _blocks(files_ds, files, config, compression, training, layout, seed)
        return _parse_stage(ds, config, decoder, layout, fused, seed)

    if service:
        from tfrecord_suite.train.service import distribute, worker_seeded

        # each worker reads, shuffles and decodes its own files with seeds of its own; Keras
        # layers (lookup tables, random generators) hold state the service cannot ship: the
        # transform and augmentation stay here
        ds = worker_seeded(read_and_parse, config.seed)
        ds = distribute(
            ds.with_options(dataset_options(config)),
            service,
            SERVICE_COMPRESSIONS[config.service_compression],
        )
    else:
        ds = read_and_parse()
    ds = _finish_stage(ds, config, schema, training, transform, augment)
    return ds.with_options(dataset_options(config))


def record_blocks(
    files: Sequence[str],
    config: ReaderConfig,
    *,
    compression: str = "",
    training: bool = True,
    input_context: Any = None,
) -> Any:
    """The reader's first two stages alone: serialized records, before any parsing.

    The files ordered, sharded, staged and interleaved as :func:`make_dataset` reads them, the
    records in blocks of ``block_length`` (one element per block; one per record for large
    records), shuffled when ``config`` shuffles. With ``shuffle_buffer=0``, the bench's raw-bytes
    ceiling: the same bytes fetched the same way, with the same parallelism.
    """
    files = list(files)
    layout = _layout(files, config, input_context, compression, training)
    files_ds = _file_stage(files, config, input_context, training, layout)
    return _blocks(files_ds, files, config, compression, training, layout)


def _blocks(
    files_ds: Any,
    files: list[str],
    config: ReaderConfig,
    compression: str,
    training: bool,
    layout: _Layout,
    seed: Any = None,
) -> Any:
    """The files in their order each pass, then the read stage.

    The shards are staged first where the config says so; ``seed``: the shuffles' (default:
    ``config.seed``).
    """
    ds = _shuffle_files(files_ds, len(files), config, training, seed)
    if layout.repeat_files:
        # reshuffled on every pass; the interleave never drains at an epoch's end
        ds = ds.repeat()
    stager = _stager(config) if layout.staged else None
    if stager is not None:
        _LOG.info("shards staged to local disk ahead of the reader, in %s", stager.folder)
    return _read_stage(ds, config, compression, layout, stager, seed)


def _stager(config: ReaderConfig) -> Any:
    from tfrecord_suite.train.staging import StageConfig, Stager

    c = config
    return Stager(StageConfig(c.stage_dir, c.stage_files, c.stage_part_mb, c.stage_parts))


def _layout(
    files: list[str], config: ReaderConfig, input_context: Any, compression: str, training: bool
) -> _Layout:
    shard_records = None
    by_file = True
    if input_context is not None and input_context.num_input_pipelines > 1:
        n, i = input_context.num_input_pipelines, input_context.input_pipeline_id
        if not files_by_pipeline(len(files), n):
            _LOG.warning(
                "only %d files for %d input pipelines: sharding by blocks of records (DATA "
                "policy), so every worker reads every file; write at least %d shards to avoid it",
                len(files),
                n,
                n,
            )
            shard_records, by_file = (n, i), False
    shuffle = training and config.shuffle_buffer > 0 and not config.cache
    sized_by_records = not (config.block_length and config.parse_window) or (
        shuffle and config.shuffle_buffer_bytes
    )
    record_bytes = estimate_record_bytes(files, compression) if sized_by_records else 0.0
    block, window = block_and_window(config, record_bytes)
    shuffle_records = shuffle_buffer_records(config, record_bytes) if shuffle else 0
    if shuffle and shuffle_records < config.shuffle_buffer:
        _LOG.info(
            "shuffle buffer: %d records of about %.0f bytes (shuffle_buffer_bytes=%d), "
            "not shuffle_buffer=%d",
            shuffle_records,
            record_bytes,
            config.shuffle_buffer_bytes,
            config.shuffle_buffer,
        )
    if config.skip_bad_records:
        window = config.batch_size  # a record that fails to parse costs one batch
    staged = config.stages(files)
    cycle = config.cycle_length
    if cycle == 0:
        sharded_by_file = input_context is not None and by_file
        pipelines = input_context.num_input_pipelines if sharded_by_file else 1
        cap = MAX_AUTO_STAGED_CYCLE if staged else MAX_AUTO_CYCLE
        cycle = min(max(1, -(-len(files) // pipelines)), cap)
    reads = config.num_parallel_reads
    if reads == 0:
        remote = any("://" in f for f in files)
        reads = max(cycle, 1) if remote and cycle != AUTOTUNE else AUTOTUNE
    pipeline = input_context.input_pipeline_id if input_context is not None else 0
    interleave_epochs = staged if config.interleave_epochs is None else config.interleave_epochs
    repeat_files = (
        config.repeat and interleave_epochs and not config.cache and shard_records is None
    )
    return _Layout(
        block, window, shuffle_records, cycle, shard_records, reads, pipeline, repeat_files, staged
    )


def _file_stage(
    files: list[str],
    config: ReaderConfig,
    input_context: Any,
    training: bool,
    layout: _Layout,
    served: bool = False,
) -> Any:
    """File names; this pipeline's files under FILE sharding (shuffled by :func:`_shuffle_files`).

    ``served``: the tf.data service deals them out among its workers (``SHARD_HINT``).
    """
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensor_slices(files)
    sharded = input_context is not None and input_context.num_input_pipelines > 1
    by_file = sharded and layout.shard_records is None  # FILE policy: each reads its own files
    if by_file:
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    if served:
        # each service worker keeps one share of the files, shuffled anew each of its passes:
        # workers run at their own pace, so a share re-dealt per pass would skip and repeat files
        hint = tf.data.experimental.SHARD_HINT
        ds = ds.shard(hint, hint)
    return ds


def _shuffle_files(
    ds: Any, files: int, config: ReaderConfig, training: bool, seed: Any = None
) -> Any:
    """The ``files`` in a seeded order, a new one each pass (training with ``shuffle_files``)."""
    if not (training and config.shuffle_files):
        return ds
    seed = config.seed if seed is None else seed
    return ds.shuffle(files, seed=seed, reshuffle_each_iteration=True)


def _read_stage(
    ds: Any,
    config: ReaderConfig,
    compression: str,
    layout: _Layout,
    stager: Any = None,
    seed: Any = None,
) -> Any:
    """Interleaved blocks of records, sharded by block under DATA policy, repeated, shuffled.

    ``stager``: a :class:`~tfrecord_suite.train.staging.Stager` the shards are copied to local
    disk through, ahead of the interleave. ``seed``: the record shuffle's (default:
    ``config.seed``).
    """
    import tensorflow as tf

    block = layout.block

    def read_blocks(path: Any) -> Any:
        records = tf.data.TFRecordDataset(
            path, compression_type=compression, buffer_size=config.file_buffer_bytes
        )
        if config.skip_bad_records:
            records = records.ignore_errors()
        return records.batch(block) if block > 1 else records

    read = read_blocks
    if stager is not None:
        from tfrecord_suite.train import staging

        ds = staging.staged_files(ds, stager, config.stage_ahead)
        empty = tf.zeros([0], tf.string) if block > 1 else tf.constant(b"")

        def read(ticket: Any) -> Any:
            return staging.staged_records(ticket, stager, read_blocks, empty)

    ds = ds.interleave(
        read,
        cycle_length=_autotune(layout.cycle),
        block_length=1,  # in blocks: each element already holds block_length records
        num_parallel_calls=_autotune(layout.reads),
        # sharding blocks by position is only exactly-once if every worker sees the same order
        deterministic=config.deterministic or layout.shard_records is not None,
    )
    if layout.shard_records is not None:
        ds = ds.shard(*layout.shard_records)
    if config.repeat and not config.cache and not layout.repeat_files:
        # repeating before batching means no partial batch ever reaches the model, so the step
        # function is traced once and batch shapes stay static
        ds = ds.repeat()
    if layout.shuffle_records:
        seed = config.seed if seed is None else seed
        ds = ds.shuffle(-(-layout.shuffle_records // block), seed=seed)
    return ds


def _parallel(config: ReaderConfig) -> dict[str, Any]:
    return {
        "num_parallel_calls": _autotune(config.num_parallel_calls),
        "deterministic": config.deterministic,
    }


def _with_crop_seeds(ds: Any, config: ReaderConfig, layout: _Layout, seed: Any = None) -> Any:
    """``(batch, seed)`` pairs: each batch's fused crops are placed by its own stateless seed.

    A stream of its own (``seed + 1``: the window permutation draws from the reader's seed), with
    the input pipeline's index folded in, so that replicas do not place their crops alike.
    """
    import tensorflow as tf

    seed = config.seed if seed is None else seed
    seeds = tf.data.Dataset.random(seed=seed + 1, rerandomize_each_iteration=True)
    fold = tf.constant([0, layout.pipeline], tf.int64)
    return tf.data.Dataset.zip(ds, seeds.batch(2).map(lambda s: s + fold))


def _parse_stage(
    ds: Any,
    config: ReaderConfig,
    decoder: FeatureDecoder,
    layout: _Layout,
    fused: bool = False,
    seed: Any = None,
) -> Any:
    """Batches of parsed features: windows parsed at once and cut into batches, or per batch.

    ``fused``: images are decoded as random crop windows, each batch by a seed of its own.
    ``seed``: the reader's (a tensor on a tf.data service worker: its own), default
    ``config.seed``.
    """
    import tensorflow as tf

    seed = config.seed if seed is None else seed
    parallel = _parallel(config)

    def group(ds: Any, size: int, drop_remainder: bool = False) -> Any:
        if layout.block > 1:
            return ds.rebatch(size, drop_remainder=drop_remainder)
        return ds.batch(size, drop_remainder=drop_remainder)

    if layout.window == config.batch_size:
        ds = group(ds, config.batch_size, config.drop_remainder)
        if fused:
            return _with_crop_seeds(ds, config, layout, seed).map(decoder, **parallel)
        return ds.map(decoder, **parallel)
    ds = group(ds, layout.window)
    if layout.shuffle_records and layout.block > 1:
        # blocks left the shuffle buffer in random order; permuting each window spreads every
        # block's consecutive records over the window's batches
        seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True)
        ds = tf.data.Dataset.zip(ds, seeds.batch(2))

    def parse_window(records: Any, seed: Any = None) -> Any:
        # one map for permuting and parsing: each parallel stage costs a thread pool and a
        # buffer hand-off per element
        if seed is not None:
            records = tf.random.experimental.stateless_shuffle(records, seed)
        # decoded images would make windows huge: they are decoded per batch below; tabular
        # labels and shapes are finished per window, one map per window instead of per batch
        return decoder.parse(records) if decoder.is_image else decoder(records)

    ds = ds.map(parse_window, **parallel)
    ds = ds.rebatch(config.batch_size, drop_remainder=config.drop_remainder)
    if decoder.is_image:
        ds = _with_crop_seeds(ds, config, layout, seed) if fused else ds
        ds = ds.map(decoder.finish, **parallel)
    return ds


def _finish_stage(
    ds: Any,
    config: ReaderConfig,
    schema: Schema,
    training: bool,
    transform: Any,
    augment: Any,
) -> Any:
    """The feature transform, the cache (and its repeat), augmentation, prefetch."""
    parallel = _parallel(config)
    if transform is not None:
        ds = ds.map((lambda x, y: (transform(x), y)) if schema.label else transform, **parallel)
    if config.skip_bad_records:
        ds = ds.ignore_errors()
    if config.cache:
        ds = ds.cache("" if config.cache == "memory" else config.cache)
        if training and config.shuffle_buffer:
            # the cache holds parsed batches; shuffling whole batches keeps epochs varied
            ds = ds.shuffle(max(1, config.shuffle_buffer // config.batch_size), seed=config.seed)
    if config.repeat and config.cache:
        ds = ds.repeat()
    if augment is not None and training:
        ds = ds.map((lambda x, y: (augment(x), y)) if schema.label else augment, **parallel)
    return ds.prefetch(_autotune(config.prefetch))


def dataset_options(config: ReaderConfig) -> Any:
    """The ``tf.data.Options`` of the reader (the benchmark gives its peers the same)."""
    import tensorflow as tf

    options = tf.data.Options()
    # the reader shards itself; tf.distribute must not shard again
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    options.deterministic = config.deterministic
    options.autotune.enabled = config.retune
    return options


def dataset_for_split(ref: str, split: str, config: ReaderConfig, **kwargs: Any) -> Any:
    """A dataset over one split of ``<registry>/<dataset>@<version|alias>``.

    Example::

        from tfrecord_suite.train.reader import dataset_for_split
        from tfrecord_suite.train.reader_config import ReaderConfig

        ds = dataset_for_split("gs://bucket/registry/penguins@stable", "train", ReaderConfig())
    """
    from tfrecord_suite.registry.datasets import Registry, shard_uris

    reg, dataset, version = Registry.resolve_ref(ref)
    manifest = reg.manifest(dataset, version)
    files = shard_uris(manifest, reg.version_dir(dataset, version), split)
    return make_dataset(
        files,
        Schema.from_dict(manifest.schema),
        config,
        statistics=manifest.statistics,
        compression=manifest.compression,
        **kwargs,
    )
