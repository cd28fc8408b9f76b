"""Contract test: `submit` with the real kfp.Client against a local stand-in of the KFP v2beta1 API
(tests/fakes/fakekfp.py) that checks every request body; no cluster involved."""

import re
import warnings

import pytest

from fakes.fakekfp import FakeKfp
from tfrecord_suite.kfp.submit import submit_pipeline

PARAMS = {
    "input_uri": "gs://b/raw.csv",
    "registry_root": "gs://b/reg",
    "dataset_name": "rows",
    "epochs": 3,
}


def test_first_submit_uploads_pipeline_and_starts_a_run():
    with FakeKfp() as api, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = submit_pipeline(host=api.url, experiment="exp", params=PARAMS, wait=True, timeout=30)
        assert api.errors == []
        paths = [(r["method"], r["path"]) for r in api.requests]
        assert ("POST", "/apis/v2beta1/pipelines/upload") in paths
        assert ("POST", "/apis/v2beta1/runs") in paths
        run = next(r for r in api.requests if r["path"] == "/apis/v2beta1/runs")["json"]
        assert run["runtime_config"]["parameters"] == PARAMS
        assert run["service_account"] == "tfrecord-suite"  # Workload Identity, no keys
        upload = next(r for r in api.requests if r["path"].endswith("/upload"))["uploaded"]
        assert upload["pipelineInfo"]["name"] == "tfrecord-suite"
        assert out["state"].endswith("SUCCEEDED") and out["run_id"] in api.runs
        # a second submit adds a pipeline version instead of a second pipeline
        again = submit_pipeline(host=api.url, experiment="exp", params=PARAMS)
        assert len(api.pipelines) == 1 and len(api.versions[out["pipeline_id"]]) == 2
        assert again["version_id"] == api.versions[out["pipeline_id"]][0]["pipeline_version_id"]
        assert api.errors == []


def test_schedule_creates_a_recurring_run():
    with FakeKfp() as api, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = submit_pipeline(
            host=api.url, experiment="nightly", params=PARAMS, schedule="0 0 3 * * *"
        )
        assert api.errors == []
        job = api.recurring[out["recurring_run_id"]]
        assert job["trigger"]["cron_schedule"]["cron"] == "0 0 3 * * *"
        assert job["max_concurrency"] in ("1", 1) and not api.runs
        assert job["service_account"] == "tfrecord-suite"


@pytest.mark.parametrize("state", ["FAILED"])
def test_cli_wait_exits_nonzero_on_failed_run(state):
    from click.testing import CliRunner

    from tfrecord_suite.cli.main import main

    with FakeKfp(final_state=state) as api:
        result = CliRunner().invoke(
            main,
            [
                "submit",
                "--host",
                api.url,
                "--wait",
                "--json",
                *[f"--param={k}={v}" for k, v in PARAMS.items()],
            ],
        )
    assert result.exit_code == 1, result.output
    assert "FAILED" in result.output


def test_cli_submit_compiles_with_the_placement_flags():
    from click.testing import CliRunner

    from tfrecord_suite.cli.main import main

    with FakeKfp() as api, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = CliRunner().invoke(
            main,
            ["submit", "--host", api.url, "--param", "input_uri=gs://b/raw.csv",
             "--accelerator-type", "nvidia-l4", "--accelerator-count", "2", "--json"],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        upload = next(r for r in api.requests if r["path"].endswith("/upload"))["uploaded"]
    train = upload["deploymentSpec"]["executors"]["exec-train-op"]["container"]["resources"]
    assert train["accelerator"]["resourceCount"] == "2"


@pytest.mark.parametrize(
    ("params", "root", "schedule", "message"),
    [
        (
            {**PARAMS, "registry_root": "/data/reg"},
            None,
            None,
            "registry_root=/data/reg is a local path",
        ),
        (
            {**PARAMS, "input_uri": "s3://b/raw.csv"},
            None,
            None,
            "s3:// is not a storage this suite",
        ),
        (PARAMS, "hdfs://nn/root", None, "--pipeline-root hdfs://nn/root"),
        (PARAMS, None, "0 3 * * *", "for this one: '0 0 3 * * *'"),
    ],
)
def test_submit_refuses_what_a_cluster_run_could_not_do(params, root, schedule, message):
    from tfrecord_suite.errors import UserError

    with FakeKfp() as api:
        with pytest.raises(UserError, match=re.escape(message)):
            submit_pipeline(
                host=api.url, experiment="e", params=params, pipeline_root=root, schedule=schedule
            )
        assert api.requests == []  # nothing was uploaded


def test_submit_passes_the_pipeline_root_and_compiles_for_the_registry():
    from tfrecord_suite.kfp.placement import Deployment

    with FakeKfp() as api, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        submit_pipeline(
            host=api.url,
            experiment="e",
            params=PARAMS,
            pipeline_root="minio://mlpipeline/v2/artifacts",
            deployment=Deployment(image_registry="localhost:5000/ml", image_tag="dev"),
        )
        assert api.errors == []
        run = next(r for r in api.requests if r["path"] == "/apis/v2beta1/runs")["json"]
        assert run["runtime_config"]["pipeline_root"] == "minio://mlpipeline/v2/artifacts"
        upload = next(r for r in api.requests if r["path"].endswith("/upload"))["uploaded"]
        images = {e["container"]["image"] for e in upload["deploymentSpec"]["executors"].values()}
        assert images == {"localhost:5000/ml/tfrecord-suite:dev"}
