"""Converted records as columns: what the shard step's stages pass one another.

A :class:`Records` holds serialized ``tf.train.Example`` records with the split and the 16-byte
key hash of each (:func:`tfrecord_suite.shard.convert.key_digest`), in four numpy arrays, so a
chunk of thousands of records crosses a Beam stage, is grouped by shard, spilled, sorted and
framed by compiled loops (:mod:`.kernels`) instead of one Python object per record. Both
conversion paths produce them: the batch path directly, the row path from its
:class:`~tfrecord_suite.shard.convert.Converted` records.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

import numpy as np

from tfrecord_suite.shard.kernels import keys as key_loops
from tfrecord_suite.shard.kernels import records as record_loops

#: At most this many splits (a split is one byte per record).
MAX_SPLITS = 255


@dataclasses.dataclass
class Records:
    """Records of one or more splits.

    Attributes:
        split: Each record's split, an index into the step's split names (uint8).
        digest: Each record's key hash, one row of 16 bytes (uint8, shape ``(n, 16)``).
        offsets: Record ``i`` is ``data[offsets[i]:offsets[i + 1]]`` (int64, ``n + 1``).
        data: The records' bytes, one after another (uint8).

    """

    split: np.ndarray
    digest: np.ndarray
    offsets: np.ndarray
    data: np.ndarray

    def __len__(self) -> int:
        return len(self.split)

    @classmethod
    def empty(cls) -> Records:
        """No record."""
        return cls(
            np.empty(0, np.uint8),
            np.empty((0, 16), np.uint8),
            np.zeros(1, np.int64),
            np.empty(0, np.uint8),
        )

    @classmethod
    def of(
        cls, splits: Sequence[int], digests: Sequence[bytes], records: Sequence[bytes]
    ) -> Records:
        """Records from Python values: split indices, 16-byte digests and serialized records."""
        if not records:
            return cls.empty()
        offsets = np.zeros(len(records) + 1, np.int64)
        np.cumsum([len(r) for r in records], out=offsets[1:])
        return cls(
            np.asarray(splits, np.uint8),
            np.frombuffer(b"".join(digests), np.uint8).reshape(-1, 16).copy(),
            offsets,
            np.frombuffer(b"".join(records), np.uint8).copy(),
        )

    @classmethod
    def concat(cls, parts: Iterable[Records]) -> Records:
        """All records of ``parts``, in order."""
        parts = [p for p in parts if len(p)]
        if not parts:
            return cls.empty()
        if len(parts) == 1:
            return parts[0]
        offsets = [np.zeros(1, np.int64)]
        base = 0
        for p in parts:
            offsets.append(p.offsets[1:] - p.offsets[0] + base)
            base += int(p.offsets[-1] - p.offsets[0])
        return cls(
            np.concatenate([p.split for p in parts]),
            np.concatenate([p.digest for p in parts]),
            np.concatenate(offsets),
            np.concatenate([p.data[p.offsets[0] : p.offsets[-1]] for p in parts]),
        )

    def take(self, indices: np.ndarray) -> Records:
        """The records ``indices`` names, in that order."""
        indices = np.asarray(indices, np.int64)
        offsets, data = record_loops.take_records(self.offsets, self.data, indices)
        return Records(self.split[indices], self.digest[indices], offsets, data)

    def record(self, i: int) -> bytes:
        """Record ``i``'s bytes."""
        return self.data[self.offsets[i] : self.offsets[i + 1]].tobytes()

    def lengths(self) -> np.ndarray:
        """Each record's length in bytes."""
        return np.diff(self.offsets)

    def sizes(self, names: Sequence[str]) -> dict[str, list[int]]:
        """``split -> [records, record bytes]`` of the splits that hold records."""
        counts = np.bincount(self.split, minlength=len(names))
        sizes = np.bincount(self.split, weights=self.lengths(), minlength=len(names))
        return {
            name: [int(counts[s]), int(sizes[s])]
            for s, name in enumerate(names)
            if s < len(counts) and counts[s]
        }

    def shard_of(self, counts: np.ndarray) -> np.ndarray:
        """Each record's shard within its split, given each split's shard count.

        :func:`tfrecord_suite.shard.convert.shard_index`: a range of hash bytes 8-15.
        """
        _, low = key_loops.digest_words(self.digest)
        out = np.empty(len(self), np.int64)
        for s in np.unique(self.split):
            mine = self.split == s
            out[mine] = key_loops.shard_indices(low[mine], int(counts[s]))
        return out

    def groups(self, keys: np.ndarray) -> Iterable[tuple[int, Records]]:
        """``(key, the records with that key)`` for each distinct key (int64), in key order."""
        order = np.argsort(keys, kind="stable")
        ordered = keys[order]
        bounds = np.flatnonzero(np.diff(ordered)) + 1
        for chunk in np.split(order, bounds):
            if len(chunk):
                yield int(keys[chunk[0]]), self.take(chunk)

    def sort_order(self) -> np.ndarray:
        """The order of ``(digest, record)`` pairs as Python sorts them: hash, then bytes.

        Records with the same hash (duplicate rows, or rows with the same key column value)
        are ordered by their bytes.
        """
        high, low = key_loops.digest_words(self.digest)
        order = np.argsort(high, kind="stable")  # one word decides all but a few
        record_loops.sort_ties(order, high, low, self.offsets, self.data)
        return order

    def framed(self, order: np.ndarray | None = None) -> memoryview:
        """The records (in ``order``, else as they are) framed as a TFRecord file's bytes."""
        if order is None:
            order = np.arange(len(self), dtype=np.int64)
        return memoryview(record_loops.frame_records(self.offsets, self.data, order))

    def spilled(self, order: np.ndarray) -> memoryview:
        """The records ``order`` names as spill entries (:mod:`tfrecord_suite.shard.spill`)."""
        return memoryview(record_loops.spill_entries(self.offsets, self.data, self.digest, order))
