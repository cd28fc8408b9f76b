"""How many shards each split gets, and why.

The rules, in order (each reason is recorded in the output):

1. ``--num-shards`` overrides everything.
2. Enough shards that none exceeds the target size (default 128 MiB).
3. At least ``10 x readers`` files so every reading host interleaves over ~10 files, as long as
   each shard stays at or above the minimum size (10 MB); smaller data gets fewer shards.
4. Never a shard above the maximum size (1 GiB).
5. A multiple of the expected number of training workers, so file-based auto-sharding gives every
   worker the same number of files.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from tfrecord_suite.errors import UserError

MIB = 1024 * 1024
MIN_SHARD_BYTES = 10 * 1000 * 1000
MAX_SHARD_BYTES = 1024 * MIB
DEFAULT_TARGET_SHARD_BYTES = 128 * MIB
FILES_PER_READER = 10


@dataclasses.dataclass(frozen=True)
class ShardPlanConfig:
    """Inputs to the shard plan.

    Attributes:
        target_shard_bytes: Preferred shard size.
        readers: Hosts expected to read the data in parallel (training workers x hosts).
        workers: Training workers; the shard count is rounded up to a multiple of it.
        num_shards: Fixed shard count per split (overrides the rules), or None.
        min_shard_bytes: Smallest shard worth having.
        max_shard_bytes: Largest shard allowed.

    """

    target_shard_bytes: int = DEFAULT_TARGET_SHARD_BYTES
    readers: int = 1
    workers: int = 1
    num_shards: int | None = None
    min_shard_bytes: int = MIN_SHARD_BYTES
    max_shard_bytes: int = MAX_SHARD_BYTES

    def __post_init__(self) -> None:
        if self.num_shards is not None and self.num_shards < 1:
            raise UserError(f"num_shards must be at least 1, got {self.num_shards}")
        if self.readers < 1 or self.workers < 1:
            raise UserError("readers and workers must be at least 1")
        if not 0 < self.min_shard_bytes <= self.target_shard_bytes <= self.max_shard_bytes:
            raise UserError(
                "need 0 < min_shard_bytes <= target_shard_bytes <= max_shard_bytes, got "
                f"{self.min_shard_bytes}, {self.target_shard_bytes}, {self.max_shard_bytes}"
            )


def plan_split(num_bytes: int, num_records: int, config: ShardPlanConfig) -> dict[str, Any]:
    """The shard count for one split and the reasons for it.

    Args:
        num_bytes: Serialized size of the split's records.
        num_records: Number of records.
        config: The plan's inputs.

    Returns:
        ``{"num_shards": n, "bytes": ..., "records": ..., "avg_shard_bytes": ...,
        "reasons": [...]}``.

    """
    reasons: list[str] = []
    if config.num_shards is not None:
        n = config.num_shards
        reasons.append(f"--num-shards {n}")
    else:
        n = max(1, math.ceil(num_bytes / config.target_shard_bytes))
        reasons.append(f"{_h(num_bytes)} / target {_h(config.target_shard_bytes)} per shard -> {n}")
        want = FILES_PER_READER * config.readers
        if n < want:
            affordable = max(1, num_bytes // config.min_shard_bytes)
            if affordable >= want:
                n = want
                reasons.append(
                    f"at least {FILES_PER_READER} files per reader x {config.readers} -> {n}"
                )
            elif affordable > n:
                n = int(affordable)
                reasons.append(
                    f"{want} files would be under {_h(config.min_shard_bytes)} each; "
                    f"as many {_h(config.min_shard_bytes)}+ shards as the data allows -> {n}"
                )
            else:
                reasons.append(
                    f"too little data for {want} shards of {_h(config.min_shard_bytes)}+"
                )
        floor = math.ceil(num_bytes / config.max_shard_bytes)
        if n < floor:
            n = floor
            reasons.append(f"no shard above {_h(config.max_shard_bytes)} -> {n}")
        if n % config.workers:
            n = math.ceil(n / config.workers) * config.workers
            reasons.append(f"rounded up to a multiple of {config.workers} training workers -> {n}")
    return {
        "num_shards": n,
        "bytes": num_bytes,
        "records": num_records,
        "avg_shard_bytes": num_bytes // n if n else 0,
        "reasons": reasons,
    }


def plan_shards(
    sizes: dict[str, tuple[int, int]], config: ShardPlanConfig, splits: tuple[str, ...]
) -> dict[str, dict[str, Any]]:
    """Plans for every split; a split with no records still gets one (empty) shard.

    Args:
        sizes: Split name to ``(records, bytes)``.
        config: The plan's inputs.
        splits: All split names, so empty splits are planned too.

    """
    out = {}
    for name in splits:
        records, num_bytes = sizes.get(name, (0, 0))
        out[name] = plan_split(num_bytes, records, config)
    return out


def _h(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover
