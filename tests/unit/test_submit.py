"""Contract test: `submit` and `retrain` with the real kfp.Client against a local stand-in of the
KFP v2beta1 API (tests/fakes/fakekfp.py) that checks every request body, the namespace rules of
single- and multi-user backends, and the bearer token of every request; no cluster involved.

What remains here is what KFP 2.17.0's real backend (tests/integration/test_kfp.py, multi-user,
on the one-node cluster: runs, recurring runs, versions reused, tokens, a denied verb) does not
cover in milliseconds: the standalone backend's rules, older and unknown backend versions, the
refusals before anything is uploaded, a failed run's exit status, the flags' mapping."""

import json
import os
import re

import pytest

from fakes.fakekfp import FakeKfp
from tfrecord_suite.kfp.endpoint import KfpEndpoint
from tfrecord_suite.kfp.submit import submit_pipeline

PARAMS = {
    "input_uri": "gs://b/raw.csv",
    "registry_root": "gs://b/reg",
    "dataset_name": "rows",
    "epochs": 3,
}


@pytest.fixture(autouse=True)
def no_kfp_context(tmp_path, monkeypatch):
    """kfp's client saves a namespace to ~/.config/kfp/context.json when it looks one up; the
    CronJob's root is read-only, so nothing here may write it (checked after each test)."""
    import kfp

    context = tmp_path / "kfp-home" / "context.json"
    monkeypatch.setattr(kfp.Client, "_LOCAL_KFP_CONTEXT", str(context))
    # and no pod namespace unless a test gives one
    monkeypatch.setattr(
        "tfrecord_suite.kfp.endpoint.POD_NAMESPACE_FILE", str(tmp_path / "no-namespace")
    )
    yield
    assert not context.exists(), "the kfp client wrote its context file"


def _submit(api, **kw):
    endpoint = kw.pop("endpoint", None) or KfpEndpoint(api.url, auth="none")
    return submit_pipeline(endpoint=endpoint, experiment=kw.pop("experiment", "exp"), **kw)


def test_first_submit_uploads_pipeline_and_starts_a_run():
    with FakeKfp() as api:
        out = _submit(api, params=PARAMS, wait=True, timeout=30)
        assert api.errors == []
        paths = [(r["method"], r["path"]) for r in api.requests]
        assert ("POST", "/apis/v2beta1/pipelines/upload") in paths
        assert ("POST", "/apis/v2beta1/runs") in paths
        run = next(r for r in api.requests if r["path"] == "/apis/v2beta1/runs")["json"]
        assert run["runtime_config"]["parameters"] == PARAMS
        # the run runs as the account Kubeflow gives pipeline runs (k8s/ binds our Role to it)
        assert "service_account" not in run or not run["service_account"]
        upload = next(r for r in api.requests if r["path"].endswith("/upload"))["uploaded"]
        assert upload["pipelineInfo"]["name"] == "tfrecord-suite"
        assert out["state"].endswith("SUCCEEDED") and out["run_id"] in api.runs
        assert out["backend"] == "2.5.0" and out["namespace"] == ""
        assert api.tokens_seen() == {None}  # standalone KFP: no credentials sent
        # the pipeline's upload names its first version after it: the run's version is the
        # one named by its content, uploaded beside it at once
        versions = api.versions[out["pipeline_id"]]
        assert [v["display_name"] for v in versions][1:] == ["tfrecord-suite"]
        assert re.fullmatch(r"0\.1\.0-[0-9a-f]{12}", versions[0]["display_name"])
        assert out["version_id"] == versions[0]["pipeline_version_id"]
        # the same pipeline again: its version is reused, nothing is uploaded a second time...
        uploads = sum(r["path"].endswith(("/upload", "/upload_version")) for r in api.requests)
        _submit(api, params=PARAMS)
        again = _submit(api, params=PARAMS)
        assert len(api.pipelines) == 1 and len(api.versions[out["pipeline_id"]]) == 2
        assert again["version_id"] == out["version_id"]
        assert (
            sum(r["path"].endswith(("/upload", "/upload_version")) for r in api.requests) == uploads
        )
        # ...and another placement is another version
        from tfrecord_suite.launch.placement import Placement

        gpu = _submit(api, params=PARAMS, placement=Placement("nvidia-l4", 1))
        assert gpu["version_id"] not in (again["version_id"], out["version_id"])
        assert api.errors == []


def test_in_cluster_service_account_token_is_sent_and_reread(tmp_path):
    """Multi-user Kubeflow from a pod: the projected token (KF_PIPELINES_SA_TOKEN_PATH), as
    `Authorization: Bearer`, on every request, read again after the kubelet rotates it; the
    runs go to the pod's namespace."""
    token = tmp_path / "token"
    token.write_text("sa-token-1\n")
    namespace = tmp_path / "namespace"
    namespace.write_text("team-a")
    with FakeKfp(multi_user=True, tokens=("sa-token-1", "sa-token-2")) as api:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("KF_PIPELINES_SA_TOKEN_PATH", str(token))
            mp.setattr("tfrecord_suite.kfp.endpoint.POD_NAMESPACE_FILE", str(namespace))
            out = _submit(api, endpoint=KfpEndpoint(api.url), params=PARAMS)
            assert api.errors == [] and out["namespace"] == "team-a"
            assert api.tokens_seen() == {"Bearer sa-token-1"}
            token.write_text("sa-token-2")  # rotated
            _submit(api, endpoint=KfpEndpoint(api.url), params=PARAMS)
        assert api.tokens_seen() == {"Bearer sa-token-1", "Bearer sa-token-2"}
        experiment = next(iter(api.experiments.values()))
        assert experiment["namespace"] == "team-a"
        (pipeline,) = api.pipelines.values()
        assert pipeline["namespace"] == "team-a"
        assert api.errors == []


def test_token_file_from_ci_and_refusals(tmp_path):
    token = tmp_path / "iap-token"
    token.write_text("ci-token")
    with FakeKfp(multi_user=True, tokens=("ci-token",)) as api:
        endpoint = KfpEndpoint(api.url, namespace="team-b", token_file=str(token))
        _submit(api, endpoint=endpoint, params=PARAMS)
        assert api.tokens_seen() == {"Bearer ci-token"} and api.errors == []
    from tfrecord_suite.errors import UserError

    with FakeKfp(multi_user=True, tokens=("ci-token",)) as api:
        # no namespace from a laptop: say which flag
        with pytest.raises(UserError, match="multi-user Kubeflow: give --namespace"):
            _submit(api, endpoint=KfpEndpoint(api.url, token_file=str(token)), params=PARAMS)
        # a wrong token: the server's 401, with a hint
        token.write_text("stale")
        with pytest.raises(UserError, match=r"401.*check --auth and the token"):
            _submit(api, endpoint=KfpEndpoint(api.url, token_file=str(token)), params=PARAMS)
        with pytest.raises(UserError, match="no token at"):
            KfpEndpoint(api.url, auth="service-account", sa_token_path=str(tmp_path / "x"))
            _submit(
                api,
                endpoint=KfpEndpoint(
                    api.url, auth="service-account", sa_token_path=str(tmp_path / "x")
                ),
                params=PARAMS,
            )
        assert not any(r["method"] == "POST" for r in api.requests)
    with FakeKfp() as api:  # standalone: a namespace is dropped, as the API server drops it
        out = _submit(api, endpoint=KfpEndpoint(api.url, namespace="team-a"), params=PARAMS)
        assert out["namespace"] == "" and api.ignored_namespaces == [] and api.errors == []


@pytest.mark.parametrize(
    ("version", "ok"),
    [("2.2.0", False), ("2.0.5", False), ("2.3.0", True), ("2.17.0", True), ("unknown", True)],
)
def test_backend_version_is_checked_before_anything_is_uploaded(version, ok, caplog):
    """Kubeflow 1.9 (KFP 2.2.0) would drop the trainer's /dev/shm (its driver has no
    emptyDirMounts); KFP's own images of 2.5-2.15 report their version as "unknown"."""
    from tfrecord_suite.errors import UserError

    with FakeKfp(version=version) as api:
        if ok:
            _submit(api, params=PARAMS)
            assert ("reports no version" in caplog.text) == (version == "unknown")
            return
        with pytest.raises(UserError, match=r"older than 2\.3\.0.*emptyDirMounts"):
            _submit(api, params=PARAMS)
        assert [r["path"] for r in api.requests] == ["/apis/v2beta1/healthz"]


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

    with FakeKfp() as api:
        result = CliRunner().invoke(
            main,
            ["submit", "--host", api.url, "--param", "input_uri=gs://b/raw.csv",
             "--accelerator-type", "nvidia-l4", "--accelerator-count", "2", "--json"],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        upload = next(r for r in api.requests if r["path"].endswith("/upload"))["uploaded"]
    train = upload["deploymentSpec"]["executors"]["exec-train"]["container"]["resources"]
    assert train["accelerator"]["resourceCount"] == "2"


def test_cli_retrain_takes_submits_placement_registry_and_endpoint_flags(tmp_path, monkeypatch):
    """retrain compiles what submit would: the same placement, images and endpoint flags."""
    from click.testing import CliRunner

    from tfrecord_suite.cli.main import main

    monkeypatch.setattr("tfrecord_suite.retrain.input_changed", lambda *a: (True, "new"))
    token = tmp_path / "token"
    token.write_text("t")
    with FakeKfp(multi_user=True, tokens=("t",)) as api:
        result = CliRunner().invoke(
            main,
            ["retrain", "--input", "gs://b/raw.csv", "--registry", "gs://b/reg",
             "--dataset", "rows", "--host", api.url, "--namespace", "team-a",
             "--token-file", str(token), "--accelerator-type", "nvidia-l4",
             "--image-registry", "europe-docker.pkg.dev/acme/ml", "--image-tag", "7",
             "--param", "epochs=2", "--json"],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["submitted"] is True
        upload = next(r for r in api.requests if r["path"].endswith("/upload"))["uploaded"]
        assert api.errors == [] and api.tokens_seen() == {"Bearer t"}
    executors = upload["deploymentSpec"]["executors"]
    assert executors["exec-train"]["container"]["image"] == (
        "europe-docker.pkg.dev/acme/ml/tfrecord-suite-gpu:7"
    )


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
            {**PARAMS, "input_uri": "minio://b/raw.csv"},
            None,
            None,
            "minio:// is not a storage this suite",
        ),
        (PARAMS, "hdfs://nn/root", None, "--pipeline-root hdfs://nn/root"),
        (PARAMS, None, "0 3 * * *", "for this one: '0 0 3 * * *'"),
    ],
)
def test_submit_refuses_what_a_cluster_run_could_not_do(params, root, schedule, message):
    from tfrecord_suite.errors import UserError

    with FakeKfp() as api:
        with pytest.raises(UserError, match=re.escape(message)):
            _submit(api, params=params, pipeline_root=root, schedule=schedule)
        assert api.requests == []  # nothing was uploaded


def test_submit_takes_s3_data_and_registries():
    """Self-hosted Kubeflow keeps data in its S3 store (SeaweedFS, MinIO): s3:// workdirs pass."""
    from tfrecord_suite.kfp.submit import check_submission

    s3 = {**PARAMS, "input_uri": "s3://b/raw.csv", "registry_root": "s3://b/reg"}
    check_submission(s3, "minio://mlpipeline/v2/artifacts", None)
    check_submission({**s3, "dataset_ref": "s3://b/reg/rows@stable"}, None, None)


def test_submit_passes_the_pipeline_root_and_compiles_for_the_registry():
    from tfrecord_suite.kfp.task_placement import Deployment

    with FakeKfp() as api:
        _submit(
            api,
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


def test_endpoint_flags_are_checked():
    from tfrecord_suite.errors import UserError

    with pytest.raises(UserError, match="with its scheme"):
        KfpEndpoint("ml-pipeline:8888")
    with pytest.raises(UserError, match="--auth 'oauth'"):
        KfpEndpoint("http://x", auth="oauth")
    with pytest.raises(UserError, match="needs --token-file"):
        KfpEndpoint("http://x", auth="token-file")
    assert os.environ.get("KF_PIPELINES_SA_TOKEN_PATH") is None


def test_retrain_settings_file_flags_win_and_params_merge(tmp_path, monkeypatch):
    """`retrain --settings FILE`: the file's keys are the command's flags, its params the
    pipeline's; a flag on the command line wins, and --param wins over params key by key."""
    from click.testing import CliRunner

    from tfrecord_suite.cli.main import main

    monkeypatch.setattr("tfrecord_suite.retrain.input_changed", lambda *a: (True, "new"))
    settings = tmp_path / "retrain.yaml"
    settings.write_text(
        "input: gs://b/raw.csv\nregistry: gs://b/reg\ndataset: rows\n"
        "accelerator-type: nvidia-l4\nimage_pull_secrets: regcred\n"
        "params:\n  epochs: 7\n  learning_rate: 0.5\n"
    )
    with FakeKfp() as api:
        result = CliRunner().invoke(
            main,
            ["retrain", "--settings", str(settings), "--host", api.url, "--dataset", "other",
             "--param", "learning_rate=0.1", "--image",
             "eu.gcr.io/acme/ml/tfrecord-suite:7", "--json"],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        (run,) = api.runs.values()
        upload = next(r for r in api.requests if r["path"].endswith("/upload"))
    params = run["runtime_config"]["parameters"]
    assert params["dataset_name"] == "other"  # the flag won
    assert (params["epochs"], params["learning_rate"]) == (7, 0.1)
    train = upload["uploaded"]["deploymentSpec"]["executors"]["exec-train"]["container"]
    assert train["image"] == "eu.gcr.io/acme/ml/tfrecord-suite-gpu:7"
    k8s = upload["platform"]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert k8s["exec-train"]["imagePullSecret"][0]["secretName"] == "regcred"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("accelerator: nvidia-l4\n", "'accelerator' is not a flag of tfrecord-suite retrain"),
        ("params: [1, 2]\n", "params must map pipeline parameters to values"),
        ("- input\n", "expected a mapping of retrain flags"),
    ],
)
def test_retrain_settings_file_refuses_what_is_not_a_flag(tmp_path, text, message):
    from click.testing import CliRunner

    from tfrecord_suite.cli.main import main

    settings = tmp_path / "retrain.yaml"
    settings.write_text(text)
    result = CliRunner().invoke(main, ["retrain", "--settings", str(settings)])
    assert result.exit_code == 2 and message in result.output, result.output


def test_image_sets_from_a_reference_and_from_the_images_component(tmp_path):
    from tfrecord_suite.images import ImageReferenceError, ImageSet

    assert ImageSet.of("eu.gcr.io/p/ml/tfrecord-suite-gpu:2026.11") == ImageSet(
        "eu.gcr.io/p/ml", "2026.11"
    )
    for bad in ("eu.gcr.io/p/ml/other:1", "tfrecord-suite:1", "eu.gcr.io/p/tfrecord-suite"):
        with pytest.raises(ImageReferenceError, match="not one of the suite's images"):
            ImageSet.of(bad)
    component = tmp_path / "kustomization.yaml"
    component.write_text(
        "images:\n- name: ghcr.io/tfrecord-suite/tfrecord-suite\n"
        "  newName: localhost:5000/team/tfrecord-suite\n  newTag: v2\n"
    )
    assert ImageSet.from_kustomization(str(tmp_path)) == ImageSet("localhost:5000/team", "v2")
    component.write_text(
        "images:\n- name: ghcr.io/tfrecord-suite/tfrecord-suite\n  newName: x/renamed\n"
    )
    with pytest.raises(ImageReferenceError, match="change only the registry"):
        ImageSet.from_kustomization(str(component))
