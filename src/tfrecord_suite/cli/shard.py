"""The ``shard`` command: raw data to TFRecord shards."""

from __future__ import annotations

from typing import Any

import click

from tfrecord_suite.cli import options
from tfrecord_suite.cli.common import emit, friendly_errors, json_option, stdout_for
from tfrecord_suite.shard.summary import ShardSummary


def _shard_config_cls() -> type:
    from tfrecord_suite.shard.step import ShardConfig

    return ShardConfig


@click.command()
@options.dataclass_options(_shard_config_cls(), exclude=("beam_args",))
@json_option
@click.argument("beam_args", nargs=-1, type=click.UNPROCESSED)
@friendly_errors
def shard(as_json: bool, beam_args: tuple[str, ...], **values: Any) -> None:
    """Shard raw data into TFRecord files with Apache Beam.

    Beam pipeline options go after `--`, e.g.
    `-- --runner DataflowRunner --project P --region R --temp_location gs://b/tmp`; before it,
    an unknown flag is an error (a misspelt flag is never passed to Beam, which would drop it).
    """
    from tfrecord_suite.shard.step import ShardConfig, run_shard

    config = options.build(ShardConfig, values, beam_args=list(beam_args))
    with stdout_for(as_json):
        summary = run_shard(config)
    emit(_shard_brief(summary) if as_json else summary, as_json, _shard_human)


def _shard_brief(s: ShardSummary) -> dict[str, Any]:
    return {
        "output": s.output,
        "format": s.format,
        "records": s.records,
        "bad_rows": s.bad_rows,
        "rows_read": s.rows_read,
        "dead_letter": s.dead_letter,
        "seconds": s.seconds,
        "beam_metrics": s.beam_metrics,
        "splits": s.split_counts,
        "shards": [x["path"] for x in s.shards],
    }


def _shard_human(s: ShardSummary) -> str:
    lines = [
        f"{s.records} records ({s.format}, {s.bad_rows} bad rows) -> {s.output} "
        f"in {s.seconds:.1f} s"
    ]
    for split, p in s.plan["splits"].items():
        lines.append(
            f"  {split}: {p['records']} records in {p['num_shards']} shard(s) "
            f"[{'; '.join(p['reasons'])}]"
        )
    if s.dead_letter:
        lines.append(f"  dead letters: {s.dead_letter}")
    return "\n".join(lines)
