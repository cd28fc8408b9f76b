"""The compiled loops of :mod:`tfrecord_suite.shard.records`: Example bytes, framing, spills, order.

``tf.train.Example`` bytes, TFRecord framing, spill entries and the writer's sort order.
"""

from __future__ import annotations

import numpy as np

from tfrecord_suite.shard.kernels import (
    BYTES,
    FLOAT,
    INT,
    PRESENT,
    U64,
    compiled,
    copy_bytes,
)
from tfrecord_suite.shard.kernels.keys import shard_of

# ----------------------------------------------------------------------------------- examples


@compiled
def _varint_size(value: np.uint64) -> int:
    size = 1
    while value > U64(0x7F):
        value >>= U64(7)
        size += 1
    return size


@compiled
def _put_varint(out: np.ndarray, at: int, value: np.uint64) -> int:
    while value > U64(0x7F):
        out[at] = (value & U64(0x7F)) | U64(0x80)
        value >>= U64(7)
        at += 1
    out[at] = value
    return at + 1


@compiled
def _put_le(out: np.ndarray, at: int, value: int, width: int) -> None:
    """Write ``value``'s low ``width`` bytes at ``out[at:]``, little-endian.

    TFRecord's lengths and CRCs, a float32's bits, the spill entries' lengths.
    """
    word = np.int64(value)
    for b in range(width):
        out[at + b] = (word >> (8 * b)) & 0xFF


@compiled
def _entry_sizes(kind: int, name_size: int, payload: int) -> tuple[int, int, int, int]:
    """(inner, feature, body, entry) sizes of one feature's map entry."""
    inner = 1 + _varint_size(U64(payload)) + payload
    feature = 1 + _varint_size(U64(inner)) + inner
    body = name_size + 1 + _varint_size(U64(feature)) + feature
    return inner, feature, body, 1 + _varint_size(U64(body)) + body


@compiled
def _payload(kind: int, value: int, start: int, end: int) -> int:
    if kind == INT:
        return _varint_size(U64(value))
    if kind == FLOAT:
        return 4
    return end - start


@compiled
def encode_examples(
    rows: np.ndarray,
    kinds: np.ndarray,
    state: np.ndarray,
    ints: np.ndarray,
    text: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    names: np.ndarray,
    name_offsets: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """``convert.encode_example`` of each row in ``rows``: one ``tf.train.Example`` each.

    The features come in protobuf's map order; ``names[name_offsets[f]:name_offsets[f + 1]]``
    is feature ``f``'s encoded map key (tag, length, name). A :data:`MISSING` value is left out;
    an :data:`INT` is ``ints[i, f]``, a :data:`FLOAT` the float32 bits in ``ints[i, f]``, a
    :data:`BYTES` its span of ``text``.
    """
    n = len(rows)
    features = len(kinds)
    offsets = np.zeros(n + 1, np.int64)
    totals = np.zeros(n, np.int64)  # the bytes of each example's features
    for r in range(n):
        i = rows[r]
        total = 0
        for f in range(features):
            if state[i, f] != PRESENT:
                continue
            payload = _payload(kinds[f], ints[i, f], start[i, f], end[i, f])
            name_size = name_offsets[f + 1] - name_offsets[f]
            total += _entry_sizes(kinds[f], name_size, payload)[3]
        totals[r] = total
        offsets[r + 1] = offsets[r] + (1 + _varint_size(U64(total)) + total if total else 0)
    out = np.empty(offsets[n], np.uint8)
    for r in range(n):
        i = rows[r]
        if not totals[r]:
            continue
        out[offsets[r]] = 0x0A
        at = _put_varint(out, offsets[r] + 1, U64(totals[r]))
        for f in range(features):
            if state[i, f] != PRESENT:
                continue
            kind = kinds[f]
            value = ints[i, f]
            payload = _payload(kind, value, start[i, f], end[i, f])
            name_size = name_offsets[f + 1] - name_offsets[f]
            inner, feature, body_size, _ = _entry_sizes(kind, name_size, payload)
            out[at] = 0x0A
            at = _put_varint(out, at + 1, U64(body_size))
            at = copy_bytes(out, at, names, name_offsets[f], name_offsets[f + 1])
            out[at] = 0x12
            at = _put_varint(out, at + 1, U64(feature))
            # Feature: bytes_list = 1, float_list = 2, int64_list = 3; each list's field 1
            out[at] = 0x0A if kind == BYTES else (0x12 if kind == FLOAT else 0x1A)
            at = _put_varint(out, at + 1, U64(inner))
            out[at] = 0x0A
            at = _put_varint(out, at + 1, U64(payload))
            if kind == INT:
                at = _put_varint(out, at, U64(value))
            elif kind == FLOAT:  # the float32's bits, little-endian
                _put_le(out, at, value, 4)
                at += 4
            else:
                at = copy_bytes(out, at, text, start[i, f], end[i, f])
    return offsets, out


# ------------------------------------------------------------------------------------ framing


def _crc32c_tables() -> np.ndarray:
    """Slicing-by-8 tables of CRC32C (Castagnoli, reflected polynomial 0x82F63B78)."""
    tables = np.zeros((8, 256), np.uint32)
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        tables[0, i] = crc
    for i in range(256):
        crc = int(tables[0, i])
        for t in range(1, 8):
            crc = (crc >> 8) ^ int(tables[0, crc & 0xFF])
            tables[t, i] = crc
    return tables


_CRC_TABLES = _crc32c_tables()


@compiled
def _crc32c(data: np.ndarray, start: int, end: int) -> np.uint32:
    t = _CRC_TABLES
    crc = np.uint32(0xFFFFFFFF)
    at = start
    while end - at >= 8:
        one = crc ^ (
            np.uint32(data[at])
            | (np.uint32(data[at + 1]) << np.uint32(8))
            | (np.uint32(data[at + 2]) << np.uint32(16))
            | (np.uint32(data[at + 3]) << np.uint32(24))
        )
        crc = (
            t[7, one & np.uint32(0xFF)]
            ^ t[6, (one >> np.uint32(8)) & np.uint32(0xFF)]
            ^ t[5, (one >> np.uint32(16)) & np.uint32(0xFF)]
            ^ t[4, one >> np.uint32(24)]
            ^ t[3, data[at + 4]]
            ^ t[2, data[at + 5]]
            ^ t[1, data[at + 6]]
            ^ t[0, data[at + 7]]
        )
        at += 8
    while at < end:
        crc = t[0, (crc ^ np.uint32(data[at])) & np.uint32(0xFF)] ^ (crc >> np.uint32(8))
        at += 1
    return crc ^ np.uint32(0xFFFFFFFF)


@compiled
def _masked(crc: np.uint32) -> np.uint32:
    return ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(0xA282EAD8)


@compiled
def crc32c(data: np.ndarray) -> int:
    """CRC32C of a whole array (``google_crc32c.value``)."""
    return _crc32c(data, 0, len(data))


@compiled
def frame_records(offsets: np.ndarray, data: np.ndarray, order: np.ndarray) -> np.ndarray:
    """The records ``order`` names, each framed as TFRecord frames it, one after another."""
    size = 0
    for i in order:
        size += 16 + offsets[i + 1] - offsets[i]
    out = np.empty(size, np.uint8)
    at = 0
    for i in order:
        length = offsets[i + 1] - offsets[i]
        _put_le(out, at, length, 8)
        _put_le(out, at + 8, _masked(_crc32c(out, at, at + 8)), 4)
        out[at + 12 : at + 12 + length] = data[offsets[i] : offsets[i + 1]]
        _put_le(out, at + 12 + length, _masked(_crc32c(data, offsets[i], offsets[i + 1])), 4)
        at += 16 + length
    return out


# ------------------------------------------------------------------------- record collections


@compiled
def take_records(
    offsets: np.ndarray, data: np.ndarray, indices: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The records ``indices`` names, in that order, as (offsets, data)."""
    out_offsets = np.zeros(len(indices) + 1, np.int64)
    for k in range(len(indices)):
        i = indices[k]
        out_offsets[k + 1] = out_offsets[k] + offsets[i + 1] - offsets[i]
    out = np.empty(out_offsets[-1], np.uint8)
    for k in range(len(indices)):
        i = indices[k]
        out[out_offsets[k] : out_offsets[k + 1]] = data[offsets[i] : offsets[i + 1]]
    return out_offsets, out


@compiled
def spill_entries(
    offsets: np.ndarray, data: np.ndarray, digests: np.ndarray, order: np.ndarray
) -> np.ndarray:
    """The records ``order`` names as spill entries: uint32 length, 16-byte hash, record."""
    size = 0
    for i in order:
        size += 20 + offsets[i + 1] - offsets[i]
    out = np.empty(size, np.uint8)
    at = 0
    for i in order:
        length = offsets[i + 1] - offsets[i]
        _put_le(out, at, length, 4)
        for b in range(16):
            out[at + 4 + b] = digests[i, b]
        out[at + 20 : at + 20 + length] = data[offsets[i] : offsets[i + 1]]
        at += 20 + length
    return out


@compiled
def _spill_length(buffer: np.ndarray, at: int) -> int:
    length = np.int64(0)
    for b in range(4):
        length |= np.int64(buffer[at + b]) << (8 * b)
    return length


@compiled
def read_spill(
    buffer: np.ndarray, count: int, index: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The entries of one spill file that fall in shard ``index`` of ``count``.

    Returns their hashes (rows of 16 bytes), their records as (offsets, data), and the offset
    of an entry the file ends inside, or -1.
    """
    size = len(buffer)
    selected = 0
    total = 0
    at = 0
    while at + 20 <= size:
        length = _spill_length(buffer, at)
        if at + 20 + length > size:
            break
        if shard_of(_big_endian(buffer, at + 12), count) == index:
            selected += 1
            total += length
        at += 20 + length
    truncated = -1 if at == size else at
    digests = np.empty((selected, 16), np.uint8)
    offsets = np.zeros(selected + 1, np.int64)
    data = np.empty(total, np.uint8)
    k = 0
    at = 0
    while k < selected:
        length = _spill_length(buffer, at)
        if shard_of(_big_endian(buffer, at + 12), count) == index:
            for b in range(16):
                digests[k, b] = buffer[at + 4 + b]
            offsets[k + 1] = offsets[k] + length
            data[offsets[k] : offsets[k + 1]] = buffer[at + 20 : at + 20 + length]
            k += 1
        at += 20 + length
    return digests, offsets, data, truncated


@compiled
def _big_endian(data: np.ndarray, at: int) -> np.uint64:
    word = U64(0)
    for b in range(8):
        word = (word << U64(8)) | U64(data[at + b])
    return word


@compiled
def _word(data: np.ndarray, at: int) -> np.uint64:
    """Eight bytes from ``at`` as one little-endian word (one load, as LLVM combines them)."""
    return (
        U64(data[at])
        | (U64(data[at + 1]) << U64(8))
        | (U64(data[at + 2]) << U64(16))
        | (U64(data[at + 3]) << U64(24))
        | (U64(data[at + 4]) << U64(32))
        | (U64(data[at + 5]) << U64(40))
        | (U64(data[at + 6]) << U64(48))
        | (U64(data[at + 7]) << U64(56))
    )


@compiled
def _bytes_less(offsets: np.ndarray, data: np.ndarray, a: int, b: int) -> bool:
    """Whether record ``a`` sorts before record ``b`` as Python compares bytes."""
    sa, ea, sb, eb = offsets[a], offsets[a + 1], offsets[b], offsets[b + 1]
    n = min(ea - sa, eb - sb)
    k = 0
    while k + 8 <= n and _word(data, sa + k) == _word(data, sb + k):
        k += 8  # equal records (duplicate rows) are the common tie: skip them a word at a time
    while k < n:
        if data[sa + k] != data[sb + k]:
            return data[sa + k] < data[sb + k]
        k += 1
    return ea - sa < eb - sb


@compiled
def sort_ties(
    order: np.ndarray, high: np.ndarray, low: np.ndarray, offsets: np.ndarray, data: np.ndarray
) -> None:
    """Order each run of equal first hash words in ``order`` by second word, then bytes.

    ``order`` is sorted by the first word; runs of equal first words are short (duplicate rows,
    a key column's repeats) and ordered here by insertion.
    """
    n = len(order)
    first = 0
    while first < n:
        last = first + 1
        while last < n and high[order[last]] == high[order[first]]:
            last += 1
        for k in range(first + 1, last):  # insertion sort: runs are short
            item = order[k]
            j = k - 1
            while j >= first and _before(offsets, data, low, item, order[j]):
                order[j + 1] = order[j]
                j -= 1
            order[j + 1] = item
        first = last


@compiled
def _before(offsets: np.ndarray, data: np.ndarray, low: np.ndarray, a: int, b: int) -> bool:
    """Whether record ``a`` sorts before ``b`` of the same first hash word: second word, bytes."""
    if low[a] != low[b]:
        return low[a] < low[b]
    return _bytes_less(offsets, data, a, b)
