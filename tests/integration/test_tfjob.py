"""The TFJob launcher: the rendered object, checked field by field and against the operator's
OpenAPI types, and create/watch/delete/cleanup against a Kubernetes API stand-in (contract test,
tests/fakes/fakek8s.py). The multi-worker training itself runs for real in tests/integration/test_train.py."""

import os
import signal

import pytest

from fakes.chief import write_chief_outputs
from fakes.fakek8s import Artifact, FakeKubernetes, Scenario, kubeconfig, train_step, validate_tfjob
from tfrecord_suite.cli import options
from tfrecord_suite.io import storage
from tfrecord_suite.launch.job import JobCancelled, JobConfig, JobError, JobLauncher, job_name
from tfrecord_suite.launch.placement import Placement
from tfrecord_suite.launch.tfjob import TFJob, render_tfjob
from tfrecord_suite.train.reader import ReaderConfig
from tfrecord_suite.train.trainer import TrainConfig

GPU = Placement(accelerator_type="nvidia-l4", accelerator_count=2, shm_size="16Gi", launch_job=True)


def config(**kw):
    base = dict(
        name="tfrs-train-abc",
        namespace="ml",
        image="ghcr.io/tfrecord-suite/tfrecord-suite-gpu:0.1.0",
        trainer_args=["--dataset", "gs://b/reg/digits@1.0.0", "--model-dir", "gs://b/m"],
        workers=4,
        placement=GPU,
        run_id="run-123",
        service_account="pipeline-runner",
        owner={"apiVersion": "v1", "kind": "Pod", "name": "train-op-pod", "uid": "u-1"},
        poll_seconds=0,
    )
    base.update(kw)
    return JobConfig(**base)


def test_render_one_chief_three_workers_two_gpus_each():
    job = render_tfjob(config())
    assert validate_tfjob(job) == []
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "TFJob")
    assert job["metadata"] == {
        "name": "tfrs-train-abc",
        "namespace": "ml",
        "labels": {
            "app.kubernetes.io/name": "tfrecord-suite",
            "app.kubernetes.io/component": "trainer",
            "tfrecord-suite/run": "run-123",
        },
        # the launcher's pod owns the job: deleting the pod deletes the job and its replicas
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "Pod", "name": "train-op-pod", "uid": "u-1"}
        ],
    }
    specs = job["spec"]["tfReplicaSpecs"]
    assert set(specs) == {"Chief", "Worker"}
    assert specs["Chief"]["replicas"] == 1 and specs["Worker"]["replicas"] == 3
    assert job["spec"]["runPolicy"]["backoffLimit"] == 3
    # a job the launcher could not delete goes an hour after it finished
    assert job["spec"]["runPolicy"]["ttlSecondsAfterFinished"] == 3600
    for spec in specs.values():
        assert spec["restartPolicy"] == "OnFailure"
        meta = spec["template"]["metadata"]
        assert meta["labels"]["sidecar.istio.io/inject"] == "false"
        assert meta["annotations"] == {"sidecar.istio.io/inject": "false"}
        pod = spec["template"]["spec"]
        assert pod["serviceAccountName"] == "pipeline-runner"  # the run's own account
        assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
        assert pod["tolerations"] == [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
        ]
        assert pod["volumes"] == [
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}
        ]
        (c,) = pod["containers"]
        assert c["name"] == "tensorflow"  # the only container the operator manages
        assert c["image"].endswith("tfrecord-suite-gpu:0.1.0")
        assert c["command"] == ["tfrecord-suite", "train"]
        assert c["args"][:2] == ["--dataset", "gs://b/reg/digits@1.0.0"]
        assert c["resources"] == {
            "requests": {"cpu": "4", "memory": "16Gi"},
            "limits": {"nvidia.com/gpu": "2"},
        }
        assert c["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]
        assert c["securityContext"]["runAsNonRoot"] is True


def test_tpu_replicas_go_to_the_tpu_node_pool():
    tpu = Placement(
        accelerator_type="tpu-v5-lite-podslice", accelerator_count=4, tpu_topology="2x2"
    )
    job = render_tfjob(config(workers=1, placement=tpu))
    assert validate_tfjob(job) == []
    assert set(job["spec"]["tfReplicaSpecs"]) == {"Chief"}
    pod = job["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
        "cloud.google.com/gke-tpu-topology": "2x2",
    }
    assert pod["containers"][0]["resources"]["limits"] == {"google.com/tpu": "4"}


def test_schema_check_reports_bad_objects():
    job = render_tfjob(config())
    job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = "3"
    job["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"][0]["name"] = "main"
    job["spec"]["runPolicy"]["cleanupPolicy"] = "All"
    del job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"]
    problems = "\n".join(validate_tfjob(job))
    assert ".spec.tfReplicaSpecs.Worker.replicas: expected int, got str" in problems
    assert ".spec.runPolicy.cleanupPolicy: unknown field" in problems
    assert "Chief: no container named 'tensorflow'" in problems
    assert "`name`, must not be `None`" in problems


def test_job_names_are_stable_dns_labels():
    a, b = job_name("run-1"), job_name("run-1")
    assert a == b and a != job_name("run-2") and len(a) <= 63 and a.islower()


def test_success_polls_reports_and_deletes():
    steps = [("Created", ""), ("Running", ""), ("Running", ""), ("Succeeded", "done")]
    with FakeKubernetes(Scenario(steps)) as k8s:
        result = JobLauncher(TFJob, k8s.api_client(), sleep=lambda s: None).run(config())
        assert result["state"] == "Succeeded"
        assert sorted(result["replicas"]) == ["chief-0", "worker-0", "worker-1", "worker-2"]
        assert "epoch 1/1" in result["replicas"]["chief-0"]["log"]
        assert k8s.deleted == [("ml", "tfrs-train-abc", "Foreground")]
        gets = [p for m, p in k8s.requests if m == "GET" and p.endswith("/tfjobs/tfrs-train-abc")]
        assert len(gets) == 4


def test_failing_replica_fails_the_task_with_its_error():
    log = "Traceback (most recent call last):\nValueError: --epochs must be at least 1\n"
    scenario = Scenario(
        [("Running", ""), ("Failed", "TFJob has failed because 1 Worker replica(s) failed.")],
        fail_replica="worker-1",
        fail_log=log,
    )
    with FakeKubernetes(scenario) as k8s:
        with pytest.raises(JobError) as err:
            JobLauncher(TFJob, k8s.api_client(), sleep=lambda s: None).run(config())
        text = str(err.value)
        assert "1 Worker replica(s) failed" in text
        assert "worker-1 (pod tfrs-train-abc-worker-1, phase Failed, exit code 1)" in text
        assert "ValueError: --epochs must be at least 1" in text
        assert "chief-0" not in text  # only the failing replica's log
        assert k8s.deleted == [("ml", "tfrs-train-abc", "Foreground")]
    with FakeKubernetes(scenario) as k8s:
        with pytest.raises(JobError):
            JobLauncher(TFJob, k8s.api_client(), sleep=lambda s: None).run(
                config(keep_on_failure=True)
            )
        assert k8s.deleted == [] and ("ml", "tfrs-train-abc") in k8s.jobs


def test_cancellation_deletes_the_job_even_when_keeping_failures():
    calls = []

    def sleep(_):
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGTERM)  # what kfp does to a cancelled task's pod

    with FakeKubernetes(Scenario([("Running", "")])) as k8s:
        before = signal.getsignal(signal.SIGTERM)
        with pytest.raises(JobCancelled):
            JobLauncher(TFJob, k8s.api_client(), sleep=sleep).run(config(keep_on_failure=True))
        assert k8s.deleted == [("ml", "tfrs-train-abc", "Foreground")]
        assert signal.getsignal(signal.SIGTERM) is before


def test_transient_api_errors_are_retried():
    with FakeKubernetes(Scenario([("Succeeded", "")]), errors=[503, 429, 500]) as k8s:
        result = JobLauncher(TFJob, k8s.api_client(), sleep=lambda s: None).run(config())
        assert result["state"] == "Succeeded"
        assert [m for m, _ in k8s.requests[:4]] == ["POST"] * 4


def test_timeout_gives_up_and_cleans_up():
    now = [0.0]

    def sleep(s):
        now[0] += 60

    with FakeKubernetes(Scenario([("Running", "")])) as k8s:
        launcher = JobLauncher(TFJob, k8s.api_client(), sleep=sleep, clock=lambda: now[0])
        with pytest.raises(JobError, match="TimedOut: not finished after 300 s"):
            launcher.run(config(timeout_seconds=300))
        assert k8s.deleted


def test_retried_task_adopts_its_own_job_but_not_another_runs():
    with FakeKubernetes(Scenario([("Running", ""), ("Succeeded", "")])) as k8s:
        k8s.jobs[("ml", "tfrs-train-abc")] = render_tfjob(config())  # from the first attempt
        result = JobLauncher(TFJob, k8s.api_client(), sleep=lambda s: None).run(config())
        assert result["state"] == "Succeeded"
    with FakeKubernetes(Scenario([("Running", "")])) as k8s:
        k8s.jobs[("ml", "tfrs-train-abc")] = render_tfjob(config(run_id="someone-else"))
        with pytest.raises(JobError, match="belongs to another run"):
            JobLauncher(TFJob, k8s.api_client(), sleep=lambda s: None).run(config())
        assert ("ml", "tfrs-train-abc") in k8s.jobs  # not ours: left alone


def test_train_task_with_workers_launches_a_tfjob(tmp_path, monkeypatch):
    """The kfp train step's multi-worker path: kubeconfig client, TFJob args and image, the
    chief writing under the registry (replicas cannot reach the step's disk), and the model,
    metrics and report copied into the artifact's local path for Kubeflow to keep."""
    registry = str(tmp_path / "reg")
    shared = os.path.join(registry, "_runs", job_name("run-9"), "model")

    # a cluster with only the Training Operator v1: launcher auto falls back to TFJob
    with FakeKubernetes(Scenario([("Succeeded", "")]), serves=("tfjobs",)) as k8s:
        monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path, k8s.url))
        monkeypatch.setattr("tfrecord_suite.launch.job.current_namespace", lambda: "ml")
        # what the chief writes at the end of a real run (tests/integration/test_train.py runs one)
        write_chief_outputs(shared, replicas=3, accuracy=0.9, per_second=123.4)
        storage.write_text(os.path.join(shared, "checkpoints", "ckpt-1"), "stays behind")
        local = tmp_path / "minio" / "mlpipeline" / "run-9" / "model"
        model = Artifact("minio://mlpipeline/run-9/model", path=str(local))
        report = Artifact("minio://mlpipeline/run-9/report", path=str(tmp_path / "report.md"))
        metrics = train_step(
            f"{registry}/digits@1.0.0",
            tmp_path,
            model=model,
            report=report,
            epochs=3,
            batch_size=32,
            workers=3,
            placement=GPU.to_json(),
            run_id="run-9",
            trainer_image="registry.example.com/team/tfrecord-suite-gpu:v7",
        )["metrics"]
        (job,) = k8s.created
        assert k8s.deleted == [("ml", job_name("run-9"), "Foreground")]
    assert job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] == 2
    chief = job["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"][0]
    assert chief["image"] == "registry.example.com/team/tfrecord-suite-gpu:v7"
    assert chief["args"] == [
        "--dataset", f"{registry}/digits@1.0.0", "--model-dir", shared,
        "--strategy", "multi_worker", "--epochs", "3", "--batch-size", "32",
        "--learning-rate", "0.01",
    ]  # fmt: skip
    assert model.metadata["strategy"] == "MultiWorkerMirroredStrategy"
    assert model.metadata["export_subdir"] == "export"
    assert metrics.logged["test_accuracy"] == 0.9
    assert open(report.path).read() == "# report"
    # Kubeflow keeps what is under the artifact's local path: the export and the reports
    assert (local / "export" / "saved_model.pb").read_text() == "pb"
    assert (local / "metrics.json").is_file() and not (local / "checkpoints").exists()


def test_trainer_args_round_trip_through_the_cli():
    """The replicas parse the launcher's args back into the same TrainConfig."""
    from click.testing import CliRunner

    from tfrecord_suite.cli.main import main

    cfg = TrainConfig(
        dataset="gs://b/reg/digits@1",
        model_dir="gs://b/m",
        strategy="multi_worker",
        epochs=7,
        reader=ReaderConfig(image_size=(32, 48), shuffle_buffer=500, deterministic=True),
        verify=False,
        model_fn=None,
    )
    seen = {}
    import tfrecord_suite.train.trainer as trainer

    def fake_run(c):
        seen["config"] = c
        raise SystemExit(0)

    orig = trainer.run_train
    trainer.run_train = fake_run
    try:
        CliRunner().invoke(main, ["train", *options.to_args(cfg)], catch_exceptions=False)
    finally:
        trainer.run_train = orig
    assert seen["config"] == cfg


@pytest.mark.slow
def test_train_step_with_two_workers_trains_for_real_through_the_launcher(
    published_digits, tmp_path, monkeypatch
):
    """The kfp train step with workers=2: launcher -> TFJob -> a stand-in operator that runs the
    chief and the worker as real processes with TF_CONFIG (MultiWorkerMirroredStrategy on
    127.0.0.1) -> the chief's model and metrics fill the step's artifacts."""
    import sys

    from fakes.fakek8s import LocalOperator

    operator = LocalOperator([sys.executable, "-m", "tfrecord_suite.cli"], dict(os.environ))
    model_dir = str(tmp_path / "model")  # where train_step puts the model artifact
    with FakeKubernetes(operator, log_dir=str(tmp_path)) as k8s:
        monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path, k8s.url))
        monkeypatch.setattr("tfrecord_suite.launch.job.current_namespace", lambda: "ml")
        out = train_step(
            published_digits["ref"],
            tmp_path,
            dataset_digest=published_digits["manifest"].content_digest,
            epochs=2,
            batch_size=16,
            workers=2,
            run_id="run-real",
            launcher="tfjob",
        )
        model, metrics, cm = out["model"], out["metrics"], out["classification_metrics"]
        assert k8s.deleted == [("ml", job_name("run-real"), "Foreground")]
    assert model.metadata["strategy"] == "CollectiveAllReduceStrategy"  # = MultiWorkerMirrored
    assert model.metadata["replicas"] == 2
    assert os.path.isfile(os.path.join(model_dir, "export", "saved_model.pb"))
    assert 0.0 <= metrics.logged["test_accuracy"] <= 1.0  # two short epochs: learning not asserted
    classes, matrix = cm.logged["confusion"]
    assert (
        len(classes) == 10
        and sum(map(sum, matrix)) == published_digits["manifest"].splits["test"]["records"]
    )
