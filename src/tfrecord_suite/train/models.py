"""Built-in Keras models, and loading a user's ``module:function`` model factory.

A model factory is called as ``fn(context)`` with a :class:`ModelContext` (schema, statistics,
vocabularies, image shape, number of classes) and returns a compiled Keras model whose inputs are
the dict of features the reader yields.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from collections.abc import Callable
from typing import Any

from tfrecord_suite.schema import Schema


@dataclasses.dataclass
class ModelContext:
    """What a model factory gets.

    Attributes:
        schema: The dataset's feature spec.
        statistics: Per-split statistics from the manifest (means, std, min/max...).
        vocabularies: Categorical string feature -> values seen in the training split.
        image_shape: ``(h, w, c)`` for image datasets.
        num_classes: Classes of the label, or None for regression.
        learning_rate: Optimizer learning rate.
        hidden_units: Width of the dense layers of the built-in models.

    """

    schema: Schema
    statistics: dict[str, Any]
    vocabularies: dict[str, list[str]]
    image_shape: tuple[int, int, int] | None
    num_classes: int | None
    learning_rate: float = 1e-3
    hidden_units: int = 64


def load_model_fn(spec: str) -> Callable[[ModelContext], Any]:
    """Import ``package.module:function``.

    Raises:
        ValueError: Naming the module or attribute that is missing.

    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--model-fn {spec!r}: write module:function, e.g. mypkg.models:build")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"--model-fn {spec!r}: cannot import {module_name}: {exc}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"--model-fn {spec!r}: {module_name} has no function {attr!r}")
    return fn


def _train_feature_stats(ctx: ModelContext) -> dict[str, Any]:
    stats = ctx.statistics.get("train") or next(iter(ctx.statistics.values()), {})
    return stats.get("features", {})


def _compile(model: Any, ctx: ModelContext) -> Any:
    import keras

    if ctx.num_classes:
        loss = keras.losses.SparseCategoricalCrossentropy()
        metrics = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
    else:
        loss = keras.losses.MeanSquaredError()
        metrics = [keras.metrics.MeanAbsoluteError(name="mae")]
    model.compile(optimizer=keras.optimizers.Adam(ctx.learning_rate), loss=loss, metrics=metrics)
    return model


def _head(x: Any, ctx: ModelContext) -> Any:
    import keras

    if ctx.num_classes:
        return keras.layers.Dense(ctx.num_classes, activation="softmax", name="probabilities")(x)
    return keras.layers.Dense(1, name="prediction")(x)


def tabular_model(ctx: ModelContext) -> Any:
    """Normalized numerics + embedded categoricals -> two dense layers -> head."""
    import keras

    stats = _train_feature_stats(ctx)
    inputs, encoded = {}, []
    for f in ctx.schema.input_features:
        if f.kind == "numeric":
            inp = keras.Input(shape=(1,), name=f.name, dtype=f.dtype)
            s = stats.get(f.name, {})
            mean, std = float(s.get("mean", 0.0)), float(s.get("std", 1.0)) or 1.0
            x = keras.layers.Normalization(mean=mean, variance=std * std, name=f"norm_{f.name}")(
                keras.ops.cast(inp, "float32")
            )
            encoded.append(x)
        elif f.kind == "categorical" and f.dtype == "string":
            inp = keras.Input(shape=(1,), name=f.name, dtype="string")
            vocab = ctx.vocabularies.get(f.name) or [""]
            lookup = keras.layers.StringLookup(
                vocabulary=vocab, num_oov_indices=1, name=f"lookup_{f.name}"
            )
            size = len(vocab) + 1
            dim = max(2, min(16, round(math.pow(size, 0.25) * 2)))
            emb = keras.layers.Embedding(size, dim, name=f"embed_{f.name}")(lookup(inp))
            encoded.append(keras.layers.Flatten()(emb))
        elif f.kind == "text":
            inp = keras.Input(shape=(1,), name=f.name, dtype="string")
            hashed = keras.layers.Hashing(num_bins=4096, name=f"hash_{f.name}")(inp)
            emb = keras.layers.Embedding(4096, 16, name=f"embed_{f.name}")(hashed)
            encoded.append(keras.layers.Flatten()(emb))
        else:
            continue
        inputs[f.name] = inp
    if not inputs:
        raise ValueError("the dataset has no numeric, categorical or text features to train on")
    x = keras.layers.Concatenate()(encoded) if len(encoded) > 1 else encoded[0]
    x = keras.layers.Dense(ctx.hidden_units, activation="relu")(x)
    x = keras.layers.Dense(ctx.hidden_units, activation="relu")(x)
    return _compile(keras.Model(inputs, _head(x, ctx), name="tabular"), ctx)


def image_model(ctx: ModelContext) -> Any:
    """A small CNN: rescale -> 2 conv blocks -> global pooling -> dense -> head."""
    import keras

    h, w, c = ctx.image_shape
    inp = keras.Input(shape=(h, w, c), name="image", dtype="uint8")
    x = keras.layers.Rescaling(1.0 / 255)(keras.ops.cast(inp, "float32"))
    x = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(x)
    if min(h, w) >= 4:
        x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Conv2D(64, 3, padding="same", activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dense(ctx.hidden_units, activation="relu")(x)
    return _compile(keras.Model({"image": inp}, _head(x, ctx), name="small_cnn"), ctx)


def default_model(ctx: ModelContext) -> Any:
    """The built-in model for the dataset's kind."""
    if ctx.image_shape is not None:
        return image_model(ctx)
    return tabular_model(ctx)
