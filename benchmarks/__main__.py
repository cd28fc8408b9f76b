"""``python -m benchmarks``: the benchmarks, run from a checkout (they are not installed).

Flags map one-to-one onto :class:`benchmarks.core.BenchConfig`, as the package's commands do.
"""

from __future__ import annotations

import logging
from typing import Any

import click

from tfrecord_suite.cli import options
from tfrecord_suite.cli.common import emit, friendly_errors, json_option, stdout_for


def _bench_config_cls() -> type:
    from benchmarks.core import BenchConfig

    return BenchConfig


@click.command("bench")
@options.dataclass_options(_bench_config_cls())
@json_option
@friendly_errors
def bench(as_json: bool, **values: Any) -> None:
    """Measure reading, writing and training throughput against the naive way and peers."""
    from benchmarks.core import BenchConfig
    from benchmarks.run import markdown, run_bench

    with stdout_for(as_json):
        results = run_bench(options.build(BenchConfig, values))
    emit(results, as_json, markdown)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    bench()
