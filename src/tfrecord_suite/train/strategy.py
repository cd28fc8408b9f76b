"""Picking a ``tf.distribute`` strategy, and who the chief is."""

from __future__ import annotations

import json
import logging
import os
from typing import Any

_LOG = logging.getLogger(__name__)
STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker", "tpu")


def tf_config() -> dict[str, Any]:
    """The parsed ``TF_CONFIG`` (empty when unset)."""
    raw = os.environ.get("TF_CONFIG", "")
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"TF_CONFIG is not valid JSON: {exc}") from None


def cluster_workers(config: dict[str, Any] | None = None) -> int:
    """Number of chief + worker tasks in ``TF_CONFIG``."""
    cluster = (config if config is not None else tf_config()).get("cluster", {})
    return len(cluster.get("chief", [])) + len(cluster.get("worker", []))


def is_chief(config: dict[str, Any] | None = None) -> bool:
    """Whether this process writes exports and metrics (chief, or worker 0 without a chief)."""
    config = config if config is not None else tf_config()
    task = config.get("task", {})
    if not task:
        return True
    kind, index = task.get("type"), int(task.get("index", 0))
    if kind == "chief":
        return True
    has_chief = bool(config.get("cluster", {}).get("chief"))
    return kind == "worker" and index == 0 and not has_chief


def task_id(config: dict[str, Any] | None = None) -> list[str]:
    """``["worker-1"]``-style path part naming this task in a cluster; ``[]`` when alone.

    Each task backs up to its own folder: Keras writes one weights file per process and two
    processes must never write the same file.
    """
    task = (config if config is not None else tf_config()).get("task", {})
    if not task:
        return []
    return [f"{task.get('type', 'worker')}-{int(task.get('index', 0))}"]


def split_cpu(num_devices: int) -> None:
    """Split the CPU into ``num_devices`` logical devices (tests and demos without GPUs).

    Must run before TensorFlow initializes its devices.
    """
    import tensorflow as tf

    if num_devices <= 1:
        return
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(num_devices)]
    )


def make_strategy(name: str = "auto", cpu_devices: int = 1, tpu: str | None = None) -> Any:
    """Build the strategy.

    ``auto``: TPUStrategy when a TPU resolves, MultiWorkerMirroredStrategy when ``TF_CONFIG``
    lists several workers, MirroredStrategy with more than one GPU (or logical CPU device),
    otherwise the default strategy.

    Args:
        name: One of :data:`STRATEGIES`.
        cpu_devices: Split the CPU into this many logical devices first.
        tpu: TPU name or address for the resolver (None: the environment's).

    """
    import tensorflow as tf

    if name not in STRATEGIES:
        raise ValueError(f"--strategy {name!r}: use one of {', '.join(STRATEGIES)}")
    if name == "multi_worker" or (name == "auto" and cluster_workers() > 1):
        # must be created before any other TensorFlow op touches the devices
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        _LOG.info("MultiWorkerMirroredStrategy: %d replicas in sync", strategy.num_replicas_in_sync)
        return strategy
    split_cpu(cpu_devices)
    if name == "tpu" or (name == "auto" and _tpu_available(tpu)):
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    gpus = tf.config.list_logical_devices("GPU")
    cpus = tf.config.list_logical_devices("CPU")
    if name == "mirrored" or (name == "auto" and (len(gpus) > 1 or len(cpus) > 1)):
        devices = [d.name for d in (gpus if gpus else cpus)]
        strategy = tf.distribute.MirroredStrategy(devices=devices)
        _LOG.info("MirroredStrategy over %s", devices)
        return strategy
    if name == "one_device":
        return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")
    return tf.distribute.get_strategy()


def _tpu_available(tpu: str | None) -> bool:
    if tpu is None and not os.environ.get("TPU_NAME") and not os.path.exists("/dev/accel0"):
        return False
    import tensorflow as tf

    try:
        tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
    except (ValueError, RuntimeError):
        return False
    return True
