"""Schema inference from Arrow columns infers the schema the row path's samples infer."""

from __future__ import annotations

import csv
import io
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tables import FLOAT_CELLS, INT_CELLS, LABELS, TEXT_CELLS, write_parquet
from tfrecord_suite.shard import sample, sources
from tfrecord_suite.shard.step import SAMPLE_ROWS, ShardConfig, ShardError, resolve_schema


def both_ways(path: str, fmt: str, *, label=None, expect_columnar=True):
    files = sources.resolve_inputs(path)
    base = ShardConfig(input=path, output="unused", label=label, format=fmt)
    by_rows = resolve_schema(ShardConfig(**{**base.__dict__, "columnar": False}), fmt, files)
    by_columns = resolve_schema(base, fmt, files)
    assert by_columns.to_dict() == by_rows.to_dict()
    sampled = sample.sample_columns(files[:8], sources.ReadOptions(format=fmt), SAMPLE_ROWS)
    assert (sampled is not None) == expect_columnar
    return by_columns


def _csv(rows: list[list[str]], header: list[str], delimiter: str = ",") -> str:
    out = io.StringIO()
    writer = csv.writer(out, delimiter=delimiter, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()


@pytest.mark.parametrize("seed", range(6))
def test_columns_of_every_kind_infer_alike(tmp_path, seed):
    rng = random.Random(seed)
    odd = [0.0, 0.005, 0.02, 0.5][seed % 4]  # how many odd spellings: below and above the 1%
    rows = []
    for i in range(rng.choice([5, 300, 2500])):
        rows.append(
            [
                rng.choice(INT_CELLS) if rng.random() < odd else str(rng.randrange(-5000, 5000)),
                rng.choice(FLOAT_CELLS) if rng.random() < odd else f"{rng.uniform(-9, 9):.4f}",
                rng.choice([t for t in TEXT_CELLS if "\n" not in t]),
                rng.choice(["a", "b", "c", "", "NA"]),
                "x" * rng.choice([3, 70]) if i % 50 == 0 else "short",
                str(rng.randrange(1500)),  # many distinct texts
                rng.choice(LABELS),
            ]
        )
    header = ["i", "f", "t", "c", "wide", "many", "label"]
    (tmp_path / "t.csv").write_text(_csv(rows, header))
    both_ways(str(tmp_path / "t.csv"), "csv")
    both_ways(str(tmp_path / "t.csv"), "csv", label="i")
    (tmp_path / "t.tsv").write_text(_csv(rows, header, delimiter="\t"))
    both_ways(str(tmp_path / "t.tsv"), "tsv")


def test_several_files_with_other_headers(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.csv").write_text("x,y,label\n1,2.5,a\n3,4.5,b\n")
    (tmp_path / "in" / "b.csv").write_text("y,z,label\n1.5,t,b\nNA,u,c\n")
    (tmp_path / "in" / "c.csv").write_text("x,x,label\n7,8,a\n")  # a repeated column
    schema = both_ways(str(tmp_path / "in"), "csv")
    assert [f.name for f in schema.features] == ["x", "y", "label", "z"]


def test_first_rows_the_batch_path_leaves_to_the_row_path_are_sampled_by_it(tmp_path):
    body = "".join(f"{i},{i}.5,t\n" for i in range(30))
    (tmp_path / "quoted.csv").write_text('a,b,c\n1,2.5,"two\nlines"\n' + body)
    both_ways(str(tmp_path / "quoted.csv"), "csv", expect_columnar=False)
    (tmp_path / "ragged.csv").write_text("a,b,c\n1,2.5\n" + body)
    both_ways(str(tmp_path / "ragged.csv"), "csv", expect_columnar=False)
    (tmp_path / "blank.csv").write_text("\na,b,c\n" + body)
    with pytest.raises(ShardError, match="no columns to read"):  # csv_header's rule, both ways
        both_ways(str(tmp_path / "blank.csv"), "csv", expect_columnar=False)
    # past the sampled rows, a bad row is no reason for the row path
    (tmp_path / "late.csv").write_text("a,b,c\n" + body * 100 + "1,2.5\n")
    both_ways(str(tmp_path / "late.csv"), "csv")


def test_parquet_columns_infer_alike(tmp_path):
    path = write_parquet(tmp_path / "t.parquet", random.Random(8), 3000)
    both_ways(path, "parquet")
    both_ways(path, "parquet", label="small")
    table = pa.table({"t": pa.array([1, 2], pa.timestamp("s")), "label": ["x", "y"]})
    pq.write_table(table, tmp_path / "ts.parquet")
    both_ways(str(tmp_path / "ts.parquet"), "parquet", expect_columnar=False)


def test_the_real_tables_infer_alike(tmp_path, penguins_csv):
    both_ways(penguins_csv, "csv")
    pq.write_table(pa.csv.read_csv(penguins_csv), tmp_path / "penguins.parquet")
    both_ways(str(tmp_path / "penguins.parquet"), "parquet")
