"""Shards copied to local disk ahead of the reader: how it reads stores TensorFlow cannot open.

TensorFlow 2.21 opens local files and ``gs://`` (its own GCS filesystem); it has no ``s3://``
filesystem any more, and tensorflow-io's does not load into it. For such stores the reader does
what streaming loaders do (MosaicML Streaming, WebDataset's cache): a pool of threads downloads
the shards the interleave opens next, each in parallel ranged GETs of a few MiB
(:func:`tfrecord_suite.io.storage.download`, on kept-alive connections), into a local folder; the
interleave opens a shard's local copy once it is complete, and the copy is deleted as soon as its
last record has been read. So the network's round trips overlap each other and the reading of the
shards already staged, and local disk holds only the shards in flight.

In the ``tf.data`` graph (:func:`staged_files`, :func:`staged_records`)::

    file names -> map(start its download: a ticket) -> prefetch(ahead)
      -> interleave(ticket -> wait for its copy -> TFRecordDataset(copy) -> delete the copy)

The tickets keep a file that one epoch reads while the next one starts it apart. The functions
are Python (``tf.numpy_function``), called once per shard, so a pipeline with them cannot be
shipped to a tf.data service.

An input abandoned before its end (``take``, an early stop) leaves no copy behind for long: a
stager that nothing has called for :data:`IDLE_SECONDS` gives up its copies as soon as another
one starts a download (a copy already opened stays readable until closed, and one not yet
handed out is fetched again if it is ever asked for), and the folder goes with the stager or the
process; a killed process's folder goes with the next stager made in the same place
(:mod:`tfrecord_suite.io.held_folders`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import os
import queue
import threading
import time
import weakref
from concurrent.futures import Future
from typing import Any

from tfrecord_suite.io import storage
from tfrecord_suite.io.held_folders import HeldFolder

_LOG = logging.getLogger(__name__)
#: The stagers' folders' name prefix (:class:`~tfrecord_suite.io.held_folders.HeldFolder`).
STAGE_PREFIX = "tfrs-stage-"
#: A stager nothing called for this long gives up its copies when another one needs the disk.
IDLE_SECONDS = 30.0
_LIVE: weakref.WeakSet[Stager] = weakref.WeakSet()


@dataclasses.dataclass(frozen=True)
class StageConfig:
    """How shards are staged.

    The reader's ``stage_*`` knobs; their defaults are :class:`~tfrecord_suite.train.reader.
    ReaderConfig`'s, the only ones.

    Attributes:
        folder: Parent folder of the local copies ("" : the system's temporary folder).
        files: Shards downloaded at once.
        part_mb: Size of each ranged GET (MiB).
        parts: Ranged GETs of one shard at once.

    """

    folder: str
    files: int
    part_mb: int
    parts: int


class Stager:
    """Downloads shards into a private local folder, hands out their paths, deletes each once read.

    The folder and any copy left (an input stopped early) go when the stager is collected or the
    process exits.
    """

    def __init__(self, config: StageConfig):
        self.config = config
        held = HeldFolder.create(STAGE_PREFIX, config.folder or None)
        self.folder = held.path
        # daemon threads of its own, not a ThreadPoolExecutor: the interpreter joins those at
        # exit, and a download staged ahead for an input nobody reads any more would hold the
        # exit of a finished training job
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        for i in range(config.files):
            threading.Thread(
                target=_work, args=(self._queue,), name=f"tfrs-stage-{i}", daemon=True
            ).start()
        self._jobs: dict[int, tuple[Future, str, str]] = {}
        self._lock = threading.Lock()
        self._tickets = itertools.count()
        #: Shards staged, their bytes, the seconds readers waited for a copy, copies fetched
        #: again after they were given up.
        self.stats = {"staged": 0, "bytes": 0, "wait_s": 0.0, "fetched_again": 0}
        self._used = time.monotonic()
        weakref.finalize(self, _clean_up, self._queue, config.files, held)
        _LIVE.add(self)

    def start(self, uri: bytes | str) -> int:
        """Start downloading ``uri``; the ticket to :meth:`wait` for it with."""
        uri = uri.decode() if isinstance(uri, bytes) else str(uri)
        self._used = time.monotonic()
        release_idle(IDLE_SECONDS, keep=self)
        ticket = next(self._tickets)
        path = os.path.join(self.folder, f"{ticket:09d}-{storage.basename(uri)}")
        future: Future = Future()
        self._queue.put((future, self._download, uri, path))
        with self._lock:
            self._jobs[ticket] = (future, path, uri)
        return ticket

    def _download(self, uri: str, path: str) -> None:
        c = self.config
        storage.download(uri, path, c.parts, c.part_mb)

    def wait(self, ticket: Any) -> bytes:
        """The local path of the ticket's shard, once its copy is complete.

        Raises:
            Exception: The download's error (the URI is in its message).

        """
        self._used = time.monotonic()
        with self._lock:
            future, path, uri = self._jobs[int(ticket)]
        started = time.perf_counter()
        future.result()
        if not os.path.exists(path):  # given up while this stager was idle: fetch it again
            self._download(uri, path)
            self.stats["fetched_again"] += 1
        self._used = time.monotonic()
        with self._lock:
            self.stats["wait_s"] += time.perf_counter() - started
            self.stats["staged"] += 1
            self.stats["bytes"] += os.path.getsize(path)
        return path.encode()

    def done(self, ticket: Any) -> int:
        """Delete the ticket's copy: its last record has been read (the reader holds it open)."""
        self._used = time.monotonic()
        with self._lock:
            _, path, _ = self._jobs.pop(int(ticket), (None, "", ""))
        if path:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
        return int(ticket)

    def _give_up_copies(self) -> None:
        """Delete every complete copy (an input left idle, likely abandoned)."""
        with self._lock:
            jobs = list(self._jobs.values())
        for future, path, _ in jobs:
            if future.done():
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)

    def close(self) -> None:
        """Stop downloading and delete the folder now."""
        _clean_up(self._queue, self.config.files, self.folder)


def _work(jobs: queue.SimpleQueue) -> None:
    """A download thread: runs jobs until it gets None."""
    while (job := jobs.get()) is not None:
        future, download, uri, path = job
        if not future.set_running_or_notify_cancel():
            continue
        try:
            download(uri, path)
        except BaseException as exc:  # handed to whoever waits for the copy
            future.set_exception(exc)
        else:
            future.set_result(None)


def release_idle(seconds: float = IDLE_SECONDS, keep: Stager | None = None) -> None:
    """Delete the complete copies of every stager nothing called for ``seconds`` (but ``keep``).

    Safe at any time: a copy already opened stays readable, one not yet handed out is fetched
    again if it is asked for. With 0, between inputs that are done (the bench does so between
    variants), it frees every copy an input stopped early left.
    """
    now = time.monotonic()
    for stager in list(_LIVE):
        if stager is not keep and now - stager._used >= seconds:
            stager._give_up_copies()


def _clean_up(jobs: queue.SimpleQueue, threads: int, folder: HeldFolder) -> None:
    with contextlib.suppress(queue.Empty):
        while True:  # downloads not started yet: cancelled
            job = jobs.get_nowait()
            if job is not None:
                job[0].cancel()
    for _ in range(threads):
        jobs.put(None)
    folder.remove()


def staged_files(files: Any, stager: Stager, ahead: int) -> Any:
    """``files`` (a dataset of URIs) -> tickets, each shard's download started ``ahead`` early.

    The map runs in order, one file at a time, as the interleave will open them; the prefetch
    after it starts the next ``ahead`` downloads before the interleave asks for them.
    """
    import tensorflow as tf

    def start(uri: Any) -> Any:
        ticket = tf.numpy_function(lambda u: np_int64(stager.start(u)), [uri], tf.int64)
        return tf.ensure_shape(ticket, [])

    return files.map(start).prefetch(max(1, ahead))


def staged_records(ticket: Any, stager: Stager, read: Any, empty: Any) -> Any:
    """One shard's dataset from its ticket: ``read(local path)``, then its copy deleted.

    ``empty`` is an element of the dataset's type (never produced): the deletion rides on a
    tail element that a filter drops.
    """
    import tensorflow as tf

    path = tf.ensure_shape(tf.numpy_function(stager.wait, [ticket], tf.string), [])
    records = read(path)
    tail = (
        tf.data.Dataset.from_tensors(ticket)
        .map(lambda t: tf.numpy_function(lambda x: np_int64(stager.done(x)), [t], tf.int64))
        .filter(lambda _: False)
        .map(lambda _: empty)
    )
    return records.concatenate(tail)


def np_int64(value: int) -> Any:
    """``value`` as the numpy scalar a ``tf.numpy_function`` returning int64 must give."""
    import numpy as np

    return np.int64(value)


def tensorflow_reads(uri: str) -> bool:
    """Whether TensorFlow's own filesystems open ``uri`` (local paths, ``gs://``; not ``s3://``)."""
    if "://" not in uri:
        return True
    import tensorflow as tf

    return uri.split("://", 1)[0] in tf.io.gfile.get_registered_schemes()
