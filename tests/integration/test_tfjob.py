"""The TFJob launcher: the rendered object, field by field; and against the real API server
(tests/realparts, marker ``k8s``): every TFJob it renders accepted by the Training Operator
v1.8.1's CRD with strict field validation, broken ones refused; create, watch, report, delete,
cancel, retry and time out, with the local operator (tests/realparts/local_operator.py) running
the replicas as local processes with the TF_CONFIG the operator gives them and serving their logs
to the API server as a kubelet does; API errors no healthy server answers (429, 5xx) from a
fault-injecting proxy in front of it (tests/fakes/faultproxy.py). End to end, the train step
with two workers trains for real through a TFJob."""

import json
import os
import signal
import time

import pytest
from support import api_calls, kept, launch_as, launcher_job_config, stored_job

from fakes.artifacts import Artifact, train_step
from fakes.chief import write_chief_outputs
from realparts.local_operator import LocalOperator, node_program
from realparts.processes import wait_for
from tfrecord_suite import flags
from tfrecord_suite.io import storage
from tfrecord_suite.launch.job import JobLauncher, job_name
from tfrecord_suite.launch.kube import JobCancelled, JobError
from tfrecord_suite.launch.placement import Placement
from tfrecord_suite.launch.tfjob import TFJob, render_tfjob
from tfrecord_suite.train.reader_config import ReaderConfig
from tfrecord_suite.train.trainer import TrainConfig

GPU = Placement(accelerator_type="nvidia-l4", accelerator_count=2, shm_size="16Gi", launch_job=True)
TPU = Placement(accelerator_type="tpu-v5-lite-podslice", accelerator_count=4, tpu_topology="2x2")


def config(**kw):
    """:func:`support.launcher_job_config` as this module's tests launch it."""
    return launcher_job_config(**{"placement": GPU, "service_account": "pipeline-runner", **kw})


def test_render_one_chief_three_workers_two_gpus_each():
    job = render_tfjob(config())
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
        assert pod["securityContext"]["runAsNonRoot"] is True  # all of it: test_pod_security.py


def test_tpu_replicas_go_to_the_tpu_node_pool():
    job = render_tfjob(config(workers=1, placement=TPU))
    assert set(job["spec"]["tfReplicaSpecs"]) == {"Chief"}
    pod = job["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
        "cloud.google.com/gke-tpu-topology": "2x2",
    }
    assert pod["containers"][0]["resources"]["limits"] == {"google.com/tpu": "4"}


# ------------------------------------------------------------- the real CRD judges the objects


def _dry_run_create(k8s, namespace, job):
    from kubernetes import client

    return client.CustomObjectsApi(k8s.api_client()).create_namespaced_custom_object(
        TFJob.group, TFJob.version, namespace, TFJob.plural, job,
        dry_run="All", field_validation="Strict",
    )  # fmt: skip


@pytest.mark.k8s
def test_the_real_crd_accepts_every_tfjob_the_launcher_renders(k8s, k8s_namespace):
    """Created (server-side dry run) with strict field validation, as the launcher creates
    them: every placement, each kind of Secret, a priority class."""
    from tfrecord_suite.launch.credentials import Credentials

    variants = {
        "cpu": config(placement=Placement()),
        "gpu": config(),
        "tpu": config(workers=1, placement=TPU),
        "gcs-key": config(credentials=Credentials("gcs-sa-key", "gcs-key", "regcred")),
        "s3-keys": config(credentials=Credentials("bucket-keys", "s3-keys")),
        "priority": config(placement=Placement(priority_class="tfrecord-suite-gpu-training")),
        "no-owner": config(owner=None, service_account=""),
    }
    for variant, cfg in variants.items():
        cfg.namespace = k8s_namespace
        job = render_tfjob(cfg)
        created = _dry_run_create(k8s, k8s_namespace, job)
        # nothing dropped: the server would store all that was sent (and its defaults)
        assert kept(job, created) == [], variant


BAD_TFJOBS = {
    "unknown field": (
        lambda job: job["spec"]["runPolicy"].update(cleanupPolicy="All"),
        400, 'strict decoding error: unknown field "spec.runPolicy.cleanupPolicy"',
    ),
    "wrong type": (
        lambda job: job["spec"]["tfReplicaSpecs"]["Worker"].update(replicas="3"),
        422, "spec.tfReplicaSpecs.Worker.replicas in body must be of type integer",
    ),
    "missing field": (
        lambda job: job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].pop("name"),
        422, "spec.tfReplicaSpecs.Worker.template.spec.containers[0].name: Required value",
    ),
}  # fmt: skip


@pytest.mark.k8s
@pytest.mark.parametrize("case", list(BAD_TFJOBS))
def test_the_real_crd_refuses_a_broken_tfjob(k8s, k8s_namespace, case):
    from kubernetes.client.exceptions import ApiException

    breaks, status, message = BAD_TFJOBS[case]
    job = render_tfjob(config(namespace=k8s_namespace, owner=None))
    breaks(job)
    with pytest.raises(ApiException) as err:
        _dry_run_create(k8s, k8s_namespace, job)
    assert err.value.status == status
    assert message in json.loads(err.value.body)["message"]


def test_job_names_are_stable_dns_labels():
    a, b = job_name("run-1"), job_name("run-1")
    assert a == b and a != job_name("run-2") and len(a) <= 63 and a.islower()


# ------------------------------------------------------------------------------ lifecycle


def _live(runner, **kw):
    """A job config in the runner's namespace, polled every 0.2 s, owned by nobody (an owner
    that does not exist would make the garbage collector delete the job at once)."""
    return config(namespace=runner.namespace, owner=None, service_account="", poll_seconds=0.2,
                  **kw)  # fmt: skip


def _deleted(k8s, runner):
    """Wait until the TFJob is gone (deleted in the background: its pods after it); the runner's
    delete calls."""
    wait_for(
        lambda: stored_job(k8s.api_client(), TFJob, runner.namespace, "tfrs-train-abc") is None,
        what="the TFJob deleted",
    )
    return [c[1] for c in api_calls(k8s, runner.user, "tfjobs") if c[0] == "delete"]


NODE_OK = "{node}: epoch 1/1\n{node}: done\n"
TRACEBACK = "Traceback (most recent call last):\nValueError: --epochs must be at least 1\n"


@pytest.mark.k8s
def test_success_polls_reports_and_deletes(k8s, k8s_runner, tmp_path):
    program = lambda node: node_program(NODE_OK.format(node=node))  # noqa: E731
    with LocalOperator(k8s, k8s_runner.namespace, tmp_path, program=program):
        result = JobLauncher(TFJob, k8s_runner.api).run(_live(k8s_runner))
    assert result["state"] == "Succeeded"
    assert sorted(result["replicas"]) == ["chief-0", "worker-0", "worker-1", "worker-2"]
    assert result["replicas"]["worker-1"]["pod"] == "tfrs-train-abc-worker-1"
    # each replica's log, read through the API server (pods/log) from its process
    assert result["replicas"]["chief-0"]["log"] == NODE_OK.format(node="chief-0")
    gets = [c for c in api_calls(k8s, k8s_runner.user, "tfjobs") if c[0] == "get"]
    assert len(gets) >= 1 and {c[1] for c in gets} == {200}  # polled until it succeeded
    assert _deleted(k8s, k8s_runner) == [200]


@pytest.mark.k8s
def test_failing_replica_fails_the_task_with_its_error(k8s, k8s_runner, tmp_path):
    ns = k8s_runner.namespace

    def program(node):  # worker-1 fails; the others train on until the job is deleted
        if node == "worker-1":
            return node_program("starting\n" + TRACEBACK, 1)
        return node_program("training\n", None)

    with LocalOperator(k8s, ns, tmp_path, program=program):
        with pytest.raises(JobError) as err:
            JobLauncher(TFJob, k8s_runner.api).run(_live(k8s_runner))
        text = str(err.value)
        assert f"TFJob {ns}/tfrs-train-abc has failed because 1 Worker replica(s) failed" in text
        assert "worker-1 (pod tfrs-train-abc-worker-1, phase Failed, exit code 1)" in text
        assert "ValueError: --epochs must be at least 1" in text
        assert "chief-0" not in text  # only the failing replica's log
        assert _deleted(k8s, k8s_runner) == [200]

        # kept on failure: the job and its pods stay for inspection
        with pytest.raises(JobError):
            JobLauncher(TFJob, k8s_runner.api).run(_live(k8s_runner, keep_on_failure=True))
        assert (
            stored_job(k8s.api_client(), TFJob, ns, "tfrs-train-abc")["status"]["replicaStatuses"][
                "Worker"
            ]["failed"]
            == 1
        )
        deletes = [c for c in api_calls(k8s, k8s_runner.user, "tfjobs") if c[0] == "delete"]
        assert len(deletes) == 1  # the first run's


@pytest.mark.k8s
def test_cancellation_deletes_the_job_even_when_keeping_failures(k8s, k8s_runner, tmp_path):
    calls = []

    def sleep(seconds):
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGTERM)  # what kfp does to a cancelled task's pod
        time.sleep(seconds)

    with LocalOperator(
        k8s, k8s_runner.namespace, tmp_path, program=lambda n: node_program("", None)
    ):
        before = signal.getsignal(signal.SIGTERM)
        with pytest.raises(JobCancelled):
            JobLauncher(TFJob, k8s_runner.api, sleep=sleep).run(
                _live(k8s_runner, keep_on_failure=True)
            )
        assert signal.getsignal(signal.SIGTERM) is before
        assert _deleted(k8s, k8s_runner) == [200]


@pytest.mark.k8s
def test_transient_api_errors_are_retried(k8s, k8s_runner, tmp_path):
    """503, 429 and 500 (which a healthy API server never answers) from a proxy in front of the
    real one, to the launcher's first calls: retried, and the job created once."""
    from kubernetes import client

    from fakes.faultproxy import FaultProxy

    with (
        FaultProxy(
            k8s.url, every=0, first=("503", "429", "500"), ca_file=str(k8s.ca_file)
        ) as proxy,
        LocalOperator(k8s, k8s_runner.namespace, tmp_path, program=lambda n: node_program()),
    ):
        configuration = client.Configuration()
        configuration.host = proxy.url
        configuration.api_key = dict(k8s_runner.api.configuration.api_key)
        result = JobLauncher(TFJob, client.ApiClient(configuration)).run(_live(k8s_runner))
    assert result["state"] == "Succeeded"
    assert proxy.faults == {"503": 1, "429": 1, "500": 1}
    # what reached the server: one create, after the three answered by the proxy
    assert [c[:2] for c in api_calls(k8s, k8s_runner.user, "tfjobs") if c[0] == "create"] == [
        ("create", 201)
    ]


@pytest.mark.k8s
def test_timeout_gives_up_and_cleans_up(k8s, k8s_runner, tmp_path):
    now = [0.0]

    def sleep(seconds):
        now[0] += 60
        time.sleep(seconds)

    with LocalOperator(
        k8s, k8s_runner.namespace, tmp_path, program=lambda n: node_program("", None)
    ) as operator:
        launcher = JobLauncher(TFJob, k8s_runner.api, sleep=sleep, clock=lambda: now[0])
        with pytest.raises(JobError, match="TimedOut: not finished after 300 s"):
            launcher.run(_live(k8s_runner, timeout_seconds=300))
        assert _deleted(k8s, k8s_runner) == [200]
        # and the replicas with it: the garbage collector deleted their pods
        (job,) = operator.jobs.values()
        wait_for(lambda: all(n.process.poll() is not None for n in job.nodes), what="stopped")


@pytest.mark.k8s
def test_retried_task_adopts_its_own_job_but_not_another_runs(k8s, k8s_runner, tmp_path):
    from kubernetes import client

    ns = k8s_runner.namespace
    custom = client.CustomObjectsApi(k8s.api_client())

    def earlier(**kw):  # what a first attempt created
        return custom.create_namespaced_custom_object(
            TFJob.group, TFJob.version, ns, TFJob.plural, render_tfjob(_live(k8s_runner, **kw))
        )

    with LocalOperator(k8s, ns, tmp_path, program=lambda n: node_program()) as operator:
        first = earlier()
        result = JobLauncher(TFJob, k8s_runner.api).run(_live(k8s_runner))
        assert result["state"] == "Succeeded"
        assert list(operator.jobs) == [first["metadata"]["uid"]]  # adopted, not made again
    assert _deleted(k8s, k8s_runner) == [200]
    earlier(run_id="someone-else")
    with pytest.raises(JobError, match="belongs to another run"):
        JobLauncher(TFJob, k8s_runner.api).run(_live(k8s_runner))
    assert (
        stored_job(k8s.api_client(), TFJob, ns, "tfrs-train-abc") is not None
    )  # not ours: left alone
    assert [c[1] for c in api_calls(k8s, k8s_runner.user, "tfjobs") if c[0] == "create"] == [
        409,
        409,
    ]


# ------------------------------------------------------------------------------ kfp train step


@pytest.mark.k8s
def test_train_task_with_workers_launches_a_tfjob(k8s, k8s_runner, tmp_path, monkeypatch):
    """The kfp train step's multi-worker path: kubeconfig client, TFJob args and image, the
    chief writing under the registry (replicas cannot reach the step's disk), and the model,
    metrics and report copied into the artifact's local path for Kubeflow to keep."""
    registry = str(tmp_path / "reg")
    shared = os.path.join(registry, "_runs", job_name("run-9"), "model")

    # --launcher tfjob (auto picks it on a cluster with only the Training Operator v1:
    # test_trainjob.py test_discovery_picks_what_the_cluster_serves)
    launch_as(monkeypatch, tmp_path, k8s_runner)
    with LocalOperator(k8s, k8s_runner.namespace, tmp_path / "nodes",
                       program=lambda n: node_program()) as operator:  # fmt: skip
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
            launcher="tfjob",
        )["metrics"]
        (job,) = [j.object for j in operator.jobs.values()]
    assert job["metadata"]["name"] == job_name("run-9")
    assert _deleted(k8s, k8s_runner) == [200]
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
        CliRunner().invoke(main, ["train", *flags.to_args(cfg)], catch_exceptions=False)
    finally:
        trainer.run_train = orig
    assert seen["config"] == cfg


@pytest.mark.k8s
@pytest.mark.slow
def test_train_step_with_two_workers_trains_for_real_through_the_launcher(
    k8s, k8s_runner, published_digits, tmp_path, monkeypatch
):
    """The kfp train step with workers=2: launcher -> TFJob on the real server -> the local
    operator runs the chief and the worker as real processes with TF_CONFIG
    (MultiWorkerMirroredStrategy on 127.0.0.1) -> the chief's model and metrics fill the step's
    artifacts."""
    launch_as(monkeypatch, tmp_path, k8s_runner)
    model_dir = str(tmp_path / "model")  # where train_step puts the model artifact
    with LocalOperator(k8s, k8s_runner.namespace, tmp_path / "nodes") as operator:
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
        (job,) = operator.jobs.values()
        logs = operator.logs()
    assert (job.kind, job.name) == ("TFJob", job_name("run-real"))
    assert _deleted(k8s, k8s_runner) == [200]
    assert sorted(n.name for n in job.nodes) == ["chief-0", "worker-0"]
    assert all("CollectiveAllReduceStrategy, 2 replicas" in text for text in logs.values())
    assert model.metadata["strategy"] == "CollectiveAllReduceStrategy"  # = MultiWorkerMirrored
    assert model.metadata["replicas"] == 2
    assert os.path.isfile(os.path.join(model_dir, "export", "saved_model.pb"))
    assert 0.0 <= metrics.logged["test_accuracy"] <= 1.0  # two short epochs: learning not asserted
    classes, matrix = cm.logged["confusion"]
    assert (
        len(classes) == 10
        and sum(map(sum, matrix)) == published_digits["manifest"].splits["test"]["records"]
    )
