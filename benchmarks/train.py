"""The bench's train part (``--only train``): whether the input keeps up with a training step.

The same compiled training step fed by our reader (real input) and by ``take(1).cache().repeat()``
of it (synthetic), in alternating chunks of steps with both iterators open, as in training;
epoch 2 vs. epoch 1 with ``cache``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from benchmarks.core import BenchConfig, Part, Target, _drain, make_version
from tfrecord_suite.schema import Schema

#: Issue #18.
TARGETS = (Target("real/synthetic step time", False, 1.05),)


def run(data_root: str, root: str, config: BenchConfig) -> dict[str, Any]:
    """Step times on the small synthetic version."""
    small = make_version(data_root, "small", config.shards, 10.5)
    steps = 60 if config.quick else 300
    return {"train": train_measurements(small, config.batch_size, steps=steps)}


def train_measurements(version: dict, batch_size: int, steps: int) -> dict[str, Any]:
    """Step time with real input vs. one cached batch; epoch 2 vs. epoch 1 with cache on.

    ``steps`` training steps are measured on each input, in 15 alternating chunks.
    """
    from tfrecord_suite.registry.datasets import shard_uris
    from tfrecord_suite.train.reader import make_dataset
    from tfrecord_suite.train.reader_config import ReaderConfig

    manifest, uri = version["manifest"], version["uri"]
    files = shard_uris(manifest, uri, "train")
    schema = Schema.from_dict(manifest.schema)
    numeric = [f.name for f in schema.input_features if f.dtype == "float32"]
    train_step = _compiled_train_step(numeric)

    def only_numeric(x: Any, y: Any) -> Any:
        return {n: x[n] for n in numeric}, y

    real = make_dataset(
        files, schema, ReaderConfig(batch_size=batch_size, repeat=True, drop_remainder=True)
    ).map(only_numeric)
    iterators = {"real": iter(real), "synthetic": iter(real.take(1).cache().repeat())}

    def run_steps(name: str, n: int) -> float:
        t = time.perf_counter()
        for _ in range(n):
            loss = train_step(iterators[name])
        loss.numpy()
        return time.perf_counter() - t

    for name in iterators:  # trace, fill the pipelines
        run_steps(name, 10)
    # both inputs feed the same compiled step in short alternating chunks, so this machine's
    # load drifts over both alike; the input pipelines stay open, as in training
    chunk = max(1, steps // 15)
    seconds = {"real": 0.0, "synthetic": 0.0}
    pairs = []
    for i in range(steps // chunk):
        order = ["real", "synthetic"] if i % 2 == 0 else ["synthetic", "real"]
        pair = {name: run_steps(name, chunk) for name in order}
        for name, value in pair.items():
            seconds[name] += value
        pairs.append(pair["real"] / pair["synthetic"])
    measured_steps = chunk * len(pairs)
    cached = ReaderConfig(batch_size=batch_size, cache="memory")
    epochs = _cached_epochs(make_dataset(files, schema, cached))
    return {
        "real_step_ms": 1000 * seconds["real"] / measured_steps,
        "synthetic_step_ms": 1000 * seconds["synthetic"] / measured_steps,
        "real_over_synthetic": seconds["real"] / seconds["synthetic"],
        "steps_each": measured_steps,
        "chunk_ratios": pairs,
        "cache_epoch1_s": epochs[0],
        "cache_epoch2_s": epochs[1],
        "cache_epoch2_speedup": epochs[0] / epochs[1],
    }


def _compiled_train_step(numeric: list[str]) -> Callable[[Any], Any]:
    """A compiled training step of a dense model over the ``numeric`` features.

    Heavy enough that compute sets the pace: without an accelerator the reader's CPU time is
    taken from the model's, which an accelerator host would overlap.
    """
    import keras
    import tensorflow as tf

    inputs = {n: keras.Input((1,), name=n) for n in numeric}
    x = keras.layers.Concatenate()(list(inputs.values()))
    for _ in range(3):
        x = keras.layers.Dense(1536, activation="relu")(x)
    model = keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(x))
    optimizer = keras.optimizers.Adam()
    loss_fn = keras.losses.SparseCategoricalCrossentropy()

    @tf.function
    def train_step(iterator: Any) -> Any:
        x, y = next(iterator)
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    return train_step


def _cached_epochs(cached: Any) -> list[float]:
    """Seconds of two epochs of a dataset with ``cache`` on: the first fills it."""
    epochs = []
    for _ in range(2):
        t = time.perf_counter()
        _drain(cached)
        epochs.append(time.perf_counter() - t)
    return epochs


def ratios(results: dict[str, Any]) -> dict[str, float]:
    """Real over synthetic step time, and what the cache gains in epoch 2."""
    t = results.get("train")
    if not t:
        return {}
    return {
        "real/synthetic step time": t["real_over_synthetic"],
        "cache epoch2/epoch1 speedup": t["cache_epoch2_speedup"],
    }


PART = Part("train", ("train",), run, ratios, targets=TARGETS)
