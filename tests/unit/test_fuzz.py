"""Property-based fuzzing of the row parsers and the manifest loader: whatever the bytes, they
either parse or fail with our own clear error, never crash or loop."""

import json
import os
import string

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tfrecord_suite.registry.manifest import Manifest, RegistryError
from tfrecord_suite.schema import infer_tabular_schema
from tfrecord_suite.shard import convert, sources

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    # CI (.ci/run) replays a fixed set of examples so a stop's result is reproducible; `make test`
    # elsewhere explores new ones every run, and what it finds gets pinned with @example
    derandomize=os.environ.get("TFRS_FUZZ_DERANDOMIZE") == "1",
)


@SETTINGS
@given(st.binary(max_size=400))
@example(data=b"\r\x00")  # found by CI: a syntax error in the first record was blamed on row 1
def test_csv_reader_never_crashes(tmp_path, data):
    path = tmp_path / "f.csv"
    path.write_bytes(b"a,b,label\n" + data)
    rows = list(sources.read_rows(str(path), sources.ReadOptions(format="csv")))
    for r in rows:
        assert r.row >= 2
        assert r.error or set(r.values) == {"a", "b", "label"}


@SETTINGS
@given(st.binary(max_size=400))
def test_jsonl_reader_never_crashes(tmp_path, data):
    path = tmp_path / "f.jsonl"
    path.write_bytes(data)
    for r in sources.read_rows(str(path), sources.ReadOptions(format="jsonl")):
        assert r.error or isinstance(r.values, dict)


cells = st.one_of(
    st.none(),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=True),
    st.text(string.printable, max_size=12),
    st.lists(st.integers(), max_size=2),
)


@SETTINGS
@given(
    st.lists(st.dictionaries(st.sampled_from(["a", "b", "label"]), cells), min_size=1, max_size=8)
)
def test_converter_accepts_or_names_the_field(rows):
    schema = infer_tabular_schema(
        ["a", "b", "label"], [{"a": "1", "b": "x", "label": "y"}], label="label"
    )
    conv = convert.RowConverter(schema, convert.SplitSpec.parse("train=1"))
    for i, values in enumerate(rows):
        try:
            rec = conv.convert(sources.RawRow("f.jsonl", i + 1, values))
        except convert.RowError as exc:
            assert exc.reason
            assert exc.field in (None, "a", "b", "label")
        else:
            assert rec.split == "train" and rec.data


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)


@SETTINGS
@given(
    st.dictionaries(
        st.sampled_from(
            ["dataset", "version", "shards", "splits", "schema", "content_digest", "totals", "x"]
        ),
        json_values,
    )
)
def test_manifest_loader_rejects_garbage_with_registry_error(doc):
    try:
        Manifest.load(json.dumps(doc), "m.json")
    except RegistryError as exc:
        assert str(exc).startswith("m.json: ")


@SETTINGS
@given(st.binary(max_size=200))
def test_manifest_loader_on_raw_bytes(data):
    try:
        manifest = Manifest.load(data.decode("utf-8", errors="replace"), "m.json")
    except RegistryError as exc:
        assert str(exc).startswith("m.json: ")
    else:
        assert isinstance(manifest, Manifest)


_CELL = st.text(alphabet=string.ascii_letters + string.digits + " ,\n\"'", max_size=8)
_BAD_ROWS = [
    '"unterminated,1,2\n',  # a quote opened and never closed
    '"x"y,1,2\n',  # text after a closing quote
    '1,"two"three,4\n',  # a stray quote closing a field early
    "short,row\n",
    "one,too,many,columns\n",
]


def _quoted(cell: str) -> str:
    return '"' + cell.replace('"', '""') + '"'


@SETTINGS
@given(
    st.lists(st.tuples(_CELL, _CELL, _CELL), min_size=1, max_size=12),
    st.lists(st.tuples(st.integers(0, 12), st.sampled_from(_BAD_ROWS)), max_size=4),
)
@example(good=[("a", "b", "c")] * 3, bad=[(1, '"unterminated,1,2\n')])
# found by fuzzing: the open quote paired with one in the next row's first line, and the lines
# between made a record of the right width, cutting that row in two
@example(good=[("", "", ",,\n")], bad=[(0, '"unterminated,1,2\n')])
@example(good=[("", ",,\n,", ",\n")], bad=[(0, '"unterminated,1,2\n')])
@example(good=[("", "", ",,\n")], bad=[(0, '"unterminated,1,2\n'), (0, "short,row\n")])
def test_csv_keeps_every_good_row_around_bad_ones(tmp_path, good, bad):
    """Whatever bad records are inserted between well-formed ones (quoted fields may hold
    delimiters, quotes and newlines), every good record comes out, each bad one costs itself."""
    lines = [",".join(_quoted(c) for c in row) + "\n" for row in good]
    for position, text in sorted(bad, reverse=True):
        lines.insert(min(position, len(lines)), text)
    path = tmp_path / "f.csv"
    path.write_text("a,b,c\n" + "".join(lines))
    rows = list(sources.read_rows(str(path), sources.ReadOptions(format="csv")))
    kept = [(r.values["a"], r.values["b"], r.values["c"]) for r in rows if not r.error]
    assert kept == [tuple(row) for row in good]
    assert sum(1 for r in rows if r.error) == len(bad)
