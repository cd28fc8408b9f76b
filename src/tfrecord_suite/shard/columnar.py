"""Convert a file range into records: in Arrow batches by compiled loops, or row by row.

Two paths give the same records, byte for byte, in the same splits:

* The **row path** (:class:`RowPath`) reads :class:`~.sources.RawRow` objects and converts each
  with :class:`~.convert.RowConverter`. Images and text always take it, and it is the reference
  the batch path is tested against.
* The **batch path** (:class:`BatchPath`) takes CSV/TSV, JSON lines and Parquet. A range's bytes
  are read once; a compiled scan (:mod:`.kernels`) finds the lines that Arrow's readers parse
  exactly as the row path's parser does; Arrow parses them in one call; the cells are typed by
  compiled loops and Arrow's casts, and the split keys, their hashes, the splits and the
  serialized examples are computed for the whole batch. Everything the batch path cannot vouch
  for goes to the row path, with the row path's own reading of those lines: a bad row (its dead
  letter, line number and reason as the row path gives them), an odd spelling of a value, a
  quoted field that spans lines (read by the row path's record assembler until it reaches a
  record start where the batch path can take over again), a BOM, bad bytes. Only those rows pay
  Python's price.

Both yield :class:`Piece` objects: records as columns (:class:`~.records.Records`), the splits'
statistics and the dead letters.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, Any

import numpy as np

from tfrecord_suite.schema import DEFAULT_NA_VALUES, Feature, Schema
from tfrecord_suite.shard import convert, kernels, sources
from tfrecord_suite.shard.records import Records
from tfrecord_suite.shard.sources import FileRange, RawRow, ReadOptions

#: Records per piece the row path yields (a Beam element).
CHUNK_RECORDS = 2048
#: Rows per Arrow batch read from Parquet.
PARQUET_BATCH_ROWS = 16384
#: A JSON-lines block Arrow refuses (a bad line, a value of another type) is halved until it
#: has at most this many lines, which then go to the row path: a bad line costs a few Arrow
#: calls and a few good lines' row-path conversion, never one Arrow call per line.
JSON_BISECT_LINES = 8
#: The formats the batch path reads.
FORMATS = ("csv", "tsv", "jsonl", "parquet")


@dataclasses.dataclass
class Piece:
    """What converting some rows of a range gave.

    Attributes:
        records: The good rows' records.
        stats: Split name -> statistics accumulator (:func:`convert.new_split_stats`).
        dead_letters: The bad rows, each as the dead-letter file holds it.
        rows: Rows read, good and bad.
        path: ``batch`` or ``row``: which path converted them.

    """

    records: Records
    stats: dict[str, dict[str, Any]]
    dead_letters: list[dict[str, Any]]
    rows: int
    path: str


def dead_letter(row: RawRow, field: str | None, reason: str) -> dict[str, Any]:
    """A bad row as the dead-letter files hold it."""
    return {
        "file": row.file,
        "row": row.row,
        "field": field,
        "reason": reason,
        "raw": row.raw if row.raw is not None else _printable(row.values),
    }


def _printable(values: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in values.items():
        if isinstance(v, bytes):
            out[k] = f"<{len(v)} bytes>"
        else:
            text = str(v)
            out[k] = text if len(text) <= 500 else text[:500] + "..."
    return out


class RowPath:
    """Converts raw rows one by one (:class:`~.convert.RowConverter`) into pieces."""

    def __init__(
        self,
        schema: Schema,
        splits: convert.SplitSpec,
        key_column: str | None,
        image: convert.ImageOptions | None = None,
    ):
        self.schema = schema
        self.splits = splits
        self.converter = convert.RowConverter(schema, splits, key_column, image)
        self._split_index = {name: i for i, name in enumerate(splits.names)}

    def convert(self, rows: Iterable[RawRow]) -> Iterator[Piece]:
        """Pieces of at most :data:`CHUNK_RECORDS` records from ``rows``."""
        pending: list[convert.Converted] = []
        letters: list[dict[str, Any]] = []
        read = 0
        for row in rows:
            read += 1
            try:
                pending.append(self.converter.convert(row))
            except convert.RowError as exc:
                letters.append(dead_letter(row, exc.field, exc.reason))
            if len(pending) >= CHUNK_RECORDS:
                yield self._piece(pending, letters, read)
                pending, letters, read = [], [], 0
        if pending or letters or read:
            yield self._piece(pending, letters, read)

    def _piece(
        self, converted: list[convert.Converted], letters: list[dict[str, Any]], rows: int
    ) -> Piece:
        stats: dict[str, dict[str, Any]] = {}
        by_split: dict[str, list[convert.Converted]] = {}
        for rec in converted:
            by_split.setdefault(rec.split, []).append(rec)
        for split, recs in by_split.items():
            stats[split] = convert.new_split_stats()
            convert.update_stats_batch(stats[split], self.schema, recs)
        records = Records.of(
            [self._split_index[r.split] for r in converted],
            [r.digest for r in converted],
            [r.data for r in converted],
        )
        return Piece(records, stats, letters, rows, "row")


class _Unsupported(Exception):
    """A batch the batch path cannot vouch for: its rows go to the row path."""


class _HeldBytes(io.RawIOBase):
    """A file of which some bytes are held in memory; the rest is read from the file itself.

    The row path reads the rows the batch path hands it from here, so a bad row in a file on
    ``gs://`` costs no request (a quoted field that spans past the range reads on from the file).
    """

    def __init__(self, uri: str, held: Sequence[tuple[int, bytes]], size: int | None):
        super().__init__()
        self._uri = uri
        self._held = held
        self._size = size
        self._pos = 0
        self._file: IO[bytes] | None = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, pos: int, whence: int = 0) -> int:
        if whence != 0:
            raise io.UnsupportedOperation("only absolute seeks")
        self._pos = pos
        return pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, buffer: Any) -> int:
        for base, data in self._held:
            if base <= self._pos < base + len(data):
                n = min(len(buffer), base + len(data) - self._pos)
                buffer[:n] = data[self._pos - base : self._pos - base + n]
                self._pos += n
                return n
        if self._size is not None and self._pos >= self._size:
            return 0
        if self._file is None:
            self._file = sources.open_file(self._uri)
        self._file.seek(self._pos)
        n = self._file.readinto(buffer)
        self._pos += n
        return n

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        super().close()


def _string_buffers(array: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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


def _string_array(offsets: np.ndarray, data: np.ndarray, valid: np.ndarray | None = None) -> Any:
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
class _Column:
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


_KINDS = {"int64": kernels.INT, "float32": kernels.FLOAT, "string": kernels.BYTES}
_INT64_LIMIT = 2.0**63


class BatchPath:
    """Converts ranges of CSV/TSV, JSON-lines and Parquet files in Arrow batches.

    Args:
        schema: The dataset's schema.
        splits: The splits.
        key_column: The column whose value decides the split, or None (the record's content).
        read: How the files are read.
        row_path: Where the rows the batch path cannot vouch for go.

    """

    def __init__(
        self,
        schema: Schema,
        splits: convert.SplitSpec,
        key_column: str | None,
        read: ReadOptions,
        row_path: RowPath,
    ):
        self.schema = schema
        self.splits = splits
        self.key_column = key_column
        self.read = read
        self.rows = row_path
        self._cumulative = np.cumsum(splits.weights).astype(np.int64)
        na = [v.encode() for v in DEFAULT_NA_VALUES]
        self._na_offsets = np.zeros(len(na) + 1, np.int64)
        np.cumsum([len(v) for v in na], out=self._na_offsets[1:])
        self._na_data = np.frombuffer(b"".join(na), np.uint8)
        self._label = schema.label
        self._label_float = bool(self._label and schema.feature(self._label).dtype == "float32")
        self._tracked = [
            f
            for f in schema.features
            if f.kind not in ("image", "image_raw") and f.name != "filename"
        ]

    @staticmethod
    def takes(read: ReadOptions) -> bool:
        """Whether the batch path reads files read with ``read`` (else the row path does all)."""
        if read.format not in FORMATS:
            return False
        if read.format == "parquet":
            return True
        delimiter = sources.csv_delimiter(read)
        return read.encoding.lower().replace("_", "-") in ("utf-8", "utf8") and (
            read.format == "jsonl"
            or (len(delimiter) == 1 and delimiter not in '"\r\n' and delimiter.isascii())
        )

    def convert(self, part: FileRange) -> Iterator[Piece]:
        """The pieces of one range, batch and row, each row of the range in exactly one."""
        fmt = self.read.format
        if fmt == "parquet":
            yield from self._parquet(part)
            return
        with sources.open_file(part.uri) as fh:
            if part.start:
                fh.seek(part.start)
            data = fh.read() if part.end is None else fh.read(part.end - part.start)
        if not data:
            yield from self.rows.convert(sources.read_rows(part.uri, self.read, part=part))
            return
        if fmt == "jsonl":
            yield from self._jsonl(part, data)
        else:
            yield from self._csv(part, data)

    # ------------------------------------------------------------------------------------ CSV

    def _csv(self, part: FileRange, data: bytes) -> Iterator[Piece]:
        buf = np.frombuffer(data, np.uint8)
        starts = kernels.line_starts(buf)
        delimiter = sources.csv_delimiter(self.read)
        first_line = 0
        held = [(part.start, data)]
        if part.start == 0:
            header = self._header_line(data, starts)
            if header is None:  # blank lines, a quote or bad bytes before the header
                yield from self.rows.convert(sources.read_rows(part.uri, self.read, part=part))
                return
            first_line = 1
        else:
            header = sources.csv_header(part.uri, self.read)
        status = kernels.scan_csv_lines(
            buf, starts, ord(delimiter), len(header), self.read.max_line_bytes
        )
        opener = self._opener(part, held)
        batch_lines: list[np.ndarray] = []
        row_lines: list[int] = []
        region_rows: list[RawRow] = []
        line = first_line
        lines = len(status)
        open_quote = np.flatnonzero(status == kernels.OPEN_QUOTE)
        # plain stretches for the batch path; from each line with a quote left open, the row
        # path's assembler, up to the first record start of a line without one
        while line < lines:
            following = open_quote[np.searchsorted(open_quote, line) :]
            stop = int(following[0]) if len(following) else lines
            if stop > line:
                plain = line + np.flatnonzero(status[line:stop] == kernels.PLAIN)
                batch_lines.append(plain)
                row_lines += (
                    line + np.flatnonzero(status[line:stop] == kernels.ONE_RECORD)
                ).tolist()
            if stop == lines:
                break
            # a quote left open: the row path's assembler reads from here
            region = FileRange(
                part.uri, part.start + int(starts[stop]), part.end, part.first_row + stop
            )
            resumed = None
            for line_no, _, row in sources.csv_records(
                part.uri, self.read, region, rows=True, opener=opener, header=header
            ):
                here = line_no - part.first_row
                if here > stop and status[here] != kernels.OPEN_QUOTE:
                    resumed = here  # a record start from which every line is one record again
                    break
                region_rows.append(row)
            if resumed is None:
                break
            line = resumed
        plain = np.concatenate(batch_lines) if batch_lines else np.empty(0, np.int64)
        names = [f"c{i}" for i in range(len(header))]
        columns = {name: i for i, name in enumerate(header)}  # the last of repeated names
        needed = set(self._needed_columns(columns))
        if len(plain):
            table = self._read_csv_lines(
                buf, starts, plain, names, [names[i] for i in sorted(needed)]
            )
            if table is None or table.num_rows != len(plain):
                row_lines += plain.tolist()
            else:
                arrays = {
                    h: table.column(names[i]).combine_chunks()
                    for h, i in columns.items()
                    if i in needed
                }
                unusual = yield from self._convert_table(arrays, part.first_row + plain, "csv")
                row_lines += plain[unusual].tolist()
        lines_rows = self._rows_of_lines(part, starts, sorted(row_lines), opener, header)
        yield from self.rows.convert(itertools.chain(region_rows, lines_rows))

    def _header_line(self, data: bytes, starts: np.ndarray) -> list[str] | None:
        """The header of a file whose first line is a plain header; None otherwise."""
        if len(starts) < 2:
            return None
        line = data[: starts[1]]
        if line.count(b'"') % 2 or len(line) > self.read.max_line_bytes:
            return None
        try:
            text = line.decode(self.read.encoding)
        except UnicodeDecodeError:
            return None
        if not text.strip():
            return None
        fields = sources.parse_record(text, sources.csv_delimiter(self.read))
        if not fields or not any(f.strip() for f in fields):
            return None
        return [f.strip() for f in fields]

    def _read_csv_lines(
        self,
        buf: np.ndarray,
        starts: np.ndarray,
        lines: np.ndarray,
        names: list[str],
        include: list[str],
    ) -> Any:
        """The given plain lines parsed by Arrow, every column as text; None if Arrow refuses."""
        import pyarrow as pa
        import pyarrow.csv as pacsv

        gathered = kernels.gather_lines(buf, starts, lines.astype(np.int64))
        try:
            return pacsv.read_csv(
                pa.py_buffer(gathered),
                read_options=pacsv.ReadOptions(
                    column_names=names, use_threads=False, block_size=len(gathered) + 1
                ),
                parse_options=pacsv.ParseOptions(
                    delimiter=sources.csv_delimiter(self.read),
                    quote_char='"',
                    double_quote=True,
                    escape_char=False,
                    newlines_in_values=False,
                    ignore_empty_lines=True,
                ),
                convert_options=pacsv.ConvertOptions(
                    column_types={name: pa.large_string() for name in names},
                    include_columns=include,
                    strings_can_be_null=False,
                    quoted_strings_can_be_null=False,
                    null_values=[],
                    check_utf8=False,
                ),
            )
        except pa.ArrowInvalid:
            return None

    def _needed_columns(self, columns: dict[str, int]) -> list[int]:
        sources_ = [f.source or f.name for f in self.schema.features]
        if self.key_column is not None:
            sources_.append(self.key_column)
        return sorted({columns[s] for s in sources_ if s in columns})

    def _rows_of_lines(
        self,
        part: FileRange,
        starts: np.ndarray,
        lines: list[int],
        opener: sources.Opener,
        header: list[str] | None = None,
    ) -> Iterator[RawRow]:
        """The row path's rows of single-line records (consecutive ones read as one range)."""
        runs: list[tuple[int, int]] = []
        for line in lines:
            if runs and runs[-1][1] == line:
                runs[-1] = (runs[-1][0], line + 1)
            else:
                runs.append((line, line + 1))

        for first, stop in runs:
            region = FileRange(
                part.uri,
                part.start + int(starts[first]),
                part.start + int(starts[stop]),
                part.first_row + first,
            )
            if header is None:
                yield from sources.read_rows(part.uri, self.read, part=region, opener=opener)
            else:
                records = sources.csv_records(
                    part.uri, self.read, region, rows=True, opener=opener, header=header
                )
                yield from (row for _, _, row in records)

    @staticmethod
    def _opener(part: FileRange, held: Sequence[tuple[int, bytes]]) -> sources.Opener:
        size = part.start + len(held[0][1]) if part.end is None else None

        def opener(uri: str) -> IO[bytes]:
            return io.BufferedReader(_HeldBytes(uri, held, size))

        return opener

    # ----------------------------------------------------------------------------- JSON lines

    def _jsonl(self, part: FileRange, data: bytes) -> Iterator[Piece]:
        buf = np.frombuffer(data, np.uint8)
        starts = kernels.line_starts(buf)
        status = kernels.scan_json_lines(buf, starts, self.read.max_line_bytes)
        opener = self._opener(part, [(part.start, data)])
        row_lines = np.flatnonzero(status == kernels.ONE_RECORD).tolist()
        blocks = [np.flatnonzero(status == kernels.PLAIN)]
        while blocks:
            lines = blocks.pop()
            if not len(lines):
                continue
            table = self._read_json_lines(buf, starts, lines)
            if table is None:
                if len(lines) <= JSON_BISECT_LINES:
                    row_lines += lines.tolist()
                else:
                    half = len(lines) // 2
                    blocks += [lines[half:], lines[:half]]
                continue
            arrays = {name: table.column(name).combine_chunks() for name in table.column_names}
            unusual = yield from self._convert_table(arrays, part.first_row + lines, "jsonl")
            row_lines += lines[unusual].tolist()
        yield from self.rows.convert(self._rows_of_lines(part, starts, sorted(row_lines), opener))

    def _read_json_lines(self, buf: np.ndarray, starts: np.ndarray, lines: np.ndarray) -> Any:
        """The lines as an Arrow table of the schema's columns; None if Arrow refuses them."""
        import pyarrow as pa
        import pyarrow.json as pajson

        arrow = {"int64": pa.int64(), "float32": pa.float64(), "string": pa.large_string()}
        fields = {}
        for f in self.schema.features:
            fields[f.source or f.name] = arrow[f.dtype]
        if self.key_column is not None and self.key_column not in fields:
            fields[self.key_column] = pa.large_string()
        gathered = kernels.gather_lines(buf, starts, lines.astype(np.int64))
        try:
            table = pajson.read_json(
                pa.py_buffer(gathered),
                read_options=pajson.ReadOptions(use_threads=False, block_size=len(gathered) + 1),
                parse_options=pajson.ParseOptions(
                    explicit_schema=pa.schema(list(fields.items())),
                    unexpected_field_behavior="ignore",
                ),
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        return table if table.num_rows == len(lines) else None

    # -------------------------------------------------------------------------------- Parquet

    def _parquet(self, part: FileRange) -> Iterator[Piece]:
        try:
            batches = sources.parquet_batches(part.uri, part, PARQUET_BATCH_ROWS)
            first = next(batches, None)
        except sources.ParquetUnreadable:
            yield from self.rows.convert(sources.read_rows(part.uri, self.read, part=part))
            return
        if first is None:
            return
        rows: list[RawRow] = []
        for row, batch in itertools.chain([first], batches):
            names = batch.schema.names
            if len(set(names)) != len(names):
                unusual = np.ones(batch.num_rows, bool)
            else:
                arrays = {name: batch.column(name) for name in names}
                numbers = np.arange(row, row + batch.num_rows)
                unusual = yield from self._convert_table(arrays, numbers, "parquet")
            if unusual.any():
                # the values as the row path reads them: the batch's, as Python objects
                values = batch.take(np.flatnonzero(unusual)).to_pylist()
                numbers = row + np.flatnonzero(unusual)
                rows += (RawRow(part.uri, int(n), v) for n, v in zip(numbers, values, strict=True))
        yield from self.rows.convert(rows)

    # ---------------------------------------------------------------------------- conversion

    def _convert_table(
        self, arrays: dict[str, Any], row_numbers: np.ndarray, source: str
    ) -> Iterator[Piece]:
        """Convert a batch; yields its piece and returns which rows go to the row path."""
        n = len(row_numbers)
        try:
            columns = self._columns(arrays, n, source)
            key = self._raw_key(arrays, n, source) if self.key_column is not None else None
        except _Unsupported:
            return np.ones(n, bool)
        unusual = np.zeros(n, bool)
        for column in columns.values():
            if column is not None:
                unusual |= column.state == kernels.UNUSUAL
        if self._label is not None:
            label = columns.get(self._label)
            unusual |= label is None or label.state != kernels.PRESENT
        good = np.flatnonzero(~unusual)
        if len(good):
            yield self._piece(columns, key, good)
        return unusual

    def _columns(self, arrays: dict[str, Any], n: int, source: str) -> dict[str, _Column | None]:
        """Each feature's column over the batch; None for a metadata column the file lacks."""
        out: dict[str, _Column | None] = {}
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

    def _column(self, feature: Feature, array: Any, source: str) -> _Column:
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
            return self._text_column(feature, *_string_buffers(array))
        if pa.types.is_boolean(t):
            if kind == kernels.BYTES:
                return self._text_column(
                    feature, *_string_buffers(pc.if_else(array, "True", "False"))
                )
            array = array.cast(pa.int64())
            t = array.type
        if pa.types.is_integer(t):
            valid = _valid(array)
            if pa.types.is_uint64(t):
                too_big = valid & (array.fill_null(0).to_numpy() > np.iinfo(np.int64).max)
                if too_big.any():
                    raise _Unsupported
            values = array.cast(pa.int64()).fill_null(0).to_numpy()
            if kind == kernels.INT:
                state = np.where(valid, kernels.PRESENT, kernels.MISSING).astype(np.uint8)
                return _Column(kind, state, values, *_no_text(len(array)))
            if kind == kernels.FLOAT:
                return self._float_column(values.astype(np.float64), _present(valid))
            return self._text_column(feature, *_string_buffers(array.cast(pa.large_string())))
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
                return _Column(kind, state, ints, *_no_text(len(values)))
            offsets, text = _python_floats(values, valid)
            ints = np.zeros(len(values), np.int64)
            return _Column(kind, _present(valid), ints, text, offsets[:-1], offsets[1:])
        raise _Unsupported

    def _text_column(
        self, feature: Feature, offsets: np.ndarray, data: np.ndarray, valid: np.ndarray
    ) -> _Column:
        """A column of text cells typed as the feature's dtype (:func:`kernels.classify_cells`)."""
        import pyarrow as pa

        kind = _KINDS[feature.dtype]
        n = len(offsets) - 1
        state = np.empty(n, np.uint8)
        start = np.empty(n, np.int64)
        end = np.empty(n, np.int64)
        ints = np.zeros(n, np.int64)
        floats = np.zeros(n, np.float64)
        exact = np.zeros(n, bool)
        kernels.classify_cells(
            offsets,
            data,
            valid,
            kind,
            self._na_data,
            self._na_offsets,
            state,
            start,
            end,
            ints,
            floats,
            exact,
        )
        if kind != kernels.FLOAT:
            return _Column(kind, state, ints, data, start, end)
        # the rest of the plain decimals: parsed by Arrow's cast, printed by Arrow's
        rest = (state == kernels.PRESENT) & ~exact
        source = data
        if rest.any():
            spans = _string_array(*kernels.gather_spans(data, start, end, rest), rest)
            floats[rest] = spans.cast(pa.float64()).to_numpy(zero_copy_only=False)[rest]
            fits = _fits_float32(floats, rest)
            printed_offsets, printed_data = _arrow_float_text(floats, fits)
            source = np.concatenate([data, printed_data])
            start[fits] = len(data) + printed_offsets[:-1][fits]
            end[fits] = len(data) + printed_offsets[1:][fits]
            state[rest & ~fits] = kernels.UNUSUAL  # inf, or out of float32's range
        return self._float_column(floats, state, source, start, end)

    @staticmethod
    def _float_column(
        values: np.ndarray,
        state: np.ndarray,
        source: np.ndarray | None = None,
        start: np.ndarray | None = None,
        end: np.ndarray | None = None,
    ) -> _Column:
        """A FLOAT column: PRESENT doubles out of float32's range are the row path's (an error).

        Each PRESENT value's Python text (the key's) is printed from the span of ``source``
        given for it (a plain decimal, or Arrow's shortest text), else from Arrow's.
        """
        fits = _fits_float32(values, state == kernels.PRESENT)
        state[(state == kernels.PRESENT) & ~fits] = kernels.UNUSUAL
        if source is None:
            printed, source = _arrow_float_text(values, fits)
            start, end = printed[:-1], printed[1:]
        offsets, text = kernels.python_float_text(source, start, end, fits)
        bits = np.zeros(len(values), np.int64)
        bits[fits] = values[fits].astype(np.float32).view(np.uint32)
        return _Column(kernels.FLOAT, state, bits, text, offsets[:-1], offsets[1:], values)

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
                raise _Unsupported  # 3 and 3.0 both read as 3.0, and print apart
            values = array.cast(pa.float64()).fill_null(np.nan).to_numpy()
            valid = _valid(array)
            offsets, text = _python_floats(values, valid)
            array = pc.if_else(valid, _string_array(offsets, text), "None")
        elif pa.types.is_boolean(t):
            array = pc.if_else(array, "True", "False")
        elif pa.types.is_integer(t) or pa.types.is_null(t):
            array = array.cast(pa.large_string())
        elif not (
            pa.types.is_string(t)
            or pa.types.is_large_string(t)
            or (pa.types.is_dictionary(t) and pa.types.is_string(t.value_type))
        ):
            raise _Unsupported
        offsets, data, valid = _string_buffers(pc.fill_null(array, "None"))
        return data, offsets[:-1], offsets[1:]

    def _piece(
        self,
        columns: dict[str, _Column | None],
        key: tuple[np.ndarray, ...] | None,
        rows: np.ndarray,
    ) -> Piece:
        present = [
            (f, columns[f.name]) for f in self.schema.features if columns[f.name] is not None
        ]
        texts = [c.text for _, c in present]
        bases = np.zeros(len(texts) + 1, np.int64)
        np.cumsum([len(t) for t in texts], out=bases[1:])
        text = np.concatenate(texts) if texts else np.empty(0, np.uint8)
        kinds = np.array([c.kind for _, c in present], np.int64)
        state = np.stack([c.state for _, c in present])
        ints = np.stack([c.ints for _, c in present])
        start = np.stack([c.start + bases[i] for i, (_, c) in enumerate(present)])
        end = np.stack([c.end + bases[i] for i, (_, c) in enumerate(present)])
        rows = rows.astype(np.int64)
        if key is None:
            key_offsets, key_data = kernels.json_keys(rows, kinds, state, ints, text, start, end)
        else:
            prefix = np.frombuffer(f"{self.key_column}=".encode(), np.uint8)
            key_offsets, key_data = kernels.raw_keys(rows, prefix, *key)
        digests = kernels.blake2b_16(key_offsets, key_data)
        high, _ = kernels.digest_words(digests)
        splits = kernels.assign_splits(high, self._cumulative)
        order = sorted(range(len(present)), key=lambda i: convert.map_order(present[i][0].name))
        names = [convert.map_key(present[i][0].name) for i in order]
        name_offsets = np.zeros(len(names) + 1, np.int64)
        np.cumsum([len(k) for k in names], out=name_offsets[1:])
        offsets, data = kernels.encode_examples(
            rows,
            kinds[order],
            state[order],
            ints[order],
            text,
            start[order],
            end[order],
            np.frombuffer(b"".join(names), np.uint8),
            name_offsets,
        )
        records = Records(splits, digests, offsets, data)
        stats = self._stats(columns, records, rows)
        return Piece(records, stats, [], len(rows), "batch")

    def _stats(
        self, columns: dict[str, _Column | None], records: Records, rows: np.ndarray
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
        self, columns: dict[str, _Column | None], rows: np.ndarray, split: np.ndarray
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
            spans = kernels.gather_spans(column.text, start, end, np.ones(len(rows), bool))
            encoded = _string_array(*spans).dictionary_encode()
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


def _missing(feature: Feature, n: int) -> _Column:
    """A column the file does not have: every value missing."""
    return _Column(
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
    offsets, data, _ = _string_buffers(printed)
    return offsets, data


def _python_floats(values: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, text) of ``repr`` of each valid double (empty where not valid)."""
    offsets, data = _arrow_float_text(values, valid)
    return kernels.python_float_text(data, offsets[:-1], offsets[1:], valid)
