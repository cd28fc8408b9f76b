"""tf.data service compression of decoded images: images per second and bytes on the wire.

``python -m benchmarks.service_compression`` (``--quick`` for a smaller run) writes
``docs/bench/service-compression.json`` and ``.md``. The service's workers ship what they
decoded: 224x224 RGB images are about 150 KB each, so 10,000 images a second is 12 Gbit/s.
TensorFlow compresses elements with Snappy by default (``compression="AUTO"``); this measures
that against ``None`` on real photos (scikit-learn's two sample photos cut into JPEGs, as the
bench's images part stores them), decoded and resized by the suite's reader on the workers:

* **bytes on the wire**: each worker advertises a counting TCP proxy in front of it (the
  dispatcher's worker list names the proxies), so every byte a worker sends the reader passes
  through it; divided by the images of one pass over the photos, all of which the reader
  reads (so nothing sent is left unread in a prefetch buffer);
* **images per second**: the same read with workers advertising themselves (no proxy), timed
  after the first batch, each mode several times, alternating.

Here workers and reader share two cores and a loopback link of no practical bandwidth limit,
so images per second shows what compressing costs in CPU, not what it saves on a network; the
link a given rate needs is computed from the bytes per image (``gbit_per_s_at``), and
``link_bound_images_per_s`` is what 10 and 25 Gbit/s links could carry. Self-contained: the
servers are ``tfrecord-suite data-service`` processes started here.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import click

from tfrecord_suite.ports import free_ports

_LOG = logging.getLogger(__name__)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "docs", "bench")
MODES = {"AUTO": "AUTO", "None": None}
SIZE = (224, 224)
BATCH = 32
LINKS_GBIT = (10, 25)


class CountingProxy:
    """A TCP proxy on 127.0.0.1 counting the bytes it forwards each way."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.downstream = 0  # from the target (a worker) to the client
        self.upstream = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            threading.Thread(target=self._pipe, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, True), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, down: bool) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(1 << 20):
                dst.sendall(data)
                with self._lock:
                    if down:
                        self.downstream += len(data)
                    else:
                        self.upstream += len(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        """Stop accepting connections."""
        self.listener.close()


@contextlib.contextmanager
def service(workers: int, proxied: bool) -> Iterator[tuple[str, list[CountingProxy]]]:
    """A dispatcher and ``workers`` workers as processes; with ``proxied``, behind proxies."""
    work = tempfile.mkdtemp(prefix="tfrs-compression-")  # the servers' ready files
    dispatcher, *ports = free_ports(1 + workers)
    proxies = [CountingProxy(p) for p in ports] if proxied else []
    advertised = [f"127.0.0.1:{x.port}" for x in proxies] or [f"127.0.0.1:{p}" for p in ports]
    cli = [sys.executable, "-m", "tfrecord_suite.cli", "data-service"]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    procs = []
    ready = []
    try:
        ready.append(os.path.join(work, "dispatcher.ready"))
        procs.append(subprocess.Popen(
            [*cli, "dispatcher", "--port", str(dispatcher), "--worker-addresses",
             ",".join(advertised), "--ready-file", ready[-1]],
            env=env, stderr=subprocess.DEVNULL,
        ))  # fmt: skip
        for i, port in enumerate(ports):
            ready.append(os.path.join(work, f"worker-{i}.ready"))
            procs.append(subprocess.Popen(
                [*cli, "worker", "--dispatcher", f"127.0.0.1:{dispatcher}", "--port", str(port),
                 "--address", advertised[i], "--ready-file", ready[-1]],
                env=env, stderr=subprocess.DEVNULL,
            ))  # fmt: skip
        deadline = time.monotonic() + 180
        while not all(os.path.exists(r) for r in ready):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError("the tf.data service did not start")
            time.sleep(0.1)
        yield f"grpc://127.0.0.1:{dispatcher}", proxies
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        for proxy in proxies:
            proxy.close()
        shutil.rmtree(work, ignore_errors=True)


def photos_version(root: str, per_class: int) -> tuple[list[str], Any, dict[str, Any]]:
    """Sample photos cut into 256 px JPEGs, sharded into 4 train files: files, schema, stats."""
    from tfrecord_suite import demo_data
    from tfrecord_suite.registry.datasets import Registry, shard_uris
    from tfrecord_suite.schema import Schema
    from tfrecord_suite.shard.step import ShardConfig, run_shard

    folder = demo_data.write_photos(os.path.join(root, "photos"), per_class, (256, 256), seed=7)
    staged = os.path.join(root, "staged")
    run_shard(ShardConfig(input=folder, output=staged, splits="train=1", num_shards=4))
    reg = Registry(os.path.join(root, "registry"))
    result = reg.publish(staged, "photos")
    manifest = result.manifest
    files = shard_uris(manifest, result.uri, "train")
    return files, Schema.from_dict(manifest.schema), manifest.statistics


def _service_dataset(files: list[str], schema: Any, stats: dict, address: str, mode: Any,
                     repeat: bool) -> Any:  # fmt: skip
    """The suite's reader of decoded images through the service at ``address``."""
    from tfrecord_suite.train.reader import make_dataset
    from tfrecord_suite.train.reader_config import ReaderConfig

    config = ReaderConfig(batch_size=BATCH, repeat=repeat, image_size=SIZE,
                          service_compression="AUTO" if mode else "none")  # fmt: skip
    return make_dataset(files, schema, config, statistics=stats, service=address)


def sent_images(files: list[str], schema: Any, stats: dict, address: str, mode: Any) -> int:
    """One pass over ``files`` through the service: the images read.

    They are all the workers sent: a pass ends with nothing prefetched and left unread, where a
    ``take`` of a repeated read leaves the batches prefetched past it counted by the proxies.
    """
    ds = _service_dataset(files, schema, stats, address, mode, repeat=False)
    return sum(int(features["image"].shape[0]) for features, _ in ds)


def read_images(files: list[str], schema: Any, stats: dict, address: str, mode: Any,
                images: int) -> tuple[int, float, float]:  # fmt: skip
    """``images`` decoded images read through the service.

    Returns:
        Images read after the first batch, their wall seconds, and the CPU seconds this
        process (the trainer's side: receiving, decompressing) spent on them.

    """
    ds = _service_dataset(files, schema, stats, address, mode, repeat=True)
    it = iter(ds.take(-(-images // BATCH)))
    next(it)
    count, start, cpu = 0, time.perf_counter(), time.process_time()
    for features, _ in it:
        count += int(features["image"].shape[0])
    return count, time.perf_counter() - start, time.process_time() - cpu


def run(quick: bool = False) -> dict[str, Any]:
    """Bytes per image and images per second for each compression mode."""
    per_class, images, rounds = (30, 120, 1) if quick else (300, 2400, 3)
    with tempfile.TemporaryDirectory(prefix="tfrs-bench-") as root:
        files, schema, stats = photos_version(root, per_class)
        out: dict[str, Any] = {"images_read": images, "image_size": list(SIZE), "modes": {}}
        # compression is a property of each job, not of the service: one service serves both
        # modes' jobs, one after the other (what the proxies count between two jobs is one's)
        with service(2, proxied=True) as (address, proxies):
            for name, mode in MODES.items():
                before = sum(p.downstream for p in proxies)
                sent = sent_images(files, schema, stats, address, mode)
                down = sum(p.downstream for p in proxies) - before
                out["modes"][name] = {"bytes_per_image": down / sent, "images_sent": sent,
                                      "rates": [], "client_cpu": []}  # fmt: skip
        with service(2, proxied=False) as (address, _):
            for _ in range(rounds):
                for name, mode in MODES.items():
                    read, seconds, cpu = read_images(files, schema, stats, address, mode, images)
                    out["modes"][name]["rates"].append(read / seconds)
                    out["modes"][name]["client_cpu"].append(1000 * cpu / read)
    raw = SIZE[0] * SIZE[1] * 3  # the reader's decoded pixels are uint8
    for m in out["modes"].values():
        m["images_per_s"] = statistics.median(m["rates"])
        m["client_cpu_ms_per_image"] = statistics.median(m["client_cpu"])
        m["ratio_to_raw"] = m["bytes_per_image"] / raw
        m["gbit_per_s_at"] = m["images_per_s"] * m["bytes_per_image"] * 8 / 1e9
        m["link_bound_images_per_s"] = {
            f"{g}gbit": g * 1e9 / 8 / m["bytes_per_image"] for g in LINKS_GBIT
        }
    auto, none = out["modes"]["AUTO"], out["modes"]["None"]
    out["bytes_none_over_auto"] = none["bytes_per_image"] / auto["bytes_per_image"]
    out["rate_none_over_auto"] = none["images_per_s"] / auto["images_per_s"]
    out["client_cpu_auto_over_none"] = (
        auto["client_cpu_ms_per_image"] / none["client_cpu_ms_per_image"]
    )
    return out


def markdown(r: dict[str, Any]) -> str:
    """The results as the table docs/bench/service-compression.md holds."""
    lines = [
        "# tf.data service compression of decoded images",
        "",
        "Generated by `python -m benchmarks.service_compression`: sample photos decoded to "
        f"{r['image_size'][0]}x{r['image_size'][1]} by two workers, read by one client on the "
        "same two-core machine over loopback; bytes over one pass of "
        f"{r['modes']['None']['images_sent']:,} photos, images/s over {r['images_read']:,}.",
        "",
        "| compression | bytes per image | of the pixels | trainer CPU ms per image | "
        "images/s (loopback) | images/s a 10 Gbit/s link carries | 25 Gbit/s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, m in r["modes"].items():
        links = m["link_bound_images_per_s"]
        lines.append(
            f"| {name} | {m['bytes_per_image']:,.0f} | {m['ratio_to_raw']:.0%} | "
            f"{m['client_cpu_ms_per_image']:.3f} | {m['images_per_s']:,.0f} | "
            f"{links['10gbit']:,.0f} | {links['25gbit']:,.0f} |"
        )
    lines += [
        "",
        f"None sends {r['bytes_none_over_auto']:.2f}x the bytes of AUTO; AUTO costs the "
        f"trainer's process {r['client_cpu_auto_over_none']:.2f}x the CPU per image (it "
        f"decompresses), and None reads {r['rate_none_over_auto']:.2f}x AUTO's images/s here "
        "(the link is free and the cores are shared: what compressing costs in CPU).",
        "",
    ]
    return "\n".join(lines)


@click.command()
@click.option("--quick", is_flag=True, help="Fewer photos and images: a smoke run.")
@click.option("--out", default=OUT, show_default=True, help="Folder the results go to.")
def main(quick: bool, out: str) -> None:
    """Measure AUTO against None and write service-compression.json and .md into --out."""
    results = run(quick)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "service-compression.json"), "w") as fh:
        json.dump(results, fh, indent=2, sort_keys=True)
    text = markdown(results)
    with open(os.path.join(out, "service-compression.md"), "w") as fh:
        fh.write(text)
    click.echo(text)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    main()
