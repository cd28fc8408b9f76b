"""Picking a ``tf.distribute`` strategy, who the chief is, and ``TF_CONFIG`` on a JobSet node."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, MutableMapping
from typing import Any

from tfrecord_suite.errors import UserError

_LOG = logging.getLogger(__name__)
STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker", "tpu")

# What a node of the TensorFlow TrainJob runtime (k8s/trainer-runtime/) is given. The launcher
# sets the node count; the runtime passes the rest in through the downward API.
NUM_NODES_ENV = "TFRS_NUM_NODES"
#: The pod's completion index in its indexed Job (annotation
#: batch.kubernetes.io/job-completion-index).
NODE_RANK_ENV = "TFRS_NODE_RANK"
#: Label jobset.sigs.k8s.io/jobset-name: the TrainJob's name, also the headless service's.
JOBSET_NAME_ENV = "TFRS_JOBSET_NAME"
#: Label jobset.sigs.k8s.io/replicatedjob-name.
REPLICATED_JOB_ENV = "TFRS_REPLICATED_JOB"
#: Label jobset.sigs.k8s.io/job-index.
JOB_INDEX_ENV = "TFRS_JOB_INDEX"
#: The port each node's TensorFlow server listens on.
PORT_ENV = "TFRS_TF_PORT"
#: Optional: the nodes' host:port in rank order, for nodes that cannot use JobSet's DNS names
#: (host networking, or the local operator of tests/realparts/local_operator.py).
PEERS_ENV = "TFRS_PEER_ADDRESSES"


def tf_config_from_node_env(env: Mapping[str, str]) -> dict[str, Any] | None:
    """``TF_CONFIG`` for a node of a TrainJob on the TensorFlow runtime (None elsewhere).

    Every node is a ``worker``; worker 0 is the chief. Peer addresses are JobSet's pod DNS
    names, ``<jobset>-<replicated job>-<job index>-<rank>.<subdomain>``, the subdomain being the
    JobSet's name (Trainer v2 leaves JobSet's default), as Trainer v2 itself builds them.

    Raises:
        UserError: A variable is missing or not a number, or the peer list has the wrong length.

    """
    if NUM_NODES_ENV not in env:
        return None

    def number(name: str, default: str | None = None) -> int:
        raw = env.get(name, default)
        if raw is None or not str(raw).isdigit():
            raise UserError(
                f"{name}={raw!r}: a TrainJob node needs it as a number "
                "(is the k8s/trainer-runtime runtime installed unchanged?)"
            )
        return int(raw)

    nodes, rank = number(NUM_NODES_ENV), number(NODE_RANK_ENV)
    if not 0 <= rank < max(nodes, 1):
        raise UserError(f"{NODE_RANK_ENV}={rank} is outside 0..{nodes - 1}")
    if env.get(PEERS_ENV):
        peers = [p.strip() for p in env[PEERS_ENV].split(",")]
        if len(peers) != nodes:
            raise UserError(f"{PEERS_ENV} lists {len(peers)} addresses for {nodes} nodes")
    else:
        jobset = env.get(JOBSET_NAME_ENV, "")
        if not jobset:
            raise UserError(f"{JOBSET_NAME_ENV} is empty: cannot name the other nodes")
        replicated_job = env.get(REPLICATED_JOB_ENV) or "node"
        job_index, port = number(JOB_INDEX_ENV, "0"), number(PORT_ENV, "2222")
        peers = [f"{jobset}-{replicated_job}-{job_index}-{i}.{jobset}:{port}" for i in range(nodes)]
    return {"cluster": {"worker": peers}, "task": {"type": "worker", "index": rank}}


def ensure_tf_config(env: MutableMapping[str, str] = os.environ) -> None:
    """Set ``TF_CONFIG`` from a TrainJob node's environment when it is unset and nodes > 1."""
    if env.get("TF_CONFIG"):
        return
    config = tf_config_from_node_env(env)
    if config and len(config["cluster"]["worker"]) > 1:
        env["TF_CONFIG"] = json.dumps(config)
        _LOG.info(
            "TF_CONFIG from the TrainJob node's environment: worker %d of %s",
            config["task"]["index"],
            config["cluster"]["worker"],
        )


def tf_config() -> dict[str, Any]:
    """The parsed ``TF_CONFIG`` (empty when unset), built first on a TrainJob node."""
    ensure_tf_config()
    raw = os.environ.get("TF_CONFIG", "")
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise UserError(f"TF_CONFIG is not valid JSON: {exc}") from None


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
        raise UserError(f"--strategy {name!r}: use one of {', '.join(STRATEGIES)}")
    # MultiWorkerMirroredStrategy reads TF_CONFIG itself: on a TrainJob node it must exist first
    ensure_tf_config()
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


def patch_keras_for_multi_worker(model: Any, strategy: Any, local_dataset: Any) -> None:
    """Work around two Keras 3 bugs with MultiWorkerMirroredStrategy (seen with Keras 3.15).

    1. Keras builds a model under a strategy by reducing the first *distributed* batch across
       replicas (``strategy.reduce("MEAN", batch)``); the collective reduce cannot take a dict of
       features. We build model, metrics and optimizer from one local batch instead and make the
       per-``fit`` build a no-op (everything it would build exists by then).
    2. Keras reduces each step's scalar logs with ``strategy.reduce("MEAN", v, axis=0)``, which
       fails on rank-0 tensors. The logs are already synchronized metric values, so giving them a
       leading axis of 1 makes that reduce a correct no-op.
    """
    import tensorflow as tf

    batch = next(iter(local_dataset))
    with strategy.scope():
        model._symbolic_build(data_batch=batch)
        if model.optimizer is not None and not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)
    model._maybe_symbolic_build = lambda *args, **kwargs: None

    def with_axis(step: Any) -> Any:
        def wrapped(data: Any) -> Any:
            return {k: tf.reshape(v, [-1]) for k, v in step(data).items()}

        return wrapped

    model.train_step = with_axis(model.train_step)
    model.test_step = with_axis(model.test_step)
