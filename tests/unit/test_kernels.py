"""Each compiled loop of the batch path against the Python rule it stands for, on many inputs."""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys

import google_crc32c
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfrecord_suite.io import framing
from tfrecord_suite.schema import DEFAULT_NA_VALUES, parse_scalar
from tfrecord_suite.shard import convert, kernels
from tfrecord_suite.shard.kernels import keys as key_loops
from tfrecord_suite.shard.kernels import records as record_loops
from tfrecord_suite.shard.kernels import text as text_loops
from tfrecord_suite.shard.records import Records


def packed(items: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(items) + 1, np.int64)
    np.cumsum([len(b) for b in items], out=offsets[1:])
    return offsets, np.frombuffer(b"".join(items), np.uint8)


def texts(offsets: np.ndarray, data: np.ndarray) -> list[str]:
    return [bytes(data[offsets[i] : offsets[i + 1]]).decode() for i in range(len(offsets) - 1)]


def test_blake2b_is_hashlibs_on_every_length_around_its_blocks():
    rng = random.Random(1)
    keys = [rng.randbytes(n) for n in (*range(0, 300), 383, 384, 385, 1000, 4096)]
    digests = key_loops.blake2b_16(*packed(keys))
    assert [bytes(d) for d in digests] == [
        hashlib.blake2b(k, digest_size=16).digest() for k in keys
    ]


def test_splits_and_shards_are_the_python_rules():
    rng = random.Random(2)
    digests = np.frombuffer(rng.randbytes(16 * 5000), np.uint8).reshape(-1, 16)
    high, low = key_loops.digest_words(digests)
    for spec in ("train=1", "train=80,validation=10,test=10", "a=1,b=2,c=3,d=7"):
        splits = convert.SplitSpec.parse(spec)
        got = key_loops.assign_splits(high, np.cumsum(splits.weights))
        assert [splits.names[s] for s in got] == [splits.assign(bytes(d)) for d in digests]
    for count in (1, 2, 3, 10, 1023, 2**31 - 1, 2**32 - 1):
        got = key_loops.shard_indices(low, count)
        assert got.tolist() == [convert.shard_index(bytes(d), count) for d in digests]


def test_framing_and_crc32c_are_tensorflows():
    rng = random.Random(3)
    records = [rng.randbytes(rng.randrange(0, 3000)) for _ in range(500)]
    offsets, data = packed(records)
    order = np.array(rng.sample(range(500), 500), np.int64)
    framed = record_loops.frame_records(offsets, data, order).tobytes()
    assert framed == b"".join(framing.encode(records[i]) for i in order)
    assert all(
        record_loops.crc32c(np.frombuffer(r, np.uint8)) == google_crc32c.value(r) for r in records
    )


def _printed(values: np.ndarray) -> list[str]:
    """The kernel's Python text of doubles, from Arrow's shortest text."""
    printed = pa.array(values, pa.float64()).cast(pa.large_string())
    _, offsets, data = printed.buffers()
    offsets = np.frombuffer(offsets, np.int64)[: len(values) + 1]
    data = np.frombuffer(data, np.uint8)
    out = text_loops.python_float_text(data, offsets[:-1], offsets[1:], np.ones(len(values), bool))
    return texts(*out)


def test_the_python_text_of_doubles_is_repr():
    rng = np.random.default_rng(4)
    bits = rng.integers(0, 2**63, 300_000, dtype=np.uint64) | (
        rng.integers(0, 2, 300_000, dtype=np.uint64) << np.uint64(63)
    )
    doubles = bits.view(np.float64)
    doubles = doubles[np.isfinite(doubles)]
    decimals = np.array(
        [
            round(v, int(k))
            for v, k in zip(
                rng.normal(0, 1e4, 100_000).tolist(),
                rng.integers(0, 12, 100_000).tolist(),
                strict=True,
            )
        ]
    )
    singles = rng.normal(0, 1, 100_000).astype(np.float32).astype(np.float64)
    edges = [10.0**k for k in range(-30, 31)] + [
        0.0, -0.0, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 1e15, 1e16,
        9999999999999998.0, 1234567890123456.0, 12345678901234567.0, 0.0001, 0.00001,
        0.00012345, float("inf"), float("-inf"), float("nan"), 2.0**60, 3.4028234663852886e38,
    ]  # fmt: skip
    for values in (doubles, decimals, singles, np.array(edges)):
        assert _printed(values) == [repr(v) for v in values.tolist()]


DECIMALS = st.builds(
    lambda sign, lead, digits, point, trail, exp: (
        sign + "0" * lead + digits[:point] + "." + digits[point:] + "0" * trail + exp
    ),
    st.sampled_from(["", "-", "+"]),
    st.integers(0, 3),
    st.text("0123456789", min_size=1, max_size=20),
    st.integers(0, 20),
    st.integers(0, 25),
    st.sampled_from(["", "e5", "E-7", "e+22", "e-22", "e23", "e-300", "e308", "e0"]),
)


@settings(max_examples=3000, deadline=None)
@given(DECIMALS)
def test_a_plain_decimal_parses_and_prints_as_python_does(text):
    data = np.frombuffer(text.encode(), np.uint8)
    assert text_loops._is_decimal(data, 0, len(data))
    exact, value = text_loops._exact_decimal(data, 0, len(data), np.empty(32, np.uint8))
    if exact:
        assert value == float(text) and np.signbit(value) == np.signbit(float(text))
        offsets, printed = text_loops.python_float_text(
            data, np.array([0]), np.array([len(data)]), np.ones(1, bool)
        )
        assert texts(offsets, printed) == [repr(float(text))]


def _classify(cells: list[str], kind: int):
    offsets, data = packed([c.encode() for c in cells])
    na = [v.encode() for v in DEFAULT_NA_VALUES]
    na_offsets, na_data = packed(na)
    n = len(cells)
    out = [np.zeros(n, np.uint8), np.zeros(n, np.int64), np.zeros(n, np.int64)]
    ints, floats, exact = np.zeros(n, np.int64), np.zeros(n), np.zeros(n, bool)
    text_loops.classify_cells(
        offsets, data, np.ones(n, bool), kind, na_data, na_offsets, *out, ints, floats, exact
    )
    state, start, end = out
    spans = [bytes(data[s:e]).decode() for s, e in zip(start, end, strict=True)]
    return state, spans, ints, floats, exact


SPACES = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]


def test_cells_strip_and_miss_as_pythons_parse_scalar():
    rng = random.Random(5)
    alphabet = [*SPACES, "a", "é", "日", "😀", "N", "A", "1", ".", "\x00", "\u200b"]
    cells = ["".join(rng.choices(alphabet, k=rng.randrange(0, 6))) for _ in range(20_000)]
    cells += [s + na + s for na in DEFAULT_NA_VALUES for s in ("", " ", "\u3000", "\x1f")]
    state, spans, *_ = _classify(cells, kernels.BYTES)
    for cell, st_, span in zip(cells, state, spans, strict=True):
        expected = parse_scalar(cell)
        assert (st_ == kernels.MISSING) == (expected is None), repr(cell)
        if expected is not None:
            assert span == expected, repr(cell)


@pytest.mark.parametrize(
    ("cell", "value"),
    [("12", 12), ("-0", 0), ("+5", 5), ("007", 7), ("123456789012345678", 123456789012345678)],
)
def test_plain_integers_are_read_and_the_rest_left_to_python(cell, value):
    state, _, ints, _, _ = _classify(
        [cell, "1_000", "١٢", "1.0", "9223372036854775807"], kernels.INT
    )
    assert (state[0], ints[0]) == (kernels.PRESENT, value)
    assert (state[1:] == kernels.UNUSUAL).all()


def test_json_keys_are_json_dumps():
    rng = random.Random(6)
    alphabet = [chr(c) for c in range(0, 0x250)] + ["😀", "\U0010ffff", "\u2028", "日", "\x7f"]
    strings = ["".join(rng.choices(alphabet, k=rng.randrange(0, 12))) for _ in range(3000)]
    ints = [rng.randrange(-(2**63), 2**63) for _ in range(3000)] + [0, -1, -(2**63), 2**63 - 1]
    floats = [rng.uniform(-1e6, 1e6) for _ in range(3000)]
    n = 3004
    strings += [""] * 4
    floats += [0.5] * 4
    offsets, data = packed([s.encode() for s in strings])
    printed = [repr(f).encode() for f in floats]
    f_offsets, f_data = packed(printed)
    text = np.concatenate([data, f_data])
    state = np.ones((n, 3), np.uint8)  # a row per record, a column per feature
    state[::7, 0] = kernels.MISSING
    zeros = np.zeros(n, np.int64)
    start = np.stack([zeros, offsets[:-1], len(data) + f_offsets[:-1]], axis=1)
    end = np.stack([zeros, offsets[1:], len(data) + f_offsets[1:]], axis=1)
    values = np.stack([np.array(ints, np.int64), zeros, zeros], axis=1)
    kinds = np.array([kernels.INT, kernels.BYTES, kernels.FLOAT], np.int64)
    keys = key_loops.json_keys(np.arange(n), kinds, state, values, text, start, end)
    expected = [
        json.dumps([None if i % 7 == 0 else ints[i], strings[i], floats[i]]) for i in range(n)
    ]
    assert texts(*keys) == expected


_KIND_VALUES = {
    kernels.INT: st.integers(-(2**63), 2**63 - 1),
    kernels.FLOAT: st.floats(width=32, allow_nan=False, allow_infinity=False),
    kernels.BYTES: st.text(max_size=20),
}


@st.composite
def _typed_rows(draw):
    names = draw(
        st.lists(st.text("abcxyz_0é", min_size=1, max_size=4), min_size=1, max_size=12, unique=True)
    )
    kinds = [draw(st.sampled_from(list(_KIND_VALUES))) for _ in names]
    rows = draw(
        st.lists(st.tuples(*(st.none() | _KIND_VALUES[k] for k in kinds)), min_size=1, max_size=8)
    )
    return names, kinds, rows


@settings(max_examples=300, deadline=None)
@given(_typed_rows())
def test_examples_are_encode_examples(table):
    names, kinds, rows = table
    order = sorted(range(len(names)), key=lambda f: convert.map_order(names[f]))
    n = len(rows)
    state = np.zeros((n, len(names)), np.uint8)  # a row per record, a column per feature
    values = np.zeros((n, len(names)), np.int64)
    start = np.zeros((n, len(names)), np.int64)
    end = np.zeros((n, len(names)), np.int64)
    pieces: list[bytes] = []
    at = 0
    for slot, f in enumerate(order):
        for i, row in enumerate(rows):
            v = row[f]
            if v is None:
                continue
            state[i, slot] = kernels.PRESENT
            if kinds[f] == kernels.INT:
                values[i, slot] = v
            elif kinds[f] == kernels.FLOAT:
                values[i, slot] = np.float32(v).view(np.uint32)
            else:
                raw = v.encode()
                pieces.append(raw)
                start[i, slot], end[i, slot] = at, at + len(raw)
                at += len(raw)
    name_offsets, name_data = packed([convert.map_key(names[f]) for f in order])
    offsets, data = record_loops.encode_examples(
        np.arange(n),
        np.array([kinds[f] for f in order], np.int64),
        state,
        values,
        np.frombuffer(b"".join(pieces), np.uint8),
        start,
        end,
        name_data,
        name_offsets,
    )
    got = [bytes(data[offsets[i] : offsets[i + 1]]) for i in range(n)]
    assert got == [convert.encode_example(dict(zip(names, row, strict=True))) for row in rows]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.binary(min_size=1, max_size=1),
            st.binary(min_size=1, max_size=1),
            st.binary(max_size=4),
        ),
        max_size=60,
    )
)
def test_records_sort_as_python_sorts_digest_record_pairs(items):
    """Hashes from few values, so that first words, second words and whole hashes tie."""
    digests = [a * 8 + b * 8 for a, b, _ in items]
    records = [r for _, _, r in items]
    got = Records.of([0] * len(items), digests, records)
    order = got.sort_order()
    assert [(digests[i], records[i]) for i in order] == sorted(zip(digests, records, strict=True))


def test_without_a_writable_cache_the_loops_compile_per_process_and_say_so(tmp_path):
    """No cache folder numba may write: the loops still run (compiled in the process), with one
    warning that says how to give them one."""
    import os
    import subprocess

    env = dict(
        os.environ,
        NUMBA_CACHE_LOCATOR_CLASSES="_UserWideCacheLocator",  # not beside the package
        NUMBA_CACHE_DIR="/proc/no-cache-here",
    )
    code = (
        "import logging, hashlib, numpy as np; logging.basicConfig(level=logging.WARNING)\n"
        "from tfrecord_suite.shard.kernels import keys\n"
        "d = keys.blake2b_16(np.array([0, 3], np.int64), np.frombuffer(b'abc', np.uint8))\n"
        "assert bytes(d[0]) == hashlib.blake2b(b'abc', digest_size=16).digest()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    warnings = [line for line in proc.stderr.splitlines() if "cannot be cached" in line]
    assert len(warnings) == 1 and "NUMBA_CACHE_DIR" in warnings[0]


def test_without_numba_the_cli_imports_and_a_loop_says_what_to_install():
    # the trainer images install no shard extra and still run `tfrecord-suite train`
    script = (
        "import sys; sys.modules['numba'] = None\n"
        "import tfrecord_suite.cli.main\n"
        "from tfrecord_suite.errors import UserError\n"
        "from tfrecord_suite.shard.kernels import keys\n"
        "try:\n"
        "    keys.json_keys()\n"
        "except UserError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert "needs numba" in out and "tfrecord-suite[shard]" in out
