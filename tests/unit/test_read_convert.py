"""The batch path gives the row path's records, dead letters and statistics, byte for byte.

Each test converts the same ranges of the same files on both paths (no Beam: the conversion
alone) and compares every record with its split and key hash, every dead letter, the rows read
and the statistics. The tables hold what breaks converters: every dtype, nulls and NA strings,
odd spellings of numbers, quoted newlines and quotes, non-ASCII text and Unicode spaces, wide and
sparse rows, ragged and unparseable rows, bad bytes, blank lines, a label missing; and the
suite's real tables. Each test also checks that the batch path took the rows it should, so a
batch path that quietly handed everything to the row path would fail.
"""

from __future__ import annotations

import csv
import io
import math
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tables import (
    FLOAT_CELLS,
    HEADER,
    INT_CELLS,
    LABELS,
    TEXT_CELLS,
    nasty_rows,
    tabular_schema,
    write_csv,
    write_jsonl,
    write_parquet,
)
from tfrecord_suite.schema import Feature, Schema
from tfrecord_suite.shard import convert, ranges, read_convert, sources
from tfrecord_suite.shard.records import Records

SPLITS = convert.SplitSpec.parse("train=70,validation=20,test=10")


def collect(pieces):
    pieces = list(pieces)
    records = Records.concat(p.records for p in pieces)
    triples = sorted(
        (int(records.split[i]), bytes(records.digest[i]), records.record(i))
        for i in range(len(records))
    )
    letters = sorted(
        (d for p in pieces for d in p.dead_letters), key=lambda d: (d["file"], d["row"])
    )
    stats = {}
    for p in pieces:
        for split, s in p.stats.items():
            stats[split] = convert.merge_stats(stats[split], s) if split in stats else s
    paths = {"batch": 0, "row": 0}
    for p in pieces:
        paths[p.path] += p.rows
    return triples, letters, {k: convert.finalize_stats(v) for k, v in stats.items()}, paths


def assert_same_stats(row, batch):
    assert row.keys() == batch.keys()
    for split in row:
        a, b = row[split], batch[split]
        assert (a["count"], a["bytes"], a["label_histogram"]) == (
            b["count"],
            b["bytes"],
            b["label_histogram"],
        )
        assert a["features"].keys() == b["features"].keys()
        for name, fa in a["features"].items():
            fb = b["features"][name]
            assert {k: fa[k] for k in ("present", "missing", "min", "max") if k in fa} == {
                k: fb[k] for k in ("present", "missing", "min", "max") if k in fb
            }, name
            for k in ("mean", "std"):  # sums in another order: the last bits may differ
                if k in fa:
                    assert math.isclose(fa[k], fb[k], rel_tol=1e-9, abs_tol=1e-9), (name, k)


def both_paths(path, fmt, schema, *, key_column=None, range_bytes=None, **read):
    options = sources.ReadOptions(format=fmt, **read)
    assert read_convert.BatchPath.takes(options)
    files = sources.resolve_inputs(path)
    parts = [p for f in files for p in ranges.split_file(f, options, range_bytes)]
    row_path = read_convert.RowPath(schema, SPLITS, key_column)
    batch_path = read_convert.BatchPath(
        schema, SPLITS, key_column, options, read_convert.RowPath(schema, SPLITS, key_column)
    )
    rows = collect(
        piece
        for p in parts
        for piece in row_path.convert(sources.read_rows(p.uri, options, part=p))
    )
    batches = collect(piece for p in parts for piece in batch_path.convert(p))
    assert rows[0] == batches[0], "records differ"
    assert rows[1] == batches[1], "dead letters differ"
    assert sum(rows[3].values()) == sum(batches[3].values()), "rows read differ"
    assert_same_stats(rows[2], batches[2])
    return batches


@pytest.mark.parametrize("range_bytes", [None, 700])
@pytest.mark.parametrize(
    ("delimiter", "newline", "fmt"), [(",", "\n", "csv"), (",", "\r\n", "csv"), ("\t", "\n", "tsv")]
)
def test_a_nasty_csv_gives_the_same_records_on_both_paths(
    tmp_path, delimiter, newline, fmt, range_bytes
):
    rng = random.Random(f"{delimiter}{newline}{range_bytes}")
    path = write_csv(
        tmp_path / f"t.{fmt}", nasty_rows(rng, 1500), delimiter=delimiter, newline=newline, rng=rng
    )
    records, letters, _, paths = both_paths(
        path, fmt, tabular_schema(extra_meta=True), range_bytes=range_bytes
    )
    assert len(records) > 1000 and len(letters) > 50
    assert paths["batch"] > 0.6 * (paths["batch"] + paths["row"])


def test_a_key_column_splits_on_both_paths_alike(tmp_path):
    rng = random.Random(5)
    path = write_csv(tmp_path / "t.csv", nasty_rows(rng, 800), rng=rng)
    schema = tabular_schema()
    for key in ("s", "id", "x"):
        keyed = Schema(
            [
                Feature(f.name, f.dtype, [], "meta" if f.name == key else f.kind, f.default)
                for f in schema.features
            ],
            label="label",
        )
        _, _, _, paths = both_paths(path, "csv", keyed, key_column=key, range_bytes=900)
        assert paths["batch"] > paths["row"]


def test_every_column_as_text_and_a_header_with_repeats(tmp_path):
    """A string feature over numbers, and a repeated column (the last one counts)."""
    rng = random.Random(9)
    rows = nasty_rows(rng, 600)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*HEADER, "id"])
    for row in rows:
        writer.writerow([*row, str(rng.randrange(100))])
    (tmp_path / "t.csv").write_text(out.getvalue())
    schema = Schema(
        [Feature(name, "string", [], "text", "") for name in HEADER],
        label="label",
    )
    _, _, _, paths = both_paths(str(tmp_path / "t.csv"), "csv", schema)
    assert paths["batch"] > paths["row"]


def test_a_quoted_field_across_lines_in_every_row_still_matches(tmp_path):
    """Multi-line records throughout: the row path's assembler reads them, the rest batches."""
    lines = ["id,x,s,sparse,c,label"]
    for i in range(400):
        text = f'"line one\nline two {i}"' if i % 3 == 0 else f"plain {i}"
        lines.append(f"{i},{i / 7:.3f},{text},,a,{'xyz'[i % 3]}")
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n")
    _, _, _, paths = both_paths(str(tmp_path / "t.csv"), "csv", tabular_schema(), range_bytes=500)
    assert paths["row"] > 0


def test_a_file_starting_with_blank_lines_or_a_bom(tmp_path):
    body = "".join(f"{i},{i}.5,t{i},,a,x\n" for i in range(50))
    (tmp_path / "blank.csv").write_text("\n\n" + ",".join(HEADER) + "\n" + body)
    (tmp_path / "bom.csv").write_bytes(b"\xef\xbb\xbf" + (",".join(HEADER) + "\n" + body).encode())
    for name in ("blank.csv", "bom.csv"):
        both_paths(str(tmp_path / name), "csv", tabular_schema())


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(INT_CELLS) | st.integers(-(10**12), 10**12).map(str),
            st.sampled_from(FLOAT_CELLS) | st.floats(allow_nan=False, width=32).map(repr),
            st.sampled_from(TEXT_CELLS) | st.text(max_size=12),
            st.sampled_from(["", "1.5"]),
            st.sampled_from("ab"),
            st.sampled_from(LABELS),
        ).map(list),
        min_size=1,
        max_size=60,
    ),
    newline=st.sampled_from(["\n", "\r\n"]),
    range_bytes=st.sampled_from([None, 64, 200]),
)
def test_generated_csv_tables_match(tmp_path, rows, newline, range_bytes):
    path = write_csv(tmp_path / "g.csv", rows, newline=newline, broken=False)
    both_paths(path, "csv", tabular_schema(extra_meta=True), range_bytes=range_bytes)


# ------------------------------------------------------------------------------------ JSON lines


@pytest.mark.parametrize("range_bytes", [None, 1500])
def test_json_lines_give_the_same_records_on_both_paths(tmp_path, range_bytes):
    path = write_jsonl(tmp_path / "t.jsonl", random.Random(range_bytes or 1), 1500)
    records, letters, _, paths = both_paths(
        path, "jsonl", tabular_schema(), range_bytes=range_bytes
    )
    assert len(records) > 800 and len(letters) > 50
    assert paths["batch"] > 0.5 * (paths["batch"] + paths["row"])


def test_json_lines_with_a_key_column_and_metadata(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", random.Random(3), 600, odd_share=0.1)
    schema = tabular_schema(extra_meta=True)
    keyed = Schema(
        [
            Feature(f.name, f.dtype, [], "meta" if f.name == "s" else f.kind, f.default)
            for f in schema.features
        ],
        label="label",
    )
    both_paths(path, "jsonl", keyed, key_column="s")
    both_paths(path, "jsonl", schema)


# ------------------------------------------------------------------------------------- Parquet


def test_parquet_gives_the_same_records_on_both_paths(tmp_path):
    path = write_parquet(tmp_path / "t.parquet", random.Random(4), 2000)
    _, letters, _, paths = both_paths(path, "parquet", tabular_schema())
    assert letters and paths["batch"] > 0.8 * (paths["batch"] + paths["row"])


def test_parquet_columns_typed_across_dtypes(tmp_path):
    """Every column read as another dtype: the conversions Python makes, made alike."""
    path = write_parquet(tmp_path / "t.parquet", random.Random(6), 800)
    for dtype in ("int64", "float32", "string"):
        features = [
            Feature(name, dtype, [], "numeric" if dtype != "string" else "text", None)
            for name in ("id", "x", "s", "sparse", "c", "u", "b", "small")
        ]
        schema = Schema(
            [*features, Feature("label", "string", [], "categorical", "")], label="label"
        )
        for key in (None, "x", "b", "small"):
            both_paths(path, "parquet", schema, key_column=key)


def test_a_parquet_column_of_an_unsupported_type_takes_the_row_path(tmp_path):
    table = pa.table({"t": pa.array([1, 2, 3], pa.timestamp("s")), "label": ["x", "y", "z"]})
    pq.write_table(table, tmp_path / "t.parquet")
    schema = Schema(
        [Feature("t", "string", [], "text", ""), Feature("label", "string", [], "categorical", "")],
        label="label",
    )
    _, _, _, paths = both_paths(str(tmp_path / "t.parquet"), "parquet", schema)
    assert paths == {"batch": 0, "row": 3}


# ---------------------------------------------------------------------------------- real tables


def test_the_suites_real_tables_match(tmp_path, penguins_csv):
    from tfrecord_suite.shard.step import ShardConfig, resolve_schema

    files = sources.resolve_inputs(penguins_csv)
    schema = resolve_schema(ShardConfig(input=penguins_csv, output=str(tmp_path)), "csv", files)
    _, _, _, paths = both_paths(penguins_csv, "csv", schema, range_bytes=2000)
    assert paths["row"] == 0
    frame = pa.csv.read_csv(penguins_csv)
    pq.write_table(frame, tmp_path / "penguins.parquet", row_group_size=50)
    _, _, _, paths = both_paths(str(tmp_path / "penguins.parquet"), "parquet", schema)
    assert paths["row"] == 0


def test_digests_and_splits_of_the_batch_path_are_the_row_paths(tmp_path):
    """The split of a record hangs on its key alone: identical rows, identical places."""
    path = write_csv(tmp_path / "t.csv", [["1", "2.5", "t", "", "a", "x"]] * 50, broken=False)
    records, _, _, _ = both_paths(path, "csv", tabular_schema())
    assert len({(s, d) for s, d, _ in records}) == 1
    assert np.all(np.array([s for s, _, _ in records]) == records[0][0])
