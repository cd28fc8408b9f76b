"""TFRecord framing: ``uint64 length, masked CRC32C(length), data, masked CRC32C(data)``.

The format TensorFlow's ``TFRecordWriter`` writes, read and written here without TensorFlow or
Beam (the trainer images carry neither Beam nor its private helpers), with the C CRC32C of
``google-crc32c``.
"""

from __future__ import annotations

import struct
from typing import IO

import google_crc32c

from tfrecord_suite.errors import UserError

_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8


class FramingError(UserError):
    """A record is truncated or its checksum does not match."""


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC32C of ``data``."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def encode(data: bytes) -> bytes:
    """One framed record."""
    length = _LENGTH.pack(len(data))
    return b"".join(
        (length, _CRC.pack(masked_crc32c(length)), data, _CRC.pack(masked_crc32c(data)))
    )


def write_record(fh: IO[bytes], data: bytes) -> None:
    """Append one framed record to ``fh``."""
    fh.write(encode(data))


def read_record(fh: IO[bytes]) -> bytes | None:
    """The next record of ``fh`` with both checksums checked; None at a clean end of file.

    Raises:
        FramingError: A truncated record or a checksum mismatch.

    """
    header = fh.read(12)
    if not header:
        return None
    if len(header) < 12:
        raise FramingError(f"truncated record header ({len(header)} of 12 bytes)")
    length_bytes, length_crc = header[:8], _CRC.unpack(header[8:])[0]
    if masked_crc32c(length_bytes) != length_crc:
        raise FramingError("record length checksum mismatch")
    (length,) = _LENGTH.unpack(length_bytes)
    data = fh.read(length)
    footer = fh.read(4)
    if len(data) < length or len(footer) < 4:
        raise FramingError(f"truncated record ({len(data)} of {length} bytes)")
    if masked_crc32c(data) != _CRC.unpack(footer)[0]:
        raise FramingError("record data checksum mismatch")
    return data
