"""Cells and lines: typing text cells, printing doubles as Python does, scanning ranges."""

from __future__ import annotations

import numpy as np

from tfrecord_suite.shard.kernels import (
    BLANK,
    FLOAT,
    INT,
    MISSING,
    ONE_RECORD,
    OPEN_QUOTE,
    PLAIN,
    PRESENT,
    UNUSUAL,
    compiled,
    decode_utf8,
)

# ------------------------------------------------------------------------------- UTF-8, spaces


@compiled
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


@compiled
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


@compiled
def _strip(data: np.ndarray, start: int, end: int) -> tuple[int, int]:
    """The span of ``data[start:end]`` (valid UTF-8) without Python's leading/trailing spaces."""
    while start < end:
        cp, size = decode_utf8(data, start)
        if not _is_space(cp):
            break
        start += size
    while end > start:
        lead = end - 1
        while lead > start and (data[lead] & 0xC0) == 0x80:
            lead -= 1
        cp, _ = decode_utf8(data, lead)
        if not _is_space(cp):
            break
        end = lead
    return start, end


@compiled
def _equals(data: np.ndarray, start: int, end: int, other: np.ndarray, o_start: int, o_end: int):
    if end - start != o_end - o_start:
        return False
    for k in range(end - start):  # noqa: SIM110 (a generator does not compile)
        if data[start + k] != other[o_start + k]:
            return False
    return True


# ------------------------------------------------------------------------------------- cells


@compiled
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


@compiled
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


@compiled
def _decimal_digits(
    data: np.ndarray, start: int, end: int, digits: np.ndarray
) -> tuple[bool, int, int]:
    """A plain decimal's sign, significant digits and decimal point: 0.d1d2...dn x 10**point.

    The digits (ASCII) go to ``digits`` as far as it holds them, zeros after the last nonzero
    digit left out; their count is returned even past that. The one parser of decimal texts,
    for reading a cell's double (:func:`_exact_decimal`) and printing one
    (:func:`python_float_text`).
    """
    negative = data[start] == 45  # -
    at = start + 1 if data[start] == 45 or data[start] == 43 else start
    count = 0
    zeros = 0  # zeros after the last nonzero digit so far
    point = 0
    seen_point = False
    exponent = 0
    while at < end:
        c = data[at]
        at += 1
        if c == 46:  # .
            seen_point = True
        elif c == 101 or c == 69:  # e E
            sign = 1
            if data[at] == 45 or data[at] == 43:
                sign = -1 if data[at] == 45 else 1
                at += 1
            while at < end:
                exponent = min(exponent * 10 + (data[at] - 48), 1 << 20)  # far past any double
                at += 1
            exponent *= sign
        elif count == 0 and c == 48:  # a leading zero
            if seen_point:
                point -= 1
        else:
            if not seen_point:
                point += 1
            if c == 48:
                zeros += 1
                continue
            for _ in range(zeros):
                if count < len(digits):
                    digits[count] = 48
                count += 1
            if count < len(digits):
                digits[count] = c
            count += 1
            zeros = 0
    return negative, count, point + exponent


@compiled
def _exact_decimal(
    data: np.ndarray, start: int, end: int, digits: np.ndarray
) -> tuple[bool, float]:
    """A plain decimal's double when a single IEEE operation gives it exactly rounded.

    Clinger's fast path: at most 15 significant digits (an integer below 2**53) times or over a
    power of ten up to 10**22 (exact doubles) is one correctly rounded multiplication or
    division, the double ``float(text)`` gives. Other spellings: ``(False, 0.0)``.
    """
    negative, count, point = _decimal_digits(data, start, end, digits)
    if count == 0:
        return True, -0.0 if negative else 0.0
    exponent = point - count
    if count > 15 or exponent < -22 or exponent > 22:
        return False, 0.0
    mantissa = 0
    for k in range(count):
        mantissa = mantissa * 10 + (digits[k] - 48)
    x = np.float64(mantissa)
    x = x * _POWERS_OF_TEN[exponent] if exponent >= 0 else x / _POWERS_OF_TEN[-exponent]
    return True, -x if negative else x


@compiled
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
    digits = np.empty(32, np.uint8)
    longest_na = 0
    na_first = np.zeros(256, np.bool_)  # the first bytes of the NA strings
    na_empty = False
    for k in range(len(na_offsets) - 1):
        longest_na = max(longest_na, na_offsets[k + 1] - na_offsets[k])
        if na_offsets[k + 1] > na_offsets[k]:
            na_first[na_data[na_offsets[k]]] = True
        else:
            na_empty = True
    for i in range(n):
        exact[i] = False
        if not valid[i]:
            state[i] = MISSING
            continue
        s, e = _strip(data, offsets[i], offsets[i + 1])
        start[i] = s
        end[i] = e
        missing = e == s and na_empty
        if s < e and e - s <= longest_na and na_first[data[s]]:
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
                exact[i], floats[i] = _exact_decimal(data, s, e, digits)
            else:
                state[i] = UNUSUAL
        else:
            state[i] = PRESENT


@compiled
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


@compiled
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
        body = s + 1 if data[s] == 45 or data[s] == 43 else s
        if data[body] == 105 or data[body] == 110:  # inf, nan
            for k in range(body, e):
                out[at] = data[k]
                at += 1
            out_offsets[i + 1] = at
            continue
        _, count, point = _decimal_digits(data, s, e, digits)
        if count == 0:  # zero
            out[at] = 48
            out[at + 1] = 46
            out[at + 2] = 48
            at += 3
            out_offsets[i + 1] = at
            continue
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


# ---------------------------------------------------------------------------------- line scans


@compiled
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


@compiled
def _content_end(data: np.ndarray, start: int, end: int) -> int:
    r"""The end of a line without its ``\n`` or ``\r\n``."""
    if end > start and data[end - 1] == 10:
        end -= 1
        if end > start and data[end - 1] == 13:
            end -= 1
    return end


@compiled
def _bare_cr(data: np.ndarray, start: int, end: int) -> bool:
    r"""Whether a ``\r`` other than a final ``\r\n``'s is in the line (Arrow ends lines there)."""
    for k in range(start, end):
        if data[k] == 13 and not (k + 2 == end and data[k + 1] == 10):
            return True
    return False


@compiled
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


@compiled
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


@compiled
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


@compiled
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


@compiled
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
