"""Loading a user's ``module:function`` model factory, and the pieces built-in models share.

A model factory is called as ``fn(context)`` with a :class:`ModelContext` (schema, statistics,
vocabularies, image shape, number of classes) and returns a compiled Keras model whose inputs are
the dict of raw features the reader yields. The built-in model is described by a feature config
instead (:mod:`tfrecord_suite.train.features`).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

from tfrecord_suite.errors import UserError
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
        raise UserError(f"--model-fn {spec!r}: write module:function, e.g. mypkg.models:build")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserError(f"--model-fn {spec!r}: cannot import {module_name}: {exc}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise UserError(f"--model-fn {spec!r}: {module_name} has no function {attr!r}")
    return fn


def compile_model(model: Any, ctx: ModelContext) -> Any:
    """Compile with Adam, and the loss and metric that fit the label (classes or a number)."""
    import keras

    if ctx.num_classes:
        loss = keras.losses.SparseCategoricalCrossentropy()
        metrics = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
    else:
        loss = keras.losses.MeanSquaredError()
        metrics = [keras.metrics.MeanAbsoluteError(name="mae")]
    model.compile(optimizer=keras.optimizers.Adam(ctx.learning_rate), loss=loss, metrics=metrics)
    return model


def head(x: Any, ctx: ModelContext) -> Any:
    """Softmax over the classes, or one linear output for regression."""
    import keras

    if ctx.num_classes:
        return keras.layers.Dense(ctx.num_classes, activation="softmax", name="probabilities")(x)
    return keras.layers.Dense(1, name="prediction")(x)
