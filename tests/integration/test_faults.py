"""Storage faults: publish, verify and alias updates through a proxy that answers 503/429 and drops
connections on a schedule. Everything completes through retries, or fails leaving no version."""

import os

import pytest
from support import emulator_env
from test_registry import make_staged

from fakes.faultproxy import FaultProxy
from tfrecord_suite.io import storage
from tfrecord_suite.registry.datasets import Registry

FAULT_FIGURES = {}


@pytest.mark.gcs
def test_publish_verify_alias_survive_injected_faults(tmp_path, fake_gcs_server):
    bucket = "faults"
    with emulator_env(fake_gcs_server):
        storage.gcs_client().create_bucket(bucket)
    staged = [make_staged(str(tmp_path / f"s{i}"), n=30 + i) for i in range(3)]
    with FaultProxy(fake_gcs_server, every=4) as proxy, emulator_env(proxy.url):
        reg = Registry(f"gs://{bucket}/registry")
        versions = [reg.publish(s, "rows").version for s in staged]
        assert versions == ["1.0.0", "1.1.0", "1.2.0"]
        assert reg.publish(staged[0], "rows").created is False  # idempotent through faults too
        for v in versions:
            assert reg.verify("rows", v)["ok"]
        reg.set_alias("rows", "stable", "1.1.0", expected="1.0.0")
        assert str(reg.resolve("rows", "stable")) == "1.1.0"
        faults = dict(proxy.faults)
        FAULT_FIGURES.update(requests=proxy.requests, **faults)
    assert sum(faults.values()) >= 10 and set(faults) == {"503", "429", "drop"}
    print(f"\nfaults injected and survived: {faults} over {proxy.requests} requests")
    with emulator_env(fake_gcs_server):  # the data is right when read without faults
        assert [str(v) for v in Registry(f"gs://{bucket}/registry").versions("rows")] == versions


@pytest.mark.gcs
def test_unreachable_store_fails_clearly_and_leaves_no_version(tmp_path, fake_gcs_server):
    bucket = "down"
    with emulator_env(fake_gcs_server):
        storage.gcs_client().create_bucket(bucket)
    staged = make_staged(str(tmp_path / "s"))
    with FaultProxy(fake_gcs_server, every=1) as proxy, emulator_env(proxy.url):
        reg = Registry(f"gs://{bucket}/registry")
        from google.cloud.storage import retry as gcs_retry

        fast = gcs_retry.DEFAULT_RETRY.with_delay(initial=0.01, maximum=0.05).with_timeout(1.5)
        storage_retry = storage.gcs.retry_policy
        storage.gcs.retry_policy = lambda: fast
        try:
            with pytest.raises(Exception) as err:
                reg.publish(staged, "rows")
        finally:
            storage.gcs.retry_policy = storage_retry
    assert "503" in str(err.value) or "429" in str(err.value) or "onnection" in str(err.value)
    with emulator_env(fake_gcs_server):
        assert Registry(f"gs://{bucket}/registry").versions("rows") == []
    assert os.path.isdir(staged)


@pytest.mark.gcs
def test_shard_to_gcs_survives_injected_faults(tmp_path, gcs_emulator_server, jsonl_file):
    """The Beam shard step writing gs:// through the fault proxy (gcp-storage-emulator behind it)."""
    import tensorflow as tf

    from tfrecord_suite.shard.step import ShardConfig, run_shard

    bucket = "shard-faults"
    with emulator_env(gcs_emulator_server):
        storage.gcs_client().create_bucket(bucket)
    out = f"gs://{bucket}/staged/rows"
    with FaultProxy(gcs_emulator_server, every=5) as proxy, emulator_env(proxy.url):
        summary = run_shard(ShardConfig(input=jsonl_file, output=out, num_shards=2))
        faults = dict(proxy.faults)
        requests = proxy.requests
    print(f"\nshard step survived {faults} over {requests} requests")
    assert summary.records == 200 and sum(faults.values()) >= 3
    with emulator_env(gcs_emulator_server):  # every record landed once, readable without faults
        shards = [f for f in storage.list_files(out) if f.uri.endswith(".tfrecord")]
        assert len(shards) == 6
        local = []
        for i, f in enumerate(shards):
            path = str(tmp_path / f"{i}.tfrecord")
            with open(path, "wb") as fh:
                fh.write(storage.read_bytes(f.uri))
            local.append(path)
        records = list(tf.data.TFRecordDataset(local).as_numpy_iterator())
    assert len(records) == len(set(records)) == 200
