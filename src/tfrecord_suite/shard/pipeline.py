"""The Beam pipeline of the shard step, as named, labelled ``PTransform``s.

Shape of the graph::

    files -> Reshuffle -> ReadAndConvert -records-> PlanShards (side input)
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

import json
import logging
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from tfrecord_suite import framing, naming
from tfrecord_suite.schema import Schema
from tfrecord_suite.shard import convert, plan
from tfrecord_suite.shard.sources import ReadOptions, read_rows

NAMESPACE = "tfrecord_suite.shard"
CHUNK_RECORDS = 2048
_LOG = logging.getLogger(__name__)

Chunk = list[tuple[str, bytes, bytes]]  # (split, digest, serialized example)


class _ReadConvertFn(beam.DoFn):
    """Reads one input file and emits chunks of converted records, stats and dead letters."""

    def __init__(
        self,
        schema_json: str,
        read: ReadOptions,
        splits: str,
        key_column: str | None,
        image: convert.ImageOptions,
    ):
        self._schema_json = schema_json
        self._read = read
        self._splits = splits
        self._key_column = key_column
        self._image = image
        self.files = Metrics.counter(NAMESPACE, "files_read")
        self.rows = Metrics.counter(NAMESPACE, "rows_read")
        self.good = Metrics.counter(NAMESPACE, "records_converted")
        self.bad = Metrics.counter(NAMESPACE, "bad_rows")
        self.sizes = Metrics.distribution(NAMESPACE, "record_bytes")

    def setup(self) -> None:
        self._schema = Schema.from_json(self._schema_json)
        self._converter = convert.RowConverter(
            self._schema, convert.SplitSpec.parse(self._splits), self._key_column, self._image
        )

    def process(self, uri: str) -> Iterator[Any]:
        stats: dict[str, dict[str, Any]] = {}
        pending: list[convert.Converted] = []
        self.files.inc()
        rows = 0
        for row in read_rows(uri, self._read):
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
                yield self._flush(pending, stats)
                pending = []
        if pending:
            yield self._flush(pending, stats)
        self.rows.inc(rows)
        yield beam.pvalue.TaggedOutput("stats", stats)

    def _flush(self, pending: list[convert.Converted], stats: dict[str, Any]) -> Chunk:
        by_split: dict[str, list[convert.Converted]] = {}
        for rec in pending:
            by_split.setdefault(rec.split, []).append(rec)
        for split, recs in by_split.items():
            if split not in stats:
                stats[split] = convert.new_split_stats()
            convert.update_stats_batch(stats[split], self._schema, recs)
        chunk = [(r.split, r.digest, r.data) for r in pending]
        self.good.inc(len(chunk))
        self.sizes.update(sum(len(r.data) for r in pending) // len(pending))
        return chunk


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
    """One input URI (file, folder, glob or ``gs://`` prefix) -> the URIs of its files.

    The listing runs inside the pipeline, by the same rules as the launcher's
    (:func:`~tfrecord_suite.shard.sources.resolve_inputs`: hidden files and markers skipped), so
    the job graph carries one URI, not a list of 100,000 files (Dataflow caps a graph's size).
    """

    def expand(self, uri: beam.PCollection) -> beam.PCollection:
        from tfrecord_suite.shard.sources import resolve_inputs

        listed = Metrics.counter(NAMESPACE, "input_files_listed")

        def list_files(input_uri: str) -> Iterator[str]:
            for info in resolve_inputs(input_uri):
                listed.inc()
                yield info.uri

        return uri | "List" >> beam.FlatMap(list_files)


class ReadAndConvert(beam.PTransform):
    """Input file URIs -> tagged outputs ``records`` (chunks), ``stats`` and ``dead_letter``."""

    def __init__(
        self,
        schema: Schema,
        read: ReadOptions,
        splits: convert.SplitSpec,
        key_column: str | None,
        image: convert.ImageOptions,
    ):
        super().__init__()
        self._fn = _ReadConvertFn(schema.to_json(), read, str(splits), key_column, image)

    def expand(self, files: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        return (
            files
            | "SpreadFiles" >> beam.Reshuffle()
            | "ReadConvert"
            >> beam.ParDo(self._fn).with_outputs("stats", "dead_letter", main="records")
        )


class _SizeCombineFn(beam.CombineFn):
    def create_accumulator(self) -> dict[str, list[int]]:
        return {}

    def add_input(self, acc: dict[str, list[int]], chunk: Chunk) -> dict[str, list[int]]:
        for split, _, data in chunk:
            c = acc.setdefault(split, [0, 0])
            c[0] += 1
            c[1] += len(data)
        return acc

    def merge_accumulators(self, accs: Iterable[dict[str, list[int]]]) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for acc in accs:
            for split, (n, b) in acc.items():
                c = out.setdefault(split, [0, 0])
                c[0] += n
                c[1] += b
        return out

    def extract_output(self, acc: dict[str, list[int]]) -> dict[str, list[int]]:
        return acc


class PlanShards(beam.PTransform):
    """Record chunks -> a single plan: split name to shard count and the reasons for it."""

    def __init__(self, config: plan.ShardPlanConfig, splits: tuple[str, ...]):
        super().__init__()
        self._config = config
        self._splits = splits

    def expand(self, chunks: beam.PCollection) -> beam.PCollection:
        config, splits = self._config, self._splits
        return (
            chunks
            | "MeasureSplits" >> beam.CombineGlobally(_SizeCombineFn())
            | "Plan"
            >> beam.Map(
                lambda sizes: plan.plan_shards(
                    {k: (v[0], v[1]) for k, v in sizes.items()}, config, splits
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


class _WriteShardFn(beam.DoFn):
    """Writes one shard, sorted by record hash, to a temporary name; emits what it wrote."""

    def __init__(self, temp_dir: str, gzip: bool):
        self._temp_dir = temp_dir
        self._gzip = gzip
        self.written = Metrics.counter(NAMESPACE, "records_written")
        self.shards = Metrics.counter(NAMESPACE, "shards_written")
        self.bytes = Metrics.counter(NAMESPACE, "record_bytes_written")

    def process(
        self, element: tuple[tuple[str, int], Iterable[list]], shard_plan: dict
    ) -> Iterator[dict]:
        (split, index), groups = element
        records = sorted(r for group in groups for r in group)
        count = shard_plan[split]["num_shards"]
        name = naming.shard_name(split, index, count, self._gzip)
        path = FileSystems.join(self._temp_dir, name)
        payload_bytes = sum(len(data) for _, data in records)
        if "://" not in path:
            # local file: TensorFlow's C++ writer frames and checksums ~4x faster than Python
            import tensorflow as tf

            options = tf.io.TFRecordOptions(compression_type="GZIP" if self._gzip else "")
            with tf.io.TFRecordWriter(path, options) as writer:
                for _, data in records:
                    writer.write(data)
        else:
            compression = CompressionTypes.GZIP if self._gzip else CompressionTypes.UNCOMPRESSED
            with FileSystems.create(
                path, mime_type="application/octet-stream", compression_type=compression
            ) as fh:
                for _, data in records:
                    framing.write_record(fh, data)
        self.written.inc(len(records))
        self.shards.inc()
        self.bytes.inc(payload_bytes)
        yield {
            "split": split,
            "index": index,
            "num_shards": count,
            "name": name,
            "records": len(records),
            "record_bytes": payload_bytes,
        }


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
    """The whole shard step: input file URIs -> shards, plan, statistics and dead letters.

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
    ):
        super().__init__()
        self._read_convert = ReadAndConvert(schema, read, splits, key_column, image)
        self._plan = PlanShards(plan_config, splits.names)
        self._write = WriteShards(temp_dir, gzip)
        self._temp_dir = temp_dir

    def expand(self, files: beam.PCollection) -> dict[str, beam.PCollection]:
        outputs = files | "ReadAndConvert" >> self._read_convert
        chunks = outputs.records
        shard_plan = chunks | "PlanShards" >> self._plan
        shards = (chunks, shard_plan) | "WriteShards" >> self._write
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
