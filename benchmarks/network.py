"""The bench's network part (``--only network``): the reader on ``gs://`` and ``s3://``, latency.

On a cluster the shards live in an object store and every request waits on the network. What the
reader controls is how much of the network's latency it hides, so that is what this part
measures, against two ceilings it cannot beat: the same bytes fetched the same way, with the same
parallelism, and not parsed.

For small (~0.6 KB) and large (~100 KB) records, one version of :data:`SHARDS` train shards of
~50 MB (4 MB with ``--quick``): twice the reader's interleave cycle, so files are opened and
finished while others are read, as on a real dataset. The same files are served by
(:mod:`benchmarks.servers`):

* a local GCS server over TLS, which TensorFlow's own ``gs://`` filesystem reads through a
  CONNECT proxy (a new connection per request: about three round trips each);
* SeaweedFS's S3 gateway, which the reader reaches through boto3 (kept-alive connections),

each behind a relay that holds every round trip for 0, 20 or 50 ms, the servers and relays on a
CPU budget of their own (``--server-cpus``; their CPU time is reported beside each variant). For
each record size, one process runs every variant at every latency, alternating, after a warm-up:

* ``reader_local``: the reader on local disk (the files in the page cache), for scale;
* ``reader_gcs``: the reader on ``gs://``, its defaults (streamed by TensorFlow's filesystem);
* ``raw_gcs``: the raw bytes of the same files: the reader's own file and read stages alone
  (:func:`~tfrecord_suite.train.reader.record_blocks`: the same files fetched the same way with
  the same cycle, parallelism and read buffer, in the same blocks of records), no shuffle, no
  parsing: the ceiling of any reader streaming ``gs://`` here;
* ``reader_s3``: the reader on ``s3://``, its defaults (shards staged to local disk ahead of it);
* ``raw_s3``: the same as ``raw_gcs`` on ``s3://``: the staging and the reading of the local
  copies, unparsed: the ceiling of the staged reader here.

Rates are MB/s of shard bytes; the readers' start (to the first batch) is reported too, and the
knobs the defaults were set from are measured at every latency (:data:`KNOBS`).

What it cannot show: GCS and S3 themselves (time to first byte, per-connection throughput, a real
network's bandwidth); the stand-ins run on this machine, bound by the CPU budget they are given.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from benchmarks.core import BenchConfig, Drained, Part, Target, make_version, measure

_LOG = logging.getLogger(__name__)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DELAYS_MS = (0, 20, 50)
#: Train shards per version: twice the reader's interleave cycle (16).
SHARDS = 32
SHARD_MB = {False: 50.0, True: 4.0}  # by --quick
KINDS = ("small", "large")
STORES = {"gcs": "gs://", "s3": "s3://"}
#: Reader knobs measured against the defaults at each of :data:`KNOB_DELAYS_MS`: name -> (store,
#: ReaderConfig fields). What the defaults were set from (the old defaults among them).
KNOBS: dict[str, tuple[str, dict[str, Any]]] = {
    "gcs repeat before interleave": ("gcs", {"interleave_epochs": True}),
    "gcs cycle 8": ("gcs", {"cycle_length": 8}),
    "s3 repeat before interleave": ("s3", {"interleave_epochs": True}),
    "s3 8 MiB parts": ("s3", {"stage_part_mb": 8}),
    "s3 32 MiB parts": ("s3", {"stage_part_mb": 32}),
    "s3 ahead 8": ("s3", {"stage_ahead": 8}),
}
KNOB_DELAYS_MS = (0, 20, 50)


def _targets() -> tuple[Target, ...]:
    out = []
    for store in STORES.values():
        for kind in KINDS:
            at = f"reader {store} / reader {store} at 0 ms"
            out.append(Target(at, True, 0.95, (f"network {kind}, 20 ms",)))
            out.append(Target(at, True, 0.85, (f"network {kind}, 50 ms",)))
        raw = f"reader {store} / raw bytes {store}"
        out.append(Target(raw, True, 0.9, ("network large, 0 ms",)))
    return tuple(out)


#: Issue #37: the reader hides the network's latency, and gets what the stand-in delivers.
TARGETS = _targets()


def run(data_root: str, root: str, config: BenchConfig) -> dict[str, Any]:
    """Every variant at every latency, on small and large records."""
    return {"network": network_part(data_root, config)}


def network_part(data_root: str, config: BenchConfig) -> dict[str, Any]:
    """Every variant at every latency, on small and large records; MB/s of shard bytes."""
    from benchmarks import servers

    shard_mb = SHARD_MB[bool(config.quick)]
    versions = {
        kind: make_version(
            data_root,
            kind,
            SHARDS,
            shard_mb,
            name=f"net-{kind}-{SHARDS}x{round(shard_mb * 1000)}kb",
        )
        for kind in KINDS
    }
    out: dict[str, Any] = {
        "shard_mb": shard_mb,
        "shards": SHARDS,
        "delays_ms": list(DELAYS_MS),
        "knob_delays_ms": list(KNOB_DELAYS_MS),
    }
    with (
        tempfile.TemporaryDirectory(dir=data_root) as folder,
        servers.stores(folder, config.server_cpus) as stores,
    ):
        out["server_budget"] = stores.budget.description
        remote = _upload(versions, stores)
        env = {**os.environ, **stores.child_env(), "TF_CPP_MIN_LOG_LEVEL": "2"}
        for kind, version in versions.items():
            args = {
                "local": version["uri"],
                "gcs": remote["gcs"][kind],
                "s3": remote["s3"][kind],
                "delay_files": {"gcs": stores.gcs_delay_file, "s3": stores.s3_delay_file},
                "usage_file": stores.budget.usage_file,
                "batch_size": config.batch_size,
                "runs": config.runs(),
                "quick": bool(config.quick),
                "delays_ms": list(DELAYS_MS),
                "knobs": list(KNOBS),
                "knob_delays_ms": list(KNOB_DELAYS_MS),
            }
            _LOG.info("network: %s records", kind)
            out[kind] = _child(args, env)
    return out


def _upload(versions: dict[str, dict], stores: Any) -> dict[str, dict[str, str]]:
    """Copy each version's dataset folder (manifest and shard batches) to both stores."""
    from tfrecord_suite.io import storage

    remote: dict[str, dict[str, str]] = {"gcs": {}, "s3": {}}
    with storage.environment(stores.upload_env):
        for kind, version in versions.items():
            dataset = os.path.dirname(version["uri"])
            for store, bucket in (("gcs", stores.gcs_bucket), ("s3", stores.s3_bucket)):
                for info in storage.list_files(dataset):
                    rel = storage.relative_to(info.uri, dataset)
                    storage.copy(info.uri, f"{bucket}/{kind}/{rel}")
                remote[store][kind] = f"{bucket}/{kind}/{os.path.basename(version['uri'])}"
    return remote


def _child(args: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    """Run :func:`measure_child` in a process of its own; its results."""
    # its progress (the variants' rates as they come) goes to this process's stderr
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.network", json.dumps(args)],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"network bench child failed ({proc.returncode}); see its log above")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------- the reader's process


class _Delays:
    """Sets the latency of both relays (their delay files) before each variant runs."""

    def __init__(self, files: dict[str, str]):
        sys.path.insert(0, os.path.join(ROOT, "tests"))
        from fakes.delayproxy import SharedDelay

        self._shared = [SharedDelay(f) for f in files.values()]

    def at(self, delay: float, fn: Callable[..., Drained]) -> Callable[..., Drained]:
        def run(take: int | None = None) -> Drained:
            for shared in self._shared:
                shared.ms = delay
            return fn(take)

        return run


def _raw(files: list[str], config: Any, block: int) -> Callable[..., Drained]:
    """The reader without its parsing, batched as the reader batches.

    Its file and read stages alone, unshuffled (:func:`~tfrecord_suite.train.reader.record_blocks`):
    the same files fetched the same way (streamed, or staged), with the same cycle, parallelism
    and read buffer: what any reader gets out of the store here.
    """
    import tensorflow as tf

    from tfrecord_suite.train.reader import dataset_options, record_blocks

    unshuffled = dataclasses.replace(config, shuffle_buffer=0)

    def run(take: int | None = None, drain: Any = None) -> Drained:
        from benchmarks.core import _drain

        ds = record_blocks(files, unshuffled)
        ds = ds.rebatch(config.batch_size) if block > 1 else ds.batch(config.batch_size)
        ds = ds.prefetch(tf.data.AUTOTUNE).with_options(dataset_options(unshuffled))
        return (drain or _drain)(ds.take(take))

    return run


def measure_child(args: dict[str, Any]) -> dict[str, Any]:
    """Every variant at every latency over the local, ``gs://`` and ``s3://`` copies."""
    from benchmarks.core import QUICK_READ_EXAMPLES, _drain_window
    from benchmarks.read import ReadVariants
    from tfrecord_suite.io import storage
    from tfrecord_suite.registry.manifest import Manifest

    manifest = Manifest.load(storage.read_text(storage.join(args["local"], "manifest.json")))
    train = [s for s in manifest.shards if s["split"] == "train"]
    epoch_bytes = sum(s["bytes"] for s in train)
    record_bytes = epoch_bytes / max(1, sum(s["records"] for s in train))
    cap = QUICK_READ_EXAMPLES // args["batch_size"] if args["quick"] else None
    readers = {
        where: ReadVariants({"manifest": manifest, "uri": args[where]}, args["batch_size"], cap)
        for where in ("local", "gcs", "s3")
    }
    config = readers["gcs"].reader_config
    delays = _Delays(args["delay_files"])
    epoch = readers["local"].batches - 1

    def windowed(where: str, knob: Any = None, raw: bool = False) -> Callable[..., Drained]:
        """The reader (or its raw ceiling), one epoch untimed (its buffers fill), one timed."""
        r = readers[where]
        if raw:
            read_ = _raw(r.files, config, r.block)
        else:

            def read_(take: int, drain: Any = None) -> Drained:
                return r.reader(take, drain, config=knob)

        def read(take: int | None = None) -> Drained:
            if take:
                return read_(take)
            return read_(1 + 2 * epoch, functools.partial(_drain_window, untimed=epoch))

        return read

    examples = {"reader_local": windowed("local")}
    for delay in args["delays_ms"]:
        for store in STORES:
            examples[f"reader_{store} {delay} ms"] = delays.at(delay, windowed(store))
        for store in STORES:
            examples[f"raw_{store} {delay} ms"] = delays.at(delay, windowed(store, raw=True))
    # the knobs beside the defaults again, in a run of their own: fewer repeats
    knobs: dict[str, Callable[..., Drained]] = {}
    for delay in args["knob_delays_ms"]:
        for store in STORES:
            knobs[f"default {store} {delay} ms"] = delays.at(delay, windowed(store))
    for name in args["knobs"]:
        store, fields = KNOBS[name]
        knob = dataclasses.replace(config, **fields)
        for delay in args["knob_delays_ms"]:
            knobs[f"{name} {delay} ms"] = delays.at(delay, windowed(store, knob))
    out: dict[str, Any] = {"record_bytes": round(record_bytes), "epoch_bytes": epoch_bytes}
    runs = args["runs"]
    for key, chosen, repeats in (
        ("variants", examples, runs),
        ("knobs", knobs, max(1, (runs + 1) // 2)),
    ):
        variants, server_cpu = _with_server_cpu(chosen, args["usage_file"])
        warm = {k: (lambda fn=fn: fn(20)) for k, fn in variants.items()}
        measured = measure(variants, repeats, warm)
        out[key] = {}
        for name, r in measured.items():
            out[key][name] = {  # examples -> MB of shard bytes
                "mb_per_s": r["median_per_s"] * record_bytes / 1e6,
                "runs_mb_per_s": [x * record_bytes / 1e6 for x in r["runs_per_s"]],
                "start_s": r["median_start_s"],
                "server_cpu": statistics.median(server_cpu[name]) if server_cpu[name] else None,
            }
    return out


def _with_server_cpu(
    variants: dict[str, Callable[..., Drained]], usage_file: str
) -> tuple[dict[str, Callable[[], Drained]], dict[str, list[float]]]:
    """Each variant, also measuring the CPUs the servers used while it ran (CPU s / wall s)."""
    from benchmarks.servers import cpu_seconds
    from tfrecord_suite.train import staging

    used: dict[str, list[float]] = {k: [] for k in variants}

    def wrapped(name: str, fn: Callable[..., Drained]) -> Callable[..., Drained]:
        def run(take: int | None = None) -> Drained:
            cpu, wall = cpu_seconds(usage_file), time.perf_counter()
            out = fn(take)
            if usage_file and take is None:
                used[name].append((cpu_seconds(usage_file) - cpu) / (time.perf_counter() - wall))
            # the staged copies a drain stopped early left (those it had staged ahead)
            staging.release_idle(0.0)
            return out

        return run

    return {k: wrapped(k, fn) for k, fn in variants.items()}, used


# --------------------------------------------------------------------------------------- report


def _mb(network: dict[str, Any], kind: str, name: str) -> float:
    return network[kind]["variants"][name]["mb_per_s"]


def ratios(results: dict[str, Any]) -> dict[str, float]:
    """Each store's reader against itself at 0 ms, and against its raw-bytes ceiling."""
    network = results.get("network") or {}
    out: dict[str, float] = {}
    for kind in KINDS:
        if kind not in network:
            continue
        for delay in network["delays_ms"]:
            prefix = f"network {kind}, {delay} ms"
            for store, scheme in STORES.items():
                reader = _mb(network, kind, f"reader_{store} {delay} ms")
                if delay:
                    base = _mb(network, kind, f"reader_{store} 0 ms")
                    out[f"{prefix}: reader {scheme} / reader {scheme} at 0 ms"] = reader / base
                raw = _mb(network, kind, f"raw_{store} {delay} ms")
                out[f"{prefix}: reader {scheme} / raw bytes {scheme}"] = reader / raw
    return out


def tables(results: dict[str, Any]) -> list[str]:
    """Markdown: MB/s of every variant at every latency, and the knobs."""
    network = results.get("network")
    if not network:
        return []
    lines = [
        f"**Read over the network** ({network['shards']} train shards of "
        f"~{network['shard_mb']:g} MB; gs:// is a local GCS server over TLS read by TensorFlow's "
        "own filesystem, s3:// is SeaweedFS read through the reader's staging; the latency is "
        f"held per round trip; servers' CPU budget: {network['server_budget']}; MB/s of shard "
        "bytes, the readers' time to the first batch in brackets)",
        "",
        "| records | latency | reader gs:// | raw gs:// | reader s3:// | raw s3:// "
        "| servers' CPUs (reader gs:// / s3://) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for kind in KINDS:
        if kind not in network:
            continue
        v = network[kind]["variants"]
        for delay in network["delays_ms"]:

            def cell(name: str, v: dict = v, delay: int = delay) -> str:
                m = v[f"{name} {delay} ms"]
                start = f" ({1000 * m['start_s']:,.0f} ms)" if name.startswith("reader") else ""
                return f"{m['mb_per_s']:,.0f}{start}"

            cpus = " / ".join(
                "" if v[f"reader_{s} {delay} ms"]["server_cpu"] is None
                else f"{v[f'reader_{s} {delay} ms']['server_cpu']:.2f}"
                for s in STORES
            )  # fmt: skip
            lines.append(
                f"| {kind} (~{network[kind]['record_bytes']:,} B) | {delay} ms | "
                f"{cell('reader_gcs')} | {cell('raw_gcs')} | {cell('reader_s3')} | "
                f"{cell('raw_s3')} | {cpus} |"
            )
    lines += ["", _local_line(network), ""]
    lines += _knob_table(network)
    return lines


def _local_line(network: dict[str, Any]) -> str:
    local = ", ".join(
        f"{kind} {network[kind]['variants']['reader_local']['mb_per_s']:,.0f} MB/s"
        for kind in KINDS
        if kind in network
    )
    return f"The reader on local disk (the same files in the page cache): {local}."


def _knob_table(network: dict[str, Any], only: str = "") -> list[str]:
    """The knobs against the defaults; ``only``: one store's knobs."""
    delays = network.get("knob_delays_ms") or []
    kinds = [k for k in KINDS if k in network]
    if not delays or not kinds:
        return []
    header = " | ".join(f"{kind}, {d} ms" for kind in kinds for d in delays)
    lines = [
        "**Reader knobs over the network** (MB/s relative to the reader's defaults on the same "
        "store at the same latency, measured alternately with them in a run of their own)",
        "",
        f"| knob | {header} |",
        "|---|" + "---:|" * (len(kinds) * len(delays)),
    ]
    for name, (store, _) in KNOBS.items():
        if only and store != only:
            continue
        cells = []
        for kind in kinds:
            v = network[kind]["knobs"]
            for d in delays:
                m = v.get(f"{name} {d} ms")
                base = v[f"default {store} {d} ms"]["mb_per_s"]
                cells.append("" if m is None else f"{m['mb_per_s'] / base:.2f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return [*lines, ""]


#: The how-to pages that show one store's figures (a block the run writes): page -> store.
PAGES = {"docs/how-to/gcs.md": "gcs", "docs/how-to/s3.md": "s3"}


def _target_cell(kind: str, delay: int, ratio: str, value: float) -> str:
    """``value``, and the target it is held to with whether it is met (issue #37's targets)."""
    for target in TARGETS:
        if target.ratio == ratio and f"network {kind}, {delay} ms" in target.kinds:
            met = "met" if target.met(value) else "**not met**"
            return f"{value:.2f} (target {target}: {met})"
    return f"{value:.2f}"


def store_block(network: dict[str, Any], store: str, date: str) -> list[str]:
    """Markdown: one store's reader at every latency, and its knobs (its how-to page's block).

    The reader against its raw-bytes ceiling and against itself at 0 ms, with the targets.
    """
    scheme = STORES[store]
    lines = [
        f"Measured {date} (`docs/bench/results.json`): {network['shards']} train shards of "
        f"~{network['shard_mb']:g} MB per record size; servers' CPU budget: "
        f"{network['server_budget']}; MB/s of shard bytes.",
        "",
        f"| records | latency | reader {scheme} | raw bytes {scheme} | reader / raw bytes "
        "| reader / reader at 0 ms | first batch |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for kind in KINDS:
        if kind not in network:
            continue
        v = network[kind]["variants"]
        base = v[f"reader_{store} 0 ms"]["mb_per_s"]
        for delay in network["delays_ms"]:
            reader, raw = v[f"reader_{store} {delay} ms"], v[f"raw_{store} {delay} ms"]
            to_raw = _target_cell(
                kind, delay, f"reader {scheme} / raw bytes {scheme}",
                reader["mb_per_s"] / raw["mb_per_s"],
            )  # fmt: skip
            to_zero = "" if not delay else _target_cell(
                kind, delay, f"reader {scheme} / reader {scheme} at 0 ms",
                reader["mb_per_s"] / base,
            )  # fmt: skip
            lines.append(
                f"| {kind} (~{network[kind]['record_bytes']:,} B) | {delay} ms | "
                f"{reader['mb_per_s']:,.0f} | {raw['mb_per_s']:,.0f} | {to_raw} | {to_zero} | "
                f"{reader['start_s']:.1f} s |"
            )
    lines += ["", _local_line(network), ""]
    return lines + _knob_table(network, store)


def pages(results: dict[str, Any]) -> dict[str, str]:
    """Each store's block for its how-to page (:data:`PAGES`)."""
    network = results.get("network")
    if not network:
        return {}
    date = (results.get("measured") or {}).get("network") or results["date"]
    return {
        page: "\n".join(store_block(network, store, date)) + "\n" for page, store in PAGES.items()
    }


PART = Part("network", ("network",), run, ratios, tables, targets=TARGETS, pages=pages)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("benchmarks").setLevel(logging.INFO)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    print(json.dumps(measure_child(json.loads(sys.argv[1]))))
