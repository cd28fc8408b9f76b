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
"""

from __future__ import annotations

import os
import struct
import uuid

from tfrecord_suite.shard import convert

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

    """

    def __init__(self, spill_dir: str, buckets: int):
        self.bundle = uuid.uuid4().hex
        self._dir = spill_dir
        self._buckets = buckets
        self._buffers: dict[tuple[str, int], bytearray] = {}
        self._buffered = 0
        self.sizes: dict[str, list[int]] = {}  # split -> [records, record bytes]

    def add(self, split: str, digest: bytes, data: bytes) -> None:
        """Spill one record."""
        key = (split, bucket_of(digest, self._buckets))
        buffer = self._buffers.get(key)
        if buffer is None:
            buffer = self._buffers[key] = bytearray()
        buffer += _LENGTH.pack(len(data))
        buffer += digest
        buffer += data
        self._buffered += _HEADER + len(data)
        size = self.sizes.setdefault(split, [0, 0])
        size[0] += 1
        size[1] += len(data)
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
    spill_dir: str, bundles: list[str], split: str, index: int, num_shards: int, buckets: int
) -> list[tuple[bytes, bytes]]:
    """Shard ``index``'s ``(hash, record)`` pairs from the completed bundles, sorted."""
    records: list[tuple[bytes, bytes]] = []
    for bundle in bundles:
        for bucket in buckets_of_shard(index, num_shards, buckets):
            path = _path(spill_dir, bundle, split, bucket)
            if not os.path.exists(path):
                continue
            for digest, data in _entries(path):
                if convert.shard_index(digest, num_shards) == index:
                    records.append((digest, data))
    records.sort()
    return records


def _entries(path: str) -> list[tuple[bytes, bytes]]:
    """Every ``(hash, record)`` of one spill file (a bucket holds a fraction of one shard)."""
    with open(path, "rb") as fh:
        buffer = fh.read()
    out, at, size = [], 0, len(buffer)
    unpack = _LENGTH.unpack_from
    while at < size:
        (length,) = unpack(buffer, at) if at + _HEADER <= size else (-1,)
        start = at + _HEADER
        if length < 0 or start + length > size:
            raise RuntimeError(f"spill file {path} ends inside an entry at byte {at}")
        out.append((buffer[at + _LENGTH.size : start], buffer[start : start + length]))
        at = start + length
    return out
