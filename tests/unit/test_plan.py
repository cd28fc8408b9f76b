import pytest

from tfrecord_suite.shard.plan import MIB, ShardPlanConfig, plan_split


def test_small_data_gets_one_shard_and_says_why():
    p = plan_split(5 * MIB, 1000, ShardPlanConfig())
    assert p["num_shards"] == 1
    assert any("too little data" in r for r in p["reasons"])


def test_ten_files_per_reader_when_data_allows():
    p = plan_split(2000 * MIB, 10**6, ShardPlanConfig(readers=4))
    assert p["num_shards"] == 40
    assert p["avg_shard_bytes"] >= 10 * 1000 * 1000


def test_fewer_shards_than_ten_per_reader_keep_the_minimum_size():
    p = plan_split(100 * MIB, 10**5, ShardPlanConfig(readers=4))
    assert p["num_shards"] == 10  # 100 MiB / 10 MB
    assert p["avg_shard_bytes"] >= 10 * 1000 * 1000


def test_target_size_and_worker_multiple():
    p = plan_split(1000 * MIB, 10**6, ShardPlanConfig(target_shard_bytes=64 * MIB, workers=3))
    assert p["num_shards"] % 3 == 0 and p["num_shards"] >= 16
    assert p["avg_shard_bytes"] <= 64 * MIB


def test_override_and_bad_parameters():
    assert plan_split(10**9, 10, ShardPlanConfig(num_shards=7))["num_shards"] == 7
    with pytest.raises(ValueError):
        ShardPlanConfig(num_shards=0)
    with pytest.raises(ValueError):
        ShardPlanConfig(workers=0)
