"""How long training waits for its input: the reader measured against a cached batch.

The trainer runs :func:`input_wait_probe` after training (``TrainConfig.probe_steps``, one
worker), and its figures go into the run's metrics.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from tfrecord_suite.schema import Schema
from tfrecord_suite.train.feature_decoder import ImageFeed
from tfrecord_suite.train.reader import make_dataset
from tfrecord_suite.train.reader_config import ReaderConfig


def input_wait_probe(
    model: Any,
    files: list[str],
    schema: Schema,
    statistics: dict,
    reader: ReaderConfig,
    compression: str,
    steps: int,
    transform: Any = None,
    image: ImageFeed | None = None,
) -> dict[str, Any]:
    """Share of step time spent waiting for input, measured over ``steps`` training steps.

    Times ``next()`` on the real pipeline (waiting for input; prefetch hides it when the input
    keeps up) separately from ``train_on_batch`` (compute), then the same steps on one cached
    batch repeated, which is the compute-only ceiling.
    """
    import tensorflow as tf

    reader = dataclasses.replace(reader, repeat=True, drop_remainder=True)
    real = iter(
        make_dataset(
            files,
            schema,
            reader,
            statistics=statistics,
            compression=compression,
            transform=transform,
            image=image,
        )
    )
    x, y = next(real)
    model.train_on_batch(x, y)  # warm-up: traces the step function
    wait = compute = 0.0
    for _ in range(steps):
        t0 = time.perf_counter()
        x, y = next(real)
        t1 = time.perf_counter()
        model.train_on_batch(x, y)
        compute += time.perf_counter() - t1
        wait += t1 - t0
    synthetic = iter(tf.data.Dataset.from_tensors((x, y)).repeat())
    t0 = time.perf_counter()
    for _ in range(steps):
        xs, ys = next(synthetic)
        model.train_on_batch(xs, ys)
    synthetic_seconds = time.perf_counter() - t0
    real_seconds = wait + compute
    return {
        "probe_steps": steps,
        "input_wait_share": wait / max(real_seconds, 1e-9),
        "real_step_ms": 1000 * real_seconds / steps,
        "synthetic_step_ms": 1000 * synthetic_seconds / steps,
        "real_over_synthetic": real_seconds / max(synthetic_seconds, 1e-9),
    }
