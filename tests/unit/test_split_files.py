"""A big file is read by many workers in ranges: reading the ranges gives exactly the rows, row
numbers and bad rows that reading the file whole gives, quoted newlines across range edges
included."""

import os
import string

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tfrecord_suite.io import storage
from tfrecord_suite.shard import ranges, sources

SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    derandomize=os.environ.get("TFRS_FUZZ_DERANDOMIZE") == "1",
)


def _rows_by_ranges(path: str, options: sources.ReadOptions, range_bytes: int):
    parts = ranges.split_file(storage.stat(path), options, range_bytes=range_bytes)
    rows = [r for part in parts for r in sources.read_rows(path, options, part=part)]
    return parts, rows


def _same(whole, ranged):
    assert [(r.row, r.values, r.error, r.raw) for r in ranged] == [
        (r.row, r.values, r.error, r.raw) for r in whole
    ]


_CELL = st.text(alphabet=string.ascii_letters + " ,\n\"'", max_size=12)
_BAD = ['"unterminated,1,2\n', '"x"y,1,2\n', "short,row\n", "one,too,many,columns\n"]


@SETTINGS
@given(
    st.lists(st.tuples(_CELL, _CELL, _CELL), min_size=1, max_size=30),
    st.lists(st.tuples(st.integers(0, 30), st.sampled_from(_BAD)), max_size=4),
    st.integers(1, 200),
)
@example(good=[("a\nb\nc", "x", "y")] * 8, bad=[], range_bytes=3)  # newlines across every edge
def test_csv_ranges_give_the_rows_of_the_whole_file(tmp_path, good, bad, range_bytes):
    lines = [",".join('"' + c.replace('"', '""') + '"' for c in row) + "\n" for row in good]
    for position, text in sorted(bad, reverse=True):
        lines.insert(min(position, len(lines)), text)
    path = tmp_path / "f.csv"
    path.write_text("a,b,c\n" + "".join(lines))
    options = sources.ReadOptions(format="csv")
    whole = list(sources.read_rows(str(path), options))
    parts, ranged = _rows_by_ranges(str(path), options, range_bytes)
    _same(whole, ranged)
    if path.stat().st_size > 2 * range_bytes + 40:
        assert len(parts) > 1


@pytest.mark.parametrize("fmt", ["jsonl", "text"])
def test_line_formats_split_at_line_starts(tmp_path, fmt):
    body = "".join(
        f'{{"a": {i}, "b": "x{i}"}}\n' if i % 7 else "not json at all\n" for i in range(500)
    )
    path = tmp_path / f"f.{fmt}"
    path.write_text(body)
    options = sources.ReadOptions(format=fmt)
    whole = list(sources.read_rows(str(path), options))
    parts, ranged = _rows_by_ranges(str(path), options, 1000)
    assert len(parts) > 5
    assert all(body.encode()[p.start - 1 : p.start] == b"\n" for p in parts[1:])
    _same(whole, ranged)


def test_parquet_splits_at_row_groups(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = str(tmp_path / "f.parquet")
    pq.write_table(pa.table({"a": list(range(1000)), "b": [str(i) for i in range(1000)]}), path,
                   row_group_size=128)  # fmt: skip
    options = sources.ReadOptions(format="parquet")
    whole = list(sources.read_rows(path, options))
    parts, ranged = _rows_by_ranges(path, options, 1)
    assert len(parts) == 8 and [p.first_row for p in parts[:2]] == [1, 129]
    _same(whole, ranged)


def test_small_files_and_stream_encodings_stay_whole(tmp_path):
    path = tmp_path / "f.csv"
    path.write_text("a,b\n1,2\n")
    assert ranges.split_file(storage.stat(str(path)), sources.ReadOptions(format="csv")) == [
        sources.FileRange(str(path))
    ]
    utf16 = tmp_path / "g.csv"
    utf16.write_text("a,b\n" + "1,2\n" * 1000, encoding="utf-16")
    options = sources.ReadOptions(format="csv", encoding="utf-16")
    assert len(ranges.split_file(storage.stat(str(utf16)), options, range_bytes=100)) == 1


def _quoted_newlines_csv(tmp_path, rows: int = 400):
    """Every record holds a quoted field that spans three lines, so most cuts fall inside one."""
    body = "".join(f'{i},"line one\nline ""two""\nline three",{i % 3}\n' for i in range(rows))
    path = tmp_path / "multi.csv"
    path.write_text("n,note,label\n" + body)
    return str(path)


def test_cuts_inside_quoted_fields_settle_without_reading_again(tmp_path):
    """A cut inside a quoted field is found by the second hypothesis (the field closes at the
    first line with an odd number of quotes): no range is read twice."""
    path = _quoted_newlines_csv(tmp_path)
    options = sources.ReadOptions(format="csv")
    cuts = ranges.cut_file(storage.stat(path), options, range_bytes=500)
    probes = [ranges.probe_cut(c, options) for c in cuts]
    parts, rescans = ranges.settle(probes, options)
    assert len(cuts) > 20 and rescans == 0
    assert any(len(p.readings) == 2 for p in probes)
    whole = list(sources.read_rows(path, options))
    _same(whole, [r for part in parts for r in sources.read_rows(path, options, part=part)])


def test_a_range_no_hypothesis_reached_is_read_again_from_its_true_start(tmp_path, monkeypatch):
    """The serial fallback: with every guess refused, each range is found by reading it again
    from the true start the range before gives, and the rows are still those of the whole file."""
    path = _quoted_newlines_csv(tmp_path)
    options = sources.ReadOptions(format="csv")
    monkeypatch.setattr(ranges, "_in_step", lambda probe, start: None)
    cuts = ranges.cut_file(storage.stat(path), options, range_bytes=700)
    parts, rescans = ranges.settle([ranges.probe_cut(c, options) for c in cuts], options)
    assert rescans == len(cuts) - 2  # all but the first cut and the last, which needs no exit
    whole = list(sources.read_rows(path, options))
    _same(whole, [r for part in parts for r in sources.read_rows(path, options, part=part)])


def test_probes_settle_in_any_order_and_all_are_needed(tmp_path):
    path = _quoted_newlines_csv(tmp_path, rows=50)
    options = sources.ReadOptions(format="csv")
    probes = [
        ranges.probe_cut(c, options) for c in ranges.cut_file(storage.stat(path), options, 300)
    ]
    assert ranges.settle(probes[::-1], options) == ranges.settle(probes, options)
    with pytest.raises(RuntimeError, match="missing or repeated"):
        ranges.settle(probes[1:], options)
