"""Registry rules, atomicity, races, tamper detection and aliases, on local disk and GCS."""

import json
import multiprocessing
import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tfrecord_suite.io import naming, storage
from tfrecord_suite.registry.bumps import BumpRefused
from tfrecord_suite.registry.datasets import (
    Registry,
    RegistryError,
    VerificationError,
    shard_uri,
)
from tfrecord_suite.registry.manifest import Manifest
from tfrecord_suite.registry.refs import DatasetRef, InvalidName, Version
from tfrecord_suite.schema import Feature, Schema

BASE_SCHEMA = Schema(
    [Feature("x", "float32"), Feature("label", "int64", kind="categorical")],
    label="label",
    label_classes=["0", "1"],
    source_format="jsonl",
)


def make_staged(path, n=100, num_shards=2, gzip=False, schema=BASE_SCHEMA, offset=0):
    """A shard-step output folder (real TFRecords, summary and schema) without running Beam."""
    import tensorflow as tf

    os.makedirs(path, exist_ok=True)
    shards = []
    for split, count in (("train", n), ("test", n // 4)):
        for i in range(num_shards):
            name = naming.shard_name(split, i, num_shards, gzip)
            opts = tf.io.TFRecordOptions(compression_type="GZIP" if gzip else "")
            records = 0
            with tf.io.TFRecordWriter(os.path.join(path, name), opts) as w:
                for k in range(i, count, num_shards):
                    feats = {}
                    for f in schema.features:
                        if f.dtype == "float32":
                            feats[f.name] = tf.train.Feature(
                                float_list=tf.train.FloatList(value=[k + offset + 0.5])
                            )
                        elif f.dtype == "int64":
                            feats[f.name] = tf.train.Feature(
                                int64_list=tf.train.Int64List(value=[(k + offset) % 2])
                            )
                        else:
                            feats[f.name] = tf.train.Feature(
                                bytes_list=tf.train.BytesList(value=[b"s"])
                            )
                    w.write(
                        tf.train.Example(
                            features=tf.train.Features(feature=feats)
                        ).SerializeToString()
                    )
                    records += 1
            shards.append(
                {"split": split, "index": i, "path": os.path.join(path, name), "records": records}
            )
    summary = {
        "shards": shards,
        "gzip": gzip,
        "statistics": {},
        "input_fingerprint": {"digest": "x"},
    }
    storage.write_text(os.path.join(path, "summary.json"), json.dumps(summary))
    storage.write_text(os.path.join(path, "schema.json"), schema.to_json())
    return path


def test_publish_bump_rules_and_idempotency(tmp_path):
    reg = Registry(str(tmp_path / "reg"))
    base = make_staged(str(tmp_path / "s0"))
    first = reg.publish(base, "rows")
    assert (first.version, first.created, first.manifest.bump) == ("1.0.0", True, "initial")
    again = reg.publish(base, "rows")
    assert (again.version, again.created) == ("1.0.0", False)
    reshard = reg.publish(make_staged(str(tmp_path / "s1"), num_shards=3), "rows")
    assert (reshard.version, reshard.manifest.bump) == ("1.0.1", "patch")
    assert any("2 -> 3 shards" in r for r in reshard.manifest.bump_reasons)
    gz = reg.publish(make_staged(str(tmp_path / "s2"), num_shards=3, gzip=True), "rows")
    assert gz.version == "1.0.2"
    more = reg.publish(make_staged(str(tmp_path / "s3"), n=120), "rows")
    assert (more.version, more.manifest.bump) == ("1.1.0", "minor")
    added = Schema(
        [*BASE_SCHEMA.features, Feature("extra", "string", kind="categorical")],
        label="label",
        label_classes=["0", "1"],
    )
    staged_added = make_staged(str(tmp_path / "s4"), n=120, schema=added)
    with pytest.raises(BumpRefused, match=r"need a minor bump.*'extra' added"):
        reg.publish(staged_added, "rows", bump="patch")
    assert reg.publish(staged_added, "rows").version == "1.2.0"
    changed = Schema(
        [Feature("x", "int64"), Feature("label", "int64", kind="categorical")],
        label="label",
        label_classes=["0", "1"],
    )
    major = reg.publish(make_staged(str(tmp_path / "s5"), schema=changed), "rows")
    assert (major.version, major.manifest.bump) == ("2.0.0", "major")
    assert any("dtype float32 -> int64" in r for r in major.manifest.bump_reasons)
    forced = reg.publish(
        make_staged(str(tmp_path / "s6"), n=50, schema=changed), "rows", bump="major"
    )
    assert forced.version == "3.0.0"
    assert [str(v) for v in reg.versions("rows")] == [
        "1.0.0",
        "1.0.1",
        "1.0.2",
        "1.1.0",
        "1.2.0",
        "2.0.0",
        "3.0.0",
    ]
    assert str(reg.resolve("rows", "1")) == "1.2.0"
    assert str(reg.resolve("rows", "1.0")) == "1.0.2"
    assert str(reg.resolve("rows", "latest")) == "3.0.0"
    m = reg.manifest("rows", "1.1.0")
    assert m.parent == "1.0.2" and m.totals["records"] == 150
    assert all(len(s["sha256"]) == 64 for s in m.shards)
    d = reg.diff("rows", "1.0.0", "1.1.0")
    assert d["splits"]["train"] == {"from": 100, "to": 120, "change": 20}


def test_crash_between_copy_and_manifest_leaves_no_version(tmp_path):
    reg = Registry(str(tmp_path / "reg"))
    staged = make_staged(str(tmp_path / "s"))

    def crash(attempt_dir):
        raise KeyboardInterrupt("killed between copy and manifest")

    with pytest.raises(KeyboardInterrupt):
        reg.publish(staged, "rows", on_copied=crash)
    assert reg.versions("rows") == []
    with pytest.raises(RegistryError, match="does not exist"):
        reg.resolve("rows", "1.0.0")
    young = reg.gc("rows", grace_seconds=3600)  # too young: a publisher may still be running
    assert young.removed_data == [] and len(young.pending) == 1
    removed = reg.gc("rows", grace_seconds=0).removed_data
    assert len(removed) == 1 and "rows/_data/publish-" in removed[0]
    assert reg.publish(staged, "rows").version == "1.0.0"


def test_gc_leaves_a_batch_being_filled(tmp_path):
    """A publish makes its batch's folder before it links the first shard: gc running in that
    moment sees an empty batch, and must judge it by the start in its name (a fresh-clone CI run
    lost a publish to this race in test_concurrent_publish_and_gc_lose_no_published_version)."""
    reg = Registry(str(tmp_path / "reg"))
    reg.publish(make_staged(str(tmp_path / "s")), "rows")
    pool = tmp_path / "reg" / "rows" / "_data"
    filling = pool / f"publish-{int(time.time())}-0123abcd"
    stale = pool / f"publish-{int(time.time()) - 7200}-4567cdef"
    filling.mkdir()
    stale.mkdir()
    report = reg.gc("rows", grace_seconds=3600)
    assert str(filling) in report.pending and filling.is_dir()
    assert report.removed_data == [str(stale)] and not stale.exists()


def test_tamper_truncate_and_flip_are_named_by_verify(tmp_path):
    reg = Registry(str(tmp_path / "reg"))
    result = reg.publish(make_staged(str(tmp_path / "s")), "rows")
    assert reg.verify("rows", "1.0.0")["ok"]
    shards = result.manifest.shards
    flip = shard_uri(result.manifest, result.uri, shards[0])
    data = bytearray(open(flip, "rb").read())
    data[40] ^= 0xFF
    open(flip, "wb").write(bytes(data))
    trunc = shard_uri(result.manifest, result.uri, shards[1])
    os.truncate(trunc, os.path.getsize(trunc) - 7)
    with pytest.raises(VerificationError) as err:
        reg.verify("rows", "1.0.0")
    text = str(err.value)
    assert shards[0]["path"] in text and "corrupt TFRecord" in text
    assert shards[1]["path"] in text


def _publish_in_process(args):
    root, staged = args
    r = Registry(root).publish(staged, "rows")
    return r.version, r.created


def race_publisher_processes(root: str, tmp_path) -> tuple[Registry, list[str]]:
    """4 spawned processes (each with its own client) publish at once to ``root``, one repeating
    another's content (idempotent): three versions, each created once, listed and verified."""
    staged = [make_staged(str(tmp_path / f"s{i}"), n=30 + i) for i in range(3)]
    staged.append(staged[0])
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        results = pool.map(_publish_in_process, [(root, s) for s in staged])
    versions = sorted({v for v, _ in results})
    assert versions == ["1.0.0", "1.1.0", "1.2.0"]
    assert sum(created for _, created in results) == 3
    reg = Registry(root)
    assert [str(v) for v in reg.versions("rows")] == versions
    for v in versions:
        assert reg.verify("rows", v)["ok"]
    return reg, versions


@pytest.mark.parametrize("same_content", [False, True])
def test_concurrent_publishers_threads(tmp_path, same_content):
    reg = Registry(str(tmp_path / "reg"))
    staged = [
        make_staged(str(tmp_path / f"s{i}"), n=40 + (0 if same_content else i)) for i in range(6)
    ]
    with ThreadPoolExecutor(max_workers=len(staged)) as pool:
        published = [f.result() for f in [pool.submit(reg.publish, p, "rows") for p in staged]]
    results = [(r.version, r.created) for r in published]
    versions = reg.versions("rows")
    if same_content:
        assert [str(v) for v in versions] == ["1.0.0"]
        assert sum(created for _, created in results) == 1
    else:
        assert len(versions) == 6 and len({v for v, _ in results}) == 6
    for v in versions:
        reg.verify("rows", v)
    batches = storage.list_dirs(os.path.join(reg.dataset_dir("rows"), "_data"))
    assert len(batches) == len(
        versions
    )  # a publisher whose content was already there removed its links
    assert str(reg.alias("rows", "latest")) == str(versions[-1])


def test_concurrent_publishers_processes(tmp_path):
    root = str(tmp_path / "reg")
    staged = [make_staged(str(tmp_path / f"s{i}"), n=30 + i) for i in range(4)]
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        results = pool.map(_publish_in_process, [(root, s) for s in staged])
    assert sorted(v for v, _ in results) == ["1.0.0", "1.1.0", "1.2.0", "1.3.0"]


def test_aliases_compare_and_swap_and_no_lost_writes(tmp_path):
    reg = Registry(str(tmp_path / "reg"))
    reg.publish(make_staged(str(tmp_path / "a")), "rows")
    reg.publish(make_staged(str(tmp_path / "b"), n=80), "rows")
    # the first version is stable; a later one only by an explicit, compare-and-swap move
    assert str(reg.alias("rows", "stable")) == "1.0.0"
    assert str(reg.alias("rows", "latest")) == "1.1.0"
    with pytest.raises(storage.PreconditionFailed):
        reg.set_alias("rows", "stable", "1.1.0", expected=None)
    reg.set_alias("rows", "stable", "1.1.0", expected="1.0.0")
    assert str(reg.resolve("rows", "stable")) == "1.1.0"
    reg.publish(make_staged(str(tmp_path / "c"), n=90), "rows")  # 1.2.0 leaves stable alone
    assert str(reg.resolve("rows", "stable")) == "1.1.0"
    with pytest.raises(RegistryError, match="does not exist"):
        reg.set_alias("rows", "stable", "9.9.9")

    def flip(i):
        reg.set_alias("rows", "canary", "1.0.0" if i % 2 else "1.1.0")

    with ThreadPoolExecutor(max_workers=10) as pool:
        for f in [pool.submit(flip, i) for i in range(10)]:
            f.result()
    body = json.loads(storage.read_text(reg.alias_uri("rows", "canary")))
    assert len(body["history"]) == 9  # every one of the 10 writes is recorded: none was lost


@pytest.mark.parametrize("bad", ["../x", "", "A", "x/y", "a\x00b", "..", "-x"])
def test_hostile_names_rejected(tmp_path, bad):
    reg = Registry(str(tmp_path))
    with pytest.raises(InvalidName, match="invalid"):
        reg.dataset_dir(bad)
    assert not os.listdir(tmp_path)


def test_versions_and_refs_parse():
    assert Version.parse("1.2.3") < Version.parse("1.10.0")
    for bad in ("1.2", "v1.2.0", "01.2.3", "1.2.3.4", ""):
        with pytest.raises(InvalidName):
            Version.parse(bad)
    ref = DatasetRef.parse("gs://bucket/reg/penguins@1")
    assert (ref.root, ref.dataset, ref.selector) == ("gs://bucket/reg", "penguins", "1")
    assert DatasetRef.parse("/r/d").selector == "latest"
    with pytest.raises(InvalidName):
        DatasetRef.parse("/r/..@latest")
    with pytest.raises(InvalidName):
        DatasetRef.parse("penguins@1")


def test_manifest_loader_rejects_escaping_paths():
    good = {
        "dataset": "d",
        "version": "1.0.0",
        "splits": {},
        "schema": BASE_SCHEMA.to_dict(),
        "content_digest": "x",
        "totals": {},
        "shards": [
            {
                "path": "data-1/train-00000-of-00001.tfrecord",
                "records": 1,
                "bytes": 1,
                "sha256": "a",
            }
        ],
    }
    Manifest.load(json.dumps(good))
    good["shards"][0]["path"] = "../../etc/passwd"
    with pytest.raises(RegistryError, match="escapes"):
        Manifest.load(json.dumps(good))
    with pytest.raises(RegistryError, match="not valid JSON"):
        Manifest.load("{")


def test_tfds_reads_a_published_version(published_digits):
    tfds = pytest.importorskip("tensorflow_datasets")
    builder = tfds.builder_from_directory(published_digits["uri"])
    assert (
        builder.info.splits["train"].num_examples
        == published_digits["manifest"].splits["train"]["records"]
    )
    ex = next(iter(builder.as_dataset(split="test").take(1)))
    assert ex["image"].shape == (8, 8, 1) and 0 <= int(ex["label"]) < 10


@pytest.mark.gcs
def test_concurrent_publish_and_alias_on_fake_gcs(tmp_path, strict_gcs_bucket):
    root = f"{strict_gcs_bucket}/registry"
    staged = [make_staged(str(tmp_path / f"s{i}"), n=20 + i) for i in range(4)]
    reg = Registry(root)
    with ThreadPoolExecutor(max_workers=len(staged)) as pool:
        # .result() re-raises a publish's exception here instead of losing it in its thread.
        results = [f.result() for f in [pool.submit(reg.publish, p, "rows") for p in staged]]
    assert sorted(r.version for r in results) == ["1.0.0", "1.1.0", "1.2.0", "1.3.0"]
    for v in reg.versions("rows"):
        reg.verify("rows", v)
    assert reg.publish(staged[0], "rows").created is False
    # of racing publishers, the one that published 1.0.0 made it stable
    assert str(reg.resolve("rows", "stable")) == "1.0.0"
    with pytest.raises(storage.PreconditionFailed):
        reg.set_alias("rows", "stable", "1.1.0", expected=None)
    assert str(reg.resolve("rows", "stable")) == "1.0.0"


@pytest.mark.gcs
def test_concurrent_publisher_processes_on_fake_gcs(tmp_path, strict_gcs_bucket):
    """4 processes (spawned, each with its own GCS client) race on the strict emulator."""
    race_publisher_processes(f"{strict_gcs_bucket}/registry", tmp_path)
