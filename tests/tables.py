"""Generated tables that break converters, for the tests of both conversion paths.

Every dtype, nulls and NA strings, odd spellings of numbers, quoted newlines and quotes,
non-ASCII text and Unicode spaces, wide and sparse rows, ragged and unparseable rows, bad bytes,
blank lines, a label missing; as CSV/TSV, JSON lines and Parquet.
"""

from __future__ import annotations

import csv
import io
import json
import random

import pyarrow as pa
import pyarrow.parquet as pq

from tfrecord_suite.schema import Feature, Schema

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
