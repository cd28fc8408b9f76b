"""The shard step's result, ``summary.json``: one dataclass, one JSON form.

The registry reads the same file from a staged folder (``version publish --staged``), where a
hand-made folder may hold only the shards and, optionally, statistics, the input fingerprint and
the compression flag; every other field then keeps its default.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from tfrecord_suite.io import storage

#: The summary's file name in the step's output folder; written last, so it marks a complete one.
SUMMARY_FILE = "summary.json"


@dataclasses.dataclass
class ShardSummary:
    """What one run of the shard step wrote.

    Attributes:
        shards: One entry per shard: ``split``, ``index``, ``path``, ``records``, ``bytes``...
        created: When the step finished (UTC, ISO 8601).
        input: The input as given.
        format: The format it was read as.
        output: The output folder.
        splits: The split rule (``train=80,validation=10,test=10``).
        key_column: The column that decided the split, if any.
        gzip: Whether the shards are GZIP-compressed.
        schema: The schema written beside the shards (``schema.json``).
        plan: The shard plan's configuration and, per split, its shards and reasons.
        statistics: Per split: record count, label histogram, per-feature statistics.
        records: Records written.
        bad_rows: Rows sent to the dead letters.
        rows_read: Good and bad rows.
        first_bad_row: The first bad row's file, row and reason (None: no bad row).
        dead_letter: The dead letters' glob (None: no bad row).
        dead_letter_files: The dead-letter files.
        input_fingerprint: The input's fingerprint (files, sizes, digest).
        beam_metrics: Beam's counters.
        seconds: The step's wall time.

    """

    shards: list[dict[str, Any]]
    created: str = ""
    input: str = ""
    format: str = ""
    output: str = ""
    splits: str = ""
    key_column: str | None = None
    gzip: bool = False
    schema: dict[str, Any] = dataclasses.field(default_factory=dict)
    plan: dict[str, Any] = dataclasses.field(default_factory=dict)
    statistics: dict[str, Any] = dataclasses.field(default_factory=dict)
    records: int = 0
    bad_rows: int = 0
    rows_read: int = 0
    first_bad_row: dict[str, Any] | None = None
    dead_letter: str | None = None
    dead_letter_files: list[str] = dataclasses.field(default_factory=list)
    input_fingerprint: dict[str, Any] = dataclasses.field(default_factory=dict)
    beam_metrics: dict[str, Any] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0

    @property
    def split_counts(self) -> dict[str, int]:
        """Records per split."""
        return {k: v["count"] for k, v in self.statistics.items()}

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able form (``summary.json``'s content)."""
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        """``summary.json``'s text."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ShardSummary:
        """Read :meth:`to_dict`'s form (keys it does not know are ignored; missing ones default).

        Raises:
            TypeError: ``shards`` is missing.

        """
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    @classmethod
    def load(cls, folder: str) -> ShardSummary:
        """The summary in ``folder``.

        Raises:
            FileNotFoundError: There is none.

        """
        return cls.from_dict(json.loads(storage.read_text(storage.join(folder, SUMMARY_FILE))))
