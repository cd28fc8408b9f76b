"""Parsed records to model inputs: images decoded per batch, crops fused, labels indexed.

The part of reading that serving shares (:class:`FeatureDecoder`); :mod:`.reader` maps it over
the parsed batches, and the exported model applies its serving half to raw requests.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tfrecord_suite.errors import UserError
from tfrecord_suite.schema import Schema, parse_spec
from tfrecord_suite.train.reader_config import ReaderConfig


@dataclasses.dataclass(frozen=True)
class ImageFeed:
    """What the model's own pipeline does to decoded images, so the decoder can do it cheaper.

    The built-in model's feature config gives it (:func:`tfrecord_suite.train.features.image_feed`);
    without one, images are decoded whole, at ``ReaderConfig.image_size`` or their stored size.

    Attributes:
        resize: ``(height, width)`` the model takes images at (resized in the preprocessor);
            None: the decoded size.
        crop: ``(height, width)`` of the random window the model takes while training (the
            model's ``TrainingCrop``); None: no crop.
        cropped_transform: ``features -> features`` for batches whose images the decoder already
            cropped and resized: the feature transform without its resize. Needed for fusing
            when the reader is given a ``transform``.

    """

    resize: tuple[int, int] | None = None
    crop: tuple[int, int] | None = None
    cropped_transform: Any = None


@dataclasses.dataclass(frozen=True)
class _ImagePlan:
    """How the decoder turns encoded images into the model's input, resolved once per dataset.

    Attributes:
        shape: ``(height, width, channels)`` of a whole decoded image (evaluation, serving, and
            training without a fused crop).
        resize: Whole decodes are resized to ``shape`` (``image_size``, or DCT scaling).
        ratios: JPEG decode ratios to choose from; ``(1,)``: full size only. With more than one,
            every image is decoded by :func:`~tfrecord_suite.train.decode.decode_resized`.
        crop: ``(crop, scale_from)`` when training crops are decoded alone (fused), else None.

    """

    shape: tuple[int, int, int]
    resize: bool = False
    ratios: tuple[int, ...] = (1,)
    crop: tuple[tuple[int, int], tuple[int, int]] | None = None


def _image_plan(
    schema: Schema,
    statistics: dict[str, Any] | None,
    config: ReaderConfig,
    feed: ImageFeed,
) -> _ImagePlan:
    from tfrecord_suite.train import decode

    image = schema.feature("image")
    if image.kind == "image_raw":
        h, w, c = image.shape
        return _ImagePlan((int(h), int(w), int(c)))
    stats = {}
    for split_stats in (statistics or {}).values():
        stats = split_stats.get("features", {})
        break
    channels = int(stats.get("image_channels", {}).get("max", 3) or 3)
    jpeg = decode.all_jpeg(statistics)
    sizes = decode.stored_size_range(statistics)
    target = config.image_size or feed.resize
    ratios: tuple[int, ...] = (1,)
    if config.jpeg_scaling and jpeg and target and sizes:
        largest = sizes[1]
        if largest[0] >= 2 * target[0] and largest[1] >= 2 * target[1]:
            ratios = decode.RATIOS
    if config.image_size:
        size = (int(config.image_size[0]), int(config.image_size[1]))
    elif len(ratios) > 1:
        # decoded at a reduced scale, resized straight to the size the model takes: the
        # preprocessor's resize is then a no-op it skips
        size = (int(target[0]), int(target[1]))
    elif sizes and sizes[0] == sizes[1]:
        size = sizes[0]
    else:
        raise UserError("images differ in size; pass --image-size HEIGHTxWIDTH to resize them")
    crop = None
    if config.fused_crop and jpeg and feed.crop:
        scale_from = feed.resize or size
        crop = ((int(feed.crop[0]), int(feed.crop[1])), (int(scale_from[0]), int(scale_from[1])))
    resize = bool(config.image_size) or len(ratios) > 1
    return _ImagePlan((*size, channels), resize, ratios, crop)


def image_shape(
    schema: Schema,
    statistics: dict[str, Any] | None,
    config: ReaderConfig,
    feed: ImageFeed | None = None,
) -> tuple[int, int, int]:
    """``(height, width, channels)`` images are fed to the model with (whole decodes)."""
    return _image_plan(schema, statistics, config, feed or ImageFeed()).shape


class FeatureDecoder:
    """Parsed batch -> model inputs (and label index): the part shared with serving."""

    def __init__(
        self,
        schema: Schema,
        statistics: dict[str, Any] | None = None,
        config: ReaderConfig | None = None,
        image: ImageFeed | None = None,
    ):
        import tensorflow as tf

        self.schema = schema
        self.config = config or ReaderConfig()
        self.spec = parse_spec(schema, include_label=True)
        self.serving_spec = parse_spec(schema, include_label=False)
        self.is_image = schema.source_format == "images"
        self._plan = (
            _image_plan(schema, statistics, self.config, image or ImageFeed())
            if self.is_image
            else None
        )
        self.image_shape = self._plan.shape if self._plan else None
        self._label_table = None
        if schema.label and schema.label_encoding == "value" and schema.label_classes:
            label = schema.feature(schema.label)
            keys = (
                tf.constant(schema.label_classes)
                if label.dtype == "string"
                else tf.constant([int(c) for c in schema.label_classes], tf.int64)
            )
            self._label_table = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(
                    keys, tf.range(len(schema.label_classes), dtype=tf.int64)
                ),
                default_value=-1,
            )

    @property
    def fuses_crop(self) -> bool:
        """Whether training crops can be decoded alone (every image a JPEG, a crop asked for)."""
        return self._plan is not None and self._plan.crop is not None

    @property
    def scales_jpeg(self) -> bool:
        """Whether JPEGs are decoded at a reduced (DCT-domain) scale where they are large."""
        return self._plan is not None and len(self._plan.ratios) > 1

    def features(self, parsed: dict[str, Any], crop_seed: Any = None) -> dict[str, Any]:
        """Model inputs from a parsed batch: images decoded, scalars as ``[batch, 1]``.

        With ``crop_seed`` (training, when :attr:`fuses_crop`), images are random crop windows
        decoded alone (:func:`~tfrecord_suite.train.decode.decode_crops`), at the crop size.
        """
        import tensorflow as tf

        from tfrecord_suite.train import decode as image_decode

        out = {}
        plan = self._plan
        for f in self.schema.input_features:
            x = parsed[f.name]
            if f.kind == "image" and crop_seed is not None and plan.crop is not None:
                crop, scale_from = plan.crop
                x = image_decode.decode_crops(
                    x, plan.shape[2], crop, scale_from, crop_seed, plan.ratios
                )
            elif f.kind == "image":
                h, w, c = plan.shape

                def decode(b: Any, h: int = h, w: int = w, c: int = c) -> Any:
                    if len(plan.ratios) > 1:
                        return image_decode.decode_resized(b, c, (h, w), plan.ratios)
                    img = tf.io.decode_image(b, channels=c, expand_animations=False)
                    return (
                        tf.cast(tf.image.resize(img, (h, w), antialias=True), tf.uint8)
                        if plan.resize
                        else tf.ensure_shape(img, (h, w, c))
                    )

                x = tf.map_fn(decode, x, fn_output_signature=tf.TensorSpec((h, w, c), tf.uint8))
            elif f.kind == "image_raw":
                h, w, c = self.image_shape
                x = tf.reshape(tf.io.decode_raw(x, tf.uint8), (-1, h, w, c))
            else:
                x = tf.expand_dims(x, -1)
            out[f.name] = x
        return out

    def label(self, parsed: dict[str, Any]) -> Any:
        """The label as a class index (classification) or a float (regression)."""
        y = parsed[self.schema.label]
        if self._label_table is not None:
            return self._label_table.lookup(y)
        return y

    def parse(self, serialized: Any) -> dict[str, Any]:
        """``tf.io.parse_example`` with the dataset's spec (label included)."""
        import tensorflow as tf

        return tf.io.parse_example(serialized, self.spec)

    def finish(self, parsed: dict[str, Any], crop_seed: Any = None) -> Any:
        """A parsed batch -> ``(features, label)`` (``features`` alone without a label)."""
        x = self.features(parsed, crop_seed)
        if self.schema.label is None:
            return x
        return x, self.label(parsed)

    def __call__(self, serialized: Any, crop_seed: Any = None) -> Any:
        """Parse a batch of serialized examples into ``(features, label)``."""
        return self.finish(self.parse(serialized), crop_seed)
