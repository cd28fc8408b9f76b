"""What the shard step keeps off the screen of a run that went well, and nothing more."""

import logging
import threading

import grpc

from tfrecord_suite.shard import quiet


class Hangup(grpc.RpcError):
    """What a Java job server's end of a job leaves in Beam's SDK harness."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.CANCELLED

    def details(self) -> str:
        return "Multiplexer hanging up"


class Unavailable(Hangup):
    """A runner that went away mid-job: news."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE


def test_a_runner_hangup_ends_beams_harness_threads_quietly_and_nothing_else(monkeypatch):
    seen = []
    monkeypatch.setattr(
        threading, "excepthook", lambda a: seen.append((a.thread.name, type(a.exc_value).__name__))
    )
    quiet.install()
    quiet.install()  # once per process: a second call wraps nothing again

    def die(error: BaseException) -> None:
        raise error

    for name, error in [
        ("read_grpc_client_inputs", Hangup()),
        ("run_worker_3-1", Hangup()),
        ("run_worker_3-1", Unavailable()),
        ("mine", Hangup()),
        ("run_worker_4", ValueError("a bug")),
    ]:
        thread = threading.Thread(target=die, args=(error,), name=name)
        thread.start()
        thread.join()
    assert seen == [("run_worker_3-1", "Unavailable"), ("mine", "Hangup"),
                    ("run_worker_4", "ValueError")]  # fmt: skip


def test_beams_harness_logs_a_hangup_at_info_and_any_other_failure_as_it_was(caplog):
    quiet.install()
    log = logging.getLogger("apache_beam.runners.worker.data_plane")
    with caplog.at_level(logging.INFO):
        for error in (Hangup(), Unavailable(), None):
            try:
                raise error or RuntimeError("no gRPC error")
            except Exception:
                log.exception("Failed to read inputs in the data plane.")
    logged = [(r.name, r.levelname, type(r.exc_info[1]).__name__ if r.exc_info else None)
              for r in caplog.records]  # fmt: skip
    assert logged == [
        ("tfrecord_suite.shard.quiet", "INFO", None),
        ("apache_beam.runners.worker.data_plane", "ERROR", "Unavailable"),
        ("apache_beam.runners.worker.data_plane", "ERROR", "RuntimeError"),
    ]


def test_an_empty_dead_letters_sink_says_nothing_and_other_sink_warnings_pass(caplog):
    quiet.install()
    log = logging.getLogger("apache_beam.io.filebasedsink")
    with caplog.at_level(logging.WARNING):
        log.warning("No shards found to finalize. num_shards: 0")
        log.warning("Deleting 2 existing files in target path matching: dead-*")
    assert [r.getMessage() for r in caplog.records] == [
        "Deleting 2 existing files in target path matching: dead-*"
    ]


def _root_warning(module_file: str, msg: str, *args: object) -> None:
    """``logging.log(WARNING, msg, *args)`` as called from ``module_file``."""
    root = logging.getLogger()
    root.handle(root.makeRecord("root", logging.WARNING, module_file, 238, msg, args, None))


def test_beams_wait_for_a_job_server_is_said_once_per_server_at_info(caplog):
    """A JVM that starts slowly (a busy machine) makes Beam warn on every poll; the user is told
    once per server, with -v, and the root logger's other warnings still show."""
    from apache_beam.utils import subprocess_server

    quiet.install()
    beam = subprocess_server.__file__
    with caplog.at_level(logging.INFO):
        for endpoint in ("localhost:8099", "localhost:8099", "localhost:8100", "localhost:8099"):
            _root_warning(beam, quiet.WAITING_FOR_SERVER, endpoint)
        _root_warning(beam, "Something else at %s.", "localhost:8099")
        _root_warning(__file__, quiet.WAITING_FOR_SERVER, "not Beam's")
    said = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    assert said == [
        ("tfrecord_suite.shard.quiet", "INFO", "waiting for the runner's job server at "
         "localhost:8099 to start (a Java one takes a while)"),
        ("tfrecord_suite.shard.quiet", "INFO", "waiting for the runner's job server at "
         "localhost:8100 to start (a Java one takes a while)"),
        ("root", "WARNING", "Something else at localhost:8099."),
        ("root", "WARNING", "Waiting for grpc channel to be ready at not Beam's."),
    ]  # fmt: skip


def test_the_wait_filtered_is_the_line_beams_job_server_start_logs():
    """The filter matches Beam's own call (module and format string), so a Beam upgrade that
    rewords it fails here rather than on a user's screen."""
    import inspect

    from apache_beam.utils import subprocess_server

    source = inspect.getsource(subprocess_server.SubprocessServer.start)
    assert f"'{quiet.WAITING_FOR_SERVER}'" in source
    assert "logging.log(" in source  # the root logger, where install() puts the filter
