"""Extract: find the input files, detect their format and read them as rows.

Every reader yields :class:`RawRow` objects that remember the file and row number they came from, so
any error downstream can name exactly what was wrong. Files are opened through Beam's
``FileSystems`` when Beam is importable (so ``gs://`` works on every runner) and with ``open``
otherwise.
"""

from __future__ import annotations

import codecs
import csv
import dataclasses
import fnmatch
import glob
import io
import itertools
import json
import os
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

from tfrecord_suite.errors import UserError
from tfrecord_suite.io import storage

FORMATS = ("csv", "tsv", "jsonl", "parquet", "images", "text")
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".gif", ".bmp", ".webp")
_EXTENSION_FORMATS = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".txt": "text",
    ".text": "text",
}
_GLOB_CHARS = set("*?[")


#: Opens a file for reading bytes (:func:`open_file`, or the batch path's bytes in memory).
Opener = Callable[[str], IO[bytes]]


class InputError(UserError):
    """The input cannot be read as asked; the message says what is wrong and what to do."""


@dataclasses.dataclass(frozen=True)
class RawRow:
    """One raw example before conversion.

    Attributes:
        file: URI of the file it came from.
        row: 1-based row (line) number in the file; 0 for whole-file examples such as images.
        values: Column name to raw value (strings for CSV, JSON values for JSON lines...).
        error: Set when the row could not even be split into values (ragged CSV row, bad JSON).
        raw: The row's raw text when it is bad (at most :data:`MAX_RAW_CHARS` characters), for
            the dead letter.

    """

    file: str
    row: int
    values: dict[str, Any]
    error: str | None = None
    raw: str | None = None


#: How much of a bad row's raw text goes to the dead letter.
MAX_RAW_CHARS = 4096
#: A quoted CSV field may span lines, up to this many lines and bytes per record; past either,
#: the record is bad (reported at its first line) and reading resumes at the line after it.
MAX_RECORD_LINES = 1000
MAX_RECORD_BYTES = 8 * 1024 * 1024


def _cap(text: str) -> str:
    return text if len(text) <= MAX_RAW_CHARS else text[:MAX_RAW_CHARS] + "...[truncated]"


@dataclasses.dataclass(frozen=True)
class FileRange:
    """The part of one input file that one worker reads.

    For line formats (CSV/TSV, JSON lines, text) a byte range whose start is where a record
    starts; for Parquet a range of row groups.

    Attributes:
        uri: The file.
        start: Byte offset of the first record (row group index for Parquet).
        end: Records starting at or after this offset belong to the next range (row group
            index for Parquet); None: to the end of the file.
        first_row: The line (row for Parquet) number of the first record, for dead letters.

    """

    uri: str
    start: int = 0
    end: int | None = None
    first_row: int = 1

    @property
    def whole(self) -> bool:
        """Whether this is the whole file."""
        return self.start == 0 and self.end is None


def beam_filesystems() -> Any:
    """Beam's ``FileSystems``, usable outside a pipeline too.

    Outside one (planning, schema inference, moving shards into place) no pipeline has given it
    options, and Beam's S3 filesystem builds its client from them: default ones leave boto3 to
    its environment. Options a pipeline set are kept.
    """
    from apache_beam.io.filesystems import FileSystems

    if FileSystems._pipeline_options is None:
        from apache_beam.options.pipeline_options import PipelineOptions

        FileSystems.set_options(PipelineOptions([]))
    return FileSystems


def open_file(uri: str) -> IO[bytes]:
    """Open ``uri`` for reading bytes (``gs://``, ``s3://`` through Beam's ``FileSystems``)."""
    if storage.is_remote(uri):
        return beam_filesystems().open(uri, compression_type="uncompressed")
    return open(uri, "rb")


def resolve_inputs(input_uri: str) -> list[storage.FileInfo]:
    """The files an input names: one file, every file under a folder or prefix, or a glob.

    Hidden files (``.*``) and ``_SUCCESS``-style markers are skipped.

    Raises:
        InputError: Nothing exists there, or it matches no file.

    """
    uri = storage.normalize(input_uri)
    is_glob = any(c in _GLOB_CHARS for c in uri)
    if is_glob:
        if storage.is_remote(uri):
            base = uri[: min(uri.index(c) for c in _GLOB_CHARS if c in uri)]
            base = base.rsplit("/", 1)[0]
            files = [f for f in storage.list_files(base) if fnmatch.fnmatchcase(f.uri, uri)]
        else:
            files = [
                storage.stat(p) for p in sorted(glob.glob(uri, recursive=True)) if os.path.isfile(p)
            ]
    elif storage.is_remote(uri):
        try:
            files = [storage.stat(uri)]
        except FileNotFoundError:
            files = storage.list_files(uri)
    elif os.path.isfile(uri):
        files = [storage.stat(uri)]
    elif os.path.isdir(uri):
        files = storage.list_files(uri)
    else:
        raise InputError(f"input {input_uri!r} does not exist; pass a file, a folder or a glob")
    files = [f for f in files if not _is_hidden(f.uri, uri)]
    if not files:
        raise InputError(
            f"input {input_uri!r} matches no files; check the path or glob (hidden files are "
            "skipped)"
        )
    return files


def _is_hidden(path: str, base: str) -> bool:
    rel = path[len(base) :] if path.startswith(base) else storage.basename(path)
    parts = [p for p in rel.replace("\\", "/").split("/") if p]
    return any(p.startswith(".") or p.startswith("_") for p in parts)


def detect_format(input_uri: str, files: Sequence[storage.FileInfo]) -> str:
    """Guess the format from the files' extensions and layout.

    A folder whose files are all images is ``images`` (labels from sub-folder names); otherwise the
    extension that most files share decides.

    Raises:
        InputError: The extensions are unknown or mixed.

    """
    exts = [os.path.splitext(f.uri)[1].lower() for f in files]
    if exts and all(e in IMAGE_EXTENSIONS for e in exts):
        return "images"
    formats = {_EXTENSION_FORMATS.get(e) for e in exts}
    if len(formats) == 1 and None not in formats:
        return formats.pop()
    known = sorted(f for f in formats if f)
    unknown = sorted({e or "(none)" for e in exts if e not in _EXTENSION_FORMATS})
    raise InputError(
        f"cannot detect the format of {input_uri!r} (formats {known}, unknown extensions "
        f"{unknown}); pass --format one of {', '.join(FORMATS)}"
    )


def check_format(fmt: str) -> str:
    """``fmt`` if it is ``auto`` or a known format; a one-line error naming the choices if not."""
    if fmt != "auto" and fmt not in FORMATS:
        raise InputError(f"--format {fmt!r}: use auto or one of {', '.join(FORMATS)}")
    return fmt


def resolve_format(fmt: str, input_uri: str, files: Sequence[storage.FileInfo]) -> str:
    """The format to read ``files`` with: ``fmt`` checked, or detected when it is ``auto``."""
    return detect_format(input_uri, files) if check_format(fmt) == "auto" else fmt


def image_classes(input_uri: str, files: Sequence[storage.FileInfo]) -> list[str]:
    """Class names of an image folder: the names of the folders directly holding the images.

    Raises:
        InputError: Images lie directly in the root, so there is no class folder.

    """
    root = storage.normalize(input_uri)
    classes = set()
    for f in files:
        label = image_label(f.uri)
        if storage.normalize(storage.parent(f.uri)) == root:
            raise InputError(
                f"image {f.uri} is not inside a class folder; lay images out as "
                f"{input_uri}/<class>/<image>"
            )
        classes.add(label)
    return sorted(classes)


def image_label(uri: str) -> str:
    """The class of an image: the name of its folder."""
    return storage.basename(storage.parent(uri))


# ------------------------------------------------------------------------------------------ rows


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """How raw files are parsed.

    Attributes:
        format: One of :data:`FORMATS`.
        encoding: Text encoding of CSV/TSV/JSON lines/text files.
        text_mode: ``line`` (one example per line) or ``file`` (one example per file, labelled by
            its folder) for the ``text`` format.
        delimiter: Overrides the CSV delimiter.
        max_line_bytes: A longer line is a bad row instead of an out-of-memory error.

    """

    format: str
    encoding: str = "utf-8"
    text_mode: str = "line"
    delimiter: str | None = None
    max_line_bytes: int = 64 * 1024 * 1024


def read_rows(
    uri: str,
    options: ReadOptions,
    limit: int | None = None,
    part: FileRange | None = None,
    opener: Opener | None = None,
) -> Iterator[RawRow]:
    """Yield the rows of one file, or of one part of it.

    Args:
        uri: The file.
        options: Parsing options.
        limit: Stop after this many rows (schema inference samples the first rows).
        part: Read only this range (from :mod:`tfrecord_suite.shard.ranges`); the rows are
            exactly those that reading the whole file yields from the range, with the same row
            numbers.
        opener: Opens the file of a line format (CSV/TSV, JSON lines, text lines) for reading
            bytes; :func:`open_file` when None. The batch path passes the bytes it holds.

    """
    opener = opener or open_file
    fmt = options.format
    part = part or FileRange(uri)
    if not part.whole and fmt not in SPLITTABLE:
        raise InputError(f"{uri}: {fmt} files are read whole, not in ranges")
    if fmt in ("csv", "tsv"):
        rows = _read_csv(uri, options, part, opener)
    elif fmt == "jsonl":
        rows = _read_jsonl(uri, options, part, opener)
    elif fmt == "parquet":
        rows = _read_parquet(uri, part)
    elif fmt == "images":
        rows = _read_whole_file(uri, "image")
    elif fmt == "text":
        rows = _read_text(uri, options, part, opener)
    else:
        raise InputError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    count = 0
    for row in rows:
        if limit is not None and count >= limit:
            return
        count += 1
        yield row
    if not count and part.whole and fmt in ("csv", "tsv", "jsonl", "text") and _is_empty(uri):
        # among other inputs an empty file is a bad input of its own, not silence
        yield RawRow(uri, 0, {}, "empty file: no header and no rows")


def _is_empty(uri: str) -> bool:
    with open_file(uri) as fh:
        return not fh.read(1)


_MARKER = "\0ERR"


def read_lines(
    uri: str,
    options: ReadOptions,
    errors: list[str],
    start: int = 0,
    opener: Opener | None = None,
) -> Iterator[tuple[int, str]]:
    r"""``(byte offset, decoded line)`` from ``start``, so a bad byte costs one row only.

    An over-long line (skipped without being held in memory) or an undecodable one becomes a
    marker line ``\0ERR<n>`` whose reason is ``errors[n]``. Encodings that are not
    ASCII-compatible (UTF-16/32) are decoded as a stream instead, with offsets of -1 (such files
    are read whole).
    """

    def marker(reason: str) -> str:
        errors.append(reason)
        return f"{_MARKER}{len(errors) - 1}\n"

    limit = options.max_line_bytes
    opener = opener or open_file
    if not byte_lines(options):
        with opener(uri) as raw:
            text = io.TextIOWrapper(raw, encoding=options.encoding, newline="")
            try:
                for line in text:
                    yield -1, line
            except UnicodeDecodeError as exc:
                yield -1, marker(_decode_error(options, exc))
        return
    with opener(uri) as raw:
        if start:
            raw.seek(start)
        offset = start
        while True:
            line = raw.readline(limit + 1)
            if not line:
                return
            at, offset = offset, offset + len(line)
            if len(line) > limit and not line.endswith(b"\n"):
                while (more := raw.readline(limit)) and not more.endswith(b"\n"):
                    offset += len(more)
                offset += len(more)
                yield at, marker(f"line longer than {limit} B")
                continue
            try:
                yield at, line.decode(options.encoding)
            except UnicodeDecodeError as exc:
                yield at, marker(_decode_error(options, exc))


def byte_lines(options: ReadOptions) -> bool:
    """Whether lines can be found in the raw bytes (ASCII-compatible encodings)."""
    return not codecs.lookup(options.encoding).name.startswith(("utf-16", "utf-32"))


def _marker_error(text: str, errors: list[str]) -> str | None:
    if text.startswith(_MARKER):
        return errors[int(text[len(_MARKER) :].strip())]
    return None


def _read_csv(
    uri: str, options: ReadOptions, part: FileRange, opener: Opener | None = None
) -> Iterator[RawRow]:
    """CSV/TSV records of ``part``; a syntax error (bad quote, ragged row) costs one row.

    A record is complete when its quote characters balance (opening and closing quotes and
    doubled quotes come in pairs), so a quoted field may span lines, up to
    :data:`MAX_RECORD_LINES` lines and :data:`MAX_RECORD_BYTES`. Each record is parsed on its own
    with the strict dialect. A record that does not parse, or a quote still open past the bound,
    at the end of the file or before an unreadable line, makes only its first line bad: it is
    reported there with its raw text, and reading resumes at the next line, so the lines that
    were read ahead are read again as records of their own and no good row after it is lost.
    """
    for _, _, row in csv_records(uri, options, part, rows=True, opener=opener):
        if row is not None:
            yield row


def csv_records(
    uri: str,
    options: ReadOptions,
    part: FileRange,
    rows: bool,
    opener: Opener | None = None,
    header: list[str] | None = None,
) -> Iterator[tuple[int, int, RawRow | None]]:
    """``(line, byte offset, row)`` for every record that starts in ``part``.

    The one record assembler: :func:`_read_csv` takes its rows, and :func:`csv_record_starts`
    only its record starts (``rows=False`` skips parsing records of one line, which never change
    where the next record starts), so a range starts exactly where reading the whole file starts
    a record. ``opener`` opens the file (:func:`open_file` when None); ``header`` is the file's
    header when the caller has it (a range after the first reads it from the file otherwise).
    """
    delimiter = csv_delimiter(options)
    errors: list[str] = []
    if part.start == 0:
        header = None  # the file's first record
    elif header is None:
        header = csv_header(uri, options, opener)
    numbered = (
        (part.first_row + i, at, text)
        for i, (at, text) in enumerate(read_lines(uri, options, errors, part.start, opener))
    )
    pending: list[tuple[int, int, str]] = []  # lines read ahead, to read again (last = next)

    def take() -> tuple[int, int, str] | None:
        return pending.pop() if pending else next(numbered, None)

    def bad(first: tuple[int, int, str], more: list[tuple[int, int, str]], why: str) -> RawRow:
        pending.extend(reversed(more))
        return RawRow(uri, first[0], {}, why, _cap(first[2]))

    while (first := take()) is not None:
        line_no, at, text = first
        if part.end is not None and at >= part.end:
            return
        marker = _marker_error(text, errors)
        if marker:
            if header is None:
                raise InputError(f"{uri}: header line: {marker}")
            yield line_no, at, RawRow(uri, line_no, {}, marker)
            continue
        more: list[tuple[int, int, str]] = []
        size, open_quote = len(text), text.count('"') % 2 == 1
        while open_quote and len(more) + 1 < MAX_RECORD_LINES and size <= MAX_RECORD_BYTES:
            nxt = take()
            if nxt is None or _marker_error(nxt[2], errors):
                if nxt is not None:
                    pending.append(nxt)
                break
            more.append(nxt)
            size += len(nxt[2])
            open_quote ^= nxt[2].count('"') % 2 == 1
        if open_quote:
            if header is None:
                raise InputError(f"{uri}: header line: unterminated quote")
            yield line_no, at, bad(
                first, more, f"unterminated quote: still open after {len(more) + 1} line(s) "
                f"(a quoted field may span at most {MAX_RECORD_LINES} lines and "
                f"{MAX_RECORD_BYTES} bytes)",
            )  # fmt: skip
            continue
        record = text + "".join(t for _, _, t in more)
        if header is None:
            if not record.strip():
                continue
            fields = parse_record(record, delimiter)
            if not fields or not any(f.strip() for f in fields):
                raise InputError(f"{uri}: the first line must be a header with column names")
            header = [f.strip() for f in fields]
            continue
        if not record.strip("\r\n"):
            continue
        if not more and not rows:
            yield line_no, at, None
            continue
        fields = parse_record(record, delimiter)
        if fields is None:
            yield line_no, at, bad(
                first, more, "CSV syntax error: a quote inside a field or after a quoted "
                "field (quote the whole field and double the quotes inside it)",
            )  # fmt: skip
        elif len(fields) != len(header):
            why = f"row has {len(fields)} fields, header has {len(header)}"
            yield line_no, at, bad(first, more, why)
        elif more and _swallowed(first, more, take, pending, errors, delimiter, len(header)):
            yield line_no, at, bad(
                first, more, "unterminated quote: its line would take the start of the next "
                "row(s) into one field, leaving a broken row after it",
            )  # fmt: skip
        else:
            yield line_no, at, RawRow(uri, line_no, dict(zip(header, fields, strict=True)))


def _swallowed(
    first: tuple[int, int, str],
    more: list[tuple[int, int, str]],
    take: Any,
    pending: list[tuple[int, int, str]],
    errors: list[str],
    delimiter: str,
    width: int,
) -> bool:
    """Whether a record that spans lines is better read as a bad first line and good rows after.

    A quote left open on one line pairs with the first quote of a later line, and the lines
    between can happen to make a record of the right width: then the row whose line supplied
    that quote is cut in two, and what is left of it becomes a bad record (or worse, a good-looking
    one that breaks a later row). So both readings are followed ahead, each record bad or good
    by the reader's own rule (a bad record costs its first line), until they meet at the same
    line. When the record's reading meets a bad record on the way (the sign of a cut row), the
    record is kept only if its reading is better on both counts: fewer bad records and more good
    ones. A quoted field that truly spans lines makes its
    continuation lines bad when they are read on their own, so it keeps its reading. Only lines
    after ``first`` are read (ahead, then given back), at most :data:`MAX_RECORD_LINES` of them,
    so a range reader starting at a record start decides as reading the whole file does.
    """
    window = [first, *more]
    end = len(window)

    def line(i: int) -> tuple[int, int, str] | None:
        while len(window) <= i:
            nxt = take()
            if nxt is None:
                return None
            window.append(nxt)
        return window[i]

    def record_end(start: int) -> int | None:
        text = line(start)[2]
        size, open_quote, i = len(text), text.count('"') % 2 == 1, start + 1
        while open_quote:
            # the bounds as csv_records applies them: checked before each further line
            if i - start >= MAX_RECORD_LINES or size > MAX_RECORD_BYTES:
                return None
            nxt = line(i)
            if nxt is None or _marker_error(nxt[2], errors):
                return None
            size += len(nxt[2])
            open_quote ^= nxt[2].count('"') % 2 == 1
            i += 1
        return i

    def step(start: int) -> tuple[int, int | None]:
        """``(index after the record at start, 0 if it is good, 1 if bad, None if blank)``."""
        if _marker_error(line(start)[2], errors):
            return start + 1, 1
        stop = record_end(start)
        if stop is None:
            return start + 1, 1
        text = "".join(t for _, _, t in window[start:stop])
        if not text.strip("\r\n"):
            return stop, None
        fields = parse_record(text, delimiter)
        return (stop, 0) if fields is not None and len(fields) == width else (start + 1, 1)

    try:
        # each reading's position and its counts of [good, bad] records so far
        at = {"record": end, "bad line": 1}
        counts = {"record": [1, 0], "bad line": [0, 1]}
        while at["record"] != at["bad line"]:
            reading = min(at, key=at.__getitem__)  # the one behind moves on
            if at[reading] - end > MAX_RECORD_LINES:
                return False  # no meeting point near: no evidence against the record
            if line(at[reading]) is None:  # the end of the input: both readings end here
                break
            at[reading], bad = step(at[reading])
            if bad is not None:
                counts[reading][bad] += 1
        (good_record, bad_record), (good_line, bad_line) = counts["record"], counts["bad line"]
        if not bad_record:
            return False  # every record after it is good: no sign of a stray quote
        return not (bad_record < bad_line and good_record > good_line)
    finally:
        pending.extend(reversed(window[len(more) + 1 :]))


def csv_delimiter(options: ReadOptions) -> str:
    """The delimiter of a CSV/TSV file: the one given, else a comma (a tab for TSV)."""
    return options.delimiter or ("\t" if options.format == "tsv" else ",")


def parse_record(text: str, delimiter: str) -> list[str] | None:
    """The fields of one complete record, or None when it is not valid CSV (strict dialect)."""
    if '"' not in text:
        return text.rstrip("\r\n").split(delimiter)
    try:
        return next(csv.reader([text], delimiter=delimiter, strict=True), [])
    except csv.Error:
        return None


#: Formats a big file of which is read by several workers, in ranges
#: (:mod:`tfrecord_suite.shard.ranges`).
SPLITTABLE = ("csv", "tsv", "jsonl", "text", "parquet")


def csv_record_starts(
    uri: str, options: ReadOptions, start: int, first_line: int
) -> Iterator[tuple[int, int]]:
    """``(byte offset, line)`` of every record the assembler finds reading from ``start``.

    ``start`` must be a line start; ``first_line`` numbers its line. One-line records are not
    parsed (they never change where the next record starts), so this is a fast way to find
    where records start: :mod:`tfrecord_suite.shard.ranges` cuts files at them.
    """
    part = FileRange(uri, start, None, first_line)
    for line_no, at, _ in csv_records(uri, options, part, rows=False):
        yield at, line_no


def is_error_line(text: str) -> bool:
    """Whether a line from :func:`read_lines` stands for an unreadable line."""
    return text.startswith(_MARKER)


def _decode_error(options: ReadOptions, exc: UnicodeDecodeError) -> str:
    return f"not valid {options.encoding} ({exc.reason}); pass --encoding to read it"


def csv_header(uri: str, options: ReadOptions, opener: Opener | None = None) -> list[str]:
    """The column names of a CSV/TSV file (empty if the file is empty)."""
    delimiter = csv_delimiter(options)
    errors: list[str] = []
    lines = (text for _, text in read_lines(uri, options, errors, 0, opener))
    first = next(csv.reader(lines, delimiter=delimiter), None)
    if not first:
        return []
    if _marker_error(first[0], errors):
        raise InputError(f"{uri}: header line: {_marker_error(first[0], errors)}")
    return [h.strip() for h in first]


def _numbered_lines(
    uri: str, options: ReadOptions, part: FileRange, errors: list[str], opener: Opener | None
) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of the lines that start in ``part``."""
    for i, (at, line) in enumerate(read_lines(uri, options, errors, part.start, opener)):
        if part.end is not None and at >= part.end:
            return
        yield part.first_row + i, line


def _read_jsonl(
    uri: str, options: ReadOptions, part: FileRange, opener: Opener | None
) -> Iterator[RawRow]:
    errors: list[str] = []
    for line_no, line in _numbered_lines(uri, options, part, errors, opener):
        marker = _marker_error(line, errors)
        if marker:
            yield RawRow(uri, line_no, {}, marker)
            continue
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            yield RawRow(
                uri, line_no, {}, f"invalid JSON: {exc.msg} at column {exc.colno}", _cap(line)
            )
            continue
        if not isinstance(obj, dict):
            yield RawRow(
                uri, line_no, {}, f"expected a JSON object, got {type(obj).__name__}", _cap(line)
            )
            continue
        yield RawRow(uri, line_no, obj)


def _read_parquet(uri: str, part: FileRange) -> Iterator[RawRow]:
    try:
        batches = parquet_batches(uri, part)
        first = next(batches, None)
    except ParquetUnreadable as exc:
        yield RawRow(uri, 0, {}, str(exc))
        return
    if first is None:
        return
    for row, batch in itertools.chain([first], batches):
        for i, values in enumerate(batch.to_pylist()):
            yield RawRow(uri, row + i, values)


class ParquetUnreadable(InputError):
    """A file is not a Parquet file pyarrow can open."""


def parquet_batches(uri: str, part: FileRange, batch_size: int = 4096) -> Iterator[tuple[int, Any]]:
    """``(row number of its first row, pyarrow RecordBatch)`` of the row groups ``part`` names.

    Raises:
        ParquetUnreadable: On the first ``next``, when the file cannot be opened as Parquet.

    """
    import pyarrow.parquet as pq

    with open_file(uri) as fh:
        try:
            pf = pq.ParquetFile(io.BytesIO(fh.read()) if storage.is_remote(uri) else fh)
        except Exception as exc:  # pyarrow raises several types for a bad file
            raise ParquetUnreadable(f"not a readable Parquet file: {exc}") from None
        groups = list(range(pf.num_row_groups))[part.start : part.end]
        row = part.first_row
        for batch in pf.iter_batches(batch_size=batch_size, row_groups=groups):
            yield row, batch
            row += batch.num_rows


def parquet_columns(uri: str) -> list[str]:
    """Column names of a Parquet file."""
    import pyarrow.parquet as pq

    with open_file(uri) as fh:
        source = io.BytesIO(fh.read()) if storage.is_remote(uri) else fh
        return list(pq.ParquetFile(source).schema_arrow.names)


def _read_whole_file(uri: str, field: str) -> Iterator[RawRow]:
    with open_file(uri) as fh:
        data = fh.read()
    yield RawRow(uri, 0, {field: data, "label": image_label(uri)})


def _read_text(
    uri: str, options: ReadOptions, part: FileRange, opener: Opener | None
) -> Iterator[RawRow]:
    if options.text_mode == "file":
        with open_file(uri) as fh:
            data = fh.read()
        try:
            text = data.decode(options.encoding)
        except UnicodeDecodeError as exc:
            yield RawRow(uri, 0, {}, _decode_error(options, exc))
            return
        yield RawRow(uri, 0, {"text": text, "label": image_label(uri)})
        return
    errors: list[str] = []
    for line_no, line in _numbered_lines(uri, options, part, errors, opener):
        marker = _marker_error(line, errors)
        if marker:
            yield RawRow(uri, line_no, {}, marker)
            continue
        stripped = line.rstrip("\r\n")
        if stripped:
            yield RawRow(uri, line_no, {"text": stripped})
