"""Read a file range and convert its rows: in Arrow batches by compiled loops, or row by row.

Two paths give the same records, byte for byte, in the same splits:

* The **row path** (:class:`RowPath`) reads :class:`~.sources.RawRow` objects and converts each
  with :class:`~.convert.RowConverter`. Images and text always take it, and it is the reference
  the batch path is tested against.
* The **batch path** (:class:`BatchPath`) takes CSV/TSV, JSON lines and Parquet. A range's bytes
  are read once; a compiled scan (:mod:`.kernels.text`) finds the lines that Arrow's readers
  parse exactly as the row path's parser does; Arrow parses them in one call; and
  :class:`~.batch_convert.BatchConverter` types the cells and computes the split keys, their
  hashes, the splits and the serialized examples for the whole batch. Everything the batch
  path cannot vouch for goes to the row path, with the row path's own reading of those lines: a
  bad row (its dead letter, line number and reason as the row path gives them), an odd spelling
  of a value, a quoted field that spans lines (read by the row path's record assembler until it
  reaches a record start where the batch path can take over again), a BOM, bad bytes. Only those
  rows pay Python's price.

Both yield :class:`Piece` objects: records as columns (:class:`~.records.Records`), the splits'
statistics and the dead letters.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
from collections.abc import Iterable, Iterator
from typing import IO, Any

import numpy as np

from tfrecord_suite.schema import Schema
from tfrecord_suite.shard import convert, kernels, sources
from tfrecord_suite.shard.batch_convert import BatchConverter, Unsupported
from tfrecord_suite.shard.kernels import text as text_loops
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
            # a lone surrogate (JSON's "\ud800") shown escaped: no UTF-8 can hold it
            text = str(v).encode("utf-8", "backslashreplace").decode("utf-8")
            out[k] = text if len(text) <= 500 else text[:500] + "..."
    return out


def plain_header(data: bytes, starts: np.ndarray, read: ReadOptions) -> list[str] | None:
    """The header of a CSV file whose first line is a plain header; None otherwise.

    Plain: not blank, no quote left open, decodable, not too long: the record the row path's
    assembler takes as the header, and what :func:`sources.csv_header` reads as well.
    """
    if len(starts) < 2:
        return None
    line = data[: starts[1]]
    if line.count(b'"') % 2 or len(line) > read.max_line_bytes:
        return None
    try:
        text = line.decode(read.encoding)
    except UnicodeDecodeError:
        return None
    if not text.strip():
        return None
    fields = sources.parse_record(text, sources.csv_delimiter(read))
    if not fields or not any(f.strip() for f in fields):
        return None
    return [f.strip() for f in fields]


def parse_plain_lines(
    buf: np.ndarray,
    starts: np.ndarray,
    lines: np.ndarray,
    read: ReadOptions,
    names: list[str],
    include: list[str],
) -> Any:
    """Plain CSV lines (:func:`text_loops.scan_csv_lines`) parsed by Arrow, every column as text.

    One row per line, the columns ``names`` (those in ``include`` read); None if Arrow refuses
    them or reads another number of rows (then the row path reads them).
    """
    import pyarrow as pa
    import pyarrow.csv as pacsv

    gathered = text_loops.gather_lines(buf, starts, lines.astype(np.int64))
    try:
        table = pacsv.read_csv(
            pa.py_buffer(gathered),
            read_options=pacsv.ReadOptions(
                column_names=names, use_threads=False, block_size=len(gathered) + 1
            ),
            parse_options=pacsv.ParseOptions(
                delimiter=sources.csv_delimiter(read),
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
    return table if table.num_rows == len(lines) else None


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


class _HeldBytes(io.RawIOBase):
    """A file of which a range of bytes is held in memory; the rest is read from the file itself.

    The row path reads the rows the batch path hands it from here, so a bad row in a file on
    ``gs://`` costs no request (a quoted field that spans past the range reads on from the file).

    Args:
        uri: The file.
        base: The offset of the held bytes.
        data: The held bytes.
        size: The file's size where the held bytes reach its end; None otherwise.

    """

    def __init__(self, uri: str, base: int, data: bytes, size: int | None):
        super().__init__()
        self._uri = uri
        self._base = base
        self._data = data
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
        base, data = self._base, self._data
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
        self.key_column = key_column
        self.read = read
        self.rows = row_path
        self.converter = BatchConverter(schema, splits, key_column)

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
        starts = text_loops.line_starts(buf)
        delimiter = sources.csv_delimiter(self.read)
        first_line = 0
        if part.start == 0:
            header = plain_header(data, starts, self.read)
            if header is None:  # blank lines, a quote or bad bytes before the header
                yield from self.rows.convert(sources.read_rows(part.uri, self.read, part=part))
                return
            first_line = 1
        else:
            header = sources.csv_header(part.uri, self.read)
        status = text_loops.scan_csv_lines(
            buf, starts, ord(delimiter), len(header), self.read.max_line_bytes
        )
        opener = self._opener(part, data)
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
            include = [names[i] for i in sorted(needed)]
            table = parse_plain_lines(buf, starts, plain, self.read, names, include)
            if table is None:
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
    def _opener(part: FileRange, data: bytes) -> sources.Opener:
        """Opens the range's file with ``data``, the range's bytes, held."""
        size = part.start + len(data) if part.end is None else None

        def opener(uri: str) -> IO[bytes]:
            return io.BufferedReader(_HeldBytes(uri, part.start, data, size))

        return opener

    # ----------------------------------------------------------------------------- JSON lines

    def _jsonl(self, part: FileRange, data: bytes) -> Iterator[Piece]:
        buf = np.frombuffer(data, np.uint8)
        starts = text_loops.line_starts(buf)
        status = text_loops.scan_json_lines(buf, starts, self.read.max_line_bytes)
        opener = self._opener(part, data)
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
        gathered = text_loops.gather_lines(buf, starts, lines.astype(np.int64))
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
        try:
            records, stats, unusual = self.converter.convert(arrays, len(row_numbers), source)
        except Unsupported:
            return np.ones(len(row_numbers), bool)
        if len(records):
            yield Piece(records, stats, [], len(records), "batch")
        return unusual
