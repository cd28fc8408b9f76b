"""The bench's memory part (``--only memory``, run only when named): peak memory of sharding.

Shards generated CSVs of the sizes ``--memory-mb`` names, as one file and as 8 files, and runs the
pandas script on the single file, each in its own process; reports their peak memory and seconds.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from typing import Any

from benchmarks.core import _CSV_ROW_BYTES, BenchConfig, Part, Target, make_csv

_LOG = logging.getLogger(__name__)
#: Issue #18 (memory).
TARGETS = (Target("shard/pandas_script peak memory", False, 1.5),)


def peak(command: list[str]) -> dict[str, float]:
    """Run ``command`` in its own process; its seconds and peak resident memory (MB)."""
    code = (
        "import resource, subprocess, sys, time; t = time.perf_counter(); "
        "rc = subprocess.run(sys.argv[1:]).returncode; "
        "print(rc, time.perf_counter() - t, "
        "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    # measured by a fresh parent process, so earlier runs' peaks are not counted
    out = subprocess.run(
        [sys.executable, "-c", code, *command], capture_output=True, text=True, check=True
    )
    rc, seconds, peak_kb = out.stdout.split()[-3:]
    if rc != "0":
        raise RuntimeError(f"{command[:3]} failed: {out.stderr[-2000:]}")
    return {"seconds": round(float(seconds), 1), "peak_rss_mb": round(int(peak_kb) / 1024)}


def memory_measurements(data_root: str, out_root: str, sizes_mb: list[int]) -> dict[str, Any]:
    """Peak memory of the shard step (DirectRunner, one worker) and of the pandas script.

    Each runs in its own process on a generated CSV of each size, as one file and as 8 files
    (the pandas script reads one file, so only the single file).
    """
    cli = [sys.executable, "-m", "tfrecord_suite.cli", "shard", "--overwrite", "--json"]
    out: dict[str, Any] = {}
    for mb in sizes_mb:
        rows = mb * 1_000_000 // _CSV_ROW_BYTES
        for files in (1, 8):
            folder = make_csv(os.path.join(data_root, f"memory-{mb}mb-{files}"), rows, files=files)
            key = f"{mb} MB CSV, {files} file{'s' if files > 1 else ''}"
            target = os.path.join(out_root, f"{mb}-{files}")
            out[key] = {"shard": peak([*cli, "--input", folder, "--output", target])}
            if files == 1:
                csv_file = os.path.join(folder, "part-0.csv")
                script = (
                    "import sys; from benchmarks.write import pandas_script; "
                    "pandas_script(sys.argv[1], sys.argv[2])"
                )
                out[key]["pandas_script"] = peak(
                    [sys.executable, "-c", script, csv_file, target + "-pandas"]
                )
            _LOG.info("memory %s: %s", key, out[key])
    return out


def run(data_root: str, root: str, config: BenchConfig) -> dict[str, Any]:
    """Peak memory at every size ``config.memory_mb`` names."""
    sizes = [int(x) for x in config.memory_mb.split(",") if x.strip()]
    return {"memory": memory_measurements(data_root, os.path.join(root, "memory"), sizes)}


def ratios(results: dict[str, Any]) -> dict[str, float]:
    """The shard step's peak memory against the pandas script's, where both ran."""
    out: dict[str, float] = {}
    for key, m in results.get("memory", {}).items():
        if "pandas_script" in m:
            out[f"{key}: shard/pandas_script peak memory"] = (
                m["shard"]["peak_rss_mb"] / m["pandas_script"]["peak_rss_mb"]
            )
    return out


def tables(results: dict[str, Any]) -> list[str]:
    """The peak memory table."""
    memory = results.get("memory")
    if not memory:
        return []
    lines = [
        "**Peak memory of the shard step** (DirectRunner, one worker; each in its own process)",
        "",
        "| input | shard step | pandas script |",
        "|---|---:|---:|",
    ]
    for key, m in memory.items():
        peer = m.get("pandas_script")
        peer_text = "" if peer is None else f"{peer['peak_rss_mb']:,} MB in {peer['seconds']} s"
        lines.append(
            f"| {key} | {m['shard']['peak_rss_mb']:,} MB in {m['shard']['seconds']} s "
            f"| {peer_text} |"
        )
    lines.append("")
    return lines


PART = Part("memory", ("memory",), run, ratios, tables, targets=TARGETS)
