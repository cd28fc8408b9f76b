"""The compiled loops of the shard step's batch path, over numpy arrays (numba, no build step).

Each loop is the compiled twin of a Python rule elsewhere in the suite and gives the same bytes,
which the tests check against that rule on generated and real data (tests/unit/test_kernels.py):

* :mod:`.text`: a cell's ``parse_scalar`` and coercion (:mod:`tfrecord_suite.shard.convert`)
  for the common spellings of a value (Python's ``str.strip``, the NA strings, decimal integers
  and numbers; any other spelling is *unusual*, and its row goes to the row path, which
  decides), ``repr(float)``, and which lines of a range Arrow's readers parse exactly as the
  row path does.
* :mod:`.keys`: the split key (``json.dumps`` of the typed row, or ``column=value``), its
  BLAKE2b digest, the split (:meth:`SplitSpec.assign`) and the shard
  (:func:`convert.shard_index`).
* :mod:`.records`: ``convert.encode_example`` (deterministic ``tf.train.Example`` bytes),
  TFRecord framing with CRC32C (``io.framing.encode``), spill entries and the writer's order
  of records (the loops :class:`tfrecord_suite.shard.records.Records` runs).

numba compiles each on first use and caches the machine code beside these modules (or under
``NUMBA_CACHE_DIR``): a process pays the compilation once per machine and source, not per call
(``python -m tfrecord_suite.shard.warm`` pays it ahead, as the images' build does).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from tfrecord_suite.errors import UserError

try:
    from numba import njit
except ImportError:  # the trainer images (no shard extra) import the CLI, never run these loops
    njit = None

#: What a cell became (:func:`.text.classify_cells`).
MISSING, PRESENT, UNUSUAL = 0, 1, 2
#: A feature's value type in the loops.
INT, FLOAT, BYTES = 0, 1, 2
#: What a line of a range is (:func:`.text.scan_csv_lines`, :func:`.text.scan_json_lines`).
BLANK, PLAIN, ONE_RECORD, OPEN_QUOTE = 0, 1, 2, 3

U64 = np.uint64
_LOG = logging.getLogger(__name__)
_UNCACHED: list[str] = []


def compiled(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Compile ``fn`` with numba: nopython, releasing the GIL, its machine code cached.

    Where no cache folder can be written (beside the package, nor ``NUMBA_CACHE_DIR``, nor the
    user's cache), numba refuses to cache: the loop is then compiled by each process, and the
    first such loop says so once. Where numba is not installed (an image without the ``shard``
    extra), the module still imports and a call says what to install.
    """
    if njit is None:
        return _needs_numba(fn.__name__)
    try:
        return njit(cache=True, nogil=True)(fn)
    except RuntimeError as exc:  # "cannot cache function ...: no locator available"
        if not _UNCACHED:
            _LOG.warning(
                "the shard step's compiled loops cannot be cached (%s): each process compiles "
                "them again; set NUMBA_CACHE_DIR to a writable folder",
                exc,
            )
        _UNCACHED.append(fn.__name__)
        return njit(nogil=True)(fn)


def _needs_numba(name: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise UserError(
            f"the shard step's compiled loop {name} needs numba, which this installation lacks: "
            "pip install 'tfrecord-suite[shard]'"
        )

    return refuse


@compiled
def decode_utf8(data: np.ndarray, at: int) -> tuple[int, int]:
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


@compiled
def copy_bytes(out: np.ndarray, at: int, source: np.ndarray, start: int, end: int) -> int:
    """Copy ``source[start:end]`` to ``out[at:]``; the position after it (short copies)."""
    for k in range(end - start):
        out[at + k] = source[start + k]
    return at + end - start
