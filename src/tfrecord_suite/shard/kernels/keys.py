"""Split keys: ``json.dumps`` of typed rows or ``column=value``, BLAKE2b, splits and shards."""

from __future__ import annotations

import numpy as np

from tfrecord_suite.shard.kernels import (
    FLOAT,
    INT,
    PRESENT,
    U64,
    compiled,
    copy_bytes,
    decode_utf8,
)

_MASK32 = np.uint64(0xFFFFFFFF)


# --------------------------------------------------------------------------------- split keys


@compiled
def _put_int(out: np.ndarray, at: int, value: int) -> int:
    """Write ``str(value)`` of an int64 at ``at``; the position after it."""
    if value < 0:
        out[at] = 45
        at += 1
        magnitude = U64(-(value + 1)) + U64(1)  # -2**63 has no positive int64
    else:
        magnitude = U64(value)
    size = 1
    rest = magnitude // U64(10)
    while rest:
        size += 1
        rest //= U64(10)
    for k in range(size - 1, -1, -1):
        out[at + k] = 48 + magnitude % U64(10)
        magnitude //= U64(10)
    return at + size


_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)
_NULL = np.frombuffer(b"null", np.uint8)
#: What follows the backslash of a character ``json.dumps`` escapes by name (0: none).
_ESCAPED = np.zeros(128, np.uint8)
for _char, _name in zip(b'"\\\n\r\t\b\f', b'"\\nrtbf', strict=True):
    _ESCAPED[_char] = _name


@compiled
def _put_u16(out: np.ndarray, at: int, unit: int) -> int:
    out[at] = 92  # \
    out[at + 1] = 117  # u
    out[at + 2] = _HEX[(unit >> 12) & 15]
    out[at + 3] = _HEX[(unit >> 8) & 15]
    out[at + 4] = _HEX[(unit >> 4) & 15]
    out[at + 5] = _HEX[unit & 15]
    return at + 6


@compiled
def _put_json_string(out: np.ndarray, at: int, data: np.ndarray, start: int, end: int) -> int:
    """``json.dumps(text)`` (``ensure_ascii``) of UTF-8 ``data[start:end]``."""
    out[at] = 34
    at += 1
    k = start
    while k < end:
        cp, size = decode_utf8(data, k)
        k += size
        if cp < 128 and _ESCAPED[cp]:  # " \ and the control characters JSON names
            out[at] = 92
            out[at + 1] = _ESCAPED[cp]
            at += 2
        elif 32 <= cp <= 126:
            out[at] = cp
            at += 1
        elif cp < 0x10000:
            at = _put_u16(out, at, cp)
        else:
            cp -= 0x10000
            at = _put_u16(out, at, 0xD800 | (cp >> 10))
            at = _put_u16(out, at, 0xDC00 | (cp & 0x3FF))
    out[at] = 34
    return at + 1


@compiled
def json_keys(
    rows: np.ndarray,
    kinds: np.ndarray,
    state: np.ndarray,
    ints: np.ndarray,
    text: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """``json.dumps([value, ...]).encode()`` of each row in ``rows`` (the features in key order).

    ``state[i, f]`` is :data:`MISSING` (``null``) or :data:`PRESENT`; an :data:`INT` is
    ``ints[i, f]``, a :data:`FLOAT` its Python text and a :data:`BYTES` its string, both spans
    of ``text``.
    """
    features = len(kinds)
    n = len(rows)
    offsets = np.zeros(n + 1, np.int64)
    for r in range(n):
        i = rows[r]
        size = 2 + 2 * max(features - 1, 0)
        for f in range(features):
            if state[i, f] != PRESENT:
                size += 4
            elif kinds[f] == INT:
                size += 20
            elif kinds[f] == FLOAT:
                size += end[i, f] - start[i, f]
            else:
                size += 2 + 6 * (end[i, f] - start[i, f])  # \u00XX per byte at most
        offsets[r + 1] = offsets[r] + size
    out = np.empty(offsets[n], np.uint8)
    at = 0
    for r in range(n):
        i = rows[r]
        offsets[r] = at
        out[at] = 91  # [
        at += 1
        for f in range(features):
            if f:
                out[at] = 44
                out[at + 1] = 32
                at += 2
            if state[i, f] != PRESENT:
                at = copy_bytes(out, at, _NULL, 0, 4)
            elif kinds[f] == INT:
                at = _put_int(out, at, ints[i, f])
            elif kinds[f] == FLOAT:
                at = copy_bytes(out, at, text, start[i, f], end[i, f])
            else:
                at = _put_json_string(out, at, text, start[i, f], end[i, f])
        out[at] = 93  # ]
        at += 1
    offsets[n] = at
    return offsets, out[:at].copy()


@compiled
def raw_keys(
    rows: np.ndarray, prefix: np.ndarray, text: np.ndarray, start: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``prefix + text[start:end]`` of each row in ``rows`` (``column=value`` keys)."""
    n = len(rows)
    offsets = np.zeros(n + 1, np.int64)
    for r in range(n):
        i = rows[r]
        offsets[r + 1] = offsets[r] + len(prefix) + end[i] - start[i]
    out = np.empty(offsets[n], np.uint8)
    for r in range(n):
        i = rows[r]
        at = copy_bytes(out, offsets[r], prefix, 0, len(prefix))
        copy_bytes(out, at, text, start[i], end[i])
    return offsets, out


# ------------------------------------------------------------------------------------ BLAKE2b

_IV = np.array(
    [
        0x6A09E667F3BCC908,
        0xBB67AE8584CAA73B,
        0x3C6EF372FE94F82B,
        0xA54FF53A5F1D36F1,
        0x510E527FADE682D1,
        0x9B05688C2B3E6C1F,
        0x1F83D9ABFB41BD6B,
        0x5BE0CD19137E2179,
    ],
    np.uint64,
)
_SIGMA = np.array(
    [
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
        [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
        [11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4],
        [7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8],
        [9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13],
        [2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9],
        [12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11],
        [13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10],
        [6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5],
        [10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0],
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
        [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
    ],
    np.int64,
)


@compiled
def _rotr(x: np.uint64, n: int) -> np.uint64:
    return (x >> U64(n)) | (x << U64(64 - n))


@compiled
def _g(
    a: np.uint64, b: np.uint64, c: np.uint64, d: np.uint64, x: np.uint64, y: np.uint64
) -> tuple[np.uint64, np.uint64, np.uint64, np.uint64]:
    """BLAKE2b's mixing function G."""
    a = a + b + x
    d = _rotr(d ^ a, 32)
    c = c + d
    b = _rotr(b ^ c, 24)
    a = a + b + y
    d = _rotr(d ^ a, 16)
    c = c + d
    b = _rotr(b ^ c, 63)
    return a, b, c, d


@compiled
def _compress(
    h: np.ndarray, block: np.ndarray, at: int, counter: int, last: bool, m: np.ndarray
) -> None:
    """BLAKE2b's compression of the 128 bytes of ``block`` from ``at`` (``m``: scratch).

    The working vector is 16 local variables, so the rounds run in registers.
    """
    for w in range(16):
        word = U64(0)
        for b in range(7, -1, -1):
            word = (word << U64(8)) | U64(block[at + 8 * w + b])
        m[w] = word
    v0, v1, v2, v3, v4, v5, v6, v7 = h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]
    v8, v9, v10, v11 = _IV[0], _IV[1], _IV[2], _IV[3]
    v12, v13, v14, v15 = _IV[4] ^ U64(counter), _IV[5], _IV[6], _IV[7]
    if last:
        v14 = ~v14
    for r in range(12):
        s = _SIGMA[r]
        v0, v4, v8, v12 = _g(v0, v4, v8, v12, m[s[0]], m[s[1]])
        v1, v5, v9, v13 = _g(v1, v5, v9, v13, m[s[2]], m[s[3]])
        v2, v6, v10, v14 = _g(v2, v6, v10, v14, m[s[4]], m[s[5]])
        v3, v7, v11, v15 = _g(v3, v7, v11, v15, m[s[6]], m[s[7]])
        v0, v5, v10, v15 = _g(v0, v5, v10, v15, m[s[8]], m[s[9]])
        v1, v6, v11, v12 = _g(v1, v6, v11, v12, m[s[10]], m[s[11]])
        v2, v7, v8, v13 = _g(v2, v7, v8, v13, m[s[12]], m[s[13]])
        v3, v4, v9, v14 = _g(v3, v4, v9, v14, m[s[14]], m[s[15]])
    h[0] ^= v0 ^ v8
    h[1] ^= v1 ^ v9
    h[2] ^= v2 ^ v10
    h[3] ^= v3 ^ v11
    h[4] ^= v4 ^ v12
    h[5] ^= v5 ^ v13
    h[6] ^= v6 ^ v14
    h[7] ^= v7 ^ v15


@compiled
def blake2b_16(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """``hashlib.blake2b(key, digest_size=16).digest()`` of each key, as rows of 16 bytes."""
    n = len(offsets) - 1
    out = np.empty((n, 16), np.uint8)
    h = np.empty(8, np.uint64)
    m = np.empty(16, np.uint64)
    last = np.zeros(128, np.uint8)
    for i in range(n):
        for w in range(8):
            h[w] = _IV[w]
        h[0] ^= U64(0x01010010)  # digest length 16, no key, fanout 1, depth 1
        start, end = offsets[i], offsets[i + 1]
        at = start
        while end - at > 128:
            _compress(h, data, at, at + 128 - start, False, m)
            at += 128
        for k in range(128):
            last[k] = data[at + k] if at + k < end else 0
        _compress(h, last, 0, end - start, True, m)
        for w in range(2):
            for b in range(8):
                out[i, 8 * w + b] = (h[w] >> U64(8 * b)) & U64(0xFF)
    return out


@compiled
def _high64(digest: np.ndarray, i: int, first: int) -> np.uint64:
    word = U64(0)
    for b in range(8):
        word = (word << U64(8)) | U64(digest[i, first + b])
    return word


@compiled
def digest_words(digests: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bytes 0-7 and 8-15 of each digest as big-endian uint64s (the order bytes sort in)."""
    n = len(digests)
    high = np.empty(n, np.uint64)
    low = np.empty(n, np.uint64)
    for i in range(n):
        high[i] = _high64(digests, i, 0)
        low[i] = _high64(digests, i, 8)
    return high, low


@compiled
def assign_splits(high: np.ndarray, cumulative: np.ndarray) -> np.ndarray:
    """:meth:`SplitSpec.assign`: ``int(bytes 0-7) / 2**64 * total`` against the running sums."""
    total = np.float64(cumulative[-1])
    out = np.empty(len(high), np.uint8)
    scale = 2.0**-64
    for i in range(len(high)):
        point = np.float64(high[i]) * scale * total
        split = len(cumulative) - 1
        for s in range(len(cumulative)):
            if point < cumulative[s]:
                split = s
                break
        out[i] = split
    return out


@compiled
def shard_indices(low: np.ndarray, count: int) -> np.ndarray:
    """:func:`convert.shard_index` of each hash's bytes 8-15 (big-endian words)."""
    out = np.empty(len(low), np.int64)
    for i in range(len(low)):
        out[i] = shard_of(low[i], count)
    return out


@compiled
def shard_of(low: np.uint64, count: int) -> int:
    """:func:`convert.shard_index`: ``(low * count) >> 64``, in 64-bit halves (no 128-bit ints)."""
    n = U64(count)
    high_part = (low >> U64(32)) * n
    low_part = (low & _MASK32) * n
    return np.int64((high_part + (low_part >> U64(32))) >> U64(32))
