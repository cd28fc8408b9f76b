"""The Beam pipeline of the shard step, as named, labelled ``PTransform``s.

Shape of the graph::

    files -> SplitFiles -> ReadAndConvert -records-> PlanShards (side input)
                                |              +-> AssignShards -> GroupByKey -> WriteShards
                                +-stats------> MergeStats
                                +-dead_letter-> CollectDeadLetters

Records travel in chunks (lists of a few thousand serialized examples) rather than one element
each, so the runner's per-element overhead is paid per chunk; only the shard writer touches
records one by one. There is no global shuffle: the hash of each record's key picks its split and
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
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from tfrecord_suite.io import framing, naming
from tfrecord_suite.schema import Schema
from tfrecord_suite.shard import convert, plan
from tfrecord_suite.shard import ranges as file_ranges
from tfrecord_suite.shard.sources import FileRange, ReadOptions, read_rows
from tfrecord_suite.shard.spill import SpillWriter, read_shard

NAMESPACE = "tfrecord_suite.shard"
CHUNK_RECORDS = 2048
_LOG = logging.getLogger(__name__)

Chunk = list[tuple[str, bytes, bytes]]  # (split, digest, serialized example)


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
    """Reads one input file and emits chunks of converted records, stats and dead letters."""

    def __init__(
        self,
        schema_json: str,
        read: ReadOptions,
        splits: str,
        key_column: str | None,
        image: convert.ImageOptions,
        spill: Spill | None = None,
    ):
        self._schema_json = schema_json
        self._read = read
        self._splits = splits
        self._key_column = key_column
        self._image = image
        self._spill = spill
        self._writer: SpillWriter | None = None
        self.ranges = Metrics.counter(NAMESPACE, "ranges_read")
        self.rows = Metrics.counter(NAMESPACE, "rows_read")
        self.good = Metrics.counter(NAMESPACE, "records_converted")
        self.bad = Metrics.counter(NAMESPACE, "bad_rows")
        self.sizes = Metrics.distribution(NAMESPACE, "record_bytes")

    def setup(self) -> None:
        self._schema = Schema.from_json(self._schema_json)
        self._converter = convert.RowConverter(
            self._schema, convert.SplitSpec.parse(self._splits), self._key_column, self._image
        )

    def start_bundle(self) -> None:
        if self._spill is not None:
            self._writer = SpillWriter(self._spill.dir, self._spill.buckets)

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
        stats: dict[str, dict[str, Any]] = {}
        pending: list[convert.Converted] = []
        self.ranges.inc()
        rows = 0
        for row in read_rows(part.uri, self._read, part=part):
            rows += 1
            try:
                rec = self._converter.convert(row)
            except convert.RowError as exc:
                self.bad.inc()
                yield beam.pvalue.TaggedOutput(
                    "dead_letter",
                    {
                        "file": row.file,
                        "row": row.row,
                        "field": exc.field,
                        "reason": exc.reason,
                        "raw": row.raw if row.raw is not None else _printable(row.values),
                    },
                )
                continue
            pending.append(rec)
            if len(pending) >= CHUNK_RECORDS:
                yield from self._flush(pending, stats)
                pending = []
        if pending:
            yield from self._flush(pending, stats)
        self.rows.inc(rows)
        yield beam.pvalue.TaggedOutput("stats", stats)

    def _flush(self, pending: list[convert.Converted], stats: dict[str, Any]) -> Iterator[Chunk]:
        by_split: dict[str, list[convert.Converted]] = {}
        for rec in pending:
            by_split.setdefault(rec.split, []).append(rec)
        for split, recs in by_split.items():
            if split not in stats:
                stats[split] = convert.new_split_stats()
            convert.update_stats_batch(stats[split], self._schema, recs)
        self.good.inc(len(pending))
        self.sizes.update(sum(len(r.data) for r in pending) // len(pending))
        if self._writer is not None:
            for r in pending:
                self._writer.add(r.split, r.digest, r.data)
        else:
            yield [(r.split, r.digest, r.data) for r in pending]


def _printable(values: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in values.items():
        if isinstance(v, bytes):
            out[k] = f"<{len(v)} bytes>"
        else:
            text = str(v)
            out[k] = text if len(text) <= 500 else text[:500] + "..."
    return out


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
    """File ranges -> tagged outputs ``records`` (chunks), ``stats`` and ``dead_letter``.

    With a :class:`Spill`, records go to bucket files on local disk instead of ``records``, and
    each completed bundle is announced on ``spilled`` with the sizes it wrote per split.
    """

    def __init__(
        self,
        schema: Schema,
        read: ReadOptions,
        splits: convert.SplitSpec,
        key_column: str | None,
        image: convert.ImageOptions,
        spill: Spill | None = None,
    ):
        super().__init__()
        self._fn = _ReadConvertFn(schema.to_json(), read, str(splits), key_column, image, spill)

    def expand(self, ranges: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        return (
            ranges
            | "SpreadRanges" >> beam.Reshuffle()
            | "ReadConvert"
            >> beam.ParDo(self._fn).with_outputs("stats", "dead_letter", "spilled", main="records")
        )


def chunk_sizes(chunk: Chunk) -> dict[str, list[int]]:
    """``split -> [records, record bytes]`` of one chunk."""
    out: dict[str, list[int]] = {}
    for split, _, data in chunk:
        c = out.setdefault(split, [0, 0])
        c[0] += 1
        c[1] += len(data)
    return out


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
    chunk: Chunk, shard_plan: dict[str, dict[str, Any]]
) -> Iterator[tuple[tuple[str, int], list]]:
    groups: dict[tuple[str, int], list[tuple[bytes, bytes]]] = {}
    for split, digest, data in chunk:
        key = (split, convert.shard_index(digest, shard_plan[split]["num_shards"]))
        groups.setdefault(key, []).append((digest, data))
    yield from groups.items()


class _ShardFileWriter(beam.DoFn):
    """Writes one shard, sorted by record hash, to a temporary name; emits what it wrote."""

    def __init__(self, temp_dir: str, gzip: bool):
        self._temp_dir = temp_dir
        self._gzip = gzip
        self.written = Metrics.counter(NAMESPACE, "records_written")
        self.shards = Metrics.counter(NAMESPACE, "shards_written")
        self.bytes = Metrics.counter(NAMESPACE, "record_bytes_written")

    def write(
        self, split: str, index: int, count: int, records: list[tuple[bytes, bytes]]
    ) -> dict[str, Any]:
        name = naming.shard_name(split, index, count, self._gzip)
        path = FileSystems.join(self._temp_dir, name)
        payload_bytes = sum(len(data) for _, data in records)
        compression = CompressionTypes.GZIP if self._gzip else CompressionTypes.UNCOMPRESSED
        # framed here (C CRC32C): the shard workers never import TensorFlow, which costs each
        # worker process seconds and hundreds of MB
        with FileSystems.create(
            path, mime_type="application/octet-stream", compression_type=compression
        ) as fh:
            # one write per batch of framed records: a call per record costs more than framing
            for i in range(0, len(records), CHUNK_RECORDS):
                fh.write(
                    b"".join([framing.encode(data) for _, data in records[i : i + CHUNK_RECORDS]])
                )
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
        self, element: tuple[tuple[str, int], Iterable[list]], shard_plan: dict
    ) -> Iterator[dict]:
        (split, index), groups = element
        records = sorted(r for group in groups for r in group)
        yield self.write(split, index, shard_plan[split]["num_shards"], records)


class _WriteSpilledShardFn(_ShardFileWriter):
    """A shard from the disk-backed shuffle: read from the buckets it overlaps, then sorted."""

    def __init__(self, spill: Spill, temp_dir: str, gzip: bool):
        super().__init__(temp_dir, gzip)
        self._spill = spill

    def process(
        self, element: tuple[str, int], shard_plan: dict, bundles: list[dict]
    ) -> Iterator[dict]:
        split, index = element
        count = shard_plan[split]["num_shards"]
        ids = sorted(b["bundle"] for b in bundles)
        records = read_shard(self._spill.dir, ids, split, index, count, self._spill.buckets)
        yield self.write(split, index, count, records)


class WriteSpilledShards(beam.PTransform):
    """Plan + completed spill bundles -> shard files under ``temp_dir``; one dict per shard."""

    def __init__(self, spill: Spill, temp_dir: str, gzip: bool):
        super().__init__()
        self._spill = spill
        self._temp_dir = temp_dir
        self._gzip = gzip

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
                _WriteSpilledShardFn(self._spill, self._temp_dir, self._gzip),
                beam.pvalue.AsSingleton(shard_plan),
                beam.pvalue.AsList(spilled),
            )
        )


class WriteShards(beam.PTransform):
    """Record chunks + plan -> shard files under ``temp_dir``; outputs one dict per shard."""

    def __init__(self, temp_dir: str, gzip: bool):
        super().__init__()
        self._temp_dir = temp_dir
        self._gzip = gzip

    def expand(self, inputs: tuple[beam.PCollection, beam.PCollection]) -> beam.PCollection:
        chunks, shard_plan = inputs
        side = beam.pvalue.AsSingleton(shard_plan)
        return (
            chunks
            | "AssignShards" >> beam.FlatMap(_assign, side)
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
    ):
        super().__init__()
        self._split_files = SplitFiles(read)
        self._read_convert = ReadAndConvert(schema, read, splits, key_column, image, spill)
        self._plan = PlanShards(plan_config, splits.names)
        self._spill = spill
        self._write = (
            WriteShards(temp_dir, gzip)
            if spill is None
            else WriteSpilledShards(spill, temp_dir, gzip)
        )
        self._temp_dir = temp_dir

    def expand(self, files: beam.PCollection) -> dict[str, beam.PCollection]:
        ranges = files | "SplitFiles" >> self._split_files
        outputs = ranges | "ReadAndConvert" >> self._read_convert
        if self._spill is None:
            chunks = outputs.records
            shard_plan = (
                chunks | "MeasureChunks" >> beam.Map(chunk_sizes) | "PlanShards" >> self._plan
            )
            shards = (chunks, shard_plan) | "WriteShards" >> self._write
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
