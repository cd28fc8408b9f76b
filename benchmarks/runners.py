"""The bench's runners part (``--only runners``): the shard step on Beam's runners.

The shard step on one generated CSV on the in-process runner, Prism, Flink and Spark
(``tests/realparts/runners.py`` says how each runs), alternating after a warm-up; rows per
second and the ratio to the in-process runner. Each job server starts once and serves every run;
a run's time counts the job's submission and the runner's start of it, which on a small input is
most of it. The runners are built by ``tests/realparts/build.sh`` when missing.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from typing import Any

from benchmarks.core import BenchConfig, Part, make_csv, measure

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Rows of the bench's CSV (quick run, full run).
ROWS = {True: 20_000, False: 100_000}


def run(data_root: str, root: str, config: BenchConfig) -> dict[str, Any]:
    """The shard step on every runner."""
    return {"runners": runners_part(data_root, config)}


def runners_part(data_root: str, config: BenchConfig) -> dict[str, Any]:
    """The shard step on one CSV on every runner, alternating; rows per second of each."""
    from tfrecord_suite.shard.step import ShardConfig, run_shard

    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from realparts.runners import PARALLELISM, RUNNERS, runner_args

    rows = ROWS[bool(config.quick)]
    csv_path = make_csv(os.path.join(data_root, f"rows-{rows}-1"), rows, files=1)
    out_root = os.path.join(os.path.dirname(data_root), "runners")
    with contextlib.ExitStack() as stack:
        args = {name: runner_args(name, stack) for name in RUNNERS}

        def variant(name: str) -> Callable[[], int]:
            def run() -> int:
                out = os.path.join(out_root, name)
                cfg = ShardConfig(input=csv_path, output=out, overwrite=True, beam_args=args[name])
                return run_shard(cfg).records

            return run

        results = measure({name: variant(name) for name in RUNNERS}, config.runs())
    return {"rows": rows, "parallelism": PARALLELISM, "variants": results}


def runners_ratios(part: dict[str, Any]) -> dict[str, float]:
    """``shard on <runner>/in_process`` for every runner."""
    v = {k: r["median_per_s"] for k, r in part["variants"].items()}
    return {f"shard on {k}/in_process": v[k] / v["in_process"] for k in v if k != "in_process"}


def runners_tables(part: dict[str, Any]) -> list[str]:
    """Markdown: rows per second of the shard step on each runner."""
    if not part:
        return []
    base = part["variants"]["in_process"]["median_per_s"]
    lines = [
        f"**The shard step on Beam's runners** (one CSV of {part['rows']:,} rows; Flink and "
        f"Spark embedded with parallelism {part['parallelism']}, their job servers started "
        "once; the Python work in this process, LOOPBACK)",
        "",
        "| runner | rows/s | relative to in_process |",
        "|---|---:|---:|",
    ]
    for name, r in part["variants"].items():
        lines.append(f"| {name} | {r['median_per_s']:,.0f} | {r['median_per_s'] / base:.2f} |")
    return [*lines, ""]


def ratios(results: dict[str, Any]) -> dict[str, float]:
    """The runners' ratios, when the results have the part."""
    return runners_ratios(results["runners"]) if results.get("runners") else {}


def tables(results: dict[str, Any]) -> list[str]:
    """The runners' table, when the results have the part."""
    return runners_tables(results.get("runners") or {})


PART = Part("runners", ("runners",), run, ratios=ratios, tables=tables)
