"""The disk-backed shuffle's pieces: buckets nest in shards, flushes and reads round-trip, and
only completed bundles count."""

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfrecord_suite.shard import convert, spill
from tfrecord_suite.shard.records import Records


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=16, max_size=16), st.integers(1, 3000), st.integers(0, 10))
def test_every_record_of_a_shard_lies_in_the_shards_buckets(digest, num_shards, power):
    buckets = 2**power
    index = convert.shard_index(digest, num_shards)
    assert 0 <= index < num_shards
    assert spill.bucket_of(digest, buckets) in spill.buckets_of_shard(index, num_shards, buckets)


def test_bucket_count_is_a_power_of_two_about_twice_the_shards():
    assert [spill.bucket_count(n) for n in (0, 1, 3, 100, 10_000)] == [2, 2, 8, 256, 1024]


NAMES = ("train", "test")


def _records(items):
    """Records of ``(split, digest, data)`` triples."""
    return Records.of(
        [NAMES.index(s) for s, _, _ in items], [d for _, d, _ in items], [r for _, _, r in items]
    )


def _pairs(records):
    """``(digest, record)`` pairs in the writer's order (hash, then bytes)."""
    return [(bytes(records.digest[i]), records.record(i)) for i in records.sort_order()]


def test_spilled_records_come_back_per_shard(tmp_path, monkeypatch):
    monkeypatch.setattr(spill, "FLUSH_BYTES", 500)  # many flushes: appends must accumulate
    records = [(convert.key_digest(str(i).encode()), f"record {i}".encode()) for i in range(300)]
    first = spill.SpillWriter(str(tmp_path), 8, NAMES)
    second = spill.SpillWriter(str(tmp_path), 8, NAMES)
    for i, (digest, data) in enumerate(records):
        # a few records at a time, as batches arrive
        (first if i % 2 else second).add(_records([("train" if i % 3 else "test", digest, data)]))
    first.flush()
    second.flush()
    assert first.sizes["train"][0] + second.sizes["train"][0] == 200
    bundles = [first.bundle, second.bundle]
    got = {
        (split, index): spill.read_shard(
            str(tmp_path), bundles, split, NAMES.index(split), index, 5, 8
        )
        for split in NAMES
        for index in range(5)
    }
    for (split, index), shard in got.items():
        assert set(shard.split.tolist()) <= {NAMES.index(split)}
        assert all(convert.shard_index(d, 5) == index for d, _ in _pairs(shard))
    everything = sorted(pair for shard in got.values() for pair in _pairs(shard))
    assert everything == sorted(records)
    # a bundle whose work did not complete is never named, so its files are ignored
    failed = spill.SpillWriter(str(tmp_path), 8, NAMES)
    failed.add(_records([("train", records[1][0], b"duplicate from a failed attempt")]))
    failed.flush()
    assert os.path.isdir(tmp_path / failed.bundle)
    again = sum(
        len(spill.read_shard(str(tmp_path), bundles, "train", 0, i, 5, 8)) for i in range(5)
    )
    assert again == 200


def test_a_batch_spills_each_record_to_its_split_and_bucket(tmp_path):
    """One batch of many records lands in the buckets the per-record rule names."""
    items = [
        (NAMES[i % 2], convert.key_digest(f"k{i}".encode()), f"r{i}".encode() * (i % 7))
        for i in range(2000)
    ]
    writer = spill.SpillWriter(str(tmp_path), 16, NAMES)
    writer.add(_records(items))
    writer.flush()
    for split in NAMES:
        for bucket in range(16):
            path = tmp_path / writer.bundle / split / f"{bucket:05d}.rec"
            want = sorted(
                (d, r) for s, d, r in items if s == split and spill.bucket_of(d, 16) == bucket
            )
            got = (
                sorted(_pairs(spill._entries(str(path), NAMES.index(split))))
                if path.exists()
                else []
            )
            assert got == want


def test_a_spill_file_that_ends_inside_an_entry_is_an_error(tmp_path):
    writer = spill.SpillWriter(str(tmp_path), 1, NAMES)
    writer.add(_records([("train", convert.key_digest(b"k"), b"a record")]))
    writer.flush()
    path = tmp_path / writer.bundle / "train" / "00000.rec"
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(RuntimeError, match="ends inside an entry at byte 0"):
        spill.read_shard(str(tmp_path), [writer.bundle], "train", 0, 0, 1, 1)
