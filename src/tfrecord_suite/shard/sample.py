"""The first rows of the input as Arrow columns, sampled for schema inference.

Schema inference (:func:`tfrecord_suite.schema.schema_of_samples`) looks at each column's first
rows: which values are present, which are integers, which numbers, their sums, their distinct
texts. The row path gathers that value by value
(:func:`tfrecord_suite.schema.infer_tabular_schema`); here a CSV/TSV or Parquet file's first
rows are read as Arrow columns, and each column is sampled at once: its text cells typed by the
batch path's compiled rules
(:func:`~tfrecord_suite.shard.kernels.text.classify_cells`), with Python's own rules applied only
to the few cells they do not vouch for, and its typed values taken as they are. The samples,
and so the schema, are those the row path gathers: the same rows, the same values in the same
order (tested on generated and real tables).

Where the first rows hold anything the batch path would give the row path (a bad row, a quote
left open, a value Arrow types in a way Python would not), :func:`sample_columns` says so with
None and the row path samples the file. JSON lines are always sampled by the row path: Arrow
reads ``1`` and ``1.0`` in one column as the same double, which Python does not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tfrecord_suite.io import storage
from tfrecord_suite.schema import (
    MAX_CATEGORICAL_LENGTH,
    ColumnSample,
    is_finite_number,
    is_integer,
)
from tfrecord_suite.shard import kernels, sources
from tfrecord_suite.shard.batch_convert import string_array, string_buffers, type_cells
from tfrecord_suite.shard.kernels import text as text_loops
from tfrecord_suite.shard.read_convert import BatchPath, parse_plain_lines, plain_header
from tfrecord_suite.shard.sources import FileRange, ReadOptions

#: The formats sampled here; others (JSON lines) by the row path.
FORMATS = ("csv", "tsv", "parquet")
#: The most bytes read to find a CSV file's first rows (wider rows: the row path samples).
MAX_SAMPLE_BYTES = 64 * 1024 * 1024


class _RowPathSamples(Exception):
    """The first rows hold what only the row path reads as the row path does."""


def sample_columns(
    files: Sequence[storage.FileInfo], read: ReadOptions, rows: int
) -> tuple[list[str], dict[str, ColumnSample]] | None:
    """Each column's sample from the first ``rows`` rows of each file, columns in file order.

    None where the row path must sample (see the module's docstring).
    """
    if read.format not in FORMATS:
        return None
    columns: list[str] = []
    samples: dict[str, ColumnSample] = {}
    try:
        for info in files:
            if read.format == "parquet":
                names, arrays = _parquet_rows(info.uri, rows)
            else:
                names, arrays = _csv_rows(info, read, rows)
            for name in names:
                if name not in columns:
                    columns.append(name)
            for name, array in arrays.items():
                samples.setdefault(name, ColumnSample()).extend(column_sample(array))
    except _RowPathSamples:
        return None
    return columns, samples


def _csv_rows(info: storage.FileInfo, read: ReadOptions, rows: int) -> tuple[list[str], dict]:
    """The header and the first ``rows`` records of a CSV file, if every one is plain."""
    if not BatchPath.takes(read):
        raise _RowPathSamples
    size = 1024 * 1024
    while True:
        with sources.open_file(info.uri) as fh:
            data = fh.read(size)
        whole = len(data) < size
        buf = np.frombuffer(data, np.uint8)
        starts = text_loops.line_starts(buf)
        if not whole:  # the last line may be cut: leave it out
            starts = starts[:-1]
        header = plain_header(data, starts, read)
        if header is None:
            raise _RowPathSamples
        status = text_loops.scan_csv_lines(
            buf, starts, ord(sources.csv_delimiter(read)), len(header), read.max_line_bytes
        )[1:]
        records = np.flatnonzero(status != kernels.BLANK)
        if whole or len(records) >= rows:
            break
        if size >= MAX_SAMPLE_BYTES:
            raise _RowPathSamples
        size *= 4
    records = records[:rows]
    if (status[records] != kernels.PLAIN).any():
        raise _RowPathSamples  # a bad row or a quote left open among them: the row path's
    names = [f"c{i}" for i in range(len(header))]
    table = None
    if len(records):
        table = parse_plain_lines(buf, starts, records + 1, read, names, names)
        if table is None:
            raise _RowPathSamples
    columns = {name: i for i, name in enumerate(header)}  # the last of repeated names
    arrays = {} if table is None else {h: table.column(names[i]) for h, i in columns.items()}
    return header, arrays


def _parquet_rows(uri: str, rows: int) -> tuple[list[str], dict]:
    """The columns and the first ``rows`` rows of a Parquet file."""
    import pyarrow as pa

    names = sources.parquet_columns(uri)
    batches = []
    try:
        for _, batch in sources.parquet_batches(uri, FileRange(uri), batch_size=rows):
            batches.append(batch)
            if sum(b.num_rows for b in batches) >= rows:
                break
    except sources.ParquetUnreadable:
        raise _RowPathSamples from None
    if len(set(names)) != len(names):
        raise _RowPathSamples
    if not batches:
        return names, {}
    table = pa.Table.from_batches(batches).slice(0, rows)
    return names, {name: table.column(name) for name in names}


def column_sample(array: Any) -> ColumnSample:
    """The sample of one column's values, as :meth:`ColumnSample.add` gathers it one by one."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    t = array.type
    sample = ColumnSample()
    if pa.types.is_null(t):
        return sample
    if (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or (pa.types.is_dictionary(t) and pa.types.is_string(t.value_type))
    ):
        return _text_sample(array)
    valid = array.is_valid().to_numpy(zero_copy_only=False)
    if pa.types.is_boolean(t) or pa.types.is_integer(t):
        values = array.filter(pa.array(valid)).to_pylist()
        sample.present = len(values)
        sample.ints = [int(v) for v in values]
        sample.floats = [float(v) for v in values]
        texts = pc.unique(array.filter(pa.array(valid)))
        sample.add_texts(str(v) for v in texts.to_pylist())
        return sample
    if pa.types.is_floating(t):
        values = array.cast(pa.float64()).fill_null(np.nan).to_numpy()
        present = values[~np.isnan(values)]  # NaN reads as missing
        sample.present = len(present)
        sample.floats = present.tolist()
        # every present value a number, none an integer: float32 whatever its texts, which are
        # left out (they decide only a string column's kind and an int or string label's classes)
        return sample
    raise _RowPathSamples  # a type Arrow and Python read differently (timestamps, lists...)


def _text_sample(array: Any) -> ColumnSample:
    """The sample of text cells: the compiled rules, and Python's for the cells they leave."""
    import pyarrow as pa
    import pyarrow.compute as pc

    offsets, data, valid = string_buffers(array)
    as_int = type_cells(offsets, data, valid, kernels.INT)
    as_float = type_cells(offsets, data, valid, kernels.FLOAT)
    int_state, float_state, floats = as_int.state, as_float.state, as_float.floats
    present = int_state != kernels.MISSING
    spans = text_loops.gather_spans(data, as_int.start, as_int.end, present)
    texts = string_array(*spans).filter(pa.array(present))
    is_int = int_state == kernels.PRESENT
    is_float = (float_state == kernels.PRESENT) & np.isfinite(floats)
    ints_obj = as_int.ints.astype(object)
    odd = np.flatnonzero(
        present & ((int_state == kernels.UNUSUAL) | (float_state == kernels.UNUSUAL))
    )
    if len(odd):
        # spellings the compiled rules leave to Python (1_000, NaN, inf, 0x10...): Python's rules
        index = np.cumsum(present) - 1
        values = texts.take(pa.array(index[odd])).to_pylist()
        for i, text in zip(odd.tolist(), values, strict=True):
            if int_state[i] == kernels.UNUSUAL and is_integer(text):
                is_int[i], ints_obj[i] = True, int(text)
            if float_state[i] == kernels.UNUSUAL and is_finite_number(text):
                is_float[i], floats[i] = True, float(text)
    sample = ColumnSample(
        present=int(present.sum()),
        ints=ints_obj[is_int].tolist(),
        floats=floats[is_float].tolist(),
    )
    if sample.present:
        sample.short = bool(pc.max(pc.utf8_length(texts)).as_py() <= MAX_CATEGORICAL_LENGTH)
        sample.add_texts(pc.unique(texts).to_pylist())
    return sample
