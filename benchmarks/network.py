"""The bench's network part (``--only network``): the reader on ``gs://``, with latency.

On a cluster the shards live on GCS and training reads them through TensorFlow's own GCS
filesystem, where every request waits on the network. Here that filesystem reads from a local
GCS server over TLS through a CONNECT proxy that holds every round trip for 0, 20 or 50 ms
(``tests/fakes/gcs_tls.py``: TensorFlow opens a new connection per request, so one request
costs about three round trips). For small (~0.5 KB) and large (~100 KB) records, one version of
4 train shards of ~100 MB (25 MB with ``--quick``) is read from local disk and, the same files,
from the server. Each latency runs in a process of its own (TensorFlow's GCS filesystem reads its
proxy and CA when it starts), alternating, after a warm-up:

* ``reader_local``: the suite's reader on local disk (the files in the page cache);
* ``reader_gcs``: the suite's reader on ``gs://``, with its defaults;
* ``reader_gcs_autotune``: the same with ``num_parallel_reads=AUTOTUNE``, the local default,
  which the remote default replaces (the measurement the default is set from);
* ``textbook_gcs``: the tutorials' pipeline on ``gs://``;
* ``fetch_gcs``: the records fetched from ``gs://`` and nothing else (every file at once, no
  parse): what the network path delivers here, the ceiling of any reader over it.

What it cannot show: GCS itself (its time to first byte, per-connection throughput, the
bandwidth of a real network); the server, the proxy and TLS share this machine's cores with
the reader.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
import tempfile
from typing import Any

from benchmarks.core import Part

_LOG = logging.getLogger(__name__)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DELAYS_MS = (0, 20, 50)
SHARDS = 4
SHARD_MB = {False: 100.0, True: 25.0}  # by --quick
VARIANTS = ("reader_local", "reader_gcs", "reader_gcs_autotune", "textbook_gcs", "fetch_gcs")


def network_part(data_root: str, config: Any) -> dict[str, Any]:
    """Every variant at every latency, on small and large records; examples per second."""
    from benchmarks.core import make_version
    from tfrecord_suite.io import storage

    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from fakes.gcs_tls import local_gcs

    shard_mb = SHARD_MB[bool(config.quick)]
    versions = {
        kind: make_version(data_root, kind, SHARDS, shard_mb, name=f"net-{kind}-{shard_mb:g}")
        for kind in ("small", "large")
    }
    out: dict[str, Any] = {"shard_mb": shard_mb, "shards": SHARDS, "delays_ms": list(DELAYS_MS)}
    with tempfile.TemporaryDirectory(dir=data_root) as folder, local_gcs(folder) as gcs:
        old = {k: os.environ.get(k) for k in gcs.python_env()}
        os.environ.update(gcs.python_env())
        storage.reset_gcs_client()
        try:
            bucket = gcs.create_bucket("bench")
            remote = {}
            for kind, version in versions.items():
                # the dataset's folder: the version's manifest and the batches it points to
                dataset = os.path.dirname(version["uri"])
                for info in storage.list_files(dataset):
                    rel = storage.relative_to(info.uri, dataset)
                    storage.copy(info.uri, f"{bucket}/{kind}/{rel}")
                remote[kind] = f"{bucket}/{kind}/{os.path.basename(version['uri'])}"
            for delay in DELAYS_MS:
                gcs.proxy.delay_ms = delay
                env = {**os.environ, **gcs.tensorflow_env()}
                for kind, version in versions.items():
                    _LOG.info("network: %s records, %d ms per round trip", kind, delay)
                    out.setdefault(kind, {})[str(delay)] = _child(
                        version["uri"], remote[kind], config, env
                    )
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            storage.reset_gcs_client()
    return out


def _child(local_uri: str, remote_uri: str, config: Any, env: dict[str, str]) -> dict[str, Any]:
    """Run :func:`measure_child` in a process of its own; its results."""
    args = {"local": local_uri, "remote": remote_uri, "batch_size": config.batch_size,
            "runs": config.runs(), "quick": bool(config.quick)}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.network", json.dumps(args)],
        env=env, cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"network bench child failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure_child(args: dict[str, Any]) -> dict[str, Any]:
    """The variants over the local and the ``gs://`` copy of one version, alternately."""
    from benchmarks.core import QUICK_READ_EXAMPLES, measure
    from benchmarks.read import ReadVariants
    from tfrecord_suite.io import storage
    from tfrecord_suite.registry.manifest import Manifest
    from tfrecord_suite.train.reader import AUTOTUNE

    manifest = Manifest.load(storage.read_text(storage.join(args["local"], "manifest.json")))
    cap = QUICK_READ_EXAMPLES // args["batch_size"] if args["quick"] else None
    local, remote = (
        ReadVariants({"manifest": manifest, "uri": uri}, args["batch_size"], cap)
        for uri in (args["local"], args["remote"])
    )
    autotune = dataclasses.replace(remote.reader_config, num_parallel_reads=AUTOTUNE)

    def fetch(take: int | None = None) -> Any:
        import tensorflow as tf

        from benchmarks.core import _drain

        ds = (
            tf.data.Dataset.from_tensor_slices(remote.files)
            .interleave(
                tf.data.TFRecordDataset,
                cycle_length=len(remote.files),
                num_parallel_calls=len(remote.files),
                deterministic=False,
            )
            .repeat()
            .batch(remote.batch_size)
            .prefetch(tf.data.AUTOTUNE)
        )
        return _drain(ds.take(take or remote.batches).with_options(remote.options))

    chosen = {
        "reader_local": local.reader,
        "reader_gcs": remote.reader,
        "reader_gcs_autotune": lambda take=None: remote.reader(take, config=autotune),
        "textbook_gcs": remote.textbook,
        "fetch_gcs": fetch,
    }
    warm = {k: (lambda fn=fn: fn(20)) for k, fn in chosen.items()}
    results = measure(chosen, args["runs"], warm)
    train = [s for s in manifest.shards if s["split"] == "train"]
    record_bytes = sum(s["bytes"] for s in train) / max(1, sum(s["records"] for s in train))
    return {"record_bytes": round(record_bytes), "variants": results}


def network_ratios(network: dict[str, Any]) -> dict[str, float]:
    """``<kind>, <delay> ms: reader gs/local``, ``reader/textbook`` and ``default/autotune``."""
    out: dict[str, float] = {}
    for kind in ("small", "large"):
        for delay, result in (network.get(kind) or {}).items():
            v = {k: r["median_per_s"] for k, r in result["variants"].items()}
            prefix = f"network {kind}, {delay} ms"
            out[f"{prefix}: reader gs:// / reader local disk"] = v["reader_gcs"] / v["reader_local"]
            out[f"{prefix}: reader / textbook, both on gs://"] = v["reader_gcs"] / v["textbook_gcs"]
            out[f"{prefix}: reader default / num_parallel_reads AUTOTUNE"] = (
                v["reader_gcs"] / v["reader_gcs_autotune"]
            )
            out[f"{prefix}: reader / fetch, both on gs://"] = v["reader_gcs"] / v["fetch_gcs"]
            out[f"{prefix}: fetch gs:// / reader local disk"] = v["fetch_gcs"] / v["reader_local"]
    return out


def network_tables(network: dict[str, Any]) -> list[str]:
    """Markdown: examples per second of every variant at every latency."""
    if not network:
        return []
    lines = [
        f"**Read over the network** (4 train shards of ~{network['shard_mb']:g} MB, on local "
        "disk and on a local GCS server through TensorFlow's own gs:// filesystem, with the "
        "latency per round trip injected; examples/s)",
        "",
        "| records | latency | " + " | ".join(VARIANTS) + " | gs:// / local |",
        "|---|---:|" + "---:|" * (len(VARIANTS) + 1),
    ]
    for kind in ("small", "large"):
        for delay, result in (network.get(kind) or {}).items():
            v = {k: r["median_per_s"] for k, r in result["variants"].items()}
            cells = " | ".join(f"{v[k]:,.0f}" for k in VARIANTS)
            lines.append(
                f"| {kind} (~{result['record_bytes']:,} B) | {delay} ms | {cells} | "
                f"{v['reader_gcs'] / v['reader_local']:.2f} |"
            )
    return [*lines, ""]


def _run(data_root: str, root: str, config: Any) -> dict[str, Any]:
    return {"network": network_part(data_root, config)}


def _tables(results: dict[str, Any]) -> list[str]:
    return network_tables(results.get("network") or {})


def _ratios(results: dict[str, Any]) -> dict[str, float]:
    return network_ratios(results["network"]) if results.get("network") else {}


PART = Part("network", ("network",), _run, _ratios, _tables)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    print(json.dumps(measure_child(json.loads(sys.argv[1]))))
