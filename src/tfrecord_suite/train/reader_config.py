"""The reader's knobs (:class:`ReaderConfig`), kept apart from the pipeline that reads them.

:mod:`.reader` builds the input pipeline from a config, :mod:`.feature_decoder` decodes parsed
batches by it, and the CLI, the trainer and the tf.data service's workers all pass one around.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from tfrecord_suite.errors import UserError

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
