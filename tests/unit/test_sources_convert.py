import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import write_csv

from tfrecord_suite.schema import infer_tabular_schema
from tfrecord_suite.shard import convert, sources


def rows(path, fmt, **kw):
    return list(sources.read_rows(path, sources.ReadOptions(format=fmt, **kw)))


def test_detects_formats(tmp_path, digits_dir, jsonl_file):
    csv_path = write_csv(str(tmp_path / "a.csv"), ["x"], [[1]])
    assert sources.detect_format(csv_path, sources.resolve_inputs(csv_path)) == "csv"
    assert sources.detect_format(digits_dir, sources.resolve_inputs(digits_dir)) == "images"
    assert sources.detect_format(jsonl_file, sources.resolve_inputs(jsonl_file)) == "jsonl"
    (tmp_path / "mixed").mkdir()
    (tmp_path / "mixed" / "a.csv").write_text("x\n1\n")
    (tmp_path / "mixed" / "b.parquet").write_bytes(b"")
    with pytest.raises(sources.InputError, match="--format"):
        p = str(tmp_path / "mixed")
        sources.detect_format(p, sources.resolve_inputs(p))


def test_globs_skip_hidden_and_name_missing(tmp_path):
    for name in ("a.csv", "b.csv", ".hidden.csv", "_SUCCESS"):
        (tmp_path / name).write_text("x\n1\n")
    found = sources.resolve_inputs(str(tmp_path / "*.csv"))
    assert [f.uri.rsplit("/", 1)[1] for f in found] == ["a.csv", "b.csv"]
    assert len(sources.resolve_inputs(str(tmp_path))) == 2
    with pytest.raises(sources.InputError, match="does not exist"):
        sources.resolve_inputs(str(tmp_path / "nope"))


def test_csv_quoting_ragged_rows_and_row_numbers(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('a,b\n1,"hello, ""world"""\n2\n3,"multi\nline"\n4,x,extra\n')
    out = rows(str(path), "csv")
    assert out[0].values == {"a": "1", "b": 'hello, "world"'}
    assert out[1].error == "row has 1 fields, header has 2" and out[1].row == 3
    assert out[2].values["b"] == "multi\nline"
    assert out[3].error and out[3].row == 6


def test_bad_encoding_keeps_rows_before_it(tmp_path):
    path = tmp_path / "latin.csv"
    path.write_bytes(b"name,v\nok,1\ncaf\xe9,2\n")
    out = rows(str(path), "csv")
    assert out[0].values == {"name": "ok", "v": "1"}
    assert "not valid utf-8" in out[1].error and "--encoding" in out[1].error and out[1].row == 3
    assert rows(str(path), "csv", encoding="latin-1")[1].values["name"] == "café"


def test_overlong_line_is_a_bad_row_not_oom(tmp_path):
    path = tmp_path / "long.jsonl"
    path.write_text('{"a": 1}\n' + '{"a": "' + "x" * 5000 + '"}\n{"a": 2}\n')
    out = rows(str(path), "jsonl", max_line_bytes=1000)
    assert out[0].values == {"a": 1} and out[2].values == {"a": 2}
    assert "longer than 1000" in out[1].error


def test_jsonl_and_text_and_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    j = tmp_path / "x.jsonl"
    j.write_text('{"a": 1}\n\nnot json\n[1]\n')
    out = rows(str(j), "jsonl")
    assert out[0].values == {"a": 1}
    assert "invalid JSON" in out[1].error and out[1].row == 3
    assert "expected a JSON object" in out[2].error
    t = tmp_path / "x.txt"
    t.write_text("first line\n\nsecond\n")
    assert [r.values["text"] for r in rows(str(t), "text")] == ["first line", "second"]
    p = tmp_path / "x.parquet"
    pq.write_table(pa.table({"a": [1, 2], "b": ["u", None]}), p)
    assert [r.values for r in rows(str(p), "parquet")] == [{"a": 1, "b": "u"}, {"a": 2, "b": None}]


def test_split_assignment_is_deterministic_and_weighted():
    spec = convert.SplitSpec.parse("train=80,validation=10,test=10")
    counts = {"train": 0, "validation": 0, "test": 0}
    for i in range(5000):
        d = convert.key_digest(str(i).encode())
        assert spec.assign(d) == spec.assign(convert.key_digest(str(i).encode()))
        counts[spec.assign(d)] += 1
    assert 3800 < counts["train"] < 4200 and 350 < counts["test"] < 650
    for bad in ("", "train", "train=0", "a=1,a=2", "../x=1"):
        with pytest.raises(ValueError):
            convert.SplitSpec.parse(bad)


def test_converter_types_and_errors():
    schema = infer_tabular_schema(
        ["n", "x", "c", "label"], [{"n": "1", "x": "0.5", "c": "a", "label": "yes"}]
    )
    conv = convert.RowConverter(schema, convert.SplitSpec.parse("train=1"))
    rec = conv.convert(sources.RawRow("f.csv", 2, {"n": "3", "x": "", "c": "b", "label": "no"}))
    import tensorflow as tf

    ex = tf.train.Example.FromString(rec.data)
    assert ex.features.feature["n"].int64_list.value == [3]
    assert "x" not in ex.features.feature  # missing stays missing; the spec's default fills it
    assert rec.label == "no"
    with pytest.raises(convert.RowError) as err:
        conv.convert(sources.RawRow("f.csv", 3, {"n": "3.5", "x": "1", "c": "b", "label": "no"}))
    assert err.value.field == "n" and "not an integer" in err.value.reason
    with pytest.raises(convert.RowError, match="label is missing"):
        conv.convert(sources.RawRow("f.csv", 4, {"n": "1", "x": "1", "c": "b", "label": ""}))
    with pytest.raises(convert.RowError, match="finite"):
        conv.convert(sources.RawRow("f.csv", 5, {"n": "1", "x": "inf", "c": "b", "label": "a"}))


def test_stats_merge_is_associative():
    schema = infer_tabular_schema(["v", "label"], [{"v": "1.0", "label": "a"}])
    conv = convert.RowConverter(schema, convert.SplitSpec.parse("train=1"))
    parts = []
    for chunk in ([1.0, 2.0], [3.0], [None, 5.0]):
        s = convert.new_split_stats()
        for v in chunk:
            r = conv.convert(
                sources.RawRow("f", 1, {"v": "" if v is None else str(v), "label": "a"})
            )
            convert.update_stats(s, schema, r)
        parts.append(s)
    a = convert.merge_stats(convert.merge_stats(parts[0], parts[1]), parts[2])
    b = convert.merge_stats(parts[0], convert.merge_stats(parts[1], parts[2]))
    assert a == b
    final = convert.finalize_stats(a)
    v = final["features"]["v"]
    assert (v["min"], v["max"], v["missing"], v["present"]) == (1.0, 5.0, 1, 4)
    assert v["mean"] == pytest.approx(2.75)
    assert final["label_histogram"] == {"a": 5}
    json.dumps(final)


def test_a_real_1_gib_line_is_one_bad_row_in_bounded_memory(tmp_path):
    """A 1 GiB single line (a sparse file, so it costs no disk) between two good rows."""
    import subprocess
    import sys

    path = tmp_path / "huge.jsonl"
    with open(path, "wb") as fh:
        fh.write(b'{"a": 1}\n')
        fh.seek(fh.tell() + (1 << 30))
        fh.write(b'\n{"a": 2}\n')
    code = (
        "import json, sys\n"
        "from tfrecord_suite.shard import sources\n"
        "out = list(sources.read_rows(sys.argv[1], sources.ReadOptions(format='jsonl')))\n"
        "print(json.dumps([[r.values, r.error] for r in out]))\n"
        # VmHWM is this process's own peak; ru_maxrss would carry over the forking parent's
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0]\n"
        "print(int(hwm.split()[1]) // 1024)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result, peak_mib = proc.stdout.strip().splitlines()
    (good1, _), (_, error), (good2, _) = json.loads(result)
    assert good1 == {"a": 1} and good2 == {"a": 2}
    assert "line longer than 67108864 B" in error
    assert int(peak_mib) < 400, f"peak RSS {peak_mib} MiB reading a 1 GiB line"


_NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_0123456789", min_size=1, max_size=12)
_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(min_value=-3.4028234663852886e38, max_value=3.4028234663852886e38),
    st.text(max_size=40),
    st.binary(max_size=300),
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_NAMES, _VALUES, max_size=25))
def test_direct_example_encoding_matches_protobuf(typed):
    """encode_example writes the bytes protobuf's deterministic serialization writes."""
    import tensorflow as tf

    example = tf.train.Example()
    feature_map = example.features.feature
    for name, value in typed.items():
        if value is None:
            continue
        if isinstance(value, bytes):
            feature_map[name].bytes_list.value.append(value)
        elif isinstance(value, str):
            feature_map[name].bytes_list.value.append(value.encode())
        elif isinstance(value, float):
            feature_map[name].float_list.value.append(value)
        else:
            feature_map[name].int64_list.value.append(int(value))
    assert convert.encode_example(typed) == example.SerializeToString(deterministic=True)


def test_image_formats_are_counted_merged_and_carried_through_an_append():
    import io

    from PIL import Image

    from tfrecord_suite.registry.content import merge_statistics

    def encoded(fmt):
        buf = io.BytesIO()
        Image.new("RGB", (4, 3), (10, 20, 30)).save(buf, format=fmt)
        return buf.getvalue()

    assert [convert.image_format(encoded(f)) for f in ("JPEG", "PNG", "GIF", "BMP")] == [
        "jpeg",
        "png",
        "gif",
        "bmp",
    ]
    assert convert.image_format(b"not an image") == "other"
    schema = convert.image_schema(["a", "b"], convert.ImageOptions())
    conv = convert.RowConverter(schema, convert.SplitSpec.parse("train=1"))
    parts = []
    for formats in (["JPEG", "JPEG"], ["PNG"], ["JPEG"]):
        s = convert.new_split_stats()
        for i, fmt in enumerate(formats):
            row = sources.RawRow(f"a/{fmt}{i}", 0, {"image": encoded(fmt), "label": "a"})
            convert.update_stats(s, schema, conv.convert(row))
        parts.append(s)
    a = convert.merge_stats(convert.merge_stats(parts[0], parts[1]), parts[2])
    b = convert.merge_stats(parts[0], convert.merge_stats(parts[1], parts[2]))
    assert a == b
    final = convert.finalize_stats(a)
    assert final["features"]["image"] == {
        "present": 4,
        "missing": 0,
        "formats": {"jpeg": 3, "png": 1},
    }
    assert final["features"]["image_height"]["max"] == 3.0
    assert parts[0]["features"]["image"]["formats"] == {"jpeg": 2}  # inputs are not changed
    appended = merge_statistics({"train": final}, {"train": convert.finalize_stats(parts[1])})
    assert appended["train"]["features"]["image"]["formats"] == {"jpeg": 3, "png": 2}
    json.dumps(final)
