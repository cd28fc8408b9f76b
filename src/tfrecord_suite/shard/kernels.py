"""The compiled loops of the shard step's batch path, over numpy arrays (numba, no build step).

Each kernel is the compiled twin of a Python rule elsewhere in the suite and gives the same bytes,
which the tests check against that rule on generated and real data:

* :func:`classify_cells`: ``parse_scalar`` then the feature's coercion
  (:mod:`tfrecord_suite.shard.convert`) for the common spellings of a cell (Python's
  ``str.strip``, the NA strings, decimal integers and numbers); any other spelling is marked
  *unusual* and its row goes to the row path, which decides.
* :func:`python_float_text`: ``repr(float)`` from the shortest round-trip digits Arrow prints.
* :func:`json_keys` and :func:`raw_keys`: the split key (``json.dumps`` of the typed row, or
  ``column=value``), :func:`blake2b_16` its digest (``hashlib.blake2b(key, digest_size=16)``),
  :func:`assign_splits` the split (:meth:`SplitSpec.assign`) and :func:`shard_indices` the shard
  (:func:`convert.shard_index`).
* :func:`encode_examples`: ``convert.encode_example`` (deterministic ``tf.train.Example``
  bytes).
* :func:`frame_records`: TFRecord framing with CRC32C (``io.framing.encode``).
* :func:`scan_csv_lines` and :func:`scan_json_lines`: which lines of a range are records the
  Arrow readers parse exactly as the row path does (see each).

numba compiles each on first use and caches the machine code beside this module (or under
``NUMBA_CACHE_DIR``), so a process pays the compilation once per machine, not per call.
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: What a cell became (:func:`classify_cells`).
MISSING, PRESENT, UNUSUAL = 0, 1, 2
#: A feature's value type in the kernels.
INT, FLOAT, BYTES = 0, 1, 2
#: What a line of a range is (:func:`scan_csv_lines`, :func:`scan_json_lines`).
BLANK, PLAIN, ONE_RECORD, OPEN_QUOTE = 0, 1, 2, 3

_U64 = np.uint64
_MASK32 = np.uint64(0xFFFFFFFF)


# ------------------------------------------------------------------------------- UTF-8, spaces


@njit(cache=True)
def _is_space(cp: int) -> bool:
    """``chr(cp).isspace()``: the code points Python's ``str.strip()`` removes."""
    if cp < 128:
        return cp == 32 or 9 <= cp <= 13 or 28 <= cp <= 31
    return (
        cp == 0x85
        or cp == 0xA0
        or cp == 0x1680
        or 0x2000 <= cp <= 0x200A
        or cp == 0x2028
        or cp == 0x2029
        or cp == 0x202F
        or cp == 0x205F
        or cp == 0x3000
    )


@njit(cache=True)
def _decode(data: np.ndarray, at: int) -> tuple[int, int]:
    """The code point starting at ``at`` of valid UTF-8, and its length in bytes."""
    b = data[at]
    if b < 0x80:
        return b, 1
    if b < 0xE0:
        return ((b & 0x1F) << 6) | (data[at + 1] & 0x3F), 2
    if b < 0xF0:
        return ((b & 0x0F) << 12) | ((data[at + 1] & 0x3F) << 6) | (data[at + 2] & 0x3F), 3
    return (
        ((b & 0x07) << 18)
        | ((data[at + 1] & 0x3F) << 12)
        | ((data[at + 2] & 0x3F) << 6)
        | (data[at + 3] & 0x3F),
        4,
    )


@njit(cache=True)
def _utf8_valid(data: np.ndarray, start: int, end: int) -> bool:
    """Whether ``data[start:end]`` is UTF-8 that Python's strict decoder accepts."""
    i = start
    while i < end:
        b = data[i]
        if b < 0x80:
            i += 1
            continue
        if 0xC2 <= b <= 0xDF:
            size, low, high = 2, 0x80, 0xBF
        elif b == 0xE0:
            size, low, high = 3, 0xA0, 0xBF
        elif 0xE1 <= b <= 0xEC or 0xEE <= b <= 0xEF:
            size, low, high = 3, 0x80, 0xBF
        elif b == 0xED:  # no surrogates
            size, low, high = 3, 0x80, 0x9F
        elif b == 0xF0:
            size, low, high = 4, 0x90, 0xBF
        elif 0xF1 <= b <= 0xF3:
            size, low, high = 4, 0x80, 0xBF
        elif b == 0xF4:
            size, low, high = 4, 0x80, 0x8F
        else:
            return False
        if i + size > end or not low <= data[i + 1] <= high:
            return False
        for k in range(2, size):
            if not 0x80 <= data[i + k] <= 0xBF:
                return False
        i += size
    return True


@njit(cache=True)
def _strip(data: np.ndarray, start: int, end: int) -> tuple[int, int]:
    """The span of ``data[start:end]`` (valid UTF-8) without Python's leading/trailing spaces."""
    while start < end:
        cp, size = _decode(data, start)
        if not _is_space(cp):
            break
        start += size
    while end > start:
        lead = end - 1
        while lead > start and (data[lead] & 0xC0) == 0x80:
            lead -= 1
        cp, _ = _decode(data, lead)
        if not _is_space(cp):
            break
        end = lead
    return start, end


@njit(cache=True)
def _equals(data: np.ndarray, start: int, end: int, other: np.ndarray, o_start: int, o_end: int):
    if end - start != o_end - o_start:
        return False
    for k in range(end - start):  # noqa: SIM110 (a generator does not compile)
        if data[start + k] != other[o_start + k]:
            return False
    return True


@njit(cache=True)
def _copy(out: np.ndarray, at: int, source: np.ndarray, start: int, end: int) -> int:
    """Copy ``source[start:end]`` to ``out[at:]``; the position after it (short copies)."""
    for k in range(end - start):
        out[at + k] = source[start + k]
    return at + end - start


# ------------------------------------------------------------------------------------- cells


@njit(cache=True)
def _int_of(data: np.ndarray, start: int, end: int) -> tuple[bool, int]:
    """``[+-]?[0-9]{1,18}`` as an int64: the integers that surely fit, spelled plainly."""
    i = start
    negative = False
    if i < end and (data[i] == 43 or data[i] == 45):  # + -
        negative = data[i] == 45
        i += 1
    if i == end or end - i > 18:
        return False, 0
    value = 0
    while i < end:
        d = data[i] - 48
        if d < 0 or d > 9:
            return False, 0
        value = value * 10 + d
        i += 1
    return True, -value if negative else value


@njit(cache=True)
def _is_decimal(data: np.ndarray, start: int, end: int) -> bool:
    r"""``[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?``: what both Python and Arrow read."""
    i = start
    if i < end and (data[i] == 43 or data[i] == 45):
        i += 1
    digits = 0
    while i < end and 48 <= data[i] <= 57:
        i += 1
        digits += 1
    if i < end and data[i] == 46:  # .
        i += 1
        while i < end and 48 <= data[i] <= 57:
            i += 1
            digits += 1
    if digits == 0:
        return False
    if i < end and (data[i] == 101 or data[i] == 69):  # e E
        i += 1
        if i < end and (data[i] == 43 or data[i] == 45):
            i += 1
        if i == end:
            return False
        while i < end and 48 <= data[i] <= 57:
            i += 1
    return i == end


_POWERS_OF_TEN = np.array([10.0**k for k in range(23)])  # exact doubles


@njit(cache=True)
def _exact_decimal(data: np.ndarray, start: int, end: int) -> tuple[bool, float]:
    """A plain decimal's double when a single IEEE operation gives it exactly rounded.

    Clinger's fast path: at most 15 significant digits (an integer below 2**53) times or over a
    power of ten up to 10**22 (exact doubles) is one correctly rounded multiplication or
    division, the double ``float(text)`` gives. Other spellings: ``(False, 0.0)``.
    """
    i = start
    negative = False
    if data[i] == 43 or data[i] == 45:
        negative = data[i] == 45
        i += 1
    digits = 0
    mantissa = 0
    exponent = 0
    zeros = 0  # trailing zeros not yet counted into the mantissa
    seen_point = False
    while i < end:
        c = data[i]
        if c == 46:
            seen_point = True
        elif c == 101 or c == 69:
            break
        else:
            d = c - 48
            if seen_point:
                exponent -= 1
            if d == 0 and digits == 0:
                pass  # a leading zero
            elif d == 0:
                zeros += 1
            else:
                for _ in range(zeros):
                    mantissa *= 10
                digits += zeros + 1
                zeros = 0
                if digits > 15:
                    return False, 0.0
                mantissa = mantissa * 10 + d
        i += 1
    exponent += zeros
    if i < end:  # the exponent
        i += 1
        sign = 1
        if data[i] == 43 or data[i] == 45:
            sign = -1 if data[i] == 45 else 1
            i += 1
        if end - i > 4:
            return False, 0.0
        value = 0
        while i < end:
            value = value * 10 + (data[i] - 48)
            i += 1
        exponent += sign * value
    if mantissa == 0:
        return True, -0.0 if negative else 0.0
    if exponent < -22 or exponent > 22:
        return False, 0.0
    x = np.float64(mantissa)
    x = x * _POWERS_OF_TEN[exponent] if exponent >= 0 else x / _POWERS_OF_TEN[-exponent]
    return True, -x if negative else x


@njit(cache=True)
def classify_cells(
    offsets: np.ndarray,
    data: np.ndarray,
    valid: np.ndarray,
    kind: int,
    na_data: np.ndarray,
    na_offsets: np.ndarray,
    state: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    ints: np.ndarray,
    floats: np.ndarray,
    exact: np.ndarray,
) -> None:
    """Type the text cells of one column for a feature of ``kind`` (:data:`INT` ...).

    For each cell: Python's strip, then an NA string or a null is :data:`MISSING`; an
    :data:`INT` that is a plain decimal integer (its value in ``ints``), a :data:`FLOAT` that is a
    plain decimal number or any :data:`BYTES` is :data:`PRESENT`, its stripped span in
    ``start``/``end``; anything else is :data:`UNUSUAL`. A FLOAT whose double one IEEE operation
    gives (:func:`_exact_decimal`) has it in ``floats`` and ``exact`` set; Arrow parses the rest.
    """
    n = len(offsets) - 1
    longest_na = 0
    for k in range(len(na_offsets) - 1):
        longest_na = max(longest_na, na_offsets[k + 1] - na_offsets[k])
    for i in range(n):
        exact[i] = False
        if not valid[i]:
            state[i] = MISSING
            continue
        s, e = _strip(data, offsets[i], offsets[i + 1])
        start[i] = s
        end[i] = e
        missing = False
        if e - s <= longest_na:
            for k in range(len(na_offsets) - 1):
                if _equals(data, s, e, na_data, na_offsets[k], na_offsets[k + 1]):
                    missing = True
                    break
        if missing:
            state[i] = MISSING
        elif kind == INT:
            ok, value = _int_of(data, s, e)
            state[i] = PRESENT if ok else UNUSUAL
            ints[i] = value
        elif kind == FLOAT:
            if _is_decimal(data, s, e):
                state[i] = PRESENT
                exact[i], floats[i] = _exact_decimal(data, s, e)
            else:
                state[i] = UNUSUAL
        else:
            state[i] = PRESENT


@njit(cache=True)
def gather_spans(
    data: np.ndarray, start: np.ndarray, end: np.ndarray, take: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The spans of the rows in ``take`` as an Arrow string array's (offsets, data)."""
    offsets = np.zeros(len(start) + 1, np.int64)
    for i in range(len(start)):
        offsets[i + 1] = offsets[i] + (end[i] - start[i] if take[i] else 0)
    out = np.empty(offsets[-1], np.uint8)
    for i in range(len(start)):
        if take[i]:
            out[offsets[i] : offsets[i + 1]] = data[start[i] : end[i]]
    return offsets, out


@njit(cache=True)
def python_float_text(
    data: np.ndarray, starts: np.ndarray, ends: np.ndarray, valid: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``repr(x)`` of each double, from a text with its shortest round-trip digits.

    The text is ``data[starts[i]:ends[i]]``: what Arrow's cast prints (Arrow and Python print the
    same shortest digits, the closest of the shortest strings that read back as the double; a
    test holds them equal on millions of doubles), or a plain decimal of at most 15 significant
    digits, which are its double's shortest digits (no two such decimals read as one double).
    Only the layout is Python's: fixed notation for decimal exponents from -4 to 15 with at
    least one digit after the point (``3.0``, ``0.0001``), otherwise ``d.ddde+XX`` (``1e-05``,
    ``1e+16``). ``inf``/``nan`` are copied.
    """
    n = len(starts)
    out_offsets = np.zeros(n + 1, np.int64)
    size = 0
    for i in range(n):
        if valid[i]:
            size += 26 + ends[i] - starts[i]
    out = np.empty(size, np.uint8)
    digits = np.empty(32, np.uint8)
    at = 0
    for i in range(n):
        if not valid[i]:
            out_offsets[i + 1] = at
            continue
        s, e = starts[i], ends[i]
        if data[s] == 45:  # -
            out[at] = 45
            at += 1
            s += 1
        elif data[s] == 43:  # +
            s += 1
        if data[s] == 105 or data[s] == 110:  # inf, nan
            for k in range(s, e):
                out[at] = data[k]
                at += 1
            out_offsets[i + 1] = at
            continue
        # digits and the position of the point: value = 0.d1d2...dn x 10^point; zeros after
        # the last nonzero digit are counted, not kept (a cell may have any number of them)
        count = 0
        zeros = 0
        point = 0
        seen_point = False
        exponent = 0
        k = s
        while k < e:
            c = data[k]
            if c == 46:
                seen_point = True
            elif c == 101 or c == 69:
                sign = 1
                k += 1
                if data[k] == 45:
                    sign = -1
                    k += 1
                elif data[k] == 43:
                    k += 1
                value = 0
                while k < e:
                    value = value * 10 + (data[k] - 48)
                    k += 1
                exponent = sign * value
                break
            else:
                if count == 0 and c == 48:  # a leading zero
                    if seen_point:
                        point -= 1
                else:
                    if not seen_point:
                        point += 1
                    if c == 48:
                        zeros += 1
                    else:
                        for _ in range(zeros):
                            digits[count] = 48
                            count += 1
                        zeros = 0
                        digits[count] = c
                        count += 1
            k += 1
        if count == 0:  # zero
            out[at] = 48
            out[at + 1] = 46
            out[at + 2] = 48
            at += 3
            out_offsets[i + 1] = at
            continue
        point += exponent
        if -4 < point <= 16:
            if point <= 0:
                out[at] = 48
                out[at + 1] = 46
                at += 2
                for _ in range(-point):
                    out[at] = 48
                    at += 1
                for d in range(count):
                    out[at] = digits[d]
                    at += 1
            elif point >= count:
                for d in range(count):
                    out[at] = digits[d]
                    at += 1
                for _ in range(point - count):
                    out[at] = 48
                    at += 1
                out[at] = 46
                out[at + 1] = 48
                at += 2
            else:
                for d in range(point):
                    out[at] = digits[d]
                    at += 1
                out[at] = 46
                at += 1
                for d in range(point, count):
                    out[at] = digits[d]
                    at += 1
        else:
            out[at] = digits[0]
            at += 1
            if count > 1:
                out[at] = 46
                at += 1
                for d in range(1, count):
                    out[at] = digits[d]
                    at += 1
            e10 = point - 1
            out[at] = 101
            out[at + 1] = 45 if e10 < 0 else 43
            at += 2
            e10 = abs(e10)
            if e10 >= 100:
                out[at] = 48 + e10 // 100
                at += 1
            out[at] = 48 + (e10 // 10) % 10
            out[at + 1] = 48 + e10 % 10
            at += 2
        out_offsets[i + 1] = at
    return out_offsets, out[:at].copy()


# --------------------------------------------------------------------------------- split keys


@njit(cache=True)
def _put_int(out: np.ndarray, at: int, value: int) -> int:
    """Write ``str(value)`` of an int64 at ``at``; the position after it."""
    if value < 0:
        out[at] = 45
        at += 1
        magnitude = _U64(-(value + 1)) + _U64(1)  # -2**63 has no positive int64
    else:
        magnitude = _U64(value)
    size = 1
    rest = magnitude // _U64(10)
    while rest:
        size += 1
        rest //= _U64(10)
    for k in range(size - 1, -1, -1):
        out[at + k] = 48 + magnitude % _U64(10)
        magnitude //= _U64(10)
    return at + size


_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)
_NULL = np.frombuffer(b"null", np.uint8)


@njit(cache=True)
def _put_u16(out: np.ndarray, at: int, unit: int) -> int:
    out[at] = 92  # \
    out[at + 1] = 117  # u
    out[at + 2] = _HEX[(unit >> 12) & 15]
    out[at + 3] = _HEX[(unit >> 8) & 15]
    out[at + 4] = _HEX[(unit >> 4) & 15]
    out[at + 5] = _HEX[unit & 15]
    return at + 6


@njit(cache=True)
def _put_json_string(out: np.ndarray, at: int, data: np.ndarray, start: int, end: int) -> int:
    """``json.dumps(text)`` (``ensure_ascii``) of UTF-8 ``data[start:end]``."""
    out[at] = 34
    at += 1
    k = start
    while k < end:
        cp, size = _decode(data, k)
        k += size
        if cp == 34 or cp == 92:  # " \
            out[at] = 92
            out[at + 1] = cp
            at += 2
        elif 32 <= cp <= 126:
            out[at] = cp
            at += 1
        elif cp == 10:
            out[at] = 92
            out[at + 1] = 110
            at += 2
        elif cp == 13:
            out[at] = 92
            out[at + 1] = 114
            at += 2
        elif cp == 9:
            out[at] = 92
            out[at + 1] = 116
            at += 2
        elif cp == 8:
            out[at] = 92
            out[at + 1] = 98
            at += 2
        elif cp == 12:
            out[at] = 92
            out[at + 1] = 102
            at += 2
        elif cp < 0x10000:
            at = _put_u16(out, at, cp)
        else:
            cp -= 0x10000
            at = _put_u16(out, at, 0xD800 | (cp >> 10))
            at = _put_u16(out, at, 0xDC00 | (cp & 0x3FF))
    out[at] = 34
    return at + 1


@njit(cache=True)
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

    ``state[f, i]`` is :data:`MISSING` (``null``) or :data:`PRESENT`; an :data:`INT` is
    ``ints[f, i]``, a :data:`FLOAT` its Python text and a :data:`BYTES` its string, both spans
    of ``text``.
    """
    features = len(kinds)
    n = len(rows)
    offsets = np.zeros(n + 1, np.int64)
    for r in range(n):
        i = rows[r]
        size = 2 + 2 * max(features - 1, 0)
        for f in range(features):
            if state[f, i] != PRESENT:
                size += 4
            elif kinds[f] == INT:
                size += 20
            elif kinds[f] == FLOAT:
                size += end[f, i] - start[f, i]
            else:
                size += 2 + 6 * (end[f, i] - start[f, i])  # \u00XX per byte at most
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
            if state[f, i] != PRESENT:
                at = _copy(out, at, _NULL, 0, 4)
            elif kinds[f] == INT:
                at = _put_int(out, at, ints[f, i])
            elif kinds[f] == FLOAT:
                at = _copy(out, at, text, start[f, i], end[f, i])
            else:
                at = _put_json_string(out, at, text, start[f, i], end[f, i])
        out[at] = 93  # ]
        at += 1
    offsets[n] = at
    return offsets, out[:at].copy()


@njit(cache=True)
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
        at = _copy(out, offsets[r], prefix, 0, len(prefix))
        _copy(out, at, text, start[i], end[i])
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


@njit(cache=True)
def _rotr(x: np.uint64, n: int) -> np.uint64:
    return (x >> _U64(n)) | (x << _U64(64 - n))


@njit(cache=True)
def _mix(v: np.ndarray, a: int, b: int, c: int, d: int, x: np.uint64, y: np.uint64) -> None:
    v[a] = v[a] + v[b] + x
    v[d] = _rotr(v[d] ^ v[a], 32)
    v[c] = v[c] + v[d]
    v[b] = _rotr(v[b] ^ v[c], 24)
    v[a] = v[a] + v[b] + y
    v[d] = _rotr(v[d] ^ v[a], 16)
    v[c] = v[c] + v[d]
    v[b] = _rotr(v[b] ^ v[c], 63)


@njit(cache=True)
def _compress(
    h: np.ndarray,
    block: np.ndarray,
    at: int,
    counter: int,
    last: bool,
    m: np.ndarray,
    v: np.ndarray,
) -> None:
    """BLAKE2b's compression of the 128 bytes of ``block`` from ``at`` (``m``, ``v``: scratch)."""
    for w in range(16):
        word = _U64(0)
        for b in range(7, -1, -1):
            word = (word << _U64(8)) | _U64(block[at + 8 * w + b])
        m[w] = word
    for w in range(8):
        v[w] = h[w]
        v[w + 8] = _IV[w]
    v[12] ^= _U64(counter)
    if last:
        v[14] = ~v[14]
    for r in range(12):
        s = _SIGMA[r]
        _mix(v, 0, 4, 8, 12, m[s[0]], m[s[1]])
        _mix(v, 1, 5, 9, 13, m[s[2]], m[s[3]])
        _mix(v, 2, 6, 10, 14, m[s[4]], m[s[5]])
        _mix(v, 3, 7, 11, 15, m[s[6]], m[s[7]])
        _mix(v, 0, 5, 10, 15, m[s[8]], m[s[9]])
        _mix(v, 1, 6, 11, 12, m[s[10]], m[s[11]])
        _mix(v, 2, 7, 8, 13, m[s[12]], m[s[13]])
        _mix(v, 3, 4, 9, 14, m[s[14]], m[s[15]])
    for w in range(8):
        h[w] ^= v[w] ^ v[w + 8]


@njit(cache=True)
def blake2b_16(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """``hashlib.blake2b(key, digest_size=16).digest()`` of each key, as rows of 16 bytes."""
    n = len(offsets) - 1
    out = np.empty((n, 16), np.uint8)
    h = np.empty(8, np.uint64)
    m = np.empty(16, np.uint64)
    v = np.empty(16, np.uint64)
    last = np.zeros(128, np.uint8)
    for i in range(n):
        for w in range(8):
            h[w] = _IV[w]
        h[0] ^= _U64(0x01010010)  # digest length 16, no key, fanout 1, depth 1
        start, end = offsets[i], offsets[i + 1]
        at = start
        while end - at > 128:
            _compress(h, data, at, at + 128 - start, False, m, v)
            at += 128
        for k in range(128):
            last[k] = data[at + k] if at + k < end else 0
        _compress(h, last, 0, end - start, True, m, v)
        for w in range(2):
            for b in range(8):
                out[i, 8 * w + b] = (h[w] >> _U64(8 * b)) & _U64(0xFF)
    return out


@njit(cache=True)
def _high64(digest: np.ndarray, i: int, first: int) -> np.uint64:
    word = _U64(0)
    for b in range(8):
        word = (word << _U64(8)) | _U64(digest[i, first + b])
    return word


@njit(cache=True)
def digest_words(digests: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bytes 0-7 and 8-15 of each digest as big-endian uint64s (the order bytes sort in)."""
    n = len(digests)
    high = np.empty(n, np.uint64)
    low = np.empty(n, np.uint64)
    for i in range(n):
        high[i] = _high64(digests, i, 0)
        low[i] = _high64(digests, i, 8)
    return high, low


@njit(cache=True)
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


@njit(cache=True)
def shard_indices(low: np.ndarray, count: int) -> np.ndarray:
    """:func:`convert.shard_index`: ``(int(bytes 8-15) * count) >> 64``, in 64-bit halves."""
    out = np.empty(len(low), np.int64)
    n = _U64(count)
    for i in range(len(low)):
        high_part = (low[i] >> _U64(32)) * n
        low_part = (low[i] & _MASK32) * n
        out[i] = np.int64((high_part + (low_part >> _U64(32))) >> _U64(32))
    return out


# ----------------------------------------------------------------------------------- examples


@njit(cache=True)
def _varint_size(value: np.uint64) -> int:
    size = 1
    while value > _U64(0x7F):
        value >>= _U64(7)
        size += 1
    return size


@njit(cache=True)
def _put_varint(out: np.ndarray, at: int, value: np.uint64) -> int:
    while value > _U64(0x7F):
        out[at] = (value & _U64(0x7F)) | _U64(0x80)
        value >>= _U64(7)
        at += 1
    out[at] = value
    return at + 1


@njit(cache=True)
def _entry_sizes(kind: int, name_size: int, payload: int) -> tuple[int, int, int, int]:
    """(inner, feature, body, entry) sizes of one feature's map entry."""
    inner = 1 + _varint_size(_U64(payload)) + payload
    feature = 1 + _varint_size(_U64(inner)) + inner
    body = name_size + 1 + _varint_size(_U64(feature)) + feature
    return inner, feature, body, 1 + _varint_size(_U64(body)) + body


@njit(cache=True)
def _payload(kind: int, value: int, start: int, end: int) -> int:
    if kind == INT:
        return _varint_size(_U64(value))
    if kind == FLOAT:
        return 4
    return end - start


@njit(cache=True)
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
    an :data:`INT` is ``ints[f, i]``, a :data:`FLOAT` the float32 bits in ``ints[f, i]``, a
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
            if state[f, i] != PRESENT:
                continue
            payload = _payload(kinds[f], ints[f, i], start[f, i], end[f, i])
            name_size = name_offsets[f + 1] - name_offsets[f]
            total += _entry_sizes(kinds[f], name_size, payload)[3]
        totals[r] = total
        offsets[r + 1] = offsets[r] + (1 + _varint_size(_U64(total)) + total if total else 0)
    out = np.empty(offsets[n], np.uint8)
    for r in range(n):
        i = rows[r]
        if not totals[r]:
            continue
        out[offsets[r]] = 0x0A
        at = _put_varint(out, offsets[r] + 1, _U64(totals[r]))
        for f in range(features):
            if state[f, i] != PRESENT:
                continue
            kind = kinds[f]
            value = ints[f, i]
            payload = _payload(kind, value, start[f, i], end[f, i])
            name_size = name_offsets[f + 1] - name_offsets[f]
            inner, feature, body_size, _ = _entry_sizes(kind, name_size, payload)
            out[at] = 0x0A
            at = _put_varint(out, at + 1, _U64(body_size))
            at = _copy(out, at, names, name_offsets[f], name_offsets[f + 1])
            out[at] = 0x12
            at = _put_varint(out, at + 1, _U64(feature))
            # Feature: bytes_list = 1, float_list = 2, int64_list = 3; each list's field 1
            out[at] = 0x0A if kind == BYTES else (0x12 if kind == FLOAT else 0x1A)
            at = _put_varint(out, at + 1, _U64(inner))
            out[at] = 0x0A
            at = _put_varint(out, at + 1, _U64(payload))
            if kind == INT:
                at = _put_varint(out, at, _U64(value))
            elif kind == FLOAT:
                for b in range(4):
                    out[at + b] = (value >> (8 * b)) & 0xFF
                at += 4
            else:
                at = _copy(out, at, text, start[f, i], end[f, i])
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


@njit(cache=True)
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


@njit(cache=True)
def _masked(crc: np.uint32) -> np.uint32:
    return ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(0xA282EAD8)


@njit(cache=True)
def crc32c(data: np.ndarray) -> int:
    """CRC32C of a whole array (``google_crc32c.value``)."""
    return _crc32c(data, 0, len(data))


@njit(cache=True)
def _put_u32(out: np.ndarray, at: int, value: np.uint32) -> None:
    for b in range(4):
        out[at + b] = (value >> np.uint32(8 * b)) & np.uint32(0xFF)


@njit(cache=True)
def frame_records(offsets: np.ndarray, data: np.ndarray, order: np.ndarray) -> np.ndarray:
    """The records ``order`` names, each framed as TFRecord frames it, one after another."""
    size = 0
    for i in order:
        size += 16 + offsets[i + 1] - offsets[i]
    out = np.empty(size, np.uint8)
    at = 0
    for i in order:
        length = offsets[i + 1] - offsets[i]
        for b in range(8):
            out[at + b] = (length >> (8 * b)) & 0xFF
        _put_u32(out, at + 8, _masked(_crc32c(out, at, at + 8)))
        out[at + 12 : at + 12 + length] = data[offsets[i] : offsets[i + 1]]
        _put_u32(out, at + 12 + length, _masked(_crc32c(data, offsets[i], offsets[i + 1])))
        at += 16 + length
    return out


# ---------------------------------------------------------------------------------- line scans


@njit(cache=True)
def line_starts(data: np.ndarray) -> np.ndarray:
    r"""The offset of every line of ``data`` (lines end at ``\n``), and ``len(data)`` last."""
    count = 0
    for b in data:
        if b == 10:
            count += 1
    if len(data) and data[-1] != 10:
        count += 1
    out = np.empty(count + 1, np.int64)
    out[0] = 0
    k = 1
    for i in range(len(data)):
        if data[i] == 10 and k <= count:
            out[k] = i + 1
            k += 1
    out[count] = len(data)
    return out


@njit(cache=True)
def _content_end(data: np.ndarray, start: int, end: int) -> int:
    r"""The end of a line without its ``\n`` or ``\r\n``."""
    if end > start and data[end - 1] == 10:
        end -= 1
        if end > start and data[end - 1] == 13:
            end -= 1
    return end


@njit(cache=True)
def _bare_cr(data: np.ndarray, start: int, end: int) -> bool:
    r"""Whether a ``\r`` other than a final ``\r\n``'s is in the line (Arrow ends lines there)."""
    for k in range(start, end):
        if data[k] == 13 and not (k + 2 == end and data[k + 1] == 10):
            return True
    return False


@njit(cache=True)
def _csv_fields(data: np.ndarray, start: int, end: int, delimiter: int) -> int:
    """The fields of a line where every quoted field is well formed; -1 otherwise.

    Well formed: a field either holds no quote, or is wholly quoted, quotes inside doubled,
    the closing quote followed by the delimiter or the end. Python's strict reader and Arrow's
    reader give such a line the same fields; other uses of quotes go to the row path.
    """
    fields = 1
    k = start
    while True:
        if k < end and data[k] == 34:
            k += 1
            while True:
                if k >= end:
                    return -1
                if data[k] == 34:
                    if k + 1 < end and data[k + 1] == 34:
                        k += 2
                        continue
                    k += 1
                    break
                k += 1
            if k == end:
                return fields
            if data[k] != delimiter:
                return -1
        else:
            while k < end and data[k] != delimiter:
                if data[k] == 34:
                    return -1
                k += 1
            if k == end:
                return fields
        k += 1  # the delimiter
        fields += 1


@njit(cache=True)
def scan_csv_lines(
    data: np.ndarray, starts: np.ndarray, delimiter: int, width: int, max_line: int
) -> np.ndarray:
    r"""What each line of a CSV range is to the record assembler (``sources.csv_records``).

    :data:`BLANK`: only a line end (both paths skip it). :data:`OPEN_QUOTE`: an odd number of
    quotes, so a record may span lines from here. :data:`PLAIN`: one record of ``width``
    fields that Arrow's reader parses as Python's strict reader does (valid UTF-8, at most
    ``max_line`` bytes, no stray ``\r``, quotes well formed). :data:`ONE_RECORD`: any other
    line, which the assembler reads as one record of its own (good or bad).
    """
    lines = len(starts) - 1
    out = np.empty(lines, np.uint8)
    for line in range(lines):
        s, e = starts[line], starts[line + 1]
        content = _content_end(data, s, e)
        # one pass for what most lines need: quotes, stray \r, bytes past ASCII, delimiters
        quotes = 0
        delimiters = 0
        wide = False
        stray_cr = False
        for k in range(s, content):
            c = data[k]
            if c == 34:
                quotes += 1
            elif c == delimiter:
                delimiters += 1
            elif c == 13:
                stray_cr = True
            elif c >= 0x80:
                wide = True
        for k in range(content, e):
            if data[k] == 34:
                quotes += 1
        if quotes % 2:
            out[line] = OPEN_QUOTE
        elif content == s:
            out[line] = BLANK
        elif (
            e - s > max_line
            or stray_cr
            or (wide and not _utf8_valid(data, s, e))
            or (delimiters + 1 if quotes == 0 else _csv_fields(data, s, content, delimiter))
            != width
        ):
            out[line] = ONE_RECORD
        else:
            out[line] = PLAIN
    return out


@njit(cache=True)
def scan_json_lines(data: np.ndarray, starts: np.ndarray, max_line: int) -> np.ndarray:
    r"""What each line of a JSON-lines range is: :data:`BLANK`, :data:`PLAIN` or :data:`ONE_RECORD`.

    BLANK: only ASCII spaces (Python's ``strip`` empties it). PLAIN: valid UTF-8 of at most
    ``max_line`` bytes, its first and last non-space bytes ``{`` and ``}``, and no ``\r``
    before the line's end: an object, or text Arrow's reader refuses (then the row path reads
    it). ONE_RECORD: the row path's (a byte order mark, another value, bad bytes).
    """
    lines = len(starts) - 1
    out = np.empty(lines, np.uint8)
    for line in range(lines):
        s, e = starts[line], starts[line + 1]
        first = s
        while first < e and (
            data[first] == 32 or 9 <= data[first] <= 13 or 28 <= data[first] <= 31
        ):
            first += 1
        if first == e:
            out[line] = BLANK
            continue
        last = e - 1
        while data[last] == 32 or 9 <= data[last] <= 13 or 28 <= data[last] <= 31:
            last -= 1
        if (
            data[first] != 123
            or data[last] != 125
            or e - s > max_line
            or _bare_cr(data, s, e)
            or not _utf8_valid(data, s, e)
        ):
            out[line] = ONE_RECORD
        else:
            out[line] = PLAIN
    return out


@njit(cache=True)
def gather_lines(data: np.ndarray, starts: np.ndarray, lines: np.ndarray) -> np.ndarray:
    r"""The given lines one after another, each ending with ``\n``."""
    size = 0
    for line in lines:
        size += starts[line + 1] - starts[line] + 1
    out = np.empty(size, np.uint8)
    at = 0
    for line in lines:
        s, e = starts[line], starts[line + 1]
        out[at : at + e - s] = data[s:e]
        at += e - s
        if e == s or data[e - 1] != 10:
            out[at] = 10
            at += 1
    return out[:at]


# ------------------------------------------------------------------------- record collections


@njit(cache=True)
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


@njit(cache=True)
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
        for b in range(4):
            out[at + b] = (length >> (8 * b)) & 0xFF
        for b in range(16):
            out[at + 4 + b] = digests[i, b]
        out[at + 20 : at + 20 + length] = data[offsets[i] : offsets[i + 1]]
        at += 20 + length
    return out


@njit(cache=True)
def parse_spill(buffer: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Each spill entry's record start and length; the offset of a truncated entry, or -1."""
    count = 0
    at = 0
    size = len(buffer)
    while at + 20 <= size:
        length = np.int64(0)
        for b in range(4):
            length |= np.int64(buffer[at + b]) << (8 * b)
        if at + 20 + length > size:
            break
        at += 20 + length
        count += 1
    starts = np.empty(count, np.int64)
    lengths = np.empty(count, np.int64)
    at = 0
    for k in range(count):
        length = np.int64(0)
        for b in range(4):
            length |= np.int64(buffer[at + b]) << (8 * b)
        starts[k] = at + 20
        lengths[k] = length
        at += 20 + length
    return starts, lengths, -1 if at == size else at


@njit(cache=True)
def _bytes_less(offsets: np.ndarray, data: np.ndarray, a: int, b: int) -> bool:
    """Whether record ``a`` sorts before record ``b`` as Python compares bytes."""
    sa, ea, sb, eb = offsets[a], offsets[a + 1], offsets[b], offsets[b + 1]
    for k in range(min(ea - sa, eb - sb)):
        if data[sa + k] != data[sb + k]:
            return data[sa + k] < data[sb + k]
    return ea - sa < eb - sb


@njit(cache=True)
def sort_ties(
    order: np.ndarray, high: np.ndarray, low: np.ndarray, offsets: np.ndarray, data: np.ndarray
) -> None:
    """Order each run of equal hashes in ``order`` (sorted by hash) by the records' bytes."""
    n = len(order)
    first = 0
    while first < n:
        last = first + 1
        while (
            last < n
            and high[order[last]] == high[order[first]]
            and (low[order[last]] == low[order[first]])
        ):
            last += 1
        for k in range(first + 1, last):  # insertion sort: runs are short
            item = order[k]
            j = k - 1
            while j >= first and _bytes_less(offsets, data, item, order[j]):
                order[j + 1] = order[j]
                j -= 1
            order[j + 1] = item
        first = last


@njit(cache=True)
def quote_parity(data: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per line: 0 for line ends only, 1 for an even number of quotes, 2 for an odd one.

    Line ends only (carriage returns and the newline) is what the record assembler skips; an odd
    number of quotes, a line a quoted field may go on past.
    """
    lines = len(starts) - 1
    out = np.empty(lines, np.uint8)
    for line in range(lines):
        quotes = 0
        blank = True
        for k in range(starts[line], starts[line + 1]):
            c = data[k]
            if c == 34:
                quotes += 1
            if c != 10 and c != 13:
                blank = False
        out[line] = 2 if quotes % 2 else (0 if blank else 1)
    return out
