"""The tf.data reader: parsing with the written spec, and FILE/DATA sharding across workers."""

import logging
import os

import pytest

from tfrecord_suite.registry.datasets import Registry, shard_uris
from tfrecord_suite.schema import Schema
from tfrecord_suite.shard.step import ShardConfig, run_shard
from tfrecord_suite.train.reader import dataset_for_split, make_dataset
from tfrecord_suite.train.reader_config import ReaderConfig


@pytest.fixture(scope="module")
def rows_versions(tmp_path_factory):
    """The 200-row JSON lines table as two versions: 4 shards per split and 1 shard per split."""
    import json

    base = tmp_path_factory.mktemp("rows")
    src = base / "rows.jsonl"
    with open(src, "w") as fh:
        for i in range(200):
            fh.write(json.dumps({"n": i, "x": i * 0.5, "label": i % 3}) + "\n")
    reg = Registry(str(base / "reg"))
    out = {}
    for shards in (4, 1):
        staged = str(base / f"staged{shards}")
        run_shard(ShardConfig(input=str(src), output=staged, num_shards=shards, splits="train=1"))
        result = reg.publish(staged, f"rows{shards}")
        out[shards] = (result.manifest, result.uri)
    return out


def ids_seen(manifest, vdir, pipelines, index):
    import tensorflow as tf

    ctx = tf.distribute.InputContext(
        num_input_pipelines=pipelines, input_pipeline_id=index, num_replicas_in_sync=pipelines
    )
    ds = make_dataset(
        shard_uris(manifest, vdir, "train"),
        Schema.from_dict(manifest.schema),
        ReaderConfig(batch_size=16),
        input_context=ctx,
    )
    return [int(v) for x, _ in ds for v in x["n"].numpy().ravel()]


@pytest.mark.parametrize("shards", [4, 1])
def test_every_example_exactly_once_per_epoch_across_workers(rows_versions, shards, caplog):
    manifest, vdir = rows_versions[shards]
    seen = ids_seen(manifest, vdir, 2, 0) + ids_seen(manifest, vdir, 2, 1)
    assert sorted(seen) == list(range(200))
    if shards == 1:
        assert "DATA policy" in caplog.text
    else:
        assert "DATA policy" not in caplog.text
        # FILE policy: the two workers read disjoint files
        assert set(ids_seen(manifest, vdir, 2, 0)).isdisjoint(ids_seen(manifest, vdir, 2, 1))


def test_labels_become_indices_and_features_are_batched(rows_versions):
    manifest, vdir = rows_versions[4]
    ref = f"{os.path.dirname(vdir)}@{manifest.version}"
    x, y = next(iter(dataset_for_split(ref, "train", ReaderConfig(batch_size=8, cache="memory"))))
    assert x["x"].shape == (8, 1) and set(x) == {"n", "x"}
    assert y.dtype.name == "int64" and set(y.numpy().tolist()) <= {0, 1, 2}
    assert manifest.schema["label_classes"] == ["0", "1", "2"]


def test_reader_refuses_absurd_knobs():
    with pytest.raises(ValueError):
        ReaderConfig(batch_size=-1)
    with pytest.raises(ValueError):
        ReaderConfig(cycle_length=-2)


def epoch_ids(manifest, vdir, config, pipelines=1, index=0):
    import tensorflow as tf

    ctx = tf.distribute.InputContext(
        num_input_pipelines=pipelines, input_pipeline_id=index, num_replicas_in_sync=pipelines
    )
    ds = make_dataset(
        shard_uris(manifest, vdir, "train"),
        Schema.from_dict(manifest.schema),
        config,
        input_context=ctx if pipelines > 1 else None,
    )
    return [[int(v) for v in x["n"].numpy().ravel()] for x, _ in ds]


def test_block_reading_and_window_shuffle_read_each_example_once_and_reshuffle(rows_versions):
    # blocks of 8 records, parsed and permuted in windows of 64: the fast path on small data
    manifest, vdir = rows_versions[4]
    config = ReaderConfig(batch_size=16, block_length=8, parse_window=64, shuffle_buffer=64)
    batches = epoch_ids(manifest, vdir, config)
    seen = [i for b in batches for i in b]
    assert sorted(seen) == list(range(200))
    assert all(len(b) == 16 for b in batches[:-1])
    # a batch mixes blocks: consecutive records of one file do not stay together
    assert any(max(b) - min(b) > 16 for b in batches)
    assert seen != sorted(seen)


def test_data_policy_with_blocks_is_exactly_once_even_when_interleave_is_nondeterministic(
    rows_versions,
):
    manifest, vdir = rows_versions[4]  # 4 files for 8 workers: DATA policy
    config = ReaderConfig(batch_size=8, block_length=4, parse_window=32, deterministic=False)
    seen = [i for w in range(8) for b in epoch_ids(manifest, vdir, config, 8, w) for i in b]
    assert sorted(seen) == list(range(200))


def test_block_and_window_follow_record_size():
    from tfrecord_suite.train.reader import block_and_window

    small, large = ReaderConfig(batch_size=256), ReaderConfig(batch_size=32)
    assert block_and_window(small, 600) == (64, 2048)  # bulk for small records
    assert block_and_window(large, 100_000) == (1, 32)  # one by one, parsed per batch
    assert block_and_window(ReaderConfig(block_length=5, parse_window=10), 600) == (5, 128)


def test_shuffle_buffer_is_bounded_in_bytes(rows_versions, caplog):
    from tfrecord_suite.train.reader import shuffle_buffer_records

    config = ReaderConfig()  # 10,000 records, at most 64 MiB
    assert shuffle_buffer_records(config, 500) == 10_000
    assert shuffle_buffer_records(config, 1_000_000) == 67  # 1 MB images: not 10 GB
    assert shuffle_buffer_records(ReaderConfig(shuffle_buffer_bytes=0), 1e6) == 10_000
    with pytest.raises(ValueError, match="shuffle_buffer_bytes"):
        ReaderConfig(shuffle_buffer_bytes=-1)
    manifest, vdir = rows_versions[4]
    tight = ReaderConfig(batch_size=16, block_length=8, parse_window=64, shuffle_buffer_bytes=800)
    with caplog.at_level(logging.INFO, logger="tfrecord_suite.train.reader"):
        seen = [i for b in epoch_ids(manifest, vdir, tight) for i in b]
    assert sorted(seen) == list(range(200))  # a smaller buffer, still every example once
    assert "not shuffle_buffer=10000" in caplog.text


def test_autotune_knobs_resolve_once_unless_retune(rows_versions):
    from tfrecord_suite.train.reader import dataset_options

    assert dataset_options(ReaderConfig()).autotune.enabled is False
    assert dataset_options(ReaderConfig(retune=True)).autotune.enabled is True
    manifest, vdir = rows_versions[4]
    ds = make_dataset(
        shard_uris(manifest, vdir, "train"),
        Schema.from_dict(manifest.schema),
        ReaderConfig(batch_size=16, retune=True),
    )
    assert ds.options().autotune.enabled is True


@pytest.mark.gcs
def test_gs_shards_staged_on_request_read_every_record(rows_versions, strict_gcs_bucket, tmp_path):
    """``remote_read=stage`` copies gs:// shards ahead of the reader through the storage layer's
    client (TensorFlow's own filesystem streams them otherwise)."""
    from tfrecord_suite.io import storage
    from tfrecord_suite.io.held_folders import LOCK_FILE

    manifest, uri = rows_versions[4]
    local = shard_uris(manifest, uri, "train")
    remote = [f"{strict_gcs_bucket}/shards/{os.path.basename(f)}" for f in local]
    for src, dst in zip(local, remote, strict=True):
        storage.copy(src, dst)
    schema = Schema.from_dict(manifest.schema)
    config = ReaderConfig(batch_size=16, remote_read="stage", stage_dir=str(tmp_path))
    assert config.stages(remote) and not ReaderConfig().stages(remote)
    got = sorted(
        int(n)
        for x, _ in make_dataset(remote, schema, config, training=False)
        for n in x["n"].numpy().reshape(-1)
    )
    assert got == list(range(200))
    copies = [p for d in tmp_path.iterdir() for p in d.iterdir() if p.name != LOCK_FILE]
    assert copies == []  # every copy deleted
