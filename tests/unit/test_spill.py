"""The disk-backed shuffle's pieces: buckets nest in shards, flushes and reads round-trip, and
only completed bundles count."""

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfrecord_suite.shard import convert, spill


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=16, max_size=16), st.integers(1, 3000), st.integers(0, 10))
def test_every_record_of_a_shard_lies_in_the_shards_buckets(digest, num_shards, power):
    buckets = 2**power
    index = convert.shard_index(digest, num_shards)
    assert 0 <= index < num_shards
    assert spill.bucket_of(digest, buckets) in spill.buckets_of_shard(index, num_shards, buckets)


def test_bucket_count_is_a_power_of_two_about_twice_the_shards():
    assert [spill.bucket_count(n) for n in (0, 1, 3, 100, 10_000)] == [2, 2, 8, 256, 1024]


def test_spilled_records_come_back_sorted_per_shard(tmp_path, monkeypatch):
    monkeypatch.setattr(spill, "FLUSH_BYTES", 500)  # many flushes: appends must accumulate
    records = [(convert.key_digest(str(i).encode()), f"record {i}".encode()) for i in range(300)]
    first, second = spill.SpillWriter(str(tmp_path), 8), spill.SpillWriter(str(tmp_path), 8)
    for i, (digest, data) in enumerate(records):
        (first if i % 2 else second).add("train" if i % 3 else "test", digest, data)
    first.flush()
    second.flush()
    assert first.sizes["train"][0] + second.sizes["train"][0] == 200
    bundles = [first.bundle, second.bundle]
    got = {
        (split, index): spill.read_shard(str(tmp_path), bundles, split, index, 5, 8)
        for split in ("train", "test")
        for index in range(5)
    }
    for (_split, index), shard in got.items():
        assert shard == sorted(shard)
        assert all(convert.shard_index(d, 5) == index for d, _ in shard)
    everything = sorted(r for shard in got.values() for r in shard)
    assert everything == sorted(records)
    # a bundle whose work did not complete is never named, so its files are ignored
    failed = spill.SpillWriter(str(tmp_path), 8)
    failed.add("train", records[1][0], b"duplicate from a failed attempt")
    failed.flush()
    assert os.path.isdir(tmp_path / failed.bundle)
    again = sum(len(spill.read_shard(str(tmp_path), bundles, "train", i, 5, 8)) for i in range(5))
    assert again == 200


def test_a_spill_file_that_ends_inside_an_entry_is_an_error(tmp_path):
    writer = spill.SpillWriter(str(tmp_path), 1)
    digest = convert.key_digest(b"k")
    writer.add("train", digest, b"a record")
    writer.flush()
    path = tmp_path / writer.bundle / "train" / "00000.rec"
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(RuntimeError, match="ends inside an entry at byte 0"):
        spill.read_shard(str(tmp_path), [writer.bundle], "train", 0, 1, 1)
