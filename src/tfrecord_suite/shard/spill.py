"""A disk-backed shuffle for runners on one machine, so the shard step's memory stays flat.

Beam's DirectRunner shuffles in memory: grouping a dataset's records by shard holds all of them
at once, in a memory many times the CSV's size. Here, as TFDS's shuffler does, converted
records are appended to hash-bucket files on local disk as they are converted; then each shard
reads the buckets that cover its hash range, sorts its records by hash and is written. Memory is
one shard's records plus bounded write buffers, whatever the input size.

Shards are ranges of the record hash (:func:`tfrecord_suite.shard.convert.shard_index`), and
buckets are finer ranges of the same hash, so a shard reads only the few buckets it overlaps, and
the shard files are byte-identical to those Beam's own shuffle produces on any runner.

Retries stay exact: each bundle of work spills under its own id, and only the ids of bundles
that completed reach the shard writers; a failed attempt's files are ignored. So a spill file is
only ever read whole, by the same job on the same machine, after the bundle that wrote it
completed: its entries carry a length and the record's hash but no checksum (the shards they
become are checksummed), and a file that ends inside an entry is an error, never a short shard.

The spill folder holds a copy of the whole dataset while the step runs. A step that is killed
(SIGKILL, the OOM killer, a machine's reboot with a persistent temp folder) cannot remove its own,
so each holds its folder (:class:`tfrecord_suite.io.held_folders.HeldFolder`), and the next step
on the machine removes every spill folder no live process holds.
"""

from __future__ import annotations

import os
import struct
import uuid
from collections.abc import Sequence

import numpy as np

from tfrecord_suite.shard import convert
from tfrecord_suite.shard.kernels import records as record_loops
from tfrecord_suite.shard.records import Records

#: The spill folders' name prefix (:class:`tfrecord_suite.io.held_folders.HeldFolder`).
SPILL_PREFIX = "tfrs-shuffle-"
#: Bytes of converted records buffered in memory by one writer before they are appended to disk.
FLUSH_BYTES = 32 * 1024 * 1024
MAX_BUCKETS = 1024
_DIGEST = 16  # bytes of a record's hash (convert.key_digest)
_LENGTH = struct.Struct("<I")  # an entry: the record's length, its hash, the record
_HEADER = _LENGTH.size + _DIGEST


def bucket_count(estimated_shards: int) -> int:
    """Buckets for an expected shard count: a power of two, about twice the shards (<= 1024)."""
    buckets = 1
    while buckets < 2 * max(1, estimated_shards) and buckets < MAX_BUCKETS:
        buckets *= 2
    return buckets


def bucket_of(digest: bytes, buckets: int) -> int:
    """The bucket of a record hash: the same hash bits as the shard, at a finer grain."""
    return convert.shard_index(digest, buckets)


def buckets_of_shard(index: int, num_shards: int, buckets: int) -> range:
    """The buckets whose hash ranges overlap shard ``index`` of ``num_shards``."""
    first = index * buckets // num_shards
    last = -(-(index + 1) * buckets // num_shards)  # ceiling
    return range(first, min(last, buckets))


def _path(spill_dir: str, bundle: str, split: str, bucket: int) -> str:
    return os.path.join(spill_dir, bundle, split, f"{bucket:05d}.rec")


class SpillWriter:
    """Appends one bundle's records to bucket files, buffering at most :data:`FLUSH_BYTES`.

    Args:
        spill_dir: A local folder every worker of the runner can reach.
        buckets: From :func:`bucket_count`.
        names: The split names (a record's split is an index into them).

    """

    def __init__(self, spill_dir: str, buckets: int, names: Sequence[str]):
        self.bundle = uuid.uuid4().hex
        self._dir = spill_dir
        self._buckets = buckets
        self._names = tuple(names)
        self._buffers: dict[tuple[str, int], bytearray] = {}
        self._buffered = 0
        self.sizes: dict[str, list[int]] = {}  # split -> [records, record bytes]

    def add(self, records: Records) -> None:
        """Spill records: each to the bucket of its split and hash."""
        buckets = records.shard_of(np.full(len(self._names), self._buckets, np.int64))
        keys = records.split.astype(np.int64) * self._buckets + buckets
        order = np.argsort(keys, kind="stable")
        entries = records.spilled(order)
        ends = np.cumsum(_HEADER + records.lengths()[order])
        ordered = keys[order]
        bounds = np.flatnonzero(np.diff(ordered)) + 1
        starts = np.concatenate([[0], bounds])
        for first, stop in zip(starts, [*bounds, len(order)], strict=True):
            key = int(ordered[first])
            split = self._names[key // self._buckets]
            low = int(ends[first - 1]) if first else 0
            buffer = self._buffers.setdefault((split, key % self._buckets), bytearray())
            buffer += entries[low : int(ends[stop - 1])]
        for split, (count, size) in records.sizes(self._names).items():
            total = self.sizes.setdefault(split, [0, 0])
            total[0] += count
            total[1] += size
        self._buffered += len(entries)
        if self._buffered >= FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        """Append every buffer to its bucket file."""
        for (split, bucket), buffer in self._buffers.items():
            if buffer:
                path = _path(self._dir, self.bundle, split, bucket)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "ab") as fh:
                    fh.write(buffer)
        self._buffers.clear()
        self._buffered = 0


def read_shard(
    spill_dir: str,
    bundles: list[str],
    split: str,
    split_index: int,
    index: int,
    num_shards: int,
    buckets: int,
) -> Records:
    """Shard ``index``'s records from the completed bundles (unsorted).

    Args:
        spill_dir: The spill folder.
        bundles: The completed bundles' ids.
        split: The split's name (its folder).
        split_index: The split's index among the step's splits (the records' ``split``).
        index: The shard.
        num_shards: The split's shard count.
        buckets: The spill's bucket count.

    """
    parts = []
    for bundle in bundles:
        for bucket in buckets_of_shard(index, num_shards, buckets):
            path = _path(spill_dir, bundle, split, bucket)
            if os.path.exists(path):
                parts.append(_entries(path, split_index, num_shards, index))
    return Records.concat(parts)


def _entries(path: str, split_index: int, num_shards: int = 1, index: int = 0) -> Records:
    """The records of one spill file in shard ``index`` of ``num_shards`` (all by default).

    A bucket holds a fraction of one shard, or spans a few.
    """
    with open(path, "rb") as fh:
        buffer = np.frombuffer(fh.read(), np.uint8)
    digests, offsets, data, truncated = record_loops.read_spill(buffer, num_shards, index)
    if truncated >= 0:
        raise RuntimeError(f"spill file {path} ends inside an entry at byte {truncated}")
    return Records(np.full(len(digests), split_index, np.uint8), digests, offsets, data)
