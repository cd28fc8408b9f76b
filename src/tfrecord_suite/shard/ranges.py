"""Cut a big file into ranges that many workers read, without one worker reading it first.

A file is cut every ``range_bytes`` at nominal offsets (:func:`cut_file`, no I/O but Parquet's
footer). Each cut is then probed on its own, in parallel (:func:`probe_cut`), and the probes of a
file are settled into ranges in one cheap step (:func:`settle`):

* JSON lines and text: every line is a record, so a range starts at the first line start at or
  after its cut. The probe counts the range's lines (a C-speed pass over its bytes), so that the
  settle step can number rows as reading the whole file does.
* CSV/TSV: a quoted field may hold newlines, so a line start is not always a record start, and
  where records start depends on everything before. The probe guesses, and the settle step
  checks the guess. The probe follows the record assembler
  (:func:`tfrecord_suite.shard.sources.csv_record_starts`) from two hypotheses: the cut's line
  starts a record, or the cut's line is inside a quoted field that the first line with an odd
  number of quotes closes. For each, it keeps the first record starts it reaches and its *exit*,
  the first record start at or after the next cut. The assembler's decisions from a record
  start depend only on the lines from there on, so two readings that reach the same record start
  agree from then on. The settle step walks the cuts in order, knowing the true first record start
  of each range (the exit of the range before, true by induction from the file's start): a
  hypothesis that reached it is in step with the whole-file reading, and its exit is the next
  range's true start. When neither reached it (a cut deep in an unusual run of quoted newlines),
  that range alone is read again from its true start, serially: correct always, slower only
  where the guess failed (the ``range_rescans`` counter).
* Parquet: ranges are row groups, from the footer.

Reading the ranges gives exactly the rows, row numbers and bad rows that reading the file whole
gives (tested with hypothesis, quoted newlines across every range edge included).
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterable, Sequence

import numpy as np

from tfrecord_suite.io import storage
from tfrecord_suite.shard import sources
from tfrecord_suite.shard.kernels import text as text_loops
from tfrecord_suite.shard.sources import FileRange, ReadOptions

#: A file is cut about every this many bytes (at most :data:`MAX_RANGES` ranges): small enough
#: that two local workers get the same share of one file, large enough that a range's fixed
#: cost (opening the file, reading its header) stays negligible.
RANGE_BYTES = 4 * 1024 * 1024
MAX_RANGES = 4096
#: Record starts each CSV hypothesis keeps from the start of its range: the true first record
#: start of a range is among the first few of a hypothesis in step with it.
KEPT_STARTS = 64
_BLOCK = 1024 * 1024

Start = tuple[int, int]  # (byte offset, line number relative to the cut's line start)


@dataclasses.dataclass(frozen=True)
class Cut:
    """One nominal piece of a file, before its edges are moved to record starts.

    Attributes:
        uri: The file.
        index: The cut's position among the file's cuts (0 is the file's start).
        count: How many cuts the file has.
        offset: Nominal byte offset of the cut (0 for the first).
        next_offset: Nominal byte offset of the next cut; None for the last.
        size: The file's size, as listed.

    """

    uri: str
    index: int
    count: int
    offset: int
    next_offset: int | None
    size: int


@dataclasses.dataclass(frozen=True)
class Reading:
    """Where the record assembler went from one hypothesis about a cut.

    Attributes:
        starts: Its first record starts (at most :data:`KEPT_STARTS`) before the next cut.
        exit: Its first record start at or after the next cut; None when it reached the end.

    """

    starts: tuple[Start, ...]
    exit: Start | None


@dataclasses.dataclass(frozen=True)
class Probe:
    """What one worker learned about one cut, with line numbers relative to the cut's line.

    Attributes:
        cut: The cut.
        line_start: Byte offset of the first line that starts at or after the cut.
        end: Byte offset of the first line that starts at or after the next cut (None: the end
            of the file).
        lines: Lines that start in ``[line_start, end)``.
        readings: CSV only: one per hypothesis, in the order of the module's docstring.

    """

    cut: Cut
    line_start: int
    end: int | None
    lines: int
    readings: tuple[Reading, ...] = ()


def cut_file(
    info: storage.FileInfo, options: ReadOptions, range_bytes: int | None = None
) -> list[Cut] | list[FileRange]:
    """The cuts of a file to probe, or its final ranges when no probing is needed.

    Small files, formats read whole and encodings that are not ASCII-compatible are one range;
    Parquet is cut at its row groups.
    """
    fmt = options.format
    step = max(range_bytes or RANGE_BYTES, -(-info.size // MAX_RANGES))
    if fmt not in sources.SPLITTABLE or info.size <= step:
        return [FileRange(info.uri)]
    if fmt == "parquet":
        return _parquet_ranges(info.uri)
    if (fmt == "text" and options.text_mode == "file") or not sources.byte_lines(options):
        return [FileRange(info.uri)]
    offsets = list(range(0, info.size, step))
    bounds: list[int | None] = [*offsets[1:], None]
    return [
        Cut(info.uri, i, len(offsets), at, nxt, info.size)
        for i, (at, nxt) in enumerate(zip(offsets, bounds, strict=True))
    ]


def probe_cut(cut: Cut, options: ReadOptions) -> Probe:
    """Probe one cut (one worker, one range's worth of reading; see the module docstring).

    A cut in which no line starts (inside a long line) is empty and costs one bounded read; only
    a cut with a line start looks past its end for the next one, so a long line is read once.
    """
    csv = options.format in ("csv", "tsv")
    with sources.open_file(cut.uri) as fh:
        line_start = _line_start(fh, cut.offset, cut.next_offset)
        if line_start is None:
            return Probe(cut, cut.offset, cut.offset, 0)
        end = None if cut.next_offset is None else _line_start(fh, cut.next_offset, None)
        if end is not None and end >= cut.size:
            end = None
        if not csv:
            return Probe(cut, line_start, end, _count_lines(fh, line_start, end))
        fh.seek(line_start)
        data = np.frombuffer(fh.read() if end is None else fh.read(end - line_start), np.uint8)
        starts = text_loops.line_starts(data)
        lines = len(starts) - 1
        if lines == 0:
            return Probe(cut, line_start, end, 0)
        readings = _plain_readings(fh, cut, line_start, end, data, starts)
    if readings is None:
        hypotheses = [(line_start, 0)]
        if cut.index > 0:
            closed = _after_first_odd_quote_line(cut.uri, options, line_start)
            if closed is not None:
                hypotheses.append(closed)
        readings = _follow(cut.uri, options, hypotheses, end)
    elif cut.index > 0 and lines <= sources.MAX_RECORD_LINES:
        # too few lines here to rule out the second hypothesis: look past the cut as it does
        closed = _after_first_odd_quote_line(cut.uri, options, line_start)
        if closed is not None:
            readings += _follow(cut.uri, options, [closed], end)
    return Probe(cut, line_start, end, lines, tuple(readings))


def _plain_readings(
    fh: io.BufferedIOBase,
    cut: Cut,
    line_start: int,
    end: int | None,
    data: np.ndarray,
    starts: np.ndarray,
) -> list[Reading] | None:
    """The first hypothesis's reading where no line of the cut has an odd number of quotes.

    Then every line but those of line ends only is a one-line record (the assembler's rule),
    so the reading is the lines themselves: no line is read in Python. None where a line has
    an odd number of quotes, or the file's first line is not plainly its header.
    """
    kinds = text_loops.quote_parity(data, starts)
    if (kinds == 2).any():
        return None
    records = np.flatnonzero(kinds)
    if cut.index == 0:
        first = bytes(data[starts[0] : starts[1]])
        if not records.size or records[0] != 0 or not first.strip():
            return None  # blank lines or spaces before the header: the assembler's own way
        records = records[1:]  # the header is no record
    kept = tuple((line_start + int(starts[j]), int(j)) for j in records[:KEPT_STARTS])
    exit_ = None
    if end is not None:
        line, at = len(starts) - 1, end
        fh.seek(end)
        while (text := fh.readline()) and not text.strip(b"\r\n"):
            line, at = line + 1, at + len(text)
        exit_ = (at, line) if text else None
    # the second hypothesis needs an odd line within its reach: none among this many lines
    return [Reading(kept, exit_)]


def settle(probes: Iterable[Probe], options: ReadOptions) -> tuple[list[FileRange], int]:
    """The ranges of one file from the probes of all its cuts, and how many were read again.

    Each range starts at the true first record start at or after its cut, numbered with the
    line counts of the cuts before it.
    """
    ordered = sorted(probes, key=lambda p: p.cut.index)
    if [p.cut.index for p in ordered] != list(range(ordered[0].cut.count)):
        raise RuntimeError(f"{ordered[0].cut.uri}: probes of cuts are missing or repeated")
    lines_before = [1]
    for probe in ordered[:-1]:
        lines_before.append(lines_before[-1] + probe.lines)
    if options.format in ("csv", "tsv"):
        starts, rescans = _csv_range_starts(ordered, lines_before, options)
    else:
        starts = [
            (p.line_start, line) for p, line in zip(ordered, lines_before, strict=True) if p.lines
        ]
        rescans = 0
    uri = ordered[0].cut.uri
    starts = [(0, 1)] + [s for s in starts if s[0] > 0]
    bounds: list[int | None] = [at for at, _ in starts[1:]] + [None]
    ranges = [FileRange(uri, at, end, line) for (at, line), end in zip(starts, bounds, strict=True)]
    return ranges, rescans


def _csv_range_starts(
    ordered: Sequence[Probe], lines_before: Sequence[int], options: ReadOptions
) -> tuple[list[tuple[int, int]], int]:
    """``(offset, line)`` of each range's true first record start, walking the cuts in order.

    The first range's exit is true (the whole-file reading starts there); a range whose true
    start a hypothesis reached takes that hypothesis's exit as the next range's true start, and
    one that no hypothesis reached is read again from its true start.
    """
    first = ordered[0].readings[0].exit if ordered[0].readings else None
    true_start = _absolute(first, lines_before[0])
    starts, rescans = [], 0
    for probe, line in zip(ordered[1:], lines_before[1:], strict=True):
        if true_start is None:
            break  # the reading reached the end of the file
        if not probe.lines or (probe.end is not None and true_start[0] >= probe.end):
            continue  # no line, or one record spans the whole cut: no record starts in it
        starts.append(true_start)
        if probe.end is None:
            break
        reading = _in_step(probe, true_start[0])
        if reading is not None:
            true_start = _absolute(reading.exit, line)
        else:
            rescans += 1
            found = _follow(probe.cut.uri, options, [(true_start[0], 0)], probe.end)[0].exit
            true_start = _absolute(found, true_start[1])
    return starts, rescans


def split_file(
    info: storage.FileInfo, options: ReadOptions, range_bytes: int | None = None
) -> list[FileRange]:
    """The ranges of ``info``, its cuts probed one after another.

    The pipeline probes them in parallel (:class:`tfrecord_suite.shard.transforms.SplitFiles`).
    """
    cuts = cut_file(info, options, range_bytes)
    if not isinstance(cuts[0], Cut):
        return cuts
    return settle([probe_cut(c, options) for c in cuts], options)[0]


# ----------------------------------------------------------------------------------- internals


def _absolute(start: Start | None, line_of_origin: int) -> tuple[int, int] | None:
    return None if start is None else (start[0], line_of_origin + start[1])


def _in_step(probe: Probe, true_start: int) -> Reading | None:
    """The reading of ``probe`` that reached the true first record start of its range."""
    for reading in probe.readings:
        if any(at == true_start for at, _ in reading.starts):
            return reading
    return None


def _follow(
    uri: str, options: ReadOptions, hypotheses: Sequence[Start], end: int | None
) -> list[Reading]:
    """Follow the record assembler from each hypothesis to its first record start at ``end``.

    ``end`` None: to the end of the file.

    The readings advance together, the one behind first; one that reaches the record start
    where another stands stops there and takes that one's exit (the assembler is deterministic
    from a record start), so a second hypothesis in step with the first costs only the lines
    until they meet.
    """
    walkers = [sources.csv_record_starts(uri, options, at, line) for at, line in hypotheses]
    starts: list[list[Start]] = [[] for _ in hypotheses]
    current: list[Start | None] = [None] * len(hypotheses)
    exits: list[Start | None] = [None] * len(hypotheses)
    joined: list[int | None] = [None] * len(hypotheses)
    active = set(range(len(hypotheses)))
    while active:
        i = min(active, key=lambda j: (current[j] or (-1, 0))[0])
        start = current[i] = next(walkers[i], None)
        if start is None or (end is not None and start[0] >= end):
            exits[i] = start
            active.discard(i)
            continue
        if len(starts[i]) < KEPT_STARTS:
            starts[i].append(start)
        for j, other in enumerate(current):
            if j != i and joined[j] is None and other is not None and other[0] == start[0]:
                joined[i] = j
                active.discard(i)
                break
    for i in range(len(hypotheses)):
        j = joined[i]
        while j is not None:  # a merge chain ends at a reading that reached its exit
            exits[i], j = exits[j], joined[j]
    return [Reading(tuple(s), e) for s, e in zip(starts, exits, strict=True)]


def _after_first_odd_quote_line(uri: str, options: ReadOptions, start: int) -> Start | None:
    """The line after the first line from ``start`` with an odd number of quotes, if near."""
    found = False
    size = 0
    for i, (at, text) in enumerate(sources.read_lines(uri, options, [], start)):
        if found:
            return at, i
        size += len(text)
        if i >= sources.MAX_RECORD_LINES or size > sources.MAX_RECORD_BYTES:
            return None
        found = not sources.is_error_line(text) and text.count('"') % 2 == 1
    return None


def _line_start(fh: io.BufferedIOBase, offset: int, limit: int | None) -> int | None:
    """The first line start at or after ``offset`` and before ``limit``; None if there is none.

    ``limit`` None: up to the end of the file, which counts as a line start there.
    """
    if offset == 0:
        return 0
    fh.seek(offset - 1)
    at = offset - 1
    while limit is None or at < limit - 1:
        block = fh.read(_BLOCK if limit is None else min(_BLOCK, limit - 1 - at))
        if not block:
            return at if limit is None else None
        newline = block.find(b"\n")
        if newline >= 0:
            return at + newline + 1
        at += len(block)
    return None


def _count_lines(fh: io.BufferedIOBase, start: int, end: int | None) -> int:
    """Lines starting in ``[start, end)``: its newlines, and a last line without one."""
    fh.seek(start)
    remaining = None if end is None else end - start
    lines, last = 0, b"\n"
    while remaining is None or remaining > 0:
        block = fh.read(_BLOCK if remaining is None else min(_BLOCK, remaining))
        if not block:
            break
        lines += block.count(b"\n")
        last = block[-1:]
        if remaining is not None:
            remaining -= len(block)
    return lines + (last != b"\n")


def _parquet_ranges(uri: str) -> list[FileRange]:
    import pyarrow.parquet as pq

    with sources.open_file(uri) as fh:
        try:
            meta = pq.ParquetFile(io.BytesIO(fh.read()) if storage.is_remote(uri) else fh).metadata
        except Exception:  # a bad file: read whole, where its error becomes a dead letter
            return [FileRange(uri)]
    out, row = [], 1
    for g in range(meta.num_row_groups):
        out.append(FileRange(uri, g, g + 1, row))
        row += meta.row_group(g).num_rows
    return out or [FileRange(uri)]
