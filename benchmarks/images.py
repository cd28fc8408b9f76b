"""The bench's images part (``--only images``): JPEGs decoded and resized for a 224 px model.

JPEGs cut from scikit-learn's two sample photos, stored at 256 px and at 1024 px and sharded by
the suite, fed to a model taking 224x224 (:func:`image_part`): the in-memory decode+resize
ceiling, the textbook per-image pipeline, the reader decoding whole images, and the reader's JPEG
paths (fused decode and crop, DCT-domain downscaling, images resized at shard time), in images
per second.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from typing import Any

from benchmarks.core import BenchConfig, Drained, Part, _drain, measure
from tfrecord_suite.schema import Schema

_LOG = logging.getLogger(__name__)

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
        from tfrecord_suite.train.reader import dataset_options
        from tfrecord_suite.train.reader_config import ReaderConfig

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
        from tfrecord_suite.train.feature_decoder import ImageFeed

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


def run(data_root: str, root: str, config: BenchConfig) -> dict[str, Any]:
    """Images per second on both photo sets."""
    return {"images": image_part(data_root, config)}


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


def _charts(results: dict[str, Any], folder: str) -> None:
    if results.get("images"):
        image_chart(results, os.path.join(folder, IMAGE_CHART))


PART = Part("images", ("images",), run, tables=_image_tables, charts=_charts)
