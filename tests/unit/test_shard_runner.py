"""Which runner the shard step runs on, and which runners may be given local paths."""

import logging

import pytest

from tfrecord_suite.errors import UserError
from tfrecord_suite.shard.runner import (
    beam_option,
    check_paths_reach_runner,
    runner_args,
    where_workers_run,
)

HERE = [
    [],
    ["--runner=DirectRunner"],
    ["--runner", "FnApiRunner", "--direct_num_workers=2"],
    ["--runner=PrismRunner", "--prism_location=/opt/prism"],
    ["--runner=apache_beam.runners.portability.flink_runner.FlinkRunner"],
    ["--runner=FlinkRunner", "--flink_master=[local]", "--parallelism=2"],
    ["--runner=FlinkRunner", "--job_endpoint=localhost:8099", "--environment_type=PROCESS"],
    ["--runner=SparkRunner", "--spark_master_url=local[2]"],
    ["--runner=SparkRunner", "--spark_master_url", "spark://127.0.0.1:7077"],
    ["--runner=PortableRunner", "--job_endpoint=[::1]:8099", "--environment_type=LOOPBACK"],
    ["--runner=PortableRunner", "--job_endpoint=embed", "--environment_type=loopback"],
]
ELSEWHERE = {
    "--runner DataflowRunner runs on remote workers": ["--runner", "DataflowRunner"],
    "--runner FlinkRunner runs its SDK workers in DOCKER environments": [
        "--runner=FlinkRunner",
        "--environment_type=DOCKER",
    ],
    "--runner FlinkRunner runs on --flink_master http://flink.example:8081": [
        "--runner=FlinkRunner",
        "--flink_master=http://flink.example:8081",
    ],
    "--runner SparkRunner runs on --job_endpoint jobs.example:8099": [
        "--runner=SparkRunner",
        "--job_endpoint=jobs.example:8099",
        "--environment_type=PROCESS",
    ],
    # a job server's own default is DOCKER: containers see none of this disk
    "--runner PortableRunner runs its SDK workers in DOCKER environments": [
        "--runner=PortableRunner",
        "--job_endpoint=localhost:8099",
    ],
    "--runner PrismRunner runs its SDK workers in EXTERNAL environments": [
        "--runner=PrismRunner",
        "--prism_location=/opt/prism",
        "--environment_type=EXTERNAL",
    ],
}


@pytest.mark.parametrize("args", HERE, ids=" ".join)
def test_runners_whose_workers_run_here_take_local_paths(args):
    assert where_workers_run(args) is None
    check_paths_reach_runner("/data/raw", "/data/out", args)


@pytest.mark.parametrize("why", ELSEWHERE)
def test_runners_elsewhere_refuse_local_paths_saying_why(why):
    args = ELSEWHERE[why]
    assert where_workers_run(args) == why
    with pytest.raises(UserError) as err:
        check_paths_reach_runner("gs://b/raw", "/data/out", args)
    message = str(err.value)
    assert message.startswith(f"--output /data/out is a local path but {why} that cannot see")
    assert ("--environment_type LOOPBACK or PROCESS" in message) == ("Dataflow" not in why)
    check_paths_reach_runner("gs://b/raw", "gs://b/out", args)


def test_no_runner_runs_in_process_or_on_the_prism_binary_given_never_a_download(caplog):
    caplog.set_level(logging.WARNING, "tfrecord_suite.shard.runner")
    assert runner_args([]) == ["--runner=FnApiRunner"]
    assert runner_args(["--runner", "DirectRunner", "--direct_num_workers=2"]) == [
        "--direct_num_workers=2",
        "--runner=FnApiRunner",
    ]
    assert runner_args(["--prism_location=/opt/prism"]) == [
        "--prism_location=/opt/prism",
        "--runner=PrismRunner",
        "--prism_log_level=warn",  # its INFO lines only when this step logs at INFO
    ]
    told = ["--runner=PrismRunner", "--prism_location=/p", "--prism_log_level=debug"]
    assert runner_args(told) == told
    named = ["--runner=FlinkRunner", "--parallelism=2"]
    assert runner_args(named) == named
    with pytest.raises(UserError, match="PrismRunner needs --prism_location PATH"):
        runner_args(["--runner=PrismRunner"])


def test_options_are_read_in_both_spellings_the_last_winning():
    args = ["--runner", "A", "--x=1", "--runner=B", "--flag"]
    assert beam_option(args, "runner") == "B"
    assert beam_option(args, "x") == "1"
    assert beam_option(args, "flag") is None and beam_option(args, "missing") is None
