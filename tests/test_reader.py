"""The tf.data reader: parsing with the written spec, and FILE/DATA sharding across workers."""

import os

import pytest

from tfrecord_suite.registry.registry import Registry, shard_uris
from tfrecord_suite.schema import Schema
from tfrecord_suite.shard.step import ShardConfig, run_shard
from tfrecord_suite.train.reader import ReaderConfig, dataset_for_split, make_dataset


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
        Schema.from_dict(manifest["schema"]),
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
    ref = f"{os.path.dirname(vdir)}@{manifest['version']}"
    x, y = next(iter(dataset_for_split(ref, "train", ReaderConfig(batch_size=8, cache="memory"))))
    assert x["x"].shape == (8, 1) and set(x) == {"n", "x"}
    assert y.dtype.name == "int64" and set(y.numpy().tolist()) <= {0, 1, 2}
    assert manifest["schema"]["label_classes"] == ["0", "1", "2"]


def test_reader_refuses_absurd_knobs():
    with pytest.raises(ValueError):
        ReaderConfig(batch_size=-1)
    with pytest.raises(ValueError):
        ReaderConfig(cycle_length=-2)
