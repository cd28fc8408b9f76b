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
from tfrecord_suite.schema import Schema, parse_spec
from tfrecord_suite.train.served import files_by_pipeline

_LOG = logging.getLogger(__name__)
AUTOTUNE = -1  # tf.data.AUTOTUNE, without importing TensorFlow here
#: ``ReaderConfig.service_compression`` -> ``distribute``'s ``compression``.
SERVICE_COMPRESSIONS = {"AUTO": "AUTO", "none": None}
MAX_AUTO_CYCLE = 16
#: The automatic cycle when shards are staged to local disk: the copies being read and those
#: staged ahead are all on the pod's disk, and the bench read no faster with more at once.
MAX_AUTO_STAGED_CYCLE = 8


@dataclasses.dataclass
class ReaderConfig:
    """Every knob of the reader; AUTOTUNE (-1) lets tf.data pick at run time.

    Attributes:
        batch_size: Examples per batch (per input pipeline: the per-replica batch under a
            strategy is computed by the caller).
        shuffle_files: Shuffle the file order each epoch.
        seed: Seed for the file order and the record shuffle.
        cycle_length: Files read at once by interleave. 0 (default): every file of this input
            pipeline, at most :data:`MAX_AUTO_CYCLE` (:data:`MAX_AUTO_STAGED_CYCLE` when the
            shards are staged to local disk); AUTOTUNE (-1): tf.data's choice, which is
            the number of CPU cores and reads too few files at once on small hosts, where one
            file's reader then stalls the whole input.
        block_length: Consecutive records taken from one file before moving on; they travel
            through the pipeline as one element (per-element overhead, not bytes, bounds the
            reading of small records). 0 (default): about 64 KiB of records, 1 to 64.
        num_parallel_reads: ``num_parallel_calls`` of interleave. 0 (default): AUTOTUNE for
            local files; for remote ones (``gs://``) every file of the cycle at once: a remote
            read waits on the network, not on a core, and TensorFlow's GCS filesystem fills each
            file's 64 MiB block synchronously, so AUTOTUNE's one thread per core leaves most
            files idle while their requests wait (the bench's network part measures both).
        num_parallel_calls: Parallelism of the parse/decode map.
        deterministic: Keep element order reproducible (slower when False is possible).
        shuffle_buffer: Records in the shuffle buffer (held as blocks of ``block_length``);
            0 disables shuffling.
        shuffle_buffer_bytes: Bound on the shuffle buffer's memory: it holds at most this many
            bytes of records (by the estimated record size), whatever ``shuffle_buffer`` says.
            10,000 records of 1 MB images would otherwise hold 10 GB per input pipeline, and the
            first batch waits until the buffer is full. Records also leave a smaller buffer while
            still in the CPU's caches, which matters for large records. 0: no bound.
        cache: ``""`` (off), ``"memory"``, or a file path prefix for an on-disk cache.
        prefetch: Batches prepared ahead (AUTOTUNE).
        drop_remainder: Drop the last partial batch (static batch shapes for TPUs).
        repeat: Repeat forever (steps per epoch set by the trainer).
        image_size: ``(height, width)`` encoded images are decoded and resized to.
        fused_crop: When every stored image is a JPEG (the version's statistics say so) and the
            model takes random training crops (the feature config's ``image.augment.crop``),
            decode only each crop's window while training (``tf.io.decode_and_crop_jpeg``),
            resized to the crop size, instead of decoding the whole image for the model to
            crop. Not with ``cache`` (cached crops would repeat every epoch).
        jpeg_scaling: When every stored image is a JPEG, decode each at 1/2, 1/4 or 1/8 scale in
            the DCT domain when that still covers the size the model takes (``image_size`` or
            the feature config's ``image.resize``), then resize: training, evaluation and the
            serving signature alike.
        skip_bad_records: Drop records that fail to read, and batches that fail to parse, instead
            of failing (parsing then runs per batch, so one bad record costs one batch, not a
            window); the trainer then also trains on a version that fails verification.
        file_buffer_bytes: Read buffer per open file.
        parse_window: Records parsed by one ``parse_example`` call (and permuted together when
            shuffling) before they are cut into batches; at least ``batch_size``. 0 (default):
            about 2 MiB of records, at most 2048.
        service_compression: How a tf.data service's workers compress the batches they send
            the trainer (--input-service): none (default) or AUTO (TensorFlow's default,
            Snappy). Measured on decoded photos (docs/bench/service-compression.md), Snappy
            saves little of the bytes and costs the trainer, which decompresses, more CPU per
            image: the CPU the service exists to spare. AUTO where the link, not the
            trainer's CPU, is what runs out.
        retune: Let tf.data's runtime model keep re-tuning the AUTOTUNE knobs while the input
            runs (``tf.data.Options().autotune.enabled``). Off (default): AUTOTUNE knobs are
            resolved once, when the input starts (parallelism: the host's cores; prefetch:
            grown on demand). On small hosts the runtime model's re-tuning can settle on a much
            slower setting from one run to the next; resolving once is steady.
        remote_read: How shards in an object store are read. ``"stream"``: through TensorFlow's
            own filesystem (``gs://``); ``"stage"``: copied to local disk ahead of the reader in
            parallel ranged GETs and deleted once read (:mod:`~tfrecord_suite.train.staging`);
            ``"auto"`` (default): stream where TensorFlow opens the store (``gs://``), stage
            where it cannot (``s3://``: TensorFlow 2.21 has no S3 filesystem).
        stage_dir: Parent folder of the staged copies ("": the system's temporary folder). It
            holds the shards being read and those staged ahead of them.
        stage_files: Shards downloaded at once when staging.
        stage_ahead: Shards whose download starts before the interleave opens them.
        stage_part_mb: MiB per ranged GET when staging. 16 (default): a shard of 50-64 MB is
            one round of ``stage_parts`` GETs, where 8 MiB parts took two, each paying the
            store's round trip (the bench's network knob rows measure both).
        stage_parts: Ranged GETs of one shard at once when staging.
        served_copies: Where the workers of a tf.data service of the run's own staged the
            shards they serve (each copies its share there before it serves:
            :mod:`~tfrecord_suite.train.served`): the graph the service runs then names those
            copies instead of shards it would stage (``s3://``), which no worker could. Set
            by the trainer for the service it starts (``local:N``) and by the train step for
            its pods' (``cluster:N``); empty: none.
        interleave_epochs: With ``repeat``, the file list repeats before the interleave, so
            the next epoch's files open while this epoch's last ones are read. Off: the records
            repeat after the interleave, and each epoch ends when its last file is read: the
            cycle drains, then opens anew, and every epoch reads each record exactly once.
            None (default): on where the shards are staged (``s3://``), so that the stager
            runs on into the next epoch's shards instead of the next epoch waiting for its
            first downloads; off where they are read in place (local, streamed ``gs://``).
            Chosen from the bench's network knob rows (``repeat before interleave`` on each
            store): on was faster staged, off faster streamed.

    """

    batch_size: int = 128
    shuffle_files: bool = True
    seed: int = 42
    cycle_length: int = 0
    block_length: int = 0
    num_parallel_reads: int = 0
    num_parallel_calls: int = AUTOTUNE
    deterministic: bool = False
    shuffle_buffer: int = 10_000
    shuffle_buffer_bytes: int = 64 << 20
    cache: str = ""
    prefetch: int = AUTOTUNE
    drop_remainder: bool = False
    repeat: bool = False
    image_size: tuple[int, int] | None = None
    fused_crop: bool = True
    jpeg_scaling: bool = True
    skip_bad_records: bool = False
    file_buffer_bytes: int = 1 << 20
    parse_window: int = 0
    service_compression: str = "none"
    retune: bool = False
    remote_read: str = "auto"
    stage_dir: str = ""
    stage_files: int = 8
    stage_ahead: int = 4
    stage_part_mb: int = 16
    stage_parts: int = 4
    served_copies: str = ""
    interleave_epochs: bool | None = None

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise UserError(f"batch_size must be at least 1, got {self.batch_size}")
        if self.shuffle_buffer < 0 or self.shuffle_buffer_bytes < 0:
            raise UserError("shuffle_buffer and shuffle_buffer_bytes must be >= 0")
        if self.cycle_length < AUTOTUNE:
            raise UserError(
                "cycle_length must be 0 (all files), AUTOTUNE (-1) or >= 1, "
                f"got {self.cycle_length}"
            )
        if self.num_parallel_reads < AUTOTUNE:
            raise UserError(
                "num_parallel_reads must be 0 (by where the files are), AUTOTUNE (-1) or >= 1, "
                f"got {self.num_parallel_reads}"
            )
        for name in ("num_parallel_calls", "prefetch"):
            value = getattr(self, name)
            if value != AUTOTUNE and value < 1:
                raise UserError(f"{name} must be AUTOTUNE (-1) or >= 1, got {value}")
        if self.block_length < 0 or self.parse_window < 0:
            raise UserError("block_length and parse_window must be 0 (auto) or >= 1")
        if self.remote_read not in ("auto", "stream", "stage"):
            raise UserError(f"remote_read must be auto, stream or stage, got {self.remote_read!r}")
        for name in ("stage_files", "stage_ahead", "stage_part_mb", "stage_parts"):
            if getattr(self, name) < 1:
                raise UserError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.service_compression not in SERVICE_COMPRESSIONS:
            raise UserError(
                f"service_compression {self.service_compression!r}: use "
                f"{' or '.join(SERVICE_COMPRESSIONS)}"
            )

    def stages(self, files: Sequence[str]) -> bool:
        """Whether ``files`` are staged to local disk (by ``remote_read`` and where they are)."""
        from tfrecord_suite.train.staging import tensorflow_reads

        if not any("://" in f for f in files):
            return False
        opened = all(tensorflow_reads(f) for f in files)
        if self.remote_read == "stream" and not opened:
            raise UserError(
                f"remote_read=stream: TensorFlow cannot open {files[0].split('://')[0]}:// "
                "itself; stage the shards (remote_read auto or stage)"
            )
        return self.remote_read == "stage" or (self.remote_read == "auto" and not opened)

    def served_files(self, files: Sequence[str]) -> list[str]:
        """The names a tf.data service's workers read ``files`` by.

        The files themselves where TensorFlow opens them; where the reader would stage them,
        the workers' own copies in :attr:`served_copies`
        (:func:`~tfrecord_suite.train.served.served_names`).

        Raises:
            UserError: The files would be staged and no worker holds copies of them (a shared
                service, ``grpc://``).

        """
        if not self.stages(files):
            return list(files)
        if self.served_copies:
            from tfrecord_suite.train.served import served_names

            return served_names(files, self.served_copies)
        raise UserError(
            f"{files[0]} and the other shards are staged to local disk before they are read "
            f"(remote_read={self.remote_read}), which the workers of a shared tf.data service "
            "cannot do: read them through a service of the run's own (--input-service local:N, "
            "or cluster:N in the pipeline: its workers stage their shares first), or keep the "
            "dataset on a store TensorFlow opens (gs://, or a folder the workers mount)"
        )


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
class ImageFeed:
    """What the model's own pipeline does to decoded images, so the decoder can do it cheaper.

    The built-in model's feature config gives it (:func:`tfrecord_suite.train.features.image_feed`);
    without one, images are decoded whole, at ``ReaderConfig.image_size`` or their stored size.

    Attributes:
        resize: ``(height, width)`` the model takes images at (resized in the preprocessor);
            None: the decoded size.
        crop: ``(height, width)`` of the random window the model takes while training (the
            model's ``TrainingCrop``); None: no crop.
        cropped_transform: ``features -> features`` for batches whose images the decoder already
            cropped and resized: the feature transform without its resize. Needed for fusing
            when the reader is given a ``transform``.

    """

    resize: tuple[int, int] | None = None
    crop: tuple[int, int] | None = None
    cropped_transform: Any = None


@dataclasses.dataclass(frozen=True)
class _ImagePlan:
    """How the decoder turns encoded images into the model's input, resolved once per dataset.

    Attributes:
        shape: ``(height, width, channels)`` of a whole decoded image (evaluation, serving, and
            training without a fused crop).
        resize: Whole decodes are resized to ``shape`` (``image_size``, or DCT scaling).
        ratios: JPEG decode ratios to choose from; ``(1,)``: full size only. With more than one,
            every image is decoded by :func:`~tfrecord_suite.train.decode.decode_resized`.
        crop: ``(crop, scale_from)`` when training crops are decoded alone (fused), else None.

    """

    shape: tuple[int, int, int]
    resize: bool = False
    ratios: tuple[int, ...] = (1,)
    crop: tuple[tuple[int, int], tuple[int, int]] | None = None


def _image_plan(
    schema: Schema,
    statistics: dict[str, Any] | None,
    config: ReaderConfig,
    feed: ImageFeed,
) -> _ImagePlan:
    from tfrecord_suite.train import decode

    image = schema.feature("image")
    if image.kind == "image_raw":
        h, w, c = image.shape
        return _ImagePlan((int(h), int(w), int(c)))
    stats = {}
    for split_stats in (statistics or {}).values():
        stats = split_stats.get("features", {})
        break
    channels = int(stats.get("image_channels", {}).get("max", 3) or 3)
    jpeg = decode.all_jpeg(statistics)
    sizes = decode.stored_size_range(statistics)
    target = config.image_size or feed.resize
    ratios: tuple[int, ...] = (1,)
    if config.jpeg_scaling and jpeg and target and sizes:
        largest = sizes[1]
        if largest[0] >= 2 * target[0] and largest[1] >= 2 * target[1]:
            ratios = decode.RATIOS
    if config.image_size:
        size = (int(config.image_size[0]), int(config.image_size[1]))
    elif len(ratios) > 1:
        # decoded at a reduced scale, resized straight to the size the model takes: the
        # preprocessor's resize is then a no-op it skips
        size = (int(target[0]), int(target[1]))
    elif sizes and sizes[0] == sizes[1]:
        size = sizes[0]
    else:
        raise UserError("images differ in size; pass --image-size HEIGHTxWIDTH to resize them")
    crop = None
    if config.fused_crop and jpeg and feed.crop:
        scale_from = feed.resize or size
        crop = ((int(feed.crop[0]), int(feed.crop[1])), (int(scale_from[0]), int(scale_from[1])))
    resize = bool(config.image_size) or len(ratios) > 1
    return _ImagePlan((*size, channels), resize, ratios, crop)


def image_shape(
    schema: Schema,
    statistics: dict[str, Any] | None,
    config: ReaderConfig,
    feed: ImageFeed | None = None,
) -> tuple[int, int, int]:
    """``(height, width, channels)`` images are fed to the model with (whole decodes)."""
    return _image_plan(schema, statistics, config, feed or ImageFeed()).shape


class FeatureDecoder:
    """Parsed batch -> model inputs (and label index): the part shared with serving."""

    def __init__(
        self,
        schema: Schema,
        statistics: dict[str, Any] | None = None,
        config: ReaderConfig | None = None,
        image: ImageFeed | None = None,
    ):
        import tensorflow as tf

        self.schema = schema
        self.config = config or ReaderConfig()
        self.spec = parse_spec(schema, include_label=True)
        self.serving_spec = parse_spec(schema, include_label=False)
        self.is_image = schema.source_format == "images"
        self._plan = (
            _image_plan(schema, statistics, self.config, image or ImageFeed())
            if self.is_image
            else None
        )
        self.image_shape = self._plan.shape if self._plan else None
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

    @property
    def fuses_crop(self) -> bool:
        """Whether training crops can be decoded alone (every image a JPEG, a crop asked for)."""
        return self._plan is not None and self._plan.crop is not None

    @property
    def scales_jpeg(self) -> bool:
        """Whether JPEGs are decoded at a reduced (DCT-domain) scale where they are large."""
        return self._plan is not None and len(self._plan.ratios) > 1

    def features(self, parsed: dict[str, Any], crop_seed: Any = None) -> dict[str, Any]:
        """Model inputs from a parsed batch: images decoded, scalars as ``[batch, 1]``.

        With ``crop_seed`` (training, when :attr:`fuses_crop`), images are random crop windows
        decoded alone (:func:`~tfrecord_suite.train.decode.decode_crops`), at the crop size.
        """
        import tensorflow as tf

        from tfrecord_suite.train import decode as image_decode

        out = {}
        plan = self._plan
        for f in self.schema.input_features:
            x = parsed[f.name]
            if f.kind == "image" and crop_seed is not None and plan.crop is not None:
                crop, scale_from = plan.crop
                x = image_decode.decode_crops(
                    x, plan.shape[2], crop, scale_from, crop_seed, plan.ratios
                )
            elif f.kind == "image":
                h, w, c = plan.shape

                def decode(b: Any, h: int = h, w: int = w, c: int = c) -> Any:
                    if len(plan.ratios) > 1:
                        return image_decode.decode_resized(b, c, (h, w), plan.ratios)
                    img = tf.io.decode_image(b, channels=c, expand_animations=False)
                    return (
                        tf.cast(tf.image.resize(img, (h, w), antialias=True), tf.uint8)
                        if plan.resize
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

    def parse(self, serialized: Any) -> dict[str, Any]:
        """``tf.io.parse_example`` with the dataset's spec (label included)."""
        import tensorflow as tf

        return tf.io.parse_example(serialized, self.spec)

    def finish(self, parsed: dict[str, Any], crop_seed: Any = None) -> Any:
        """A parsed batch -> ``(features, label)`` (``features`` alone without a label)."""
        x = self.features(parsed, crop_seed)
        if self.schema.label is None:
            return x
        return x, self.label(parsed)

    def __call__(self, serialized: Any, crop_seed: Any = None) -> Any:
        """Parse a batch of serialized examples into ``(features, label)``."""
        return self.finish(self.parse(serialized), crop_seed)


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

        from tfrecord_suite.train.reader import ReaderConfig, dataset_for_split

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
