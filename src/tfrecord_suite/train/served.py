"""Shards on a store TensorFlow cannot open, read through a tf.data service.

Each worker stages its own share to local disk before it serves, and the trainer names those
copies. TensorFlow 2.21 has no ``s3://`` filesystem. Read here, the reader stages the shards in
its own process, ahead of the interleave (:mod:`~tfrecord_suite.train.staging`); a tf.data service
cannot run that (its workers run the dataset's graph, and a Python function is no part of one).
So for a service of the run's own (``--input-service local:N``, and ``cluster:N`` on Kubeflow),
every worker, before it registers with the dispatcher, downloads the shards it is going to read
into a folder of its own disk (:func:`stage_share`), and the trainer's graph names each shard
by that local copy (:func:`served_names`), the same path on every worker.

A worker's share is what the reader's file stage deals it (:func:`worker_share`): under the
service's static sharding (``SHARD_HINT``), worker ``i`` of the dispatcher's list reads every
``n``-th file from the ``i``-th, of each input pipeline's files (a multi-worker trainer reads
its own files per node, ``FILE`` policy, when every node gets one). So each shard is downloaded
once per run, by the one worker that reads it, and kept for the run's passes; the cost is the
wait before the first step (the download of the largest share; ``tfrecord-suite`` logs it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import posixpath
import time
from collections.abc import Sequence
from typing import Any

from tfrecord_suite.errors import UserError

_LOG = logging.getLogger(__name__)

#: The folder a run's service workers stage into, under their ``/tmp`` (an emptyDir on
#: Kubernetes), and the one the trainer's graph names.
SERVED_DIR = "/tmp/tfrs-served"


def copy_name(uri: str) -> str:
    """The file name of ``uri``'s staged copy: its base name after a digest of the whole URI.

    Two versions' shards may share a base name.
    """
    digest = hashlib.sha256(uri.encode()).hexdigest()[:12]
    return f"{digest}-{posixpath.basename(uri)}"


def served_names(files: Sequence[str], folder: str) -> list[str]:
    """The local copies of ``files`` in ``folder``, in the same order: what the graph reads."""
    return [os.path.join(folder, copy_name(f)) for f in files]


def files_by_pipeline(files: int, pipelines: int) -> bool:
    """Whether each of ``pipelines`` input pipelines reads whole files of its own.

    That is the ``FILE`` policy; False: every pipeline reads every file, and they split its
    records (``DATA``). The reader's rule (:func:`~tfrecord_suite.train.reader.make_dataset`):
    whole files where there is one for every pipeline.
    """
    return pipelines > 1 and files >= pipelines


def worker_share(files: Sequence[str], pipelines: int, workers: int, index: int) -> list[str]:
    """The files the service's worker ``index`` of ``workers`` reads, over every input pipeline.

    The reader's file stage: each pipeline's files (``files[p::pipelines]`` under ``FILE``
    policy, else all of them), then the service's ``shard(workers, index)``. Each file once, in
    the order met.
    """
    if not 0 <= index < workers:
        raise ValueError(f"worker {index} of {workers}")
    split = files_by_pipeline(len(files), pipelines)
    per_pipeline = [list(files[p::pipelines]) for p in range(pipelines)] if split else [files]
    share: list[str] = []
    for own in per_pipeline:
        share += [f for f in own[index::workers] if f not in share]
    return share


@dataclasses.dataclass
class ShareOptions:
    """What a service worker stages before it serves (``data-service worker --stage-*``).

    Attributes:
        stage_dataset: The dataset version whose split the service serves, as its folder or an
            exact ``<registry>/<name>@<version>`` (its manifest names the shards and their
            sha256); empty: the worker stages nothing (the shards are on a store TensorFlow
            opens).
        stage_split: The split served (the service serves training's).
        stage_pipelines: Input pipelines reading through the service (the training nodes).
        stage_workers: Every worker's ``host:port``, comma-separated, as the dispatcher lists
            them: the worker's share of the files is its own address's place there.
        stage_folder: Where the copies go (the trainer's ``--served-copies``).

    """

    stage_dataset: str = ""
    stage_split: str = "train"
    stage_pipelines: int = 1
    stage_workers: str = ""
    stage_folder: str = SERVED_DIR


def stage_share(options: ShareOptions, address: str) -> dict[str, Any]:
    """Download the share of the worker at ``address`` into ``options.stage_folder``.

    Each copy's sha256 is checked against the manifest. Returns what was staged: files, of
    (the split's), bytes, seconds, and a line saying so.

    Raises:
        UserError: ``address`` is not in ``options.stage_workers``, or a copy's sha256 differs
            from the manifest's.

    """
    from tfrecord_suite.io import storage
    from tfrecord_suite.registry.datasets import resolve_dataset, shard_uri

    addresses = [a.strip() for a in options.stage_workers.split(",") if a.strip()]
    if address not in addresses:
        raise UserError(
            f"worker {address} is not one of the service's workers ({', '.join(addresses)}): "
            "its share of the files is its place in that list"
        )
    started = time.perf_counter()
    manifest, version_dir = resolve_dataset(options.stage_dataset)
    shards = sorted((s for s in manifest.shards if s["split"] == options.stage_split),
                    key=lambda s: s["index"])  # fmt: skip
    uris = {shard_uri(manifest, version_dir, s): s for s in shards}
    index = addresses.index(address)
    mine = worker_share(list(uris), options.stage_pipelines, len(addresses), index)
    os.makedirs(options.stage_folder, exist_ok=True)
    size = 0
    for uri in mine:
        path = os.path.join(options.stage_folder, copy_name(uri))
        storage.download(uri, path)
        digest = _sha256(path)
        if digest != uris[uri]["sha256"]:
            raise UserError(f"{uri}: its staged copy has sha256 {digest}, the manifest says "
                            f"{uris[uri]['sha256']}")  # fmt: skip
        size += os.path.getsize(path)
    seconds = time.perf_counter() - started
    line = (
        f"staged {len(mine)} of {len(uris)} {options.stage_split} shards of {manifest.ref} "
        f"({size / 1e6:.1f} MB) into {options.stage_folder} in {seconds:.1f} s"
    )
    _LOG.info("%s", line)
    return {"files": len(mine), "of": len(uris), "bytes": size, "seconds": round(seconds, 2),
            "line": line}  # fmt: skip


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
