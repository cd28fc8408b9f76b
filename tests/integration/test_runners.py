"""The shard step, unchanged, on Beam's runners beyond the in-process one: the same bytes.

Prism is built from Beam's Go module at the SDK's version, the Flink and Spark job servers from
Maven Central (``make real-parts``: ``tests/realparts/build.sh``, versions in ``versions.env``;
``tests/realparts/runners.py`` runs them). Each job server starts once per session; the pipeline's Python code runs in this process (LOOPBACK), so local
paths are given, as a user on one machine gives them. A CSV and a folder of images are sharded
on each runner into two shards per split (records of one shard come from both workers) and
published: the manifests' digests equal the in-process runner's, with the runner's own shuffle
and with the disk-backed one.
"""

import contextlib
import re
import subprocess
import sys
from typing import Any

import pytest
from support import unavailable

from tfrecord_suite.registry.datasets import Registry
from tfrecord_suite.shard.step import ShardConfig, run_shard

pytestmark = pytest.mark.runners
CLI = [sys.executable, "-m", "tfrecord_suite.cli"]


@pytest.fixture(scope="module")
def runner_inputs(tmp_path_factory) -> dict[str, str]:
    """A tiny CSV and a few images: what a runner must get right is not size."""
    from tfrecord_suite import demo_data

    root = tmp_path_factory.mktemp("runner-inputs")
    return {
        "csv": demo_data.write_penguins(str(root / "penguins.csv")),
        "images": demo_data.write_digits(str(root / "digits"), limit=60),
    }


@pytest.fixture(scope="module")
def runners():
    """Each runner's Beam options; its job server started on first use, stopped after this
    file's last test (an idle Flink or Spark job server, a JVM, keeps using a few percent of a
    core: not for the rest of the run).
    Where the runners are not built the tests skip and say so; under CI they fail."""
    from realparts import parts
    from realparts.runners import PARTS, runner_args

    missing = [p for p in PARTS if parts.built(p) is None]
    if missing:
        unavailable(f"real parts not built ({', '.join(missing)}): run `make real-parts`")
    with contextlib.ExitStack() as stack:
        args: dict[str, list[str]] = {}

        def get(name: str) -> list[str]:
            if name not in args:
                args[name] = runner_args(name, stack)
            return args[name]

        yield get


def _shard_and_publish(
    root, name: str, data: str, beam_args: list[str], shuffle: str = "auto"
) -> dict:
    """Shard ``data`` into 2 shards per split and publish it; the manifest's digests."""
    staged = str(root / f"{name}-staged")
    config = ShardConfig(
        input=data, output=staged, num_shards=2, shuffle=shuffle, beam_args=beam_args
    )
    summary = run_shard(config)
    manifest = Registry(str(root / "registry")).publish(staged, name).manifest
    return {
        "records": summary.records,
        "input_files_listed": summary.beam_metrics.get("input_files_listed"),
        "content_digest": manifest.content_digest,
        "records_digest": manifest.records_digest,
        "shards": {s["path"].rsplit("/", 1)[-1]: s["sha256"] for s in manifest.shards},
    }


@pytest.fixture(scope="module")
def in_process(tmp_path_factory, runner_inputs, runners) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("in-process")
    return {
        kind: _shard_and_publish(root, kind, data, runners("in_process"))
        for kind, data in runner_inputs.items()
    }


@pytest.mark.parametrize("runner", ["prism", "flink", "spark"])
@pytest.mark.parametrize("kind", ["csv", "images"])
def test_the_shard_step_writes_the_same_bytes_on_every_runner(
    tmp_path, runner_inputs, runners, in_process, runner, kind
):
    expected = in_process[kind]
    assert expected["records"] == {"csv": 344, "images": 60}[kind]
    assert len(expected["shards"]) == 6  # 3 splits x 2 shards
    # the CSV's records grouped into shards by the runner's own shuffle (as on a cluster), the
    # images' through this machine's disk (the default where the workers run here)
    shuffle = {"csv": "beam", "images": "auto"}[kind]
    got = _shard_and_publish(tmp_path, kind, runner_inputs[kind], runners(runner), shuffle)
    assert got == expected


def _shard_csv_through_the_cli(
    tmp_path, csv: str, beam_args: list[str], *cli_flags: str
) -> subprocess.CompletedProcess:
    """``tfrecord-suite [cli_flags] shard`` of ``csv`` into two shards per split, into
    ``tmp_path/out``, as a user types it."""
    shard = ["shard", "--input", csv, "--output", str(tmp_path / "out"), "--num-shards", "2",
             "--overwrite", "--", *beam_args]  # fmt: skip
    return subprocess.run([*CLI, *cli_flags, *shard], capture_output=True, text=True, check=True)


#: A line of stderr that warns or fails: logging's (``WARNING root: ...``, as the CLI formats it),
#: absl's from gRPC's or TensorFlow's C++ (``W0123 12:00:00.000 ...``), a traceback's first line
ALARM = re.compile(r"(WARNING|ERROR|CRITICAL) |[WEF]\d{4} |Traceback ")


def _alarms(stderr: str) -> list[str]:
    """The lines of a CLI run's stderr that warn or fail: none on a run that went well, however
    slowly its job server started (Beam's wait for it is progress, said with -v only)."""
    return [line for line in stderr.splitlines() if ALARM.match(line)]


def _publish_cli_output(tmp_path) -> Any:
    """What :func:`_shard_csv_through_the_cli` wrote, published: its manifest."""
    return Registry(str(tmp_path / "registry")).publish(str(tmp_path / "out"), "csv").manifest


def test_prism_runs_from_the_built_binary_through_the_cli(tmp_path, runner_inputs, in_process):
    """What a user types: ``--prism_location`` alone picks Prism, quietly; nothing is
    downloaded."""
    from realparts.runners import prism_binary

    prism = str(prism_binary())
    beam_args = [f"--prism_location={prism}"]
    quiet = _shard_csv_through_the_cli(tmp_path, runner_inputs["csv"], beam_args)
    assert _alarms(quiet.stderr) == [] and quiet.stdout.startswith("344 records (csv, 0 bad rows)")
    manifest = _publish_cli_output(tmp_path)
    assert manifest.content_digest == in_process["csv"]["content_digest"]
    verbose = _shard_csv_through_the_cli(tmp_path, runner_inputs["csv"], beam_args, "-v")
    assert f"running on the PrismRunner at {prism}" in verbose.stderr
    assert "Downloading prism" not in verbose.stderr and "Falling back" not in verbose.stderr


@pytest.mark.parametrize("runner", ["flink", "spark"])
def test_job_server_jar_started_by_beam_itself(tmp_path, runner_inputs, in_process, runner):
    """The launcher jar as Beam's ``--flink_job_server_jar`` / ``--spark_job_server_jar``, as a
    user types it: Beam starts and stops the job server around the run, with the heap the
    options give it, and the run says what it wrote and warns of nothing (the runner's hang-up
    at the job's end, which Beam's harness prints as a traceback, and Beam's warnings while the
    JVM starts, are kept off: shard/quiet.py)."""
    from realparts.runners import PARALLELISM, job_server_jar

    jar = job_server_jar(runner)
    embedded = {"flink": f"--parallelism={PARALLELISM}",
                "spark": f"--spark_master_url=local[{PARALLELISM}]"}  # fmt: skip
    beam_args = [f"--runner={runner.title()}Runner", f"--{runner}_job_server_jar={jar}",
                 embedded[runner], "--job_server_jvm_properties=-Xmx1g"]  # fmt: skip
    run = _shard_csv_through_the_cli(tmp_path, runner_inputs["csv"], beam_args)
    assert _alarms(run.stderr) == [] and run.stdout.startswith("344 records (csv, 0 bad rows)")
    manifest = _publish_cli_output(tmp_path)
    assert manifest.content_digest == in_process["csv"]["content_digest"]
    assert manifest.records_digest == in_process["csv"]["records_digest"]
