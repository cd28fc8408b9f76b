"""Integration tests: the Beam shard step for real on the DirectRunner, into temporary folders."""

import glob
import json
import os
import random

import pytest
from support import write_csv

from tfrecord_suite.errors import UserError
from tfrecord_suite.io import storage
from tfrecord_suite.schema import Schema, parse_spec
from tfrecord_suite.shard.step import ShardConfig, ShardError, read_dead_letters, run_shard


def read_all(output: str, split: str, gzip: bool = False) -> list[dict]:
    import tensorflow as tf

    schema = Schema.from_json(storage.read_text(os.path.join(output, "schema.json")))
    files = sorted(glob.glob(os.path.join(output, f"{split}-*.tfrecord*")))
    ds = tf.data.TFRecordDataset(files, compression_type="GZIP" if gzip else "").batch(1000)
    out = []
    for batch in ds.map(lambda b: tf.io.parse_example(b, parse_spec(schema, include_meta=True))):
        keys = list(batch)
        for i in range(len(batch[keys[0]])):
            out.append({k: batch[k][i].numpy() for k in keys})
    return out


def test_penguins_csv_to_shards_readable_with_written_spec(tmp_path, penguins_csv):
    out = str(tmp_path / "out")
    s = run_shard(ShardConfig(input=penguins_csv, output=out))
    assert s.records == 344 and s.bad_rows == 0
    assert sum(s.statistics[k]["count"] for k in ("train", "validation", "test")) == 344
    assert 240 < s.statistics["train"]["count"] < 310
    assert sorted(os.listdir(out)) == [
        "schema.json",
        "summary.json",
        "summary.md",
        "test-00000-of-00001.tfrecord",
        "train-00000-of-00001.tfrecord",
        "validation-00000-of-00001.tfrecord",
    ]
    schema = Schema.from_json(storage.read_text(os.path.join(out, "schema.json")))
    assert schema.label == "species" and schema.label_classes == ["Adelie", "Chinstrap", "Gentoo"]
    missing = sum(st["features"]["bill_length_mm"]["missing"] for st in s.statistics.values())
    assert missing == 2  # the two penguins with no measurements
    rows = read_all(out, "train")
    assert len(rows) == s.statistics["train"]["count"]
    assert {r["species"] for r in rows} == {b"Adelie", b"Chinstrap", b"Gentoo"}
    assert s.beam_metrics["records_written"] == 344
    assert s.input_fingerprint["files"][0]["size"] == os.path.getsize(penguins_csv)
    md = storage.read_text(os.path.join(out, "summary.md"))
    assert "| train |" in md and "bill_length_mm" in md


def _same_shards(a: str, b: str, expected: int) -> None:
    names = sorted(n for n in os.listdir(a) if n.endswith(".tfrecord"))
    assert len(names) == expected
    assert names == sorted(n for n in os.listdir(b) if n.endswith(".tfrecord"))
    for n in names:
        with open(os.path.join(a, n), "rb") as fa, open(os.path.join(b, n), "rb") as fb:
            assert fa.read() == fb.read(), n


def test_same_input_gives_identical_bytes(tmp_path, jsonl_file):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    run_shard(ShardConfig(input=jsonl_file, output=a, num_shards=3))
    run_shard(ShardConfig(input=jsonl_file, output=b, num_shards=3))
    _same_shards(a, b, 9)


@pytest.mark.slow
def test_disk_and_beam_shuffles_write_identical_shards(tmp_path):
    """The disk-backed shuffle (flat memory on one machine) and the runner's shuffle group the
    same records into the same shards, byte for byte, with one worker or two processes."""
    from benchmarks.core import make_csv

    raw = make_csv(str(tmp_path / "raw"), rows=6000, files=3)
    beam = str(tmp_path / "beam")
    run_shard(ShardConfig(input=raw, output=beam, num_shards=5, shuffle="beam"))
    disk = str(tmp_path / "disk")
    s = run_shard(ShardConfig(input=raw, output=disk, num_shards=5, shuffle="disk"))
    assert s.records == 6000
    _same_shards(beam, disk, 15)
    two = str(tmp_path / "two")
    run_shard(
        ShardConfig(
            input=raw, output=two, num_shards=5, shuffle="disk",
            beam_args=["--direct_num_workers=2", "--direct_running_mode=multi_processing"],
        )
    )  # fmt: skip
    _same_shards(beam, two, 15)


def _dead_letters(output):
    return sorted(json.dumps(d, sort_keys=True) for d in read_dead_letters(output))


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_the_batch_path_writes_the_row_paths_shards(tmp_path, fmt):
    """The whole step, on Beam, with and without the batch path: the same shards, byte for byte,
    the same dead letters, the same plan and statistics; and so with two worker processes."""
    from tables import nasty_rows, tabular_schema, write_jsonl, write_parquet
    from tables import write_csv as write_nasty_csv

    rng = random.Random(fmt)
    path = tmp_path / f"t.{fmt}"
    if fmt == "csv":
        write_nasty_csv(path, nasty_rows(rng, 3000), rng=rng)
    elif fmt == "jsonl":
        write_jsonl(path, rng, 3000)
    else:
        write_parquet(path, rng, 3000)
    common = dict(input=str(path), label="label", num_shards=3, max_bad_fraction=1.0)
    if fmt == "jsonl":
        # the generator's "extra" field holds numbers, strings and lists: inferred, it would be a
        # string column whose numbers send nearly every line to the row path
        schema = tmp_path / "schema.json"
        schema.write_text(tabular_schema().to_json())
        common["schema_file"] = str(schema)
    rows = run_shard(ShardConfig(output=str(tmp_path / "rows"), columnar=False, **common))
    batches = run_shard(ShardConfig(output=str(tmp_path / "batches"), **common))
    two = run_shard(
        ShardConfig(
            output=str(tmp_path / "two"), shuffle="beam", **common,
            beam_args=["--direct_num_workers=2", "--direct_running_mode=multi_processing"],
        )
    )  # fmt: skip
    for other in (batches, two):
        _same_shards(rows.output, other.output, 9)
        assert _dead_letters(other.output) == _dead_letters(rows.output)
        assert (other.records, other.bad_rows, other.schema) == (
            rows.records,
            rows.bad_rows,
            rows.schema,
        )
        assert other.plan == rows.plan
        for split, stats in rows.statistics.items():
            got = other.statistics[split]
            assert (got["count"], got["bytes"], got["label_histogram"]) == (
                stats["count"],
                stats["bytes"],
                stats["label_histogram"],
            )
    assert rows.beam_metrics.get("batch_path_rows", 0) == 0
    assert batches.beam_metrics["batch_path_rows"] > batches.beam_metrics["row_path_rows"]


def test_disk_shuffle_needs_a_local_runner(tmp_path):
    from tfrecord_suite.errors import UserError

    with pytest.raises(UserError, match="--shuffle disk needs a runner on this machine"):
        ShardConfig(
            input="gs://b/raw", output="gs://b/out", shuffle="disk",
            beam_args=["--runner=DataflowRunner"],
        ).validate()  # fmt: skip
    assert not ShardConfig(
        input="gs://b/raw", output="gs://b/o", beam_args=["--runner=DataflowRunner"]
    ).uses_disk_shuffle()
    assert ShardConfig(input="a", output="b").uses_disk_shuffle()
    # the FnApiRunner named outright (no Prism attempt) is a runner on this machine too
    local = ShardConfig(input=str(tmp_path), output="out", beam_args=["--runner=FnApiRunner"])
    local.validate()
    assert local.uses_disk_shuffle()


def test_no_runner_named_runs_in_process_and_never_tries_to_download_prism(
    tmp_path, penguins_csv, caplog
):
    """Beam's DirectRunner would first try Prism, downloading its binary; the step says which
    runner it runs on instead and tries nothing else (Prism itself: tests/integration/
    test_runners.py)."""
    import logging

    caplog.set_level(logging.INFO)
    run_shard(ShardConfig(input=penguins_csv, output=str(tmp_path / "out")))
    assert "running on the FnApiRunner in this process (no --prism_location)" in caplog.text
    beam = [r.getMessage() for r in caplog.records if r.name.startswith("apache_beam")]
    assert beam and not [m for m in beam if "prism" in m.lower()]


def test_bad_rows_go_to_dead_letter_and_fail_past_threshold(tmp_path):
    good = [[i, f"{i * 0.1:.1f}", "a" if i % 2 else "b"] for i in range(200)]
    path = write_csv(str(tmp_path / "in.csv"), ["n", "x", "label"], good)
    with open(path, "a") as fh:
        fh.write("7,notanumber,a\n1,2\n")
    out = str(tmp_path / "ok")
    s = run_shard(ShardConfig(input=path, output=out, max_bad_fraction=0.05))
    assert s.records == 200 and s.bad_rows == 2
    dead = list(read_dead_letters(out))
    assert {(d["row"], d["field"]) for d in dead} == {(202, "x"), (203, None)}
    # written by Beam as JSON-lines shards beside the output; the summary names their pattern
    assert s.dead_letter == os.path.join(out, "dead_letter-*-of-*.jsonl")
    assert s.dead_letter_files and all(
        os.path.isfile(os.path.join(out, n)) for n in s.dead_letter_files
    )
    assert "not a number" in dead[0]["reason"] or "not a number" in dead[1]["reason"]
    out2 = str(tmp_path / "strict")
    with pytest.raises(ShardError, match=r"2 of 202 rows.*in.csv row 20[23]") as err:
        run_shard(ShardConfig(input=path, output=out2, max_bad_fraction=0.001))
    assert "Good records were written" in str(err.value)
    assert json.loads(storage.read_text(os.path.join(out2, "summary.json")))["records"] == 200


def test_images_encoded_raw_and_undecodable(tmp_path, digits_dir):
    import shutil

    src = str(tmp_path / "img")
    shutil.copytree(digits_dir, src)
    with open(os.path.join(src, "3", "broken.png"), "wb") as fh:
        fh.write(b"this is not a png")
    out = str(tmp_path / "enc")
    s = run_shard(ShardConfig(input=src, output=out, max_bad_fraction=0.01))
    assert s.records == 1797 and s.bad_rows == 1
    assert s.schema["label_classes"] == [str(i) for i in range(10)]
    rows = read_all(out, "test")
    assert rows[0]["image"][:4] == b"\x89PNG" and rows[0]["image_height"] == 8
    raw = str(tmp_path / "raw")
    s = run_shard(ShardConfig(input=src, output=raw, image_encoding="raw", image_size=(16, 16)))
    rows = read_all(raw, "validation")
    assert len(rows[0]["image"]) == 16 * 16 * 1
    assert s.schema["features"][0]["shape"] == [16, 16, 1]


def test_shard_time_resize_stores_the_training_size_and_says_so(tmp_path):
    import numpy as np
    import tensorflow as tf
    from PIL import Image

    from tfrecord_suite import demo_data
    from tfrecord_suite.registry.datasets import Registry

    bands = tmp_path / "bands"
    os.makedirs(bands / "a")
    os.makedirs(bands / "b")
    pixels = np.zeros((30, 90, 3), np.uint8)
    pixels[:, :30, 0] = pixels[:, 30:60, 1] = pixels[:, 60:, 2] = 255  # red, green, blue thirds
    for i in range(3):
        Image.fromarray(pixels).save(bands / "a" / f"{i}.jpg", quality=95)
        Image.fromarray(pixels).save(bands / "b" / f"{i}.png")
    for aspect, green_only in (("crop", True), ("stretch", False)):
        out = str(tmp_path / aspect)
        s = run_shard(
            ShardConfig(
                input=str(bands),
                output=out,
                splits="train=1",
                image_size=(20, 20),
                image_aspect=aspect,
                image_quality=80,
            )
        )
        stats = s.statistics["train"]["features"]
        assert stats["image_height"]["min"] == stats["image_height"]["max"] == 20
        assert stats["image_width"]["min"] == stats["image_width"]["max"] == 20
        assert stats["image"]["formats"] == {"jpeg": 3, "png": 3}  # a JPEG stays a JPEG
        for row in read_all(out, "train"):
            img = tf.io.decode_image(row["image"], channels=3).numpy().astype(int)
            assert img.shape == (20, 20, 3) and row["image_height"] == 20
            # crop keeps the aspect ratio (the central, green third); stretch keeps all three
            assert (img[:, :, 1].mean() > 200) == green_only
            assert (img[:, 2, 0].mean() > 200) == (not green_only)

    # photos resized at shard time: the published version's statistics say the new size
    photos = demo_data.write_photos(str(tmp_path / "photos"), 10, (48, 64), seed=2)
    staged = str(tmp_path / "staged")
    config = ShardConfig(input=photos, output=staged, image_size=(24, 32), image_aspect="crop")
    run_shard(config)
    manifest = Registry(str(tmp_path / "registry")).publish(staged, "photos").manifest
    for split in manifest.statistics.values():
        f = split["features"]
        assert (f["image_height"]["min"], f["image_height"]["max"]) == (24, 24)
        assert (f["image_width"]["min"], f["image_width"]["max"]) == (32, 32)
        assert f["image"]["formats"] == {"jpeg": split["count"]}
    for row in read_all(staged, "train"):
        assert tf.io.extract_jpeg_shape(row["image"]).numpy().tolist() == [24, 32, 3]
    same_size = str(tmp_path / "same")  # already of the size: the stored bytes are the file's
    run_shard(ShardConfig(input=photos, output=same_size, image_size=(48, 64)))
    originals = {
        open(os.path.join(photos, c, f), "rb").read()
        for c in os.listdir(photos)
        for f in os.listdir(os.path.join(photos, c))
    }
    assert all(row["image"] in originals for row in read_all(same_size, "train"))
    with pytest.raises(UserError, match="--image-aspect"):
        ShardConfig(input="x", output="y", image_aspect="fill").validate()
    with pytest.raises(UserError, match="--image-quality"):
        ShardConfig(input="x", output="y", image_quality=0).validate()


def test_parquet_text_gzip_and_overwrite(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "pq"
    folder.mkdir()
    for part in range(3):
        pq.write_table(
            pa.table({"v": [float(i) for i in range(50)], "label": [i % 2 for i in range(50)]}),
            folder / f"part-{part}.parquet",
        )
    out = str(tmp_path / "pq_out")
    s = run_shard(ShardConfig(input=str(folder), output=out, gzip=True, num_shards=2))
    assert s.records == 150 and s.beam_metrics["files_read"] == 3
    assert sorted(n for n in os.listdir(out) if n.startswith("train")) == [
        "train-00000-of-00002.tfrecord.gz",
        "train-00001-of-00002.tfrecord.gz",
    ]
    assert len(read_all(out, "train", gzip=True)) == s.statistics["train"]["count"]
    with pytest.raises(ShardError, match="not empty"):
        run_shard(ShardConfig(input=str(folder), output=out))
    text = tmp_path / "lines.txt"
    text.write_text("".join(f"sentence number {i}\n" for i in range(40)))
    s = run_shard(ShardConfig(input=str(text), output=out, overwrite=True))
    assert s.format == "text" and s.records == 40
    assert not [n for n in os.listdir(out) if n.endswith(".gz")]


def test_absurd_parameters_are_refused(tmp_path, jsonl_file):
    for kwargs, msg in (
        ({"num_shards": 0}, "num_shards"),
        ({"max_bad_fraction": 2}, "within"),
        ({"splits": "train=0"}, "positive"),
        ({"format": "xml"}, "--format"),
        ({"workers": -1}, "at least 1"),
    ):
        with pytest.raises(ValueError, match=msg):
            run_shard(ShardConfig(input=jsonl_file, output=str(tmp_path / "o"), **kwargs))
    assert not os.path.exists(tmp_path / "o")


@pytest.mark.gcs
def test_writes_to_gcs_emulator(gcs_bucket, jsonl_file):
    out = f"{gcs_bucket}/staged/rows"
    s = run_shard(ShardConfig(input=jsonl_file, output=out, num_shards=2))
    names = sorted(storage.basename(f.uri) for f in storage.list_files(out))
    assert names == [
        "schema.json",
        "summary.json",
        "summary.md",
        "test-00000-of-00002.tfrecord",
        "test-00001-of-00002.tfrecord",
        "train-00000-of-00002.tfrecord",
        "train-00001-of-00002.tfrecord",
        "validation-00000-of-00002.tfrecord",
        "validation-00001-of-00002.tfrecord",
    ]
    assert s.records == 200
    total = sum(x["records"] for x in s.shards)
    assert total == 200


@pytest.mark.gcs
def test_a_csv_on_gcs_is_cut_and_probed_in_ranges_like_a_local_one(
    tmp_path, gcs_bucket, monkeypatch
):
    """Probes seek into the object (gs:// through Beam's FileSystems): the same rows, row numbers
    and dead letters as reading the local copy whole."""
    from tfrecord_suite.shard import ranges, sources

    body = "".join(
        f'{i},"note {i}\nsecond line",{i % 3}\n' if i % 5 else f"{i},plain,{i % 3}\n"
        for i in range(400)
    )
    text = "n,note,label\n" + body.replace("\n200,", '\n"unterminated,1\n200,')
    local = tmp_path / "quoted.csv"
    local.write_text(text)
    remote = f"{gcs_bucket}/raw/quoted.csv"
    storage.write_text(remote, text)
    options = sources.ReadOptions(format="csv")
    monkeypatch.setattr(ranges, "RANGE_BYTES", 1024)
    parts = ranges.split_file(storage.stat(remote), options)
    assert len(parts) >= 8
    rows = [r for p in parts for r in sources.read_rows(remote, options, part=p)]
    whole = list(sources.read_rows(str(local), options))
    assert [(r.row, r.values, r.error) for r in rows] == [(r.row, r.values, r.error) for r in whole]
    s = run_shard(ShardConfig(input=remote, output=f"{gcs_bucket}/staged/quoted", label="label"))
    assert (s.records, s.bad_rows) == (400, 1) and s.beam_metrics["input_ranges"] == len(parts)


def test_a_real_table_with_syntax_errors_in_the_middle_keeps_every_other_row(tmp_path):
    """Palmer penguins (344 real rows) with an unterminated quote, a short row and an extra
    column inserted in the middle: each costs exactly its own row, reported at its first line
    with its raw text; every one of the 344 rows is kept."""
    from tfrecord_suite import demo_data

    clean = demo_data.write_penguins(str(tmp_path / "clean.csv"))
    lines = open(clean).read().splitlines(keepends=True)
    header, rows = lines[0], lines[1:]
    width = header.count(",") + 1
    bad = {
        100: '"Adelie,Torgersen,39.1,18.7,181,3750,male,2007\n',  # the quote never closes
        200: "Gentoo,Biscoe\n",  # short
        300: ",".join(["x"] * (width + 1)) + "\n",  # an extra column
    }
    out_lines = [header]
    for i, row in enumerate(rows):
        if i in bad:
            out_lines.append(bad[i])
        out_lines.append(row)
    dirty = tmp_path / "dirty.csv"
    dirty.write_text("".join(out_lines))
    out = str(tmp_path / "out")
    result = run_shard(
        ShardConfig(input=str(dirty), output=out, label="species", max_bad_fraction=0.01)
    )
    assert result.records == len(rows) == 344
    assert result.bad_rows == 3
    letters = list(read_dead_letters(out))
    by_row = {d["row"]: d for d in letters}
    # file line numbers: the header is line 1, and each inserted row shifts the later ones
    assert sorted(by_row) == [102, 203, 304]
    assert "unterminated quote" in by_row[102]["reason"]
    assert by_row[102]["raw"] == bad[100]
    assert by_row[203]["reason"] == f"row has 2 fields, header has {width}"
    assert by_row[304]["raw"] == bad[300]


@pytest.mark.slow
def test_a_big_file_read_in_ranges_gives_identical_shards(tmp_path, monkeypatch):
    """One CSV with quoted newlines and bad rows, read whole and read by many workers in ranges:
    the same shards, byte for byte, and the same dead letters."""
    from tfrecord_suite.shard import ranges

    rows = [
        [i, f'"line one\nline two {i}"' if i % 5 == 0 else f"v{i}", "ab"[i % 2]]
        for i in range(3000)
    ]
    path = tmp_path / "big.csv"
    text = "n,note,label\n" + "".join(f"{a},{b},{c}\n" for a, b, c in rows)
    text = text.replace("\n1500,", '\n"unterminated,1\n1500,')
    path.write_text(text)
    whole = str(tmp_path / "whole")
    a = run_shard(ShardConfig(input=str(path), output=whole, num_shards=3, label="label"))
    monkeypatch.setattr(ranges, "RANGE_BYTES", 2048)
    ranged = str(tmp_path / "ranged")
    b = run_shard(ShardConfig(input=str(path), output=ranged, num_shards=3, label="label"))
    assert a.beam_metrics["input_ranges"] == 1 and b.beam_metrics["input_ranges"] > 10
    assert a.records == b.records == 3000 and a.bad_rows == b.bad_rows == 1
    _same_shards(whole, ranged, 9)
    assert list(read_dead_letters(whole)) == list(read_dead_letters(ranged))


@pytest.mark.slow
def test_every_kind_of_bad_record_in_the_middle_of_a_large_file(tmp_path, monkeypatch):
    """An unterminated quote, a stray quote, a short and a long row, bad UTF-8 and a 1 GiB line
    (a sparse file: no disk) in the middle of one CSV read by many workers in ranges, beside an
    empty file: one dead letter each, every good row kept, the threshold on the true count."""
    from tfrecord_suite.shard import ranges

    monkeypatch.setattr(ranges, "RANGE_BYTES", 16 * 1024)
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "empty.csv").write_bytes(b"")
    good = [f"{i},{i * 0.5},{'ab'[i % 2]}\n".encode() for i in range(4000)]
    bad = {
        500: b'"unterminated,1,a\n',
        1000: b'1,"two"three,a\n',
        1500: b"5\n",
        2000: b"1,2,a,extra\n",
        2500: b"\xff\xfe,1,a\n",
    }
    with open(folder / "big.csv", "wb") as fh:
        fh.write(b"n,x,label\n")
        for i, row in enumerate(good):
            if i in bad:
                fh.write(bad[i])
            if i == 3000:
                fh.write(b"x")
                fh.seek(fh.tell() + (1 << 30))  # the 1 GiB line, as a hole
                fh.write(b"\n")
            fh.write(row)
    out = str(tmp_path / "out")
    s = run_shard(ShardConfig(input=str(folder), output=out, label="label", max_bad_fraction=0.01))
    assert s.records == 4000 and s.bad_rows == 7
    assert s.beam_metrics["input_ranges"] >= 3  # the big file in ranges, and the empty one
    letters = sorted(read_dead_letters(out), key=lambda d: (d["file"], d["row"]))
    reasons = [(os.path.basename(d["file"]), d["row"], d["reason"].split(":")[0]) for d in letters]
    assert reasons == [
        ("big.csv", 502, "unterminated quote"),
        ("big.csv", 1003, "CSV syntax error"),
        ("big.csv", 1504, "row has 1 fields, header has 3"),
        ("big.csv", 2005, "row has 4 fields, header has 3"),
        ("big.csv", 2506, "not valid utf-8 (invalid start byte); pass --encoding to read it"),
        ("big.csv", 3007, "line longer than 67108864 B"),
        ("empty.csv", 0, "empty file"),
    ]
    strict = str(tmp_path / "strict")
    with pytest.raises(ShardError, match=r"7 of 4007 rows"):
        run_shard(
            ShardConfig(input=str(folder), output=strict, label="label", max_bad_fraction=0.001)
        )


def test_the_shard_step_resizes_images_when_the_pipeline_asks(tmp_path, digits_dir):
    """The kfp shard step's image options reach the shard step (the pipelines' image_size)."""
    from fakes.artifacts import Artifact
    from tfrecord_suite.errors import RetryWillNotHelp
    from tfrecord_suite.steps import data as data_steps

    def shard(size):
        staged = Artifact("s", path=str(tmp_path / f"staged-{size}"))
        data_steps.shard_step(
            input_uri=digits_dir, registry_root=str(tmp_path / "reg"), dataset_name="digits",
            fingerprint="", input_format="auto", label="", key_column="",
            splits="train=80,validation=10,test=10", num_shards=0, target_shard_mb=128.0,
            readers=1, workers=1, gzip=False, max_bad_fraction=0.0, beam_args=[],
            image_size=size, image_aspect="crop", staged=staged,
            summary=Artifact("m", path=str(tmp_path / f"summary-{size}.md")),
        )  # fmt: skip
        return json.loads((tmp_path / f"staged-{size}" / "summary.json").read_text())

    stats = shard("4x6")["statistics"]["train"]["features"]
    assert (stats["image_height"]["min"], stats["image_height"]["max"]) == (4, 4)
    assert (stats["image_width"]["min"], stats["image_width"]["max"]) == (6, 6)
    with pytest.raises(RetryWillNotHelp, match="'4by6' is not HEIGHTxWIDTH"):
        shard("4by6")


def test_key_column_splits_rows_but_is_no_model_input(tmp_path):
    """A row id decides the split; the inferred feature config must not feed it to the model."""
    from tfrecord_suite.train.features import infer_feature_config

    path = tmp_path / "rows.csv"
    with open(path, "w") as fh:
        fh.write("row_id,x,color,label\n")
        for i in range(120):
            fh.write(f"r{i:04d},{i * 0.5},{['red', 'blue'][i % 2]},{i % 3}\n")
    out = str(tmp_path / "out")
    run_shard(ShardConfig(input=str(path), output=out, label="label", key_column="row_id"))
    schema = Schema.from_json(storage.read_text(os.path.join(out, "schema.json")))
    assert schema.feature("row_id").kind == "meta"
    assert "row_id" not in {f.name for f in schema.input_features}
    config = infer_feature_config(schema)
    assert set(config.features) == {"x", "color"}
    # the id is still in every record, for joins and lookups
    rows = read_all(out, "train") + read_all(out, "validation") + read_all(out, "test")
    assert len({r["row_id"] for r in rows}) == 120


def test_key_column_that_is_not_a_column_names_the_columns(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text("a,label\n1,0\n2,1\n")
    with pytest.raises(UserError, match=r"--key-column 'id' is not a column of the input \(a, "):
        run_shard(ShardConfig(input=str(path), output=str(tmp_path / "o"), key_column="id"))
