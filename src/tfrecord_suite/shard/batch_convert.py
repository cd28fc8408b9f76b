"""A batch of table rows converted to records by compiled loops: the batch path's conversion.

The twin of :class:`~tfrecord_suite.shard.convert.RowConverter` for a whole Arrow batch: each
feature's column is typed as the row path types a cell (:mod:`.kernels.text`, Arrow's casts),
then the split keys, their hashes, the splits, the serialized examples (:mod:`.kernels.keys`,
:mod:`.kernels.records`) and the splits' statistics are computed for every row at once. A row
whose value the compiled rules cannot vouch for is *unusual*: :class:`BatchConverter` says which,
and :mod:`.read_convert` hands those rows to the row path.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from tfrecord_suite.schema import DEFAULT_NA_VALUES, Feature, Schema
from tfrecord_suite.shard import convert, kernels
from tfrecord_suite.shard.kernels import keys as key_loops
from tfrecord_suite.shard.kernels import records as record_loops
from tfrecord_suite.shard.kernels import text as text_loops
from tfrecord_suite.shard.records import Records


class Unsupported(Exception):
    """A batch whose column types the batch path does not convert: its rows take the row path."""


def string_buffers(array: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets int64, data uint8, valid bool) of an Arrow string array."""
    import pyarrow as pa

    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if pa.types.is_string(array.type):
        array = array.cast(pa.large_string())
    _, offsets, data = array.buffers()
    n = len(array)
    offsets = np.frombuffer(offsets, np.int64)[array.offset : array.offset + n + 1]
    data = np.frombuffer(data, np.uint8) if data is not None else np.empty(0, np.uint8)
    valid = (
        np.ones(n, bool)
        if array.null_count == 0
        else array.is_valid().to_numpy(zero_copy_only=False)
    )
    return offsets, data, valid


def string_array(offsets: np.ndarray, data: np.ndarray, valid: np.ndarray | None = None) -> Any:
    """An Arrow ``large_string`` array of (offsets, data), null where ``valid`` is False."""
    import pyarrow as pa

    mask = (
        None
        if valid is None or valid.all()
        else pa.py_buffer(np.packbits(valid, bitorder="little"))
    )
    return pa.Array.from_buffers(
        pa.large_string(), len(offsets) - 1, [mask, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


@dataclasses.dataclass
class Column:
    """One feature over a batch, as the kernels take it (see :func:`kernels.encode_examples`).

    ``state`` is MISSING, PRESENT or UNUSUAL; ``ints`` the integer, or a FLOAT's float32 bits;
    ``text`` with ``start``/``end`` a BYTES value's stripped text or a FLOAT's Python text;
    ``floats`` a FLOAT's values (the statistics' doubles).
    """

    kind: int
    state: np.ndarray
    ints: np.ndarray
    text: np.ndarray
    start: np.ndarray
    end: np.ndarray
    floats: np.ndarray | None = None


@dataclasses.dataclass
class TypedCells:
    """Text cells typed as a feature's dtype (:func:`type_cells`).

    Attributes:
        state: MISSING, PRESENT or UNUSUAL per cell.
        start: Where each cell's stripped text starts in the data.
        end: Where it ends.
        ints: An INT cell's value.
        floats: A PRESENT FLOAT cell's double.
        exact: Whether a FLOAT cell's double is one IEEE operation on its text (its own text is
            then its shortest round-trip text).

    """

    state: np.ndarray
    start: np.ndarray
    end: np.ndarray
    ints: np.ndarray
    floats: np.ndarray
    exact: np.ndarray


_NA = [v.encode() for v in DEFAULT_NA_VALUES]
_NA_OFFSETS = np.cumsum([0, *(len(v) for v in _NA)]).astype(np.int64)
_NA_DATA = np.frombuffer(b"".join(_NA), np.uint8)


def type_cells(offsets: np.ndarray, data: np.ndarray, valid: np.ndarray, kind: int) -> TypedCells:
    """Type an Arrow string array's cells (offsets, data, valid) as ``kind`` (INT, FLOAT, BYTES).

    The compiled rules of :func:`text_loops.classify_cells`; for FLOAT, the plain decimals one
    IEEE operation does not read are parsed by Arrow's cast, which reads them as Python does.
    """
    import pyarrow as pa

    n = len(offsets) - 1
    cells = TypedCells(
        np.empty(n, np.uint8),
        np.empty(n, np.int64),
        np.empty(n, np.int64),
        np.zeros(n, np.int64),
        np.zeros(n, np.float64),
        np.zeros(n, bool),
    )
    text_loops.classify_cells(
        offsets,
        data,
        valid,
        kind,
        _NA_DATA,
        _NA_OFFSETS,
        cells.state,
        cells.start,
        cells.end,
        cells.ints,
        cells.floats,
        cells.exact,
    )
    rest = (cells.state == kernels.PRESENT) & ~cells.exact
    if kind == kernels.FLOAT and rest.any():
        spans = string_array(*text_loops.gather_spans(data, cells.start, cells.end, rest), rest)
        cells.floats[rest] = spans.cast(pa.float64()).to_numpy(zero_copy_only=False)[rest]
    return cells


_KINDS = {"int64": kernels.INT, "float32": kernels.FLOAT, "string": kernels.BYTES}
_INT64_LIMIT = 2.0**63


class BatchConverter:
    """Converts Arrow batches of a table's rows into records and statistics.

    Args:
        schema: The dataset's schema.
        splits: The splits.
        key_column: The column whose value decides the split, or None (the record's content).

    """

    def __init__(self, schema: Schema, splits: convert.SplitSpec, key_column: str | None):
        self.schema = schema
        self.splits = splits
        self.key_column = key_column
        self._cumulative = np.cumsum(splits.weights).astype(np.int64)
        self._label = schema.label
        self._label_float = bool(self._label and schema.feature(self._label).dtype == "float32")
        self._tracked = [
            f
            for f in schema.features
            if f.kind not in ("image", "image_raw") and f.name != "filename"
        ]

    def convert(
        self, arrays: dict[str, Any], n: int, source: str
    ) -> tuple[Records, dict[str, dict[str, Any]], np.ndarray]:
        """Convert a batch of ``n`` rows.

        Args:
            arrays: Column name -> Arrow array of the batch (names as the schema's sources).
            n: The rows.
            source: ``csv``, ``jsonl`` or ``parquet``: how the values were read.

        Returns:
            The records of the rows that are not unusual, their splits' statistics, and which
            rows are unusual (for the row path).

        Raises:
            Unsupported: A column of a type the batch path does not convert.

        """
        columns = self._columns(arrays, n, source)
        key = self._raw_key(arrays, n, source) if self.key_column is not None else None
        unusual = np.zeros(n, bool)
        for column in columns.values():
            if column is not None:
                unusual |= column.state == kernels.UNUSUAL
        if self.schema.label is not None:
            label = columns.get(self.schema.label)
            unusual |= label is None or label.state != kernels.PRESENT
        good = np.flatnonzero(~unusual)
        if not len(good):
            return Records.empty(), {}, unusual
        records = self._records(columns, key, good)
        return records, self._stats(columns, records, good), unusual

    def _columns(self, arrays: dict[str, Any], n: int, source: str) -> dict[str, Column | None]:
        """Each feature's column over the batch; None for a metadata column the file lacks."""
        out: dict[str, Column | None] = {}
        for f in self.schema.features:
            name = f.source or f.name
            array = arrays.get(name)
            if array is None and f.kind == "meta" and source != "jsonl":
                out[f.name] = None  # the row path leaves it out of the record and the key
                continue
            column = _missing(f, n) if array is None else self._column(f, array, source)
            if source == "jsonl" and f.kind == "meta":
                # JSON's null and an absent key both read as null, which the row path tells apart
                column.state[column.state == kernels.MISSING] = kernels.UNUSUAL
            out[f.name] = column
        return out

    def _column(self, feature: Feature, array: Any, source: str) -> Column:
        import pyarrow as pa
        import pyarrow.compute as pc

        kind = _KINDS[feature.dtype]
        t = array.type
        if pa.types.is_null(t):
            return _missing(feature, len(array))
        if (
            pa.types.is_string(t)
            or pa.types.is_large_string(t)
            or (pa.types.is_dictionary(t) and pa.types.is_string(t.value_type))
        ):
            return self._text_column(feature, *string_buffers(array))
        if pa.types.is_boolean(t):
            if kind == kernels.BYTES:
                return self._text_column(
                    feature, *string_buffers(pc.if_else(array, "True", "False"))
                )
            array = array.cast(pa.int64())
            t = array.type
        if pa.types.is_integer(t):
            valid = _valid(array)
            if pa.types.is_uint64(t):
                too_big = valid & (array.fill_null(0).to_numpy() > np.iinfo(np.int64).max)
                if too_big.any():
                    raise Unsupported
            values = array.cast(pa.int64()).fill_null(0).to_numpy()
            if kind == kernels.INT:
                state = np.where(valid, kernels.PRESENT, kernels.MISSING).astype(np.uint8)
                return Column(kind, state, values, *_no_text(len(array)))
            if kind == kernels.FLOAT:
                return self._float_column(values.astype(np.float64), _present(valid))
            return self._text_column(feature, *string_buffers(array.cast(pa.large_string())))
        if pa.types.is_floating(t):
            values = array.cast(pa.float64()).fill_null(np.nan).to_numpy()
            valid = ~np.isnan(values)  # NaN reads as missing, as a null does
            if kind == kernels.FLOAT:
                column = self._float_column(values, _present(valid))
                if source == "jsonl":
                    # JSON's -0 is the integer 0 to Python, which makes it 0.0, not -0.0
                    column.state[(values == 0) & np.signbit(values)] = kernels.UNUSUAL
                return column
            if kind == kernels.INT:
                whole = np.zeros(len(values), bool)
                whole[valid] = (np.floor(values[valid]) == values[valid]) & (
                    np.abs(values[valid]) < _INT64_LIMIT
                )
                state = np.full(len(values), kernels.MISSING, np.uint8)
                state[valid] = np.where(whole[valid], kernels.PRESENT, kernels.UNUSUAL)
                ints = np.zeros(len(values), np.int64)
                ints[whole] = values[whole].astype(np.int64)
                return Column(kind, state, ints, *_no_text(len(values)))
            offsets, text = _python_floats(values, valid)
            ints = np.zeros(len(values), np.int64)
            return Column(kind, _present(valid), ints, text, offsets[:-1], offsets[1:])
        raise Unsupported

    def _text_column(
        self, feature: Feature, offsets: np.ndarray, data: np.ndarray, valid: np.ndarray
    ) -> Column:
        """A column of text cells typed as the feature's dtype (:func:`type_cells`)."""
        kind = _KINDS[feature.dtype]
        cells = type_cells(offsets, data, valid, kind)
        state, start, end = cells.state, cells.start, cells.end
        if kind != kernels.FLOAT:
            return Column(kind, state, cells.ints, data, start, end)
        # a plain decimal one IEEE operation reads prints as its own text; the others as Arrow's
        rest = (state == kernels.PRESENT) & ~cells.exact
        source = data
        if rest.any():
            fits = _fits_float32(cells.floats, rest)
            printed_offsets, printed_data = _arrow_float_text(cells.floats, fits)
            source = np.concatenate([data, printed_data])
            start[fits] = len(data) + printed_offsets[:-1][fits]
            end[fits] = len(data) + printed_offsets[1:][fits]
        return self._float_column(cells.floats, state, source, start, end)

    @staticmethod
    def _float_column(
        values: np.ndarray,
        state: np.ndarray,
        source: np.ndarray | None = None,
        start: np.ndarray | None = None,
        end: np.ndarray | None = None,
    ) -> Column:
        """A FLOAT column: PRESENT doubles out of float32's range are the row path's (an error).

        Each PRESENT value's Python text (the key's) is printed from the span of ``source``
        given for it (a plain decimal, or Arrow's shortest text), else from Arrow's.
        """
        fits = _fits_float32(values, state == kernels.PRESENT)
        state[(state == kernels.PRESENT) & ~fits] = kernels.UNUSUAL
        if source is None:
            printed, source = _arrow_float_text(values, fits)
            start, end = printed[:-1], printed[1:]
        offsets, text = text_loops.python_float_text(source, start, end, fits)
        bits = np.zeros(len(values), np.int64)
        bits[fits] = values[fits].astype(np.float32).view(np.uint32)
        return Column(kernels.FLOAT, state, bits, text, offsets[:-1], offsets[1:], values)

    def _raw_key(self, arrays: dict[str, Any], n: int, source: str) -> tuple[np.ndarray, ...]:
        """``str(value)`` of the key column's raw value in each row, as (text, start, end)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        array = arrays.get(self.key_column)
        if array is None:
            array = pa.nulls(n, pa.large_string())
        t = array.type
        if pa.types.is_floating(t):
            if source == "jsonl":
                raise Unsupported  # 3 and 3.0 both read as 3.0, and print apart
            values = array.cast(pa.float64()).fill_null(np.nan).to_numpy()
            valid = _valid(array)
            offsets, text = _python_floats(values, valid)
            array = pc.if_else(valid, string_array(offsets, text), "None")
        elif pa.types.is_boolean(t):
            array = pc.if_else(array, "True", "False")
        elif pa.types.is_integer(t) or pa.types.is_null(t):
            array = array.cast(pa.large_string())
        elif not (
            pa.types.is_string(t)
            or pa.types.is_large_string(t)
            or (pa.types.is_dictionary(t) and pa.types.is_string(t.value_type))
        ):
            raise Unsupported
        offsets, data, valid = string_buffers(pc.fill_null(array, "None"))
        return data, offsets[:-1], offsets[1:]

    def _records(
        self,
        columns: dict[str, Column | None],
        key: tuple[np.ndarray, ...] | None,
        rows: np.ndarray,
    ) -> Records:
        """The records of ``rows``: split keys, hashes, splits and examples (compiled loops)."""
        present = [
            (f, columns[f.name]) for f in self.schema.features if columns[f.name] is not None
        ]
        texts = [c.text for _, c in present]
        bases = np.zeros(len(texts) + 1, np.int64)
        np.cumsum([len(t) for t in texts], out=bases[1:])
        text = np.concatenate(texts) if texts else np.empty(0, np.uint8)
        kinds = np.array([c.kind for _, c in present], np.int64)
        # one row per record, one column per feature: a record's values side by side in memory
        state = np.stack([c.state for _, c in present], axis=1)
        ints = np.stack([c.ints for _, c in present], axis=1)
        start = np.stack([c.start + bases[i] for i, (_, c) in enumerate(present)], axis=1)
        end = np.stack([c.end + bases[i] for i, (_, c) in enumerate(present)], axis=1)
        rows = rows.astype(np.int64)
        if key is None:
            key_offsets, key_data = key_loops.json_keys(rows, kinds, state, ints, text, start, end)
        else:
            prefix = np.frombuffer(f"{self.key_column}=".encode(), np.uint8)
            key_offsets, key_data = key_loops.raw_keys(rows, prefix, *key)
        digests = key_loops.blake2b_16(key_offsets, key_data)
        high, _ = key_loops.digest_words(digests)
        splits = key_loops.assign_splits(high, self._cumulative)
        order = sorted(range(len(present)), key=lambda i: convert.map_order(present[i][0].name))
        names = [convert.map_key(present[i][0].name) for i in order]
        name_offsets = np.zeros(len(names) + 1, np.int64)
        np.cumsum([len(k) for k in names], out=name_offsets[1:])
        offsets, data = record_loops.encode_examples(
            rows,
            kinds[order],
            state[:, order],
            ints[:, order],
            text,
            start[:, order],
            end[:, order],
            np.frombuffer(b"".join(names), np.uint8),
            name_offsets,
        )
        return Records(splits, digests, offsets, data)

    def _stats(
        self, columns: dict[str, Column | None], records: Records, rows: np.ndarray
    ) -> dict[str, dict[str, Any]]:
        """The splits' statistics accumulators, as :func:`convert.update_stats_batch` folds them."""
        names = self.splits.names
        split = records.split.astype(np.int64)
        counts = np.bincount(split, minlength=len(names))
        sizes = np.bincount(split, weights=records.lengths(), minlength=len(names))
        histograms = self._label_histograms(columns, rows, split)
        out: dict[str, dict[str, Any]] = {}
        for s, name in enumerate(names):
            if counts[s]:
                out[name] = convert.new_split_stats()
                out[name].update(count=int(counts[s]), bytes=int(sizes[s]))
                out[name]["label_histogram"] = histograms[s]
        for f in self._tracked:
            column = columns.get(f.name)
            if column is None:
                for s, name in enumerate(names):
                    if counts[s]:
                        out[name]["features"][f.name] = {"present": 0, "missing": int(counts[s])}
                continue
            present = column.state[rows] == kernels.PRESENT
            where = split[present]
            found = np.bincount(where, minlength=len(names))
            numeric = f.dtype in ("int64", "float32") and present.any()
            if numeric:
                values = (
                    column.floats[rows][present]
                    if column.floats is not None
                    else column.ints[rows][present].astype(np.float64)
                )
                sums = np.bincount(where, weights=values, minlength=len(names))
                squares = np.bincount(where, weights=values * values, minlength=len(names))
            for s, name in enumerate(names):
                if not counts[s]:
                    continue
                entry = {"present": int(found[s]), "missing": int(counts[s] - found[s])}
                if numeric and found[s]:
                    mine = values[where == s]
                    entry.update(
                        min=float(mine.min()),
                        max=float(mine.max()),
                        sum=float(sums[s]),
                        sum_sq=float(squares[s]),
                    )
                out[name]["features"][f.name] = entry
        return out

    def _label_histograms(
        self, columns: dict[str, Column | None], rows: np.ndarray, split: np.ndarray
    ) -> list[dict[str, int]]:
        """Each split's ``str(label) -> records`` (the row path's ``Converted.label``)."""
        names = self.splits.names
        if self._label is None or self._label_float:
            return [{} for _ in names]
        column = columns[self._label]
        if column.kind == kernels.INT:
            classes, codes = np.unique(column.ints[rows], return_inverse=True)
            labels = [str(c) for c in classes.tolist()]
        else:
            start, end = column.start[rows], column.end[rows]
            spans = text_loops.gather_spans(column.text, start, end, np.ones(len(rows), bool))
            encoded = string_array(*spans).dictionary_encode()
            labels = encoded.dictionary.to_pylist()
            codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        counts = np.bincount(split * len(labels) + codes, minlength=len(names) * len(labels))
        counts = counts.reshape(len(names), len(labels))
        return [
            {label: int(n) for label, n in zip(labels, counts[s], strict=True) if n}
            for s in range(len(names))
        ]


def _valid(array: Any) -> np.ndarray:
    if array.null_count == 0:
        return np.ones(len(array), bool)
    return array.is_valid().to_numpy(zero_copy_only=False)


def _no_text(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.empty(0, np.uint8), np.zeros(n, np.int64), np.zeros(n, np.int64)


def _missing(feature: Feature, n: int) -> Column:
    """A column the file does not have: every value missing."""
    return Column(
        _KINDS[feature.dtype],
        np.full(n, kernels.MISSING, np.uint8),
        np.zeros(n, np.int64),
        *_no_text(n),
        np.zeros(n) if feature.dtype == "float32" else None,
    )


def _present(valid: np.ndarray) -> np.ndarray:
    """PRESENT where ``valid``, MISSING elsewhere."""
    return np.where(valid, kernels.PRESENT, kernels.MISSING).astype(np.uint8)


def _fits_float32(values: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Where a present double is finite and within float32's range (the row path's rule)."""
    fits = present & np.isfinite(values)
    fits[fits] = np.abs(values[fits]) <= convert.FLOAT32_MAX
    return fits


def _arrow_float_text(values: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, text) of Arrow's shortest round-trip text of each valid double."""
    import pyarrow as pa

    printed = pa.array(values, pa.float64(), mask=~valid).cast(pa.large_string())
    offsets, data, _ = string_buffers(printed)
    return offsets, data


def _python_floats(values: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, text) of ``repr`` of each valid double (empty where not valid)."""
    offsets, data = _arrow_float_text(values, valid)
    return text_loops.python_float_text(data, offsets[:-1], offsets[1:], valid)
