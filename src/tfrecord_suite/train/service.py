"""tf.data service: the reader's work on other processes and hosts (``--input-service``).

A dispatcher hands each worker a share of every input pipeline's files; the workers read, shuffle,
parse and decode (the CPU-heavy part, images above all) and the trainer takes their batches over
gRPC. The trainer's host then needs CPU only for the feature transform, augmentation and the
accelerators' feeding.

The sharding is static (``ShardingPolicy.HINT``: the reader marks its file list with
``shard(SHARD_HINT, SHARD_HINT)``, which the service replaces with ``shard(workers, index)``), so
the dispatcher takes the fixed list of workers (``worker_addresses``) and each worker streams
passes over its own files, each pass in a new order, as the local reader does. A worker killed
and restarted at the same address starts its stream again from the start: what it had delivered
is read again (at least once, never lost). A worker that does not come back stalls the input
for good (TF 2.21 waits forever), which the trainer's stall watchdog turns into a failed run.

Guards against TF 2.21's server lifecycle faults (measured, see ``docs/how-to/data-service.md``):
servers are always constructed started (an unstarted one segfaults in its destructor), a worker
waits in Python for the dispatcher's port before it constructs its server (the constructor
blocks holding the GIL, so a signal could not stop it), and both leave with ``os._exit`` on
SIGTERM (no destructor, 0.06 s).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from tfrecord_suite import flags
from tfrecord_suite.errors import UserError
from tfrecord_suite.ports import free_ports
from tfrecord_suite.train.served import ShareOptions, stage_share

_LOG = logging.getLogger(__name__)

DISPATCHER_PORT = 5050
WORKER_PORT = 5051
LOCAL_HOST = "127.0.0.1"


@dataclasses.dataclass
class DispatcherOptions:
    """One tf.data service dispatcher (``tfrecord-suite data-service dispatcher``).

    Attributes:
        port: Port it serves on, on every interface (the service has no authentication: keep
            it inside the cluster's network).
        work_dir: Where it journals its state (fault-tolerant mode): restarted with the same
            port and folder it resumes every job, and trainers and workers reconnect. Empty:
            not fault tolerant (a restart loses the jobs).
        worker_addresses: Comma-separated ``host:port`` of every worker, as each advertises
            itself: the static sharding the reader uses deals files out by this list, and a
            worker at any other address is refused.
        worker_timeout_ms: A worker silent this long is considered missing; TF 2.21 only logs
            it (the worker is not replaced, and under static sharding its share waits for it
            to come back at its address; the trainer's stall watchdog ends a run that waits
            too long).
        ready_file: Created once it serves (what a readiness probe checks); empty: none.

    """

    port: int = DISPATCHER_PORT
    work_dir: str = ""
    worker_addresses: str = ""
    worker_timeout_ms: int = 10_000
    ready_file: str = ""


@dataclasses.dataclass
class WorkerOptions:
    """One tf.data service worker (``tfrecord-suite data-service worker``).

    Attributes:
        dispatcher: The dispatcher's ``host:port``.
        port: Port it serves on, on every interface.
        address: The ``host:port`` it advertises, exactly as listed in the dispatcher's
            ``worker_addresses`` (on Kubernetes the pod's stable DNS name). Empty:
            ``127.0.0.1:<port>``.
        dispatcher_wait_seconds: How long it waits for the dispatcher to accept connections
            before it gives up (exit 2).
        ready_file: Created once it has registered with the dispatcher (what a readiness
            probe checks: its port opens a moment earlier); empty: none.
        stage: The share of a staged store's shards it copies to local disk before it
            serves (flat flags: ``--stage-dataset`` ...; :mod:`~tfrecord_suite.train.served`).

    """

    dispatcher: str
    port: int = WORKER_PORT
    address: str = ""
    dispatcher_wait_seconds: float = 600.0
    ready_file: str = ""
    stage: ShareOptions = dataclasses.field(default_factory=ShareOptions)


def _serve_until_signalled(what: str, make_server: Any, ready_file: str = "") -> None:
    """Construct a started server, then wait for SIGTERM/SIGINT and leave with ``os._exit``.

    ``ready_file`` is created once the constructor returned (a worker's has registered).
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    stop = threading.Event()
    try:
        server = make_server()
    except Exception as exc:  # any failure: leave before a destructor runs
        print(f"error: tf.data service {what} did not start: {exc}", file=sys.stderr, flush=True)
        os._exit(2)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    _LOG.info("tf.data service %s serving (%s)", what, type(server).__name__)
    print(f"ready: tf.data service {what}", file=sys.stderr, flush=True)
    if ready_file:
        with open(ready_file, "w") as fh:
            fh.write(f"{os.getpid()}\n")
    stop.wait()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # no C++ destructor: TF 2.21's can crash; fault-tolerant state is journalled


def run_dispatcher(options: DispatcherOptions) -> None:
    """Serve a dispatcher until SIGTERM (never returns)."""
    import tensorflow as tf

    service = tf.data.experimental.service
    kwargs: dict[str, Any] = {
        "port": options.port,
        "protocol": "grpc",
        "worker_timeout_ms": options.worker_timeout_ms,
    }
    if options.work_dir:
        kwargs.update(work_dir=options.work_dir, fault_tolerant_mode=True)
    workers = [a.strip() for a in options.worker_addresses.split(",") if a.strip()]
    if workers:
        kwargs["worker_addresses"] = workers
    _serve_until_signalled(
        f"dispatcher on port {options.port}",
        lambda: service.DispatchServer(service.DispatcherConfig(**kwargs), start=True),
        options.ready_file,
    )


def wait_for_port(host: str, port: int, seconds: float) -> bool:
    """Whether ``host:port`` accepts a TCP connection within ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)


def run_worker(options: WorkerOptions) -> None:
    """Serve a worker until SIGTERM (never returns); exit 2 if the dispatcher never answers.

    With ``options.stage``, the worker first stages its share of the shards
    (:func:`~tfrecord_suite.train.served.stage_share`): it registers only once it can read them.
    """
    host, _, port = options.dispatcher.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--dispatcher {options.dispatcher!r}: expected host:port")
    address = options.address or f"{LOCAL_HOST}:{options.port}"
    if options.stage.stage_dataset:
        print(stage_share(options.stage, address)["line"], file=sys.stderr, flush=True)
    # WorkerServer() blocks, holding the GIL, until it reaches the dispatcher; waiting here
    # first keeps SIGTERM working meanwhile and skips the constructor's retry backoff
    if not wait_for_port(host, int(port), options.dispatcher_wait_seconds):
        print(
            f"error: dispatcher {options.dispatcher} unreachable for "
            f"{options.dispatcher_wait_seconds:g} s",
            file=sys.stderr,
            flush=True,
        )
        os._exit(2)
    import tensorflow as tf

    service = tf.data.experimental.service
    config = service.WorkerConfig(
        dispatcher_address=options.dispatcher,
        worker_address=address,
        port=options.port,
        protocol="grpc",
    )
    _serve_until_signalled(
        f"worker on port {options.port}",
        lambda: service.WorkerServer(config, start=True),
        options.ready_file,
    )


@dataclasses.dataclass(frozen=True)
class InputService:
    """What ``--input-service`` asks for: a dispatcher to use, or N workers to start.

    Attributes:
        address: ``grpc://HOST:PORT`` of a running dispatcher.
        local_workers: ``local:N``: worker processes on this host, for the run.
        cluster_workers: ``cluster:N``: worker pods the pipeline's train step creates beside
            its trainers for the run (:mod:`tfrecord_suite.launch.data_service_k8s`).

    """

    address: str = ""
    local_workers: int = 0
    cluster_workers: int = 0

    @classmethod
    def parse(cls, spec: str) -> InputService | None:
        """``""`` -> None, ``local:N``, ``cluster:N`` or ``grpc://HOST:PORT``; else an error."""
        spec = spec.strip()
        if not spec:
            return None
        kind, _, value = spec.partition(":")
        if kind in ("local", "cluster") and value.isdigit() and int(value) >= 1:
            return cls(**{f"{kind}_workers": int(value)})
        if spec.startswith("grpc://"):
            host, _, port = spec[len("grpc://") :].rpartition(":")
            if host and port.isdigit():
                return cls(address=spec)
        raise UserError(
            f"--input-service {spec!r}: expected local:N (N >= 1 worker processes here), "
            "cluster:N (worker pods the pipeline's train step starts) or grpc://HOST:PORT (a "
            "running dispatcher)"
        )


def check_files_per_worker(spec: InputService | None, files: int, pipelines: int = 1) -> None:
    """Refuse a service whose workers would outnumber an input pipeline's files.

    The static sharding gives each worker whole files; with fewer files than workers the
    service fails the first step. ``pipelines``: the training nodes reading (each its share).
    """
    workers = spec.local_workers or spec.cluster_workers if spec else 0
    if workers and files // max(1, pipelines) < workers:
        raise UserError(
            f"the training split has {files} shard files for {pipelines} input pipeline(s) "
            f"and {workers} tf.data service workers, who read whole files: shard it into at "
            f"least {workers * max(1, pipelines)} files (--num-shards), or use fewer workers"
        )


class LocalDataService:
    """A dispatcher and ``workers`` worker processes on this host, supervised.

    A process that exits is started again at its address, as a StatefulSet restarts its pod
    under its name: a worker (what the static sharding needs for the epoch to go on), or the
    dispatcher (it resumes every job from its journal in ``work_dir``), at most
    ``max_restarts`` times in all. Use as a context manager; the processes are stopped on exit,
    and die with this process (``PR_SET_PDEATHSIG``).

    ``hosts``: the address each worker advertises (the dispatcher's list), by default
    127.0.0.1 for all; other loopback addresses (127.0.0.2...) give workers addresses of their
    own, as on other hosts. Every server listens on all of this host's addresses.

    ``stage``: each worker stages its share of that version's shards into :attr:`served_copies`
    before it serves (its ``stage_workers`` and ``stage_folder`` are this service's own), for a
    store TensorFlow cannot open (:mod:`~tfrecord_suite.train.served`).
    """

    def __init__(
        self,
        workers: int,
        work_dir: str = "",
        max_restarts: int = 10,
        hosts: list[str] | None = None,
        stage: ShareOptions | None = None,
    ):
        self.workers = workers
        self.max_restarts = max_restarts
        self.restarts = 0
        self.dispatcher_restarts = 0
        self.hosts = list(hosts or [LOCAL_HOST] * workers)
        if len(self.hosts) != workers:
            raise ValueError(f"{len(self.hosts)} hosts for {workers} workers")
        self._own_dir = None if work_dir else tempfile.TemporaryDirectory(prefix="tfrs-service-")
        self.work_dir = work_dir or self._own_dir.name  # type: ignore[union-attr]
        self.dispatcher_port, *self.worker_ports = free_ports(1 + workers)
        self.stage = stage and dataclasses.replace(
            stage,
            stage_workers=",".join(self.worker_address(i) for i in range(workers)),
            stage_folder=os.path.join(self.work_dir, "served"),
        )
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._supervisor: threading.Thread | None = None
        self.exit_codes: dict[str, int] = {}  # by process name, once stopped

    @property
    def address(self) -> str:
        """The dispatcher, as the reader takes it."""
        return f"grpc://{LOCAL_HOST}:{self.dispatcher_port}"

    @property
    def served_copies(self) -> str:
        """Where the workers stage their shares (the reader's ``served_copies``); "": none."""
        return self.stage.stage_folder if self.stage else ""

    def worker_address(self, index: int) -> str:
        """Worker ``index``'s ``host:port``, as it advertises itself."""
        return f"{self.hosts[index]}:{self.worker_ports[index]}"

    def _log(self, kind: str, port: int | str) -> str:
        """The log of the ``kind`` server ("dispatcher", "worker") on ``port``."""
        return os.path.join(self.work_dir, f"{kind}-{port}.log")

    def _spawn(self, *args: str) -> subprocess.Popen[bytes]:
        log = open(self._log(args[0], args[-1]), "ab")  # noqa: SIM115
        with log:
            return subprocess.Popen(
                [sys.executable, "-m", "tfrecord_suite.cli", "data-service", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
                preexec_fn=_die_with_parent,
            )

    def _ready_file(self, name: str) -> str:
        return os.path.join(self.work_dir, f"{name}.ready")

    def _start_worker(self, index: int) -> None:
        port = str(self.worker_ports[index])
        name = f"worker-{index}"
        with contextlib.suppress(FileNotFoundError):
            os.remove(self._ready_file(name))
        self._procs[name] = self._spawn(
            "worker",
            "--dispatcher",
            f"{LOCAL_HOST}:{self.dispatcher_port}",
            "--address",
            self.worker_address(index),
            "--ready-file",
            self._ready_file(name),
            *(flags.to_args(self.stage) if self.stage else []),
            "--port",
            port,
        )

    def _start_dispatcher(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(self._ready_file("dispatcher"))
        self._procs["dispatcher"] = self._spawn(
            "dispatcher",
            "--work-dir",
            self.journal,
            "--worker-addresses",
            ",".join(self.worker_address(i) for i in range(self.workers)),
            "--ready-file",
            self._ready_file("dispatcher"),
            "--port",
            str(self.dispatcher_port),
        )

    @property
    def journal(self) -> str:
        """The dispatcher's journal (it outlives the dispatcher's process)."""
        return os.path.join(self.work_dir, "journal")

    def start(self, timeout: float = 180.0) -> LocalDataService:
        """Start the dispatcher and the workers; return once every port accepts connections."""
        os.makedirs(self.work_dir, exist_ok=True)
        self._start_dispatcher()
        for index in range(self.workers):
            self._start_worker(index)
        deadline = time.monotonic() + timeout
        for name in ["dispatcher", *(f"worker-{i}" for i in range(self.workers))]:
            # a worker's file appears once it has registered: a one-pass read started before
            # could end without its share
            while not os.path.exists(self._ready_file(name)):
                time.sleep(0.1)
                proc = self._procs[name]
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise self._not_started(name, proc)
        self._supervisor = threading.Thread(target=self._supervise, daemon=True)
        self._supervisor.start()
        _LOG.info(
            "tf.data service: dispatcher %s and %d workers (logs in %s)",
            self.address,
            self.workers,
            self.work_dir,
        )
        return self

    def _not_started(self, name: str, proc: subprocess.Popen[bytes]) -> RuntimeError:
        """Stop every process; return the error that says why ``name`` did not start.

        The error quotes the end of its log: a service's own folder, and the log in it, are
        deleted when it stops.
        """
        code = proc.poll()
        state = f"exit {code}" if code is not None else "not ready in time"
        port = self.dispatcher_port if name == "dispatcher" else self.worker_ports[int(name[7:])]
        log = self._log(name.split("-")[0], port)
        try:
            with open(log, "rb") as fh:
                fh.seek(max(0, os.path.getsize(log) - 3000))
                tail = fh.read().decode(errors="replace").strip()
        except OSError:
            tail = ""
        self.stop()
        kept = "" if self._own_dir is not None else f"; its log: {log}"
        return RuntimeError(
            f"tf.data service {name} did not start ({state}, port {port}){kept}"
            + (f"; its log ends:\n{tail}" if tail else "")
        )

    def _supervise(self) -> None:
        while not self._stopping.wait(0.5):
            with self._lock:
                dispatcher = self._procs["dispatcher"]
                if (
                    dispatcher.poll() is not None
                    and not self._stopping.is_set()
                    and self.restarts + self.dispatcher_restarts < self.max_restarts
                ):
                    self.dispatcher_restarts += 1
                    _LOG.warning(
                        "tf.data service dispatcher exited (%s): starting it again on port %d "
                        "(it resumes its jobs from its journal)",
                        dispatcher.returncode,
                        self.dispatcher_port,
                    )
                    self._start_dispatcher()
                for index in range(self.workers):
                    proc = self._procs[f"worker-{index}"]
                    if proc.poll() is None or self._stopping.is_set():
                        continue
                    if self.restarts + self.dispatcher_restarts >= self.max_restarts:
                        continue  # the trainer's stall watchdog ends the run
                    self.restarts += 1
                    _LOG.warning(
                        "tf.data service worker %d exited (%s): starting it again at %s "
                        "(its files are read again from the start)",
                        index,
                        proc.returncode,
                        self.worker_address(index),
                    )
                    self._start_worker(index)

    def pids(self) -> dict[str, int]:
        """The processes' ids, by name (``dispatcher``, ``worker-0``...)."""
        with self._lock:
            return {name: proc.pid for name, proc in self._procs.items()}

    def stop(self) -> None:
        """SIGTERM every process (workers first), SIGKILL any still running after 10 s."""
        self._stopping.set()
        with self._lock:
            procs = [p for n, p in sorted(self._procs.items(), reverse=True)]  # workers first
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        with self._lock:
            self.exit_codes = {name: proc.returncode for name, proc in self._procs.items()}
        if self._own_dir is not None:
            self._own_dir.cleanup()

    def __enter__(self) -> LocalDataService:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _die_with_parent() -> None:
    """In the child: SIGTERM when the parent dies (Linux), so no server outlives a crashed run."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class StallWatchdog:
    """Ends the process when training takes no step for ``seconds`` (the service stalled).

    TF 2.21's tf.data service waits forever for a worker that does not come back, inside C++
    where no Python exception can reach; a run that hangs holds its accelerators for nothing.
    ``os._exit(75)`` after an error line is the only way out; the job's restart policy and
    ``BackupAndRestore`` then resume the run.
    """

    EXIT_CODE = 75

    def __init__(self, seconds: float):
        self.seconds = seconds
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def step(self) -> None:
        """Record progress."""
        self._last = time.monotonic()

    def __enter__(self) -> StallWatchdog:
        self._last = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.wait(min(5.0, self.seconds / 4)):
            if time.monotonic() - self._last > self.seconds:
                print(
                    f"error: no training step for {self.seconds:g} s: the tf.data service "
                    "stalled (a worker lost for good?); exiting so the job restarts and "
                    "resumes from its backup",
                    file=sys.stderr,
                    flush=True,
                )
                os._exit(self.EXIT_CODE)

    def callback(self) -> Any:
        """A Keras callback recording each batch as progress."""
        import keras

        watchdog = self

        class Progress(keras.callbacks.Callback):
            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                watchdog.step()

            def on_test_batch_end(self, batch: int, logs: Any = None) -> None:
                watchdog.step()

        return Progress()


#: Each worker's seeds: the reader's seed plus this times (its index + 1); a prime, so that
#: workers' streams (and the crop stream at seed + 1) never coincide for small seeds.
WORKER_SEED_STRIDE = 1_000_003


def worker_seeded(build: Any, seed: int) -> Any:
    """The dataset ``build(worker_seed)`` makes, each tf.data service worker with its own seed.

    The service runs one dataset graph on every worker, so fixed seeds would give every worker
    the same file order, shuffles and crop windows. The worker's index is what the service
    substitutes for ``SHARD_HINT`` (``range(...).shard(SHARD_HINT, SHARD_HINT)`` on worker
    ``i`` of ``n`` starts at ``i``), and ``build`` runs inside a ``flat_map`` over it, so its
    seeds (a tensor: ``seed + WORKER_SEED_STRIDE * (i + 1)``) are the worker's. Reproducible:
    the same workers, the same seeds. Only inside a dataset given to :func:`distribute`.
    """
    import tensorflow as tf

    hint = tf.data.experimental.SHARD_HINT
    index = tf.data.Dataset.range(1 << 30).shard(hint, hint).take(1)
    return index.flat_map(lambda i: build(seed + WORKER_SEED_STRIDE * (i + 1)))


def distribute(dataset: Any, address: str, compression: str | None = "AUTO") -> Any:
    """``dataset`` (marked with ``SHARD_HINT``) processed by the service at ``address``.

    ``compression``: how the workers compress what they send (``"AUTO"``: Snappy; None: not).
    """
    import tensorflow as tf

    service = tf.data.experimental.service
    return dataset.apply(
        service.distribute(
            processing_mode=service.ShardingPolicy.HINT,
            service=address,
            compression=compression,
        )
    )
