"""A big file is read by many workers in ranges: reading the ranges gives exactly the rows, row
numbers and bad rows that reading the file whole gives, quoted newlines across range edges
included."""

import os
import string

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tfrecord_suite.io import storage
from tfrecord_suite.shard import sources

SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    derandomize=os.environ.get("TFRS_FUZZ_DERANDOMIZE") == "1",
)


def _rows_by_ranges(path: str, options: sources.ReadOptions, range_bytes: int):
    parts = sources.split_file(storage.stat(path), options, range_bytes=range_bytes)
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
    assert sources.split_file(storage.stat(str(path)), sources.ReadOptions(format="csv")) == [
        sources.FileRange(str(path))
    ]
    utf16 = tmp_path / "g.csv"
    utf16.write_text("a,b\n" + "1,2\n" * 1000, encoding="utf-16")
    options = sources.ReadOptions(format="csv", encoding="utf-16")
    assert len(sources.split_file(storage.stat(str(utf16)), options, range_bytes=100)) == 1
