"""Compile the batch path's loops ahead of their first use: ``python -m tfrecord_suite.shard.warm``.

numba compiles each loop of :mod:`.kernels` the first time a process calls it (half a minute for
all of them on one core) and keeps the machine code in its cache: beside the modules, or under
``NUMBA_CACHE_DIR``. The images' build runs this module, so a shard step's pod finds every loop
compiled. It converts a few generated rows of each tabular format through both paths, with and
without a key column, and groups, sorts, frames and spills the records, so every loop is
compiled for the argument types the shard step gives it.
"""

from __future__ import annotations

import os
import tempfile
import time

from tfrecord_suite.schema import Feature, Schema
from tfrecord_suite.shard import convert, ranges, read_convert, sources, spill
from tfrecord_suite.shard.records import Records

_SCHEMA = Schema(
    [
        Feature("n", "int64", [], "numeric", 0),
        Feature("x", "float32", [], "numeric", 0.0),
        Feature("s", "string", [], "text", ""),
        Feature("label", "string", [], "categorical", ""),
    ],
    label="label",
)
_CSV = (
    "n,x,s,label\n"
    '1,0.5,"a, quoted",yes\n'
    '2,1.2345678901234567,"across\nlines",no\n'
    "3,oops,bad,yes\n"
    + "".join(f"{i},{i / 3},t{i},{'yes' if i % 2 else 'no'}\n" for i in range(40))
)
_JSONL = (
    "".join(
        f'{{"n": {i}, "x": {i / 7}, "s": "t{i}", "label": "{"yes" if i % 2 else "no"}"}}\n'
        for i in range(40)
    )
    + '{"n": "bad"}\n'
)


def _write_inputs(folder: str) -> dict[str, str]:
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    paths = {fmt: os.path.join(folder, f"rows.{fmt}") for fmt in ("csv", "jsonl", "parquet")}
    with open(paths["csv"], "w") as fh:
        fh.write(_CSV)
    with open(paths["jsonl"], "w") as fh:
        fh.write(_JSONL)
    table = pacsv.read_csv(paths["csv"]).slice(3)
    pq.write_table(table, paths["parquet"], row_group_size=10)
    return paths


def warm() -> float:
    """Compile every loop the shard step calls; the seconds it took."""
    started = time.monotonic()
    splits = convert.SplitSpec.parse("train=1,test=1")
    with tempfile.TemporaryDirectory() as folder:
        parts = []
        for fmt, path in _write_inputs(folder).items():
            read = sources.ReadOptions(format=fmt)
            for key in (None, "s"):
                schema = _SCHEMA
                if key is not None:
                    schema = Schema(
                        [
                            Feature(f.name, f.dtype, [], "meta" if f.name == key else f.kind)
                            for f in _SCHEMA.features
                        ],
                        label="label",
                    )
                batch = read_convert.BatchPath(
                    schema, splits, key, read, read_convert.RowPath(schema, splits, key)
                )
                for info in sources.resolve_inputs(path):
                    for part in ranges.split_file(info, read, range_bytes=64):
                        parts += [piece.records for piece in batch.convert(part)]
        records = Records.concat(parts)
        for _, group in records.groups(records.shard_of([2, 3]) + 10 * records.split):
            group.framed(group.sort_order())
        writer = spill.SpillWriter(folder, 4, splits.names)
        writer.add(records)
        writer.flush()
        spill.read_shard(folder, [writer.bundle], "train", 0, 0, 2, 4)
    return time.monotonic() - started


if __name__ == "__main__":
    print(f"compiled the batch path's loops in {warm():.1f} s")
