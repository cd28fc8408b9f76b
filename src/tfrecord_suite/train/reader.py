"""The tf.data reader: a dataset version's shards to batches of parsed features, fast.

::

    files (manifest order) -> shuffle files (seeded) -> shard by input context (FILE policy)
      -> interleave(TFRecordDataset, cycle_length, block_length, AUTOTUNE, deterministic)
      -> [shard records (DATA policy)] -> [repeat] -> shuffle -> batch
      -> vectorized tf.io.parse_example -> parallel decode map -> [cache] -> prefetch(AUTOTUNE)

The CPU prepares batch n+1 while the accelerator trains on batch n (prefetch), many files are read
at once (interleave) and parsing is one vectorized op per batch (batch before parse). Public: call
:func:`make_dataset` or :func:`dataset_for_split` from your own training code.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from tfrecord_suite.schema import Schema, parse_spec

_LOG = logging.getLogger(__name__)
AUTOTUNE = -1  # tf.data.AUTOTUNE, without importing TensorFlow here
MAX_AUTO_CYCLE = 16


@dataclasses.dataclass
class ReaderConfig:
    """Every knob of the reader; AUTOTUNE (-1) lets tf.data pick at run time.

    Attributes:
        batch_size: Examples per batch (per input pipeline: the per-replica batch under a
            strategy is computed by the caller).
        shuffle_files: Shuffle the file order each epoch.
        seed: Seed for the file order and the record shuffle.
        cycle_length: Files read at once by interleave. 0 (default): every file of this input
            pipeline, at most :data:`MAX_AUTO_CYCLE`; AUTOTUNE (-1): tf.data's choice, which is
            the number of CPU cores and reads too few files at once on small hosts (4x slower
            than 8 files on 2 cores, measured by ``tfrecord-suite bench``).
        block_length: Consecutive records taken from one file before moving on.
        num_parallel_reads: ``num_parallel_calls`` of interleave.
        num_parallel_calls: Parallelism of the parse/decode map.
        deterministic: Keep element order reproducible (slower when False is possible).
        shuffle_buffer: Records in the shuffle buffer; 0 disables shuffling.
        cache: ``""`` (off), ``"memory"``, or a file path prefix for an on-disk cache.
        prefetch: Batches prepared ahead (AUTOTUNE).
        drop_remainder: Drop the last partial batch (static batch shapes for TPUs).
        repeat: Repeat forever (steps per epoch set by the trainer).
        image_size: ``(height, width)`` encoded images are decoded and resized to.
        skip_bad_records: Drop records that fail to read or parse instead of failing.
        file_buffer_bytes: Read buffer per open file.

    """

    batch_size: int = 128
    shuffle_files: bool = True
    seed: int = 42
    cycle_length: int = 0
    block_length: int = 1
    num_parallel_reads: int = AUTOTUNE
    num_parallel_calls: int = AUTOTUNE
    deterministic: bool = False
    shuffle_buffer: int = 10_000
    cache: str = ""
    prefetch: int = AUTOTUNE
    drop_remainder: bool = False
    repeat: bool = False
    image_size: tuple[int, int] | None = None
    skip_bad_records: bool = False
    file_buffer_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {self.batch_size}")
        if self.shuffle_buffer < 0:
            raise ValueError("shuffle_buffer must be >= 0")
        if self.cycle_length < AUTOTUNE:
            raise ValueError(
                "cycle_length must be 0 (all files), AUTOTUNE (-1) or >= 1, "
                f"got {self.cycle_length}"
            )
        for name in ("num_parallel_reads", "num_parallel_calls", "prefetch"):
            value = getattr(self, name)
            if value != AUTOTUNE and value < 1:
                raise ValueError(f"{name} must be AUTOTUNE (-1) or >= 1, got {value}")
        if self.block_length < 1:
            raise ValueError("block_length must be >= 1")


def _autotune(value: int) -> int:
    import tensorflow as tf

    return tf.data.AUTOTUNE if value == AUTOTUNE else value


def image_shape(
    schema: Schema, statistics: dict[str, Any] | None, config: ReaderConfig
) -> tuple[int, int, int]:
    """``(height, width, channels)`` images are fed to the model with."""
    image = schema.feature("image")
    if image.kind == "image_raw":
        h, w, c = image.shape
        return int(h), int(w), int(c)
    stats = {}
    for split_stats in (statistics or {}).values():
        stats = split_stats.get("features", {})
        break
    channels = int(stats.get("image_channels", {}).get("max", 3) or 3)
    if config.image_size:
        return int(config.image_size[0]), int(config.image_size[1]), channels
    h, w = stats.get("image_height", {}), stats.get("image_width", {})
    if h and w and h.get("min") == h.get("max") and w.get("min") == w.get("max"):
        return int(h["max"]), int(w["max"]), channels
    raise ValueError("images differ in size; pass --image-size HEIGHTxWIDTH to resize them")


class FeatureDecoder:
    """Parsed batch -> model inputs (and label index): the part shared with serving."""

    def __init__(
        self,
        schema: Schema,
        statistics: dict[str, Any] | None = None,
        config: ReaderConfig | None = None,
    ):
        import tensorflow as tf

        self.schema = schema
        self.config = config or ReaderConfig()
        self.spec = parse_spec(schema, include_label=True)
        self.serving_spec = parse_spec(schema, include_label=False)
        self.is_image = schema.source_format == "images"
        self.image_shape = image_shape(schema, statistics, self.config) if self.is_image else None
        self._label_table = None
        if schema.label and schema.label_encoding == "value" and schema.label_classes:
            label = schema.feature(schema.label)
            keys = (
                tf.constant(schema.label_classes)
                if label.dtype == "string"
                else tf.constant([int(c) for c in schema.label_classes], tf.int64)
            )
            self._label_table = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(
                    keys, tf.range(len(schema.label_classes), dtype=tf.int64)
                ),
                default_value=-1,
            )

    def features(self, parsed: dict[str, Any]) -> dict[str, Any]:
        """Model inputs from a parsed batch: images decoded, scalars as ``[batch, 1]``."""
        import tensorflow as tf

        out = {}
        for f in self.schema.input_features:
            x = parsed[f.name]
            if f.kind == "image":
                h, w, c = self.image_shape

                def decode(b: Any, h: int = h, w: int = w, c: int = c) -> Any:
                    img = tf.io.decode_image(b, channels=c, expand_animations=False)
                    return (
                        tf.cast(tf.image.resize(img, (h, w), antialias=True), tf.uint8)
                        if self.config.image_size
                        else tf.ensure_shape(img, (h, w, c))
                    )

                x = tf.map_fn(decode, x, fn_output_signature=tf.TensorSpec((h, w, c), tf.uint8))
            elif f.kind == "image_raw":
                h, w, c = self.image_shape
                x = tf.reshape(tf.io.decode_raw(x, tf.uint8), (-1, h, w, c))
            else:
                x = tf.expand_dims(x, -1)
            out[f.name] = x
        return out

    def label(self, parsed: dict[str, Any]) -> Any:
        """The label as a class index (classification) or a float (regression)."""
        y = parsed[self.schema.label]
        if self._label_table is not None:
            return self._label_table.lookup(y)
        return y

    def __call__(self, serialized: Any) -> Any:
        """Parse a batch of serialized examples into ``(features, label)``."""
        import tensorflow as tf

        parsed = tf.io.parse_example(serialized, self.spec)
        x = self.features(parsed)
        if self.schema.label is None:
            return x
        return x, self.label(parsed)


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
) -> Any:
    """The input pipeline over ``files``.

    Args:
        files: Shard URIs (local or ``gs://``).
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

    Returns:
        A ``tf.data.Dataset`` of ``(features, label)`` batches (``features`` alone without label).

    """
    import tensorflow as tf

    files = list(files)
    if not files:
        raise ValueError("no files to read")
    ds = tf.data.Dataset.from_tensor_slices(files)
    if training and config.shuffle_files:
        ds = ds.shuffle(len(files), seed=config.seed, reshuffle_each_iteration=True)
    shard_records = None
    if input_context is not None and input_context.num_input_pipelines > 1:
        n, i = input_context.num_input_pipelines, input_context.input_pipeline_id
        if len(files) >= n:
            ds = ds.shard(n, i)  # FILE policy: each worker reads its own files
        else:
            _LOG.warning(
                "only %d files for %d input pipelines: sharding by record (DATA policy), so "
                "every worker reads every file; write at least %d shards to avoid it",
                len(files),
                n,
                n,
            )
            shard_records = (n, i)

    def read(path: Any) -> Any:
        records = tf.data.TFRecordDataset(
            path, compression_type=compression, buffer_size=config.file_buffer_bytes
        )
        return records.ignore_errors() if config.skip_bad_records else records

    cycle = config.cycle_length
    if cycle == 0:
        sharded_by_file = input_context is not None and shard_records is None
        pipelines = input_context.num_input_pipelines if sharded_by_file else 1
        cycle = min(max(1, -(-len(files) // pipelines)), MAX_AUTO_CYCLE)
    ds = ds.interleave(
        read,
        cycle_length=_autotune(cycle),
        block_length=config.block_length,
        num_parallel_calls=_autotune(config.num_parallel_reads),
        deterministic=config.deterministic,
    )
    if shard_records is not None:
        ds = ds.shard(*shard_records)
    if config.repeat and not config.cache:
        # repeating records (not batches) means no partial batch ever reaches the model, so the
        # step function is traced once and batch shapes stay static
        ds = ds.repeat()
    if training and config.shuffle_buffer and not config.cache:
        ds = ds.shuffle(config.shuffle_buffer, seed=config.seed, reshuffle_each_iteration=True)
    ds = ds.batch(config.batch_size, drop_remainder=config.drop_remainder)
    decoder = FeatureDecoder(schema, statistics, config)
    ds = ds.map(
        decoder,
        num_parallel_calls=_autotune(config.num_parallel_calls),
        deterministic=config.deterministic,
    )
    if transform is not None:
        ds = ds.map(
            (lambda x, y: (transform(x), y)) if schema.label else transform,
            num_parallel_calls=_autotune(config.num_parallel_calls),
            deterministic=config.deterministic,
        )
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
        ds = ds.map(
            (lambda x, y: (augment(x), y)) if schema.label else augment,
            num_parallel_calls=_autotune(config.num_parallel_calls),
            deterministic=config.deterministic,
        )
    ds = ds.prefetch(_autotune(config.prefetch))
    options = tf.data.Options()
    # the reader shards itself (above); tf.distribute must not shard again
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    options.deterministic = config.deterministic
    return ds.with_options(options)


def dataset_for_split(ref: str, split: str, config: ReaderConfig, **kwargs: Any) -> Any:
    """A dataset over one split of ``<registry>/<dataset>@<version|alias>``.

    Example::

        from tfrecord_suite.train.reader import ReaderConfig, dataset_for_split

        ds = dataset_for_split("gs://bucket/registry/penguins@stable", "train", ReaderConfig())
    """
    from tfrecord_suite.registry.registry import Registry, shard_uris

    reg, dataset, version = Registry(".").resolve_ref(ref)
    manifest = reg.manifest(dataset, version)
    files = shard_uris(manifest, reg.version_dir(dataset, version), split)
    return make_dataset(
        files,
        Schema.from_dict(manifest["schema"]),
        config,
        statistics=manifest.get("statistics"),
        compression="GZIP" if manifest.get("gzip") else "",
        **kwargs,
    )
