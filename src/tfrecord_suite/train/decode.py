"""Image decoding for the reader: whole images, DCT-scaled JPEGs, and JPEG crops decoded alone.

A JPEG holds 8x8 blocks of frequencies (the DCT), which allows two shortcuts over decoding every
stored pixel and then throwing most of them away:

* **DCT-domain downscaling.** libjpeg decodes at 1/2, 1/4 or 1/8 scale straight from the
  frequencies (``tf.io.decode_jpeg(ratio=r)``), skipping most of the inverse transform and the
  colour conversion of the pixels it does not produce. When a stored image is at least ``r``
  times the size the model takes, decoding at ``1/r`` and resizing gives about what decoding
  whole and resizing gives (:func:`decode_resized`; the tests state how close).
* **Fused decode and crop.** libjpeg decodes only the blocks a window covers
  (``tf.io.decode_and_crop_jpeg``), so a random training crop costs the crop, not the image
  (:func:`decode_crops`). When the model's pipeline resizes before it crops, the window is the
  crop scaled back to the stored image's size (resize-then-crop and crop-in-the-original-scale-
  then-resize see the same part of the image at the same scale), and the window is resized to the
  crop size after decoding.

Both choose, per image, the largest ratio of :data:`RATIOS` whose decoded size still covers the
size the pipeline needs (:func:`jpeg_ratio`), so images of any size (in a dataset or sent to the
serving signature) are decoded as cheaply as their size allows. Every resize here is bilinear
(:func:`resized`) and rounds back to ``uint8``.

Whether a dataset takes these paths is decided once, from the version's statistics
(:func:`all_jpeg`): the shard step counts the stored formats, and a version with any PNG, or
sharded before formats were counted, keeps decoding whole images.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

#: The scales libjpeg decodes at: 1/1, 1/2, 1/4, 1/8.
RATIOS = (1, 2, 4, 8)


# ----------------------------------------------------------------------------------- statistics


def stored_formats(statistics: dict[str, Any] | None, feature: str = "image") -> dict[str, int]:
    """Images per stored format (``jpeg``, ``png``...) over every split; empty when not counted."""
    out: dict[str, int] = {}
    for split in (statistics or {}).values():
        for name, n in split.get("features", {}).get(feature, {}).get("formats", {}).items():
            out[name] = out.get(name, 0) + int(n)
    return out


def all_jpeg(statistics: dict[str, Any] | None, feature: str = "image") -> bool:
    """Whether the statistics say that every stored image of ``feature`` is a JPEG."""
    formats = stored_formats(statistics, feature)
    return bool(formats) and set(formats) == {"jpeg"}


def stored_size_range(
    statistics: dict[str, Any] | None,
) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """``((min_height, min_width), (max_height, max_width))`` of the stored images, or None."""
    lows: list[tuple[int, int]] = []
    highs: list[tuple[int, int]] = []
    for split in (statistics or {}).values():
        feats = split.get("features", {})
        h, w = feats.get("image_height", {}), feats.get("image_width", {})
        if "min" in h and "min" in w:
            lows.append((int(h["min"]), int(w["min"])))
            highs.append((int(h["max"]), int(w["max"])))
    if not lows:
        return None
    low = (min(x[0] for x in lows), min(x[1] for x in lows))
    high = (max(x[0] for x in highs), max(x[1] for x in highs))
    return low, high


# ------------------------------------------------------------------------------------ decoding


def _ceil_div(a: Any, b: Any) -> Any:
    return (a + b - 1) // b


def jpeg_ratio(
    height: Any, width: Any, target: Sequence[int], ratios: Sequence[int] = RATIOS
) -> Any:
    """Index in ``ratios`` of the largest ratio whose decoded size covers ``target``.

    libjpeg's decoded size at ratio ``r`` is ``ceil(height / r)`` by ``ceil(width / r)``. Works on
    scalars and on vectors of sizes (int32); the index is 0 (full size) when none covers it.
    """
    import tensorflow as tf

    index = tf.zeros_like(height)
    for i, r in enumerate(ratios[1:], 1):
        covers = (_ceil_div(height, r) >= target[0]) & (_ceil_div(width, r) >= target[1])
        index = tf.where(covers, i, index)  # ratios ascend: the last that covers is the largest
    return index


def resized(image: Any, size: Sequence[int]) -> Any:
    """``image`` resized to ``size`` (bilinear), as ``uint8``; unchanged when it has that size.

    Antialiased only when it shrinks a side by more than 2: antialiasing costs several times
    the plain bilinear resize, and only then does plain bilinear skip pixels (below 2, every
    stored pixel still weighs in). After a DCT-scaled decode the rest is always below 2 unless
    even 1/8 scale is more than twice the size. Both checks are graph branches, per image: a crop
    decoded at exactly the size the model takes (a 224 window of a 256 image) is not resized.
    """
    import tensorflow as tf

    def resize(antialias: bool) -> Any:
        out = tf.image.resize(image, size, antialias=antialias)
        return tf.cast(tf.clip_by_value(tf.round(out), 0.0, 255.0), tf.uint8)

    shape, target = tf.shape(image)[:2], tf.constant(list(size), tf.int32)
    fits = tf.reduce_all(tf.equal(shape, target))
    shrinks_much = tf.reduce_any(shape > 2 * target)
    out = tf.cond(
        fits,
        lambda: tf.cast(image, tf.uint8),
        lambda: tf.cond(shrinks_much, lambda: resize(True), lambda: resize(False)),
    )
    return tf.ensure_shape(out, (size[0], size[1], image.shape[-1]))


def _switch(index: Any, branch: Callable[[int], Any], ratios: Sequence[int]) -> Any:
    """``branch(r)`` for ``r = ratios[index]``: decode ratios are op attributes, not tensors."""
    import tensorflow as tf

    if len(ratios) == 1:
        return branch(ratios[0])
    return tf.switch_case(index, [lambda r=r: branch(r) for r in ratios])


def decode_resized(
    contents: Any, channels: int, size: Sequence[int], ratios: Sequence[int] = RATIOS
) -> Any:
    """One encoded image -> ``(size, channels)`` ``uint8``, decoded as cheaply as it allows.

    A JPEG is decoded at the largest ratio of ``ratios`` whose size still covers ``size``, then
    resized; any other format (a PNG sent to a model trained on JPEGs) is decoded whole.
    """
    import tensorflow as tf

    def jpeg() -> Any:
        shape = tf.io.extract_jpeg_shape(contents)
        index = jpeg_ratio(shape[0], shape[1], size, ratios)
        return _switch(
            index,
            lambda r: tf.io.decode_jpeg(contents, channels=channels, ratio=r),
            ratios,
        )

    def other() -> Any:
        return tf.io.decode_image(contents, channels=channels, expand_animations=False)

    image = tf.cond(tf.io.is_jpeg(contents), jpeg, other)
    return resized(tf.ensure_shape(image, (None, None, channels)), size)


def crop_windows(
    shapes: Any,
    crop: Sequence[int],
    scale_from: Sequence[int],
    seed: Any,
    ratios: Sequence[int] = RATIOS,
) -> tuple[Any, Any]:
    """Random crop windows for a batch of JPEGs, each in the pixels of its decode scale.

    The model's pipeline would resize each image to ``scale_from`` and take a random ``crop``
    window of it. The same part of the image at the same scale is a window of
    ``crop * stored / scale_from`` stored pixels at a uniformly random place, resized to ``crop``.
    Each image is decoded at the largest ratio whose size still covers ``scale_from`` (the window
    then still has at least ``crop`` pixels), and its window is given at that scale.

    Args:
        shapes: ``[n, 3]`` int32 stored shapes (``tf.io.extract_jpeg_shape`` of each image).
        crop: ``(height, width)`` the model takes.
        scale_from: ``(height, width)`` the crop is taken from in the model's pipeline.
        seed: A ``[2]`` integer seed of the stateless random offsets.
        ratios: Decode ratios to choose from (``(1,)``: full size only).

    Returns:
        ``(index, windows)``: the ratio index per image (``[n]``), and ``[n, 6]`` int32 rows of
        ``(y, x, height, width, scaled height, scaled width)``, the window inside the image
        decoded at that ratio.

    """
    import tensorflow as tf

    height, width = shapes[:, 0], shapes[:, 1]
    index = jpeg_ratio(height, width, scale_from, ratios)
    r = tf.gather(tf.constant(list(ratios), tf.int32), index)
    scaled_h, scaled_w = _ceil_div(height, r), _ceil_div(width, r)

    def side(scaled: Any, want: int, of: int) -> Any:
        n = tf.round(float(want) * tf.cast(scaled, tf.float32) / float(of))
        return tf.clip_by_value(tf.cast(n, tf.int32), 1, scaled)

    win_h, win_w = side(scaled_h, crop[0], scale_from[0]), side(scaled_w, crop[1], scale_from[1])
    u = tf.random.stateless_uniform(tf.stack([tf.shape(shapes)[0], 2]), seed)

    def offset(u: Any, room: Any) -> Any:
        return tf.minimum(tf.cast(tf.floor(u * tf.cast(room + 1, tf.float32)), tf.int32), room)

    y = offset(u[:, 0], scaled_h - win_h)
    x = offset(u[:, 1], scaled_w - win_w)
    return index, tf.stack([y, x, win_h, win_w, scaled_h, scaled_w], axis=1)


def decode_window(
    contents: Any, index: Any, window: Any, channels: int, ratios: Sequence[int] = RATIOS
) -> Any:
    """Decode only ``window`` (a row of :func:`crop_windows`) of one JPEG, at its ratio.

    With subsampled chroma (4:2:0, what most JPEGs hold) libjpeg's smooth upsampling treats the
    edge of a decoded region as the image's edge, so a window's outermost column can differ from
    the same column of a whole decode. The window is decoded one pixel wider on each side (inside
    the image) and that margin dropped, which makes it pixel-exact (tested on random windows).
    """
    import tensorflow as tf

    y, x, h, w, scaled_h, scaled_w = (window[i] for i in range(6))
    y0, x0 = tf.maximum(y - 1, 0), tf.maximum(x - 1, 0)
    y1, x1 = tf.minimum(y + h + 1, scaled_h), tf.minimum(x + w + 1, scaled_w)
    region = tf.stack([y0, x0, y1 - y0, x1 - x0])
    image = _switch(
        index,
        lambda r: tf.io.decode_and_crop_jpeg(contents, region, channels=channels, ratio=r),
        ratios,
    )
    return image[y - y0 : y - y0 + h, x - x0 : x - x0 + w]


def decode_crops(
    contents: Any,
    channels: int,
    crop: Sequence[int],
    scale_from: Sequence[int],
    seed: Any,
    ratios: Sequence[int] = RATIOS,
) -> Any:
    """A batch of JPEGs -> ``[n, crop, channels]`` ``uint8`` random crops, decoding only them.

    See :func:`crop_windows` for the windows and :func:`decode_window` for the decode.
    """
    import tensorflow as tf

    shapes = tf.map_fn(
        tf.io.extract_jpeg_shape, contents, fn_output_signature=tf.TensorSpec([3], tf.int32)
    )
    index, windows = crop_windows(shapes, crop, scale_from, seed, ratios)

    def one(args: Any) -> Any:
        data, i, window = args
        return resized(decode_window(data, i, window, channels, ratios), crop)

    return tf.map_fn(
        one,
        (contents, index, windows),
        fn_output_signature=tf.TensorSpec((crop[0], crop[1], channels), tf.uint8),
    )
