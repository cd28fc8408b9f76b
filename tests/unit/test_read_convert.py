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
import json
import math
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfrecord_suite.schema import Feature, Schema
from tfrecord_suite.shard import convert, ranges, read_convert, sources
from tfrecord_suite.shard.records import Records

SPLITS = convert.SplitSpec.parse("train=70,validation=20,test=10")

INT_CELLS = [
    "0", "7", "-12", "+5", "007", "  42 ", "\t3", "123456789012345678", "9223372036854775807",
    "-9223372036854775808", "9223372036854775808", "1_000", "\u0661\u0662", "1.0", "1e3",
    "0x10", "", "NA", "?", "null", "None", " N/A ", "-0",
]  # fmt: skip
FLOAT_CELLS = [
    "1.5", "-0.0", "0", "1e5", ".5", "5.", "+2.5", "1E-7", "  3.25 ", "0.1", "517.0",
    "1.2345678901234567", "123456789.123456789", "1e400", "-1e400", "1e-400", "nan", "NaN",
    "inf", "-Infinity", "1_0.5", "3.4028235e38", "3.5e38", "1e22", "1e23", "4.9e-324",
    "0.000001", "100000000000000000000", "12", "", "NA", "00012.5000", "1e+05", "1.e3",
    "-.5e-3", "\u00a01.5", "1.5\u3000", "1.50000000000000000000000", "0.30000000000000004",
]  # fmt: skip
TEXT_CELLS = [
    "a", "b", "hello, world", 'say "hi"', "café", "日本語", "emoji 😀", "  padded  ",
    "\u00a0nbsp\u00a0", "\x1cfs\x1f", "tab\tinside", "", "NA", "nan", "N/A", "?", "None",
    "null", "back\\slash", "ctrl\x01char", "\x7fdel", "multi\nline", "\u2028sep", "x" * 300,
]  # fmt: skip
LABELS = ["x", "y", "z", " z ", "", "NA"]


def tabular_schema(*, extra_meta: bool = False) -> Schema:
    """A schema over the generated tables' columns, and columns the files lack."""
    features = [
        Feature("id", "int64", [], "numeric", 0),
        Feature("x", "float32", [], "numeric", 0.0),
        Feature("s", "string", [], "text", ""),
        Feature("sparse", "float32", [], "numeric", 0.0),
        Feature("c", "string", [], "categorical", ""),
        Feature("label", "string", [], "categorical", ""),
        Feature("absent", "int64", [], "numeric", 0),
    ]
    if extra_meta:
        features.append(Feature("absent_meta", "string", [], "meta", ""))
    return Schema(features, label="label", label_classes=["x", "y", "z"])


def nasty_rows(rng: random.Random, n: int) -> list[list[str]]:
    rows = []
    for i in range(n):
        sparse = rng.choice(FLOAT_CELLS) if rng.random() < 0.1 else ""
        rows.append(
            [
                rng.choice(INT_CELLS)
                if rng.random() < 0.3
                else str(rng.randrange(-(10**6), 10**6)),
                rng.choice(FLOAT_CELLS)
                if rng.random() < 0.3
                else f"{rng.uniform(-1e3, 1e3):.{rng.randrange(0, 9)}f}",
                rng.choice(TEXT_CELLS),
                sparse,
                rng.choice("abcdefgh"),
                rng.choice(LABELS) if rng.random() < 0.1 else rng.choice("xyz"),
            ]
        )
        if i % 97 == 5:
            rows[-1] = rows[-2]  # a duplicate row: a tie of key hashes
    return rows


HEADER = ["id", "x", "s", "sparse", "c", "label"]
BROKEN_LINES = [
    b"1,2.5,too,many,fields,x,extra\n",
    b"1,2.5\n",
    b'1,2.5,ab"c,,a,x\n',
    b'1,2.5,"abc"d,,a,x\n',
    b'"\n',
    b"\n",
    b"   \n",
    b"\r\r\n",
    b"3,1.5,bad \xff byte,,a,x\n",
    b"4,1.5,bare\rreturn,,a,y\n",
    b'5,1.5,"quoted\nacross lines",,b,z\n',
    b'6,1.5,"an ""escaped"" quote",,b,z\n',
    b'7,"1.5","quoted number",,"c",x\n',
]


def write_csv(path, rows, *, delimiter=",", newline="\n", broken=True, rng=None) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, delimiter=delimiter, lineterminator=newline)
    writer.writerow(HEADER)
    out = bytearray(buf.getvalue().encode())
    for i, row in enumerate(rows):
        buf = io.StringIO()
        csv.writer(buf, delimiter=delimiter, lineterminator=newline).writerow(row)
        out += buf.getvalue().encode()
        if broken and rng is not None and rng.random() < 0.05:
            line = rng.choice(BROKEN_LINES)
            out += line.replace(b",", delimiter.encode()) if delimiter != "," else line
        if i == len(rows) // 2 and broken:
            out += b"8," + b"y" * 5000 + b",long line,,a,x\n"
    path.write_bytes(bytes(out))
    return str(path)


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

JSON_VALUES = [
    0, -3, 7, 2**53 + 1, 2**63 - 1, -(2**63), 2**64, 1.5, -0.0, 0.1, 3.0, 1e300, 5e-324, 1e22,
    "text", "  padded ", "NA", "", "日本", "😀", True, False, None, [1], {"a": 1},
    float("nan"), float("inf"),
]  # fmt: skip
BROKEN_JSON = [
    "{bad json",
    "[1, 2]",
    '"a string"',
    "",
    "   ",
    '\ufeff{"id": 1, "label": "x"}',
    '{"id": 1, "id": 2, "label": "x"}',
    '{"id": -0, "x": -0, "label": "y"}',
    '{"id": 1E2, "x": 1E2, "label": "z"}',
    '{"id": 01, "label": "x"}',
    '{"id": 5, "label": "x"} {"id": 6, "label": "y"}',
    '{"id": 5, "s": "a\tb", "label": "x"}',
    '{"id": 5, "s": "\\ud800", "label": "x"}',
]


def write_jsonl(path, rng: random.Random, n: int, odd_share: float = 0.005) -> str:
    lines = []
    for _ in range(n):
        row = {}
        for key in ("id", "x", "s", "sparse", "c", "label"):
            r = rng.random()
            if r < 0.05:
                continue  # absent
            odd = r < 0.05 + odd_share  # a value of any type: most go to the row path
            if key == "id":
                row[key] = rng.choice(JSON_VALUES) if odd else rng.randrange(-(10**9), 10**9)
            elif key in ("x", "sparse"):
                row[key] = rng.choice(JSON_VALUES) if odd else rng.uniform(-1e4, 1e4)
            elif key == "label":
                row[key] = rng.choice(LABELS) if r < 0.1 else rng.choice("xyz")
            else:
                row[key] = rng.choice(JSON_VALUES) if odd else rng.choice(TEXT_CELLS)
        row["extra"] = rng.choice([1, "two", [3], None])  # not in the schema
        lines.append(json.dumps(row, ensure_ascii=rng.random() < 0.5))
        if rng.random() < 0.03:
            lines.append(rng.choice(BROKEN_JSON))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
    return str(path)


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


def write_parquet(path, rng: random.Random, n: int) -> str:
    def maybe(value, p=0.1):
        return None if rng.random() < p else value

    floats = [-0.0, float("nan"), float("inf"), 1e300, 5e-324, 0.1, 3.0, 2.0**60]
    table = pa.table(
        {
            "id": pa.array([maybe(rng.randrange(-(10**12), 10**12)) for _ in range(n)], pa.int64()),
            "x": pa.array(
                [
                    maybe(rng.choice(floats) if rng.random() < 0.2 else rng.uniform(-9, 9))
                    for _ in range(n)
                ],
                pa.float64(),
            ),
            "s": pa.array([maybe(rng.choice(TEXT_CELLS)) for _ in range(n)], pa.string()),
            "sparse": pa.array([maybe(1.25, 0.9) for _ in range(n)], pa.float32()),
            "c": pa.array([rng.choice("abc") for _ in range(n)]).dictionary_encode(),
            "label": pa.array([maybe(rng.choice("xyz"), 0.03) for _ in range(n)], pa.string()),
            "u": pa.array(
                [rng.choice([1, 2**63 - 1]) for _ in range(n)],
                pa.uint32() if n < 0 else pa.uint64(),
            ),
            "b": pa.array([maybe(rng.random() < 0.5) for _ in range(n)], pa.bool_()),
            "small": pa.array([rng.randrange(100) for _ in range(n)], pa.int8()),
        }
    )
    pq.write_table(table, path, row_group_size=max(1, n // 7))
    return str(path)


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
