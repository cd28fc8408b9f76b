"""The bench's scaling part (full runs only): time per record at 1x, 4x and 16x the data.

The shard step and the reader should stay flat; the slope is reported.
"""

from __future__ import annotations

import os
from typing import Any

from benchmarks.core import BenchConfig, Part, make_csv, make_version, measure
from benchmarks.read import read_variants
from benchmarks.write import write_variants


def run(data_root: str, root: str, config: BenchConfig) -> dict[str, Any]:
    """The scaling points and slopes."""
    return {"scale": _scaling(data_root, root, config)}


def _scaling(data_root: str, root: str, config: BenchConfig) -> dict[str, Any]:
    out: dict[str, Any] = {"reader": [], "shard": []}
    for scale in (1, 4, 16):
        # 2 shards of 10.5 MB at 1x: the 16x point is 336 MB, ~560k small examples
        v = make_version(data_root, "small", 2, 10.5 * scale, name=f"scale-small-x{scale}")
        variants, _ = read_variants(v, config.batch_size)
        r = measure({"reader": variants["reader"]}, config.runs())["reader"]
        # whole drains: how the pipeline's one-off start is spread over more data is the point
        out["reader"].append((r["items"], r["items"] / r["median_whole_per_s"]))
        rows = 25_000 * scale
        csv_path = make_csv(os.path.join(data_root, f"rows-{rows}"), rows)
        w = measure(
            {"beam": write_variants(csv_path, os.path.join(root, "scale"))["beam"]}, 1, warmup={}
        )["beam"]
        out["shard"].append((w["items"], w["items"] / w["median_per_s"]))
    out["reader_slope"] = _slope(out["reader"])
    out["shard_slope"] = _slope(out["shard"])
    return out


def _slope(points: list[tuple[int, float]]) -> float:
    """Relative change of time per record from the smallest to the largest size."""
    (n0, t0), (n1, t1) = points[0], points[-1]
    return (t1 / n1) / (t0 / n0) - 1.0


def notes(results: dict[str, Any]) -> list[str]:
    """One line: how time per record changed from 1x to 16x."""
    scale = results.get("scale")
    if not scale:
        return []
    return [
        "",
        f"Scaling 1x -> 16x: time per record changes {scale['reader_slope']:+.1%} "
        f"(reader), {scale['shard_slope']:+.1%} (shard step).",
    ]


PART = Part("scale", ("scale",), run, notes=notes)
