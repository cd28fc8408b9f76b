"""The one template every shard name comes from: ``<split>-00003-of-00016.tfrecord[.gz]``."""

from __future__ import annotations

import re

SHARD_TEMPLATE = "{split}-{index:05d}-of-{count:05d}.tfrecord{suffix}"
SHARD_RE = re.compile(
    r"^(?P<split>[A-Za-z_][A-Za-z0-9_]*)-(?P<index>\d{5})-of-(?P<count>\d{5})\.tfrecord(?P<gz>\.gz)?$"
)
GZIP_SUFFIX = ".gz"

#: Dead letters: JSON-lines shards Beam writes beside the output, named by the same
#: ``-00000-of-00004`` numbering (Beam's shard template spells it ``-SSSSS-of-NNNNN``).
DEAD_LETTER_PREFIX = "dead_letter"
DEAD_LETTER_SUFFIX = ".jsonl"
BEAM_SHARD_TEMPLATE = "-SSSSS-of-NNNNN"
DEAD_LETTER_RE = re.compile(r"^dead_letter-\d{5}-of-\d{5}\.jsonl$")
DEAD_LETTER_GLOB = "dead_letter-*-of-*.jsonl"


def shard_name(split: str, index: int, count: int, gzip: bool = False) -> str:
    """The file name of shard ``index`` of ``count`` in ``split``."""
    if not 0 <= index < count:
        raise ValueError(f"shard index {index} outside 0..{count - 1}")
    return SHARD_TEMPLATE.format(
        split=split, index=index, count=count, suffix=GZIP_SUFFIX if gzip else ""
    )


def parse_shard_name(name: str) -> dict | None:
    """``{"split", "index", "count", "gzip"}`` for a shard file name, None for anything else."""
    m = SHARD_RE.match(name)
    if not m:
        return None
    return {
        "split": m["split"],
        "index": int(m["index"]),
        "count": int(m["count"]),
        "gzip": bool(m["gz"]),
    }
