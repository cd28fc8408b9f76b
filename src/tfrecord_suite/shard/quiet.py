"""What Beam prints on a shard run that went well, kept off the user's screen.

:func:`install` puts each filter in place once per process; each drops one message whose cause
is known to be harmless (saying it at INFO instead where it tells of progress) and lets
everything else through.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from typing import Any

_LOG = logging.getLogger(__name__)

#: Threads of Beam's SDK harness (in this process under LOOPBACK) that die of the runner's
#: hang-up: the one reading the data stream (``apache_beam.runners.worker.data_plane``), then the
#: worker's own, which raises the reader's error again when it closes the stream
#: (``worker_pool_main`` names it ``run_worker_<id>``).
HARNESS_THREADS = re.compile(r"read_grpc_client_inputs$|run_worker_")


class EmptyDeadLettersFilter(logging.Filter):
    """Drops Beam's warning for a file sink with nothing to finalize.

    The dead letters are written only when a row was bad (``skip_if_empty``), and no bad row is
    the normal run, which must be quiet. The shards are not written by a Beam file sink, so no
    other warning is lost.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Keep every record but that warning."""
        return not record.getMessage().startswith("No shards found to finalize")


#: The line Beam's ``SubprocessServer.start`` (``apache_beam/utils/subprocess_server.py``) logs
#: through the root logger on every poll of a job server that is not serving yet, as a WARNING
#: once it has waited about five seconds; a Java job server's JVM often takes longer, more so on
#: a busy machine.
WAITING_FOR_SERVER = "Waiting for grpc channel to be ready at %s."


class ServerStartFilter(logging.Filter):
    """Says Beam's wait for a job server to start once, as progress at INFO, not as warnings.

    Only that line of Beam's is dropped; a server that fails to start still raises, and Beam
    says why on its own logger.
    """

    def __init__(self) -> None:
        super().__init__()
        self._said: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        """Keep every record but that line; say the first one per server at INFO."""
        if record.msg != WAITING_FOR_SERVER or record.module != "subprocess_server":
            return True
        endpoint = str(record.args[0]) if isinstance(record.args, tuple) and record.args else ""
        if endpoint not in self._said:
            self._said.add(endpoint)
            _LOG.info(
                "waiting for the runner's job server at %s to start (a Java one takes a while)",
                endpoint,
            )
        return False


def is_runner_hangup(error: BaseException | None) -> bool:
    """Whether ``error`` is the runner cancelling the SDK harness's data stream.

    A Java job server (Flink, Spark) ends each job by cancelling that stream ("Multiplexer
    hanging up") before the harness closes it; the harness logs a failure, and its reader thread
    and then the worker's thread die of it. The job's own outcome comes from the job service
    (``wait_until_finish`` raises when it failed), so dropping these loses nothing.
    """
    import grpc

    code = getattr(error, "code", None)
    return (
        isinstance(error, grpc.RpcError) and callable(code) and code() == grpc.StatusCode.CANCELLED
    )


class RunnerHangupFilter(logging.Filter):
    """Drops the harness's failure to read inputs when it is a runner's hang-up.

    "Failed to read inputs in the data plane" with :func:`is_runner_hangup`'s error is said at
    INFO instead (``-v``).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Keep every record but that failure."""
        error = record.exc_info[1] if record.exc_info else None
        if is_runner_hangup(error):
            _LOG.info("the runner closed the SDK harness's data stream: %s", error)
            return False
        return True


def _hangup_excepthook(previous: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``threading.excepthook`` ending the harness threads' hang-up quietly.

    Every other uncaught exception goes to ``previous``.
    """

    def hook(args: threading.ExceptHookArgs) -> None:
        thread = args.thread
        if (
            thread is not None
            and HARNESS_THREADS.match(thread.name)
            and is_runner_hangup(args.exc_value)
        ):
            return
        previous(args)

    hook.quiets_runner_hangups = True  # type: ignore[attr-defined]
    return hook


def install() -> None:
    """Put the filters above in place, once per process."""
    for logger, kind in (
        ("apache_beam.io.filebasedsink", EmptyDeadLettersFilter),
        ("apache_beam.runners.worker.data_plane", RunnerHangupFilter),
        # Beam logs the wait through logging.log, the root logger: a filter there sees only
        # records logged on it directly, not those its children pass up to its handlers
        ("", ServerStartFilter),
    ):
        log = logging.getLogger(logger)
        if not any(isinstance(f, kind) for f in log.filters):
            log.addFilter(kind())
    if not getattr(threading.excepthook, "quiets_runner_hangups", False):
        threading.excepthook = _hangup_excepthook(threading.excepthook)
