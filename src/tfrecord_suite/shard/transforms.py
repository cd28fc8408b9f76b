"""The Beam pipeline of the shard step, as named, labelled ``PTransform``s.

Shape of the graph::

    files -> SplitFiles -> ReadAndConvert -records-> PlanShards (side input)
                                |              +-> AssignShards -> GroupByKey -> WriteShards
                                +-stats------> MergeStats
                                +-dead_letter-> CollectDeadLetters

Records travel as columns (:class:`~tfrecord_suite.shard.records.Records`: thousands of
serialized examples with their splits and key hashes in numpy arrays) rather than one element
each, so the runner's per-element overhead is paid per batch, and grouping, sorting and framing
run in compiled loops. There is no global shuffle: the hash of each record's key picks its split and
shard, and each shard sorts its records by that hash, which makes the output identical byte for
byte for identical input on any runner.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from tfrecord_suite.io import naming
from tfrecord_suite.schema import Schema
from tfrecord_suite.shard import convert, plan, read_convert
from tfrecord_suite.shard import ranges as file_ranges
from tfrecord_suite.shard.records import Records
from tfrecord_suite.shard.sources import FileRange, ReadOptions, read_rows
from tfrecord_suite.shard.spill import SpillWriter, read_shard

NAMESPACE = "tfrecord_suite.shard"
#: The conversion paths (:mod:`.read_convert`), as the counters name them.
PATHS = ("batch", "row")
#: Records framed per write of a shard file.
WRITE_RECORDS = 65536
_LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Spill:
    """Where the disk-backed shuffle keeps its buckets (see :mod:`tfrecord_suite.shard.spill`).

    Attributes:
        dir: A local folder every worker of the runner can reach.
        buckets: Hash buckets, from :func:`tfrecord_suite.shard.spill.bucket_count`.

    """

    dir: str
    buckets: int


class _ReadConvertFn(beam.DoFn):
    """Reads one file range and emits its records, stats and dead letters.

    CSV/TSV, JSON lines and Parquet take the batch path (:class:`read_convert.BatchPath`), which
    hands the rows it cannot vouch for to the row path; images and text take the row path.
    """

    def __init__(
        self,
        schema_json: str,
        read: ReadOptions,
        splits: str,
        key_column: str | None,
        image: convert.ImageOptions,
        spill: Spill | None = None,
        batches: bool = True,
    ):
        self._schema_json = schema_json
        self._read = read
        self._splits = splits
        self._key_column = key_column
        self._image = image
        self._spill = spill
        self._use_batches = batches
        self._writer: SpillWriter | None = None
        self.ranges = Metrics.counter(NAMESPACE, "ranges_read")
        self.rows = Metrics.counter(NAMESPACE, "rows_read")
        self.good = Metrics.counter(NAMESPACE, "records_converted")
        self.bad = Metrics.counter(NAMESPACE, "bad_rows")
        self.sizes = Metrics.distribution(NAMESPACE, "record_bytes")
        # rows and batches each path took: a batch is one Arrow batch the compiled loops
        # converted, or one run of rows the row path converted
        self.path_rows = {p: Metrics.counter(NAMESPACE, f"{p}_path_rows") for p in PATHS}
        self.path_batches = {p: Metrics.counter(NAMESPACE, f"{p}_path_batches") for p in PATHS}

    def setup(self) -> None:
        schema = Schema.from_json(self._schema_json)
        self._split_spec = convert.SplitSpec.parse(self._splits)
        self._row_path = read_convert.RowPath(
            schema, self._split_spec, self._key_column, self._image
        )
        self._batch_path = None
        if self._use_batches and read_convert.BatchPath.takes(self._read):
            self._batch_path = read_convert.BatchPath(
                schema, self._split_spec, self._key_column, self._read, self._row_path
            )

    def start_bundle(self) -> None:
        if self._spill is not None:
            self._writer = SpillWriter(self._spill.dir, self._spill.buckets, self._split_spec.names)

    def finish_bundle(self) -> Iterator[Any]:
        if self._writer is not None and self._writer.sizes:
            self._writer.flush()
            # only a bundle that completed names its spill files to the shard writers
            yield beam.pvalue.TaggedOutput(
                "spilled",
                WindowedValue(
                    {"bundle": self._writer.bundle, "sizes": self._writer.sizes},
                    MIN_TIMESTAMP,
                    [GlobalWindow()],
                ),
            )
        self._writer = None

    def process(self, part: FileRange) -> Iterator[Any]:
        self.ranges.inc()
        if self._batch_path is not None:
            pieces = self._batch_path.convert(part)
        else:
            pieces = self._row_path.convert(read_rows(part.uri, self._read, part=part))
        stats: dict[str, dict[str, Any]] = {}
        letters: list[dict[str, Any]] = []
        for piece in pieces:
            self.rows.inc(piece.rows)
            self.path_rows[piece.path].inc(piece.rows)
            self.path_batches[piece.path].inc()
            self.bad.inc(len(piece.dead_letters))
            letters += piece.dead_letters
            for split, s in piece.stats.items():
                stats[split] = convert.merge_stats(stats[split], s) if split in stats else s
            records = piece.records
            if not len(records):
                continue
            self.good.inc(len(records))
            self.sizes.update(int(records.offsets[-1]) // len(records))
            if self._writer is not None:
                self._writer.add(records)
            else:
                yield records
        # in the order of the rows, as the range holds them
        for letter in sorted(letters, key=lambda d: d["row"]):
            yield beam.pvalue.TaggedOutput("dead_letter", letter)
        yield beam.pvalue.TaggedOutput("stats", stats)


class ListInputs(beam.PTransform):
    """One input URI (file, folder, glob or ``gs://`` prefix) -> its files (``FileInfo``).

    The listing runs inside the pipeline, by the same rules as the launcher's
    (:func:`~tfrecord_suite.shard.sources.resolve_inputs`: hidden files and markers skipped), so
    the job graph carries one URI, not a list of 100,000 files (Dataflow caps a graph's size).
    """

    def expand(self, uri: beam.PCollection) -> beam.PCollection:
        from tfrecord_suite.shard.sources import resolve_inputs

        listed = Metrics.counter(NAMESPACE, "input_files_listed")

        def list_files(input_uri: str) -> Iterator[Any]:
            for info in resolve_inputs(input_uri):
                listed.inc()
                yield info

        return uri | "List" >> beam.FlatMap(list_files)


class SplitFiles(beam.PTransform):
    """Input files -> the ranges workers read them in: a big file is read by many workers.

    No worker reads a whole file to cut it: each file is cut at nominal offsets, every cut is
    probed by a worker of its own, and one cheap step per file settles the probes into ranges
    that start where reading the whole file starts a record (:mod:`tfrecord_suite.shard.ranges`
    says how); Parquet is cut at row groups. Reading the ranges gives exactly the rows, and row
    numbers, that reading each file whole gives.
    """

    def __init__(self, read: ReadOptions):
        super().__init__()
        self._read = read

    def expand(self, files: beam.PCollection) -> beam.PCollection:
        read = self._read
        files_read = Metrics.counter(NAMESPACE, "files_read")
        cuts = Metrics.counter(NAMESPACE, "range_probes")
        rescans = Metrics.counter(NAMESPACE, "range_rescans")
        ranges = Metrics.counter(NAMESPACE, "input_ranges")

        def cut(info: Any) -> Iterator[Any]:
            files_read.inc()
            parts = file_ranges.cut_file(info, read)
            if isinstance(parts[0], file_ranges.Cut):
                cuts.inc(len(parts))
                yield from (beam.pvalue.TaggedOutput("cuts", c) for c in parts)
            else:
                ranges.inc(len(parts))
                yield from parts

        def settle(uri_probes: tuple[str, Iterable[file_ranges.Probe]]) -> Iterator[FileRange]:
            settled, rescanned = file_ranges.settle(uri_probes[1], read)
            rescans.inc(rescanned)
            ranges.inc(len(settled))
            yield from settled

        parts = (
            files
            | "SpreadFiles" >> beam.Reshuffle()
            | "Cut" >> beam.FlatMap(cut).with_outputs("cuts", main="ranges")
        )
        settled = (
            parts.cuts
            | "SpreadCuts" >> beam.Reshuffle()
            | "Probe" >> beam.Map(lambda c: (c.uri, file_ranges.probe_cut(c, read)))
            | "ProbesByFile" >> beam.GroupByKey()
            | "Settle" >> beam.FlatMap(settle)
        )
        return (parts.ranges, settled) | "AllRanges" >> beam.Flatten()


class ReadAndConvert(beam.PTransform):
    """File ranges -> tagged outputs ``records`` (:class:`Records`), ``stats``, ``dead_letter``.

    With a :class:`Spill`, records go to bucket files on local disk instead of ``records``, and
    each completed bundle is announced on ``spilled`` with the sizes it wrote per split.
    ``batches`` False converts every row on the row path (:mod:`.read_convert`).
    """

    def __init__(
        self,
        schema: Schema,
        read: ReadOptions,
        splits: convert.SplitSpec,
        key_column: str | None,
        image: convert.ImageOptions,
        spill: Spill | None = None,
        batches: bool = True,
    ):
        super().__init__()
        self._fn = _ReadConvertFn(
            schema.to_json(), read, str(splits), key_column, image, spill, batches
        )

    def expand(self, ranges: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        return (
            ranges
            | "SpreadRanges" >> beam.Reshuffle()
            | "ReadConvert"
            >> beam.ParDo(self._fn).with_outputs("stats", "dead_letter", "spilled", main="records")
        )


def merge_sizes(parts: Iterable[dict[str, list[int]]]) -> dict[str, list[int]]:
    """Sum ``split -> [records, record bytes]`` dicts."""
    out: dict[str, list[int]] = {}
    for part in parts:
        for split, (n, b) in part.items():
            c = out.setdefault(split, [0, 0])
            c[0] += n
            c[1] += b
    return out


class PlanShards(beam.PTransform):
    """Sizes per split (``split -> [records, bytes]`` parts) -> one shard plan.

    The plan maps each split to its shard count and the reasons for it.
    """

    def __init__(self, config: plan.ShardPlanConfig, splits: tuple[str, ...]):
        super().__init__()
        self._config = config
        self._splits = splits

    def expand(self, sizes: beam.PCollection) -> beam.PCollection:
        config, splits = self._config, self._splits
        return (
            sizes
            | "MeasureSplits" >> beam.CombineGlobally(merge_sizes)
            | "Plan"
            >> beam.Map(
                lambda total: plan.plan_shards(
                    {k: (v[0], v[1]) for k, v in total.items()}, config, splits
                )
            )
        )


def _assign(
    records: Records, shard_plan: dict[str, dict[str, Any]], names: tuple[str, ...]
) -> Iterator[tuple[tuple[str, int], Records]]:
    """The records of each shard they fall in, keyed by ``(split, shard index)``."""
    counts = np.array([shard_plan[name]["num_shards"] for name in names], np.int64)
    shards = records.shard_of(counts)
    width = int(counts.max())
    for key, group in records.groups(records.split.astype(np.int64) * width + shards):
        yield (names[key // width], key % width), group


class _ShardFileWriter(beam.DoFn):
    """Writes one shard, sorted by record hash, to a temporary name; emits what it wrote."""

    def __init__(self, temp_dir: str, gzip: bool):
        self._temp_dir = temp_dir
        self._gzip = gzip
        self.written = Metrics.counter(NAMESPACE, "records_written")
        self.shards = Metrics.counter(NAMESPACE, "shards_written")
        self.bytes = Metrics.counter(NAMESPACE, "record_bytes_written")

    def write(self, split: str, index: int, count: int, records: Records) -> dict[str, Any]:
        """Write one shard: its records sorted by key hash (then bytes), framed."""
        name = naming.shard_name(split, index, count, self._gzip)
        path = FileSystems.join(self._temp_dir, name)
        payload_bytes = int(records.lengths().sum())
        order = records.sort_order()
        compression = CompressionTypes.GZIP if self._gzip else CompressionTypes.UNCOMPRESSED
        # framed here (compiled CRC32C): the shard workers never import TensorFlow, which costs
        # each worker process seconds and hundreds of MB
        with FileSystems.create(
            path, mime_type="application/octet-stream", compression_type=compression
        ) as fh:
            for i in range(0, len(records), WRITE_RECORDS):
                fh.write(records.framed(order[i : i + WRITE_RECORDS]))
        self.written.inc(len(records))
        self.shards.inc()
        self.bytes.inc(payload_bytes)
        return {
            "split": split,
            "index": index,
            "num_shards": count,
            "name": name,
            "records": len(records),
            "record_bytes": payload_bytes,
        }


class _WriteShardFn(_ShardFileWriter):
    """A shard from Beam's shuffle: its record groups, sorted by record hash."""

    def process(
        self, element: tuple[tuple[str, int], Iterable[Records]], shard_plan: dict
    ) -> Iterator[dict]:
        (split, index), groups = element
        records = Records.concat(groups)
        yield self.write(split, index, shard_plan[split]["num_shards"], records)


class _WriteSpilledShardFn(_ShardFileWriter):
    """A shard from the disk-backed shuffle: read from the buckets it overlaps, then sorted."""

    def __init__(self, spill: Spill, temp_dir: str, gzip: bool, names: tuple[str, ...]):
        super().__init__(temp_dir, gzip)
        self._spill = spill
        self._names = names

    def process(
        self, element: tuple[str, int], shard_plan: dict, bundles: list[dict]
    ) -> Iterator[dict]:
        split, index = element
        count = shard_plan[split]["num_shards"]
        ids = sorted(b["bundle"] for b in bundles)
        records = read_shard(
            self._spill.dir, ids, split, self._names.index(split), index, count, self._spill.buckets
        )
        yield self.write(split, index, count, records)


class WriteSpilledShards(beam.PTransform):
    """Plan + completed spill bundles -> shard files under ``temp_dir``; one dict per shard."""

    def __init__(self, spill: Spill, temp_dir: str, gzip: bool, names: tuple[str, ...]):
        super().__init__()
        self._spill = spill
        self._temp_dir = temp_dir
        self._gzip = gzip
        self._names = names

    def expand(self, inputs: tuple[beam.PCollection, beam.PCollection]) -> beam.PCollection:
        shard_plan, spilled = inputs
        return (
            shard_plan
            | "ListShards"
            >> beam.FlatMap(
                lambda p: [(split, i) for split, s in p.items() for i in range(s["num_shards"])]
            )
            | "SpreadShards" >> beam.Reshuffle()
            | "WriteShard"
            >> beam.ParDo(
                _WriteSpilledShardFn(self._spill, self._temp_dir, self._gzip, self._names),
                beam.pvalue.AsSingleton(shard_plan),
                beam.pvalue.AsList(spilled),
            )
        )


class WriteShards(beam.PTransform):
    """Records + plan -> shard files under ``temp_dir``; outputs one dict per shard."""

    def __init__(self, temp_dir: str, gzip: bool, names: tuple[str, ...]):
        super().__init__()
        self._temp_dir = temp_dir
        self._gzip = gzip
        self._names = names

    def expand(self, inputs: tuple[beam.PCollection, beam.PCollection]) -> beam.PCollection:
        records, shard_plan = inputs
        side = beam.pvalue.AsSingleton(shard_plan)
        return (
            records
            | "AssignShards" >> beam.FlatMap(_assign, side, self._names)
            | "GroupByShard" >> beam.GroupByKey()
            | "WriteShard" >> beam.ParDo(_WriteShardFn(self._temp_dir, self._gzip), side)
        )


def _merge_split_stats(parts: Iterable[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for part in parts:
        for split, s in part.items():
            out[split] = convert.merge_stats(out[split], s) if split in out else s
    return out


class _WriteJsonFn(beam.DoFn):
    def __init__(self, path: str):
        self._path = path

    def process(self, value: Any) -> Iterator[str]:
        with FileSystems.create(self._path, mime_type="application/json") as fh:
            fh.write(json.dumps(value, sort_keys=True, default=str).encode())
        yield self._path


class WriteJson(beam.PTransform):
    """A PCollection holding one value -> that value as a JSON file."""

    def __init__(self, path: str):
        super().__init__()
        self._path = path

    def expand(self, value: beam.PCollection) -> beam.PCollection:
        return value | "Write" >> beam.ParDo(_WriteJsonFn(self._path))


class ShardToTFRecords(beam.PTransform):
    """The whole shard step: input files -> shards, plan, statistics and dead letters.

    Records are grouped into shards by Beam's shuffle, or with a :class:`Spill` by the
    disk-backed one (:mod:`tfrecord_suite.shard.spill`) that keeps a single machine's memory
    flat; the shards are byte-identical either way.

    Everything lands under ``temp_dir`` (``_plan.json``, ``_shards.json``, ``_stats.json``,
    ``_dead_letter.json``, and the shard files); the launcher moves it into place once the
    pipeline has succeeded.
    """

    def __init__(
        self,
        *,
        schema: Schema,
        read: ReadOptions,
        splits: convert.SplitSpec,
        key_column: str | None,
        image: convert.ImageOptions,
        plan_config: plan.ShardPlanConfig,
        temp_dir: str,
        gzip: bool,
        spill: Spill | None = None,
        batches: bool = True,
    ):
        super().__init__()
        self._split_files = SplitFiles(read)
        self._read_convert = ReadAndConvert(schema, read, splits, key_column, image, spill, batches)
        self._plan = PlanShards(plan_config, splits.names)
        self._spill = spill
        self._names = splits.names
        self._write = (
            WriteShards(temp_dir, gzip, splits.names)
            if spill is None
            else WriteSpilledShards(spill, temp_dir, gzip, splits.names)
        )
        self._temp_dir = temp_dir

    def expand(self, files: beam.PCollection) -> dict[str, beam.PCollection]:
        ranges = files | "SplitFiles" >> self._split_files
        outputs = ranges | "ReadAndConvert" >> self._read_convert
        if self._spill is None:
            records = outputs.records
            names = self._names
            shard_plan = (
                records
                | "MeasureRecords" >> beam.Map(lambda r: r.sizes(names))
                | "PlanShards" >> self._plan
            )
            shards = (records, shard_plan) | "WriteShards" >> self._write
        else:
            spilled = outputs.spilled
            sizes = spilled | "SpilledSizes" >> beam.Map(lambda b: b["sizes"])
            shard_plan = sizes | "PlanShards" >> self._plan
            shards = (shard_plan, spilled) | "WriteShards" >> self._write
        join = FileSystems.join
        shard_plan | "SavePlan" >> WriteJson(join(self._temp_dir, "_plan.json"))
        (
            shards
            | "CollectShards" >> beam.combiners.ToList()
            | "SaveShards" >> WriteJson(join(self._temp_dir, "_shards.json"))
        )
        (
            outputs.stats
            | "MergeStats" >> beam.CombineGlobally(_merge_split_stats)
            | "SaveStats" >> WriteJson(join(self._temp_dir, "_stats.json"))
        )
        # dead letters stay distributed: Beam writes them as JSON-lines shards, and only their
        # count and first entry (by file and row) reach the launcher
        (
            outputs.dead_letter
            | "FormatDeadLetters" >> beam.Map(lambda d: json.dumps(d, sort_keys=True))
            | "WriteDeadLetters"
            >> beam.io.WriteToText(
                join(self._temp_dir, naming.DEAD_LETTER_PREFIX),
                file_name_suffix=naming.DEAD_LETTER_SUFFIX,
                shard_name_template=naming.BEAM_SHARD_TEMPLATE,
                # no file when no row was bad: Beam's S3 filesystem cannot write an empty object
                # (it completes a multipart upload of no parts, which S3 refuses)
                skip_if_empty=True,
            )
        )
        (
            outputs.dead_letter
            | "SummarizeDeadLetters" >> beam.CombineGlobally(DeadLetterSummaryFn())
            | "SaveDeadLetterSummary" >> WriteJson(join(self._temp_dir, "_dead_letter.json"))
        )
        return {"shards": shards, "plan": shard_plan}


class DeadLetterSummaryFn(beam.CombineFn):
    """Dead letters -> ``{"count", "first"}``: their number and the first by file and row."""

    def create_accumulator(self) -> tuple[int, dict[str, Any] | None]:
        return 0, None

    def add_input(
        self, acc: tuple[int, dict[str, Any] | None], letter: dict[str, Any]
    ) -> tuple[int, dict[str, Any] | None]:
        return self.merge_accumulators([acc, (1, letter)])

    def merge_accumulators(
        self, accs: Iterable[tuple[int, dict[str, Any] | None]]
    ) -> tuple[int, dict[str, Any] | None]:
        count, first = 0, None
        for n, letter in accs:
            count += n
            if letter is not None and (
                first is None or (letter["file"], letter["row"]) < (first["file"], first["row"])
            ):
                first = letter
        return count, first

    def extract_output(self, acc: tuple[int, dict[str, Any] | None]) -> dict[str, Any]:
        return {"count": acc[0], "first": acc[1]}
