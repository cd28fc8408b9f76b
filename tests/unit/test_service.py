"""``--input-service`` parsing and the stall watchdog (the servers run in
tests/integration/test_data_service.py)."""

import subprocess
import sys

import pytest
from support import unsized_reader

from tfrecord_suite.errors import UserError
from tfrecord_suite.train.reader_config import ReaderConfig
from tfrecord_suite.train.service import InputService, StallWatchdog, check_files_per_worker
from tfrecord_suite.train.trainer import TrainConfig


def test_input_service_specs():
    assert InputService.parse("") is None
    assert InputService.parse("local:3") == InputService(local_workers=3)
    assert InputService.parse("cluster:8") == InputService(cluster_workers=8)
    assert InputService.parse("grpc://tfrs-data-dispatcher:5050") == InputService(
        address="grpc://tfrs-data-dispatcher:5050"
    )
    for bad in ("local:0", "local:x", "cluster:", "dispatcher:5050", "grpc://host", "grpc://:5050"):
        with pytest.raises(UserError, match=r"local:N .* grpc://HOST:PORT"):
            InputService.parse(bad)


def test_train_config_refuses_cache_with_a_service_and_bad_specs():
    cached = ReaderConfig(cache="memory")
    with pytest.raises(UserError, match="--cache and --input-service"):
        TrainConfig(
            dataset="r/d@1", model_dir="m", input_service="local:2", reader=cached
        ).validate()
    with pytest.raises(UserError, match="--input-service 'local'"):
        TrainConfig(dataset="r/d@1", model_dir="m", input_service="local").validate()


def test_watchdog_ends_a_stalled_process_with_its_exit_code():
    code = (
        "import time\n"
        "from tfrecord_suite.train.service import StallWatchdog\n"
        "with StallWatchdog(0.5) as w:\n"
        "    for _ in range(4):\n"
        "        time.sleep(0.2); w.step()\n"  # progress keeps it quiet
        "    time.sleep(30)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == StallWatchdog.EXIT_CODE
    assert "no training step for 0.5 s" in proc.stderr


def test_workers_must_not_outnumber_an_input_pipelines_files():
    check_files_per_worker(None, 1)
    check_files_per_worker(InputService(address="grpc://d:5050"), 1)  # count unknown: the service
    check_files_per_worker(InputService(local_workers=2), 4, pipelines=2)
    with pytest.raises(
        UserError, match=r"1 shard files for 1 input pipeline\(s\) and 2 .* least 2"
    ):
        check_files_per_worker(InputService(local_workers=2), 1)
    with pytest.raises(UserError, match="at least 6 files"):
        check_files_per_worker(InputService(cluster_workers=3), 5, pipelines=2)


def test_staged_shards_through_a_shared_service_are_refused_and_a_runs_own_reads_copies():
    """The service's workers run the read stage in processes of their own, where no stager runs:
    s3:// shards (staged by default) through a shared service are refused before anything is
    read; a service of the run's own names its workers' staged copies (served_copies)."""
    from tfrecord_suite.schema import Feature, Schema
    from tfrecord_suite.train.reader import make_dataset
    from tfrecord_suite.train.served import copy_name

    schema = Schema([Feature("x", "float32"), Feature("y", "int64")], label="y")
    with pytest.raises(
        UserError,
        match=r"s3://b/a.tfrecord and the other shards are staged .* shared tf.data service",
    ):
        make_dataset(["s3://b/a.tfrecord"], schema, unsized_reader(), service="grpc://d:5050")
    staged_gs = unsized_reader(remote_read="stage")
    with pytest.raises(UserError, match=r"\(remote_read=stage\), which the workers of a shared"):
        make_dataset(["gs://b/a.tfrecord"], schema, staged_gs, service="grpc://d:5050")
    served = unsized_reader(served_copies="/tmp/tfrs-served")
    assert served.served_files(["s3://b/v1/a.tfrecord", "s3://b/v2/a.tfrecord"]) == [
        "/tmp/tfrs-served/" + copy_name("s3://b/v1/a.tfrecord"),
        "/tmp/tfrs-served/" + copy_name("s3://b/v2/a.tfrecord"),
    ]
    assert copy_name("s3://b/v1/a.tfrecord") != copy_name("s3://b/v2/a.tfrecord")
    assert served.served_files(["/data/a.tfrecord"]) == ["/data/a.tfrecord"]  # TF opens it


@pytest.mark.parametrize(
    ("files", "pipelines", "shares"),
    [
        (6, 1, [[0, 2, 4], [1, 3, 5]]),
        (8, 2, [[0, 4, 1, 5], [2, 6, 3, 7]]),  # per pipeline: [0, 2, 4, 6] and [1, 3, 5, 7]
        (3, 4, [[0, 2], [1]]),  # fewer files than pipelines: each reads all (DATA policy)
    ],
)  # fmt: skip
def test_each_worker_share_is_what_the_readers_file_stage_deals_it(files, pipelines, shares):
    """Static sharding of each pipeline's files (tests/integration/test_data_service.py runs
    it through TensorFlow's service); every file in exactly one worker's share."""
    from tfrecord_suite.train.served import worker_share

    names = [f"f{i}" for i in range(files)]
    got = [worker_share(names, pipelines, 2, i) for i in range(2)]
    assert got == [[f"f{i}" for i in share] for share in shares]
    assert sorted(got[0] + got[1]) == sorted(names)


def test_a_server_that_cannot_start_is_named_with_its_logs_end():
    """A worker whose port is taken exits; the error names it and quotes its log, which is
    deleted with the service's own folder (the message once pointed at that deleted log)."""
    import socket

    from tfrecord_suite.train.service import LocalDataService

    service = LocalDataService(workers=1)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", service.worker_ports[0]))
        taken.listen()
        with pytest.raises(RuntimeError) as failed:
            service.start(timeout=120)
    message = str(failed.value)
    port = service.worker_ports[0]
    assert f"worker-0 did not start (exit 2, port {port}); its log ends:\n" in message
    assert f"tf.data service worker on port {port} did not start" in message  # the worker's own
