"""Kubeflow Trainer v2: the TrainJob and the TensorFlow runtime, checked against Trainer v2.3.0's
published CRD schemas (tests/fakes/schemas/); TF_CONFIG from a JobSet node's environment; discovery;
the launcher's lifecycle and least-privilege RBAC against the Kubernetes API stand-in
(tests/fakes/fakek8s.py); and, end to end, the kfp train step with two nodes that the stand-in runs
as real processes with the runtime's environment (MultiWorkerMirroredStrategy)."""

import contextlib
import json
import os
import signal
import sys

import pytest
import yaml

from fakes.chief import write_chief_outputs
from fakes.crdschema import RUNTIME_CRD, TRAINJOB_CRD, validate_crd
from fakes.fakek8s import (
    RUNTIME_YAML,
    Artifact,
    FakeKubernetes,
    LocalJobSet,
    Scenario,
    kubeconfig,
    train_step,
)
from tfrecord_suite import images
from tfrecord_suite.launch import discovery
from tfrecord_suite.launch.data_service import DataServiceLauncher
from tfrecord_suite.launch.job import (
    JobCancelled,
    JobConfig,
    JobError,
    JobLauncher,
    LauncherUnavailable,
    job_name,
)
from tfrecord_suite.launch.lease import Lease
from tfrecord_suite.launch.placement import Placement
from tfrecord_suite.launch.tfjob import TFJob
from tfrecord_suite.launch.trainjob import RUNTIME_NAME, TrainJob, render_trainjob
from tfrecord_suite.train import strategy

K8S = os.path.join(os.path.dirname(__file__), "..", "..", "k8s")
GPU = Placement(accelerator_type="nvidia-l4", accelerator_count=2, shm_size="16Gi")


def config(**kw):
    base = dict(
        name="tfrs-train-abc",
        namespace="ml",
        image="ghcr.io/tfrecord-suite/tfrecord-suite-gpu:0.1.0",
        trainer_args=["--dataset", "gs://b/reg/digits@1.0.0", "--model-dir", "gs://b/m"],
        workers=4,
        placement=GPU,
        run_id="run-123",
        service_account="default-editor",
        owner={"apiVersion": "v1", "kind": "Pod", "name": "train-op-pod", "uid": "u-1"},
        poll_seconds=0,
    )
    base.update(kw)
    return JobConfig(**base)


def _runtime():
    with open(RUNTIME_YAML) as fh:
        return yaml.safe_load(fh)


# ------------------------------------------------------------------------ rendered objects


def test_trainjob_is_valid_against_the_crd_and_carries_the_run():
    job = render_trainjob(config())
    assert validate_crd(job, TRAINJOB_CRD) == []
    assert (job["apiVersion"], job["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    assert job["metadata"]["labels"]["tfrecord-suite/run"] == "run-123"
    # the launcher's pod owns the job: deleting the pod deletes the job and its nodes
    assert job["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "train-op-pod", "uid": "u-1"}
    ]
    spec = job["spec"]
    assert spec["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
        "name": RUNTIME_NAME,
    }
    trainer = spec["trainer"]
    assert trainer["numNodes"] == 4
    assert trainer["image"].endswith("tfrecord-suite-gpu:0.1.0")
    assert trainer["command"] == ["tfrecord-suite", "train"]
    assert trainer["args"][:2] == ["--dataset", "gs://b/reg/digits@1.0.0"]
    assert trainer["env"] == [{"name": "TFRS_NUM_NODES", "value": "4"}]
    # requests as well as limits: a node is never scheduled without its CPUs and memory
    assert trainer["resourcesPerNode"] == {
        "requests": {"cpu": "4", "memory": "16Gi"},
        "limits": {"nvidia.com/gpu": "2"},
    }
    (patch,) = spec["runtimePatches"]
    (node,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert node["name"] == "node"
    meta = node["template"]["spec"]["template"]["metadata"]
    # no Istio sidecar in a profile namespace (label from Istio 1.10, annotation before)
    assert meta["labels"]["sidecar.istio.io/inject"] == "false"
    assert meta["annotations"] == {"sidecar.istio.io/inject": "false"}
    pod = node["template"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "default-editor"  # the run's own account
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert pod["volumes"] == [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}
    ]
    assert pod["containers"] == [
        {"name": "node", "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}
    ]


def test_tpu_trainjob_goes_to_the_tpu_node_pool():
    tpu = Placement(
        accelerator_type="tpu-v5-lite-podslice", accelerator_count=4, tpu_topology="2x2"
    )
    job = render_trainjob(config(workers=2, placement=tpu))
    assert validate_crd(job, TRAINJOB_CRD) == []
    pod = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"][
        "replicatedJobs"
    ][0]["template"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "2x2"
    assert job["spec"]["trainer"]["resourcesPerNode"] == {
        "requests": {"cpu": "8", "memory": "32Gi"},
        "limits": {"google.com/tpu": "4"},
    }


def test_schema_check_reports_bad_trainjobs():
    job = render_trainjob(config())
    job["spec"]["trainer"]["numNodes"] = "4"
    job["spec"]["podTemplateOverrides"] = []  # Trainer v2.1's field, gone in v2.2
    job["metadata"]["name"] = "Tfrs_Train"
    del job["spec"]["runtimeRef"]["name"]
    problems = "\n".join(validate_crd(job, TRAINJOB_CRD))
    assert ".spec.trainer.numNodes: '4' is not of type 'integer'" in problems
    assert "'podTemplateOverrides' was unexpected" in problems
    assert "'name' is a required property" in problems
    assert ".metadata.name 'Tfrs_Train'" in problems


def test_runtime_is_valid_and_gives_each_node_what_the_trainer_reads():
    runtime = _runtime()
    assert validate_crd(runtime, RUNTIME_CRD) == []
    assert runtime["metadata"]["name"] == RUNTIME_NAME
    spec = runtime["spec"]["template"]["spec"]
    assert spec["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    (rjob,) = spec["replicatedJobs"]
    assert rjob["name"] == "node"
    # Trainer v2 applies the TrainJob's trainer fields to the job with this label
    assert rjob["template"]["metadata"]["labels"] == {
        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"
    }
    assert rjob["template"]["spec"]["completionMode"] == "Indexed"
    (container,) = rjob["template"]["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "node"
    assert container["image"] == images.ImageSet().component  # the one default, in images.py
    env = {e["name"]: e for e in container["env"]}
    paths = {
        strategy.NODE_RANK_ENV: (
            "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        ),
        strategy.JOBSET_NAME_ENV: "metadata.labels['jobset.sigs.k8s.io/jobset-name']",
        strategy.REPLICATED_JOB_ENV: "metadata.labels['jobset.sigs.k8s.io/replicatedjob-name']",
        strategy.JOB_INDEX_ENV: "metadata.labels['jobset.sigs.k8s.io/job-index']",
    }
    for name, path in paths.items():
        assert env[name]["valueFrom"]["fieldRef"]["fieldPath"] == path
    (port,) = container["ports"]
    assert env[strategy.PORT_ENV]["value"] == str(port["containerPort"])
    assert strategy.NUM_NODES_ENV not in env  # the launcher sets it per TrainJob


def test_runtime_kustomization_lists_the_runtime():
    with open(os.path.join(K8S, "trainer-runtime", "kustomization.yaml")) as fh:
        assert yaml.safe_load(fh)["resources"] == ["clustertrainingruntime.yaml"]


# ------------------------------------------------------------------------------ TF_CONFIG

NODE_ENV = {
    "TFRS_NUM_NODES": "3",
    "TFRS_NODE_RANK": "2",
    "TFRS_JOBSET_NAME": "tfrs-train-abc",
    "TFRS_REPLICATED_JOB": "node",
    "TFRS_JOB_INDEX": "0",
    "TFRS_TF_PORT": "2222",
}


def test_tf_config_names_the_peers_as_jobset_dns_does():
    config = strategy.tf_config_from_node_env(NODE_ENV)
    # Trainer v2's own endpoint format: "%s-%s-%d-%d.%s" (trainjob, replicated job, job
    # index, pod index, subdomain = the TrainJob's name)
    assert config == {
        "cluster": {"worker": [f"tfrs-train-abc-node-0-{i}.tfrs-train-abc:2222" for i in range(3)]},
        "task": {"type": "worker", "index": 2},
    }
    assert not strategy.is_chief(config)
    assert strategy.is_chief({**config, "task": {"type": "worker", "index": 0}})
    assert strategy.cluster_workers(config) == 3


def test_tf_config_from_peer_list_and_bad_environments():
    peers = {**NODE_ENV, "TFRS_PEER_ADDRESSES": "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"}
    assert strategy.tf_config_from_node_env(peers)["cluster"]["worker"][1] == "127.0.0.1:2"
    assert strategy.tf_config_from_node_env({}) is None  # not a TrainJob node
    with pytest.raises(ValueError, match="TFRS_NODE_RANK='': a TrainJob node needs it as a number"):
        strategy.tf_config_from_node_env({**NODE_ENV, "TFRS_NODE_RANK": ""})
    with pytest.raises(ValueError, match=r"TFRS_NODE_RANK=3 is outside 0\.\.2"):
        strategy.tf_config_from_node_env({**NODE_ENV, "TFRS_NODE_RANK": "3"})
    with pytest.raises(ValueError, match="lists 2 addresses for 3 nodes"):
        strategy.tf_config_from_node_env({**NODE_ENV, "TFRS_PEER_ADDRESSES": "a:1,b:2"})
    with pytest.raises(ValueError, match="TFRS_JOBSET_NAME is empty"):
        strategy.tf_config_from_node_env({**NODE_ENV, "TFRS_JOBSET_NAME": ""})


def test_ensure_tf_config_sets_it_only_for_several_nodes_and_never_overrides():
    env = dict(NODE_ENV)
    strategy.ensure_tf_config(env)
    assert json.loads(env["TF_CONFIG"])["task"] == {"type": "worker", "index": 2}
    given = {**NODE_ENV, "TF_CONFIG": '{"task": {"type": "chief", "index": 0}}'}
    strategy.ensure_tf_config(given)
    assert json.loads(given["TF_CONFIG"])["task"]["type"] == "chief"
    alone = {**NODE_ENV, "TFRS_NUM_NODES": "1", "TFRS_NODE_RANK": "0"}
    strategy.ensure_tf_config(alone)
    assert "TF_CONFIG" not in alone  # one node trains as a single pod would


# ------------------------------------------------------------------------------ discovery


@pytest.mark.parametrize(
    ("serves", "requested", "expected"),
    [
        (("tfjobs", "trainjobs"), "auto", "TrainJob"),
        (("trainjobs",), "auto", "TrainJob"),
        (("tfjobs",), "auto", "TFJob"),
        (("tfjobs", "trainjobs"), "tfjob", "TFJob"),
        (("tfjobs", "trainjobs"), "trainjob", "TrainJob"),
    ],
)
def test_discovery_picks_what_the_cluster_serves(serves, requested, expected):
    with FakeKubernetes(Scenario([("Running", "")]), serves=serves) as k8s:
        assert discovery.choose_launcher(requested, k8s.api_client()).kind == expected
        # discovery only: nothing created
        assert not k8s.created
        assert all(p.count("/") == 3 for _, p in k8s.requests)  # /apis/<group>/<version>


def test_discovery_says_what_to_install_when_nothing_is_served():
    with FakeKubernetes(Scenario([("Running", "")]), serves=()) as k8s:
        with pytest.raises(LauncherUnavailable) as err:
            discovery.choose_launcher("auto", k8s.api_client())
        text = str(err.value)
        assert "neither TrainJob" in text and "Kubeflow Trainer v2.2" in text
        assert "kubectl apply -k k8s/trainer-runtime" in text and "Training Operator v1" in text
        assert "\n" not in text
    with (
        FakeKubernetes(Scenario([("Running", "")]), serves=("tfjobs",)) as k8s,
        pytest.raises(LauncherUnavailable, match="does not serve trainjobs"),
    ):
        discovery.choose_launcher("trainjob", k8s.api_client())


def test_placement_refuses_an_unknown_launcher():
    with pytest.raises(ValueError, match="--launcher 'mpijob': use one of auto, trainjob"):
        Placement(launcher="mpijob")


# ------------------------------------------------------------------------------ lifecycle


def test_success_polls_reports_and_deletes():
    steps = [("Created", ""), ("Running", ""), ("Succeeded", "jobs completed")]
    with FakeKubernetes(Scenario(steps)) as k8s:
        result = JobLauncher(TrainJob, k8s.api_client(), sleep=lambda s: None).run(config())
        assert result["kind"] == "TrainJob" and result["state"] == "Succeeded"
        assert sorted(result["replicas"]) == ["node-0", "node-1", "node-2", "node-3"]
        assert result["replicas"]["node-0"]["pod"] == "tfrs-train-abc-node-0-0-x0"
        assert "epoch 1/1" in result["replicas"]["node-0"]["log"]
        assert k8s.deleted == [("ml", "tfrs-train-abc", "Foreground")]
        # strict field validation: an older Trainer refuses runtimePatches instead of dropping it
        assert k8s.create_queries == [{"fieldValidation": "Strict"}]


def test_failing_node_fails_the_task_with_its_error():
    log = "Traceback (most recent call last):\nValueError: --epochs must be at least 1\n"
    scenario = Scenario(
        [("Running", ""), ("Failed", "jobset failed: node-0 failed")],
        fail_replica="node-1",
        fail_log=log,
    )
    with FakeKubernetes(scenario) as k8s:
        with pytest.raises(JobError) as err:
            JobLauncher(TrainJob, k8s.api_client(), sleep=lambda s: None).run(config())
        text = str(err.value)
        assert "TrainJob ml/tfrs-train-abc Failed: jobset failed" in text
        assert "node-1 (pod tfrs-train-abc-node-0-1-x1, phase Failed, exit code 1)" in text
        assert "ValueError: --epochs must be at least 1" in text
        assert "node-0 (" not in text
        assert k8s.deleted == [("ml", "tfrs-train-abc", "Foreground")]


def test_cancellation_deletes_the_trainjob():
    calls = []

    def sleep(_):
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)

    with FakeKubernetes(Scenario([("Running", "")])) as k8s:
        with pytest.raises(JobCancelled, match="deleting the TrainJob"):
            JobLauncher(TrainJob, k8s.api_client(), sleep=sleep).run(config(keep_on_failure=True))
        assert k8s.deleted == [("ml", "tfrs-train-abc", "Foreground")]


def test_retried_task_adopts_its_own_trainjob_but_not_another_runs():
    with FakeKubernetes(Scenario([("Running", ""), ("Succeeded", "")])) as k8s:
        k8s.jobs[("ml", "tfrs-train-abc")] = render_trainjob(config())
        result = JobLauncher(TrainJob, k8s.api_client(), sleep=lambda s: None).run(config())
        assert result["state"] == "Succeeded" and not k8s.created
    with FakeKubernetes(Scenario([("Running", "")])) as k8s:
        k8s.jobs[("ml", "tfrs-train-abc")] = render_trainjob(config(run_id="someone-else"))
        with pytest.raises(JobError, match="belongs to another run"):
            JobLauncher(TrainJob, k8s.api_client(), sleep=lambda s: None).run(config())
        assert ("ml", "tfrs-train-abc") in k8s.jobs


def test_a_refused_trainjob_names_the_likely_cause():
    assert "predates v2.2" in TrainJob.creation_hint(
        400, '{"message": "strict decoding error: unknown field \\"spec.runtimePatches\\""}'
    )
    assert "kubectl apply -k k8s/trainer-runtime" in TrainJob.creation_hint(
        422, '{"message": "ClusterTrainingRuntime tfrecord-suite-tensorflow not found"}'
    )
    bad = render_trainjob(config())
    with FakeKubernetes(Scenario([("Running", "")])) as k8s:
        launcher = JobLauncher(TrainJob, k8s.api_client(), sleep=lambda s: None)
        launcher.kind = type(TrainJob)()
        launcher.kind.render = lambda c: {**bad, "spec": {**bad["spec"], "podSpecOverrides": []}}
        with pytest.raises(JobError, match="could not create TrainJob ml/tfrs-train-abc: 422"):
            launcher.run(config())


# ------------------------------------------------------------------------------ RBAC

_VERBS = {"POST": "create", "GET": "get", "DELETE": "delete", "PATCH": "patch"}


def _rbac_requests(requests):
    """(apiGroup, resource, verb) of each resource request; discovery paths are left out."""
    import re

    out = set()
    for method, path in requests:
        if re.fullmatch(r"/apis/[^/]+/[^/]+", path):
            continue  # discovery: a non-resource URL every authenticated account may read
        m = re.fullmatch(r"/apis/([^/]+)/[^/]+/namespaces/[^/]+/([^/]+)(/[^/]+)?", path)
        if m:
            out.add((m[1], m[2], _VERBS[method]))
            continue
        m = re.fullmatch(r"/api/v1/namespaces/[^/]+/services(/[^/]+)?", path)
        if m:
            out.add(("", "services", _VERBS[method]))
            continue
        m = re.fullmatch(r"/api/v1/namespaces/[^/]+/pods(/[^/]+)?(/log)?", path)
        assert m, path
        if m[2]:
            out.add(("", "pods/log", "get"))
        else:
            out.add(("", "pods", "list" if not m[1] and method == "GET" else _VERBS[method]))
    return out


def test_rbac_grants_exactly_what_the_launcher_calls():
    used = set()
    for kind in (TrainJob, TFJob):
        for steps, fail in (([("Succeeded", "")], None), ([("Failed", "x")], "worker-0")):
            with FakeKubernetes(Scenario(steps, fail_replica=fail)) as k8s:
                discovery.choose_launcher("auto", k8s.api_client())
                with contextlib.suppress(JobError):
                    JobLauncher(kind, k8s.api_client(), sleep=lambda s: None).run(config())
                used |= _rbac_requests(k8s.requests)
    with FakeKubernetes(Scenario([("Succeeded", "")])) as k8s:  # --input-service cluster:N
        service = DataServiceLauncher(k8s.api_client(), sleep=lambda s: None)
        first = service.running("s", 1, "img", run_id="r", namespace="ml")
        retried = service.running("s", 1, "img", run_id="r", namespace="ml")  # adopts them
        with first, retried:
            pass
        used |= _rbac_requests(k8s.requests)
    with FakeKubernetes(Scenario([("Succeeded", "")])) as k8s:  # the step's lease, adopted
        owner = {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u-1"}
        lease = Lease(k8s.api_client(), "l", "img", namespace="ml", run_id="r", owner=owner)
        with lease, Lease(k8s.api_client(), "l", "img", namespace="ml", run_id="r"):
            lease.renew()
        used |= _rbac_requests(k8s.requests)
    with open(os.path.join(K8S, "base", "role.yaml")) as fh:
        role = yaml.safe_load(fh)
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert role["kind"] == "Role"  # namespaced
    assert not any("*" in str(rule) for rule in role["rules"])
    assert used <= granted, used - granted
    assert granted <= used, f"granted but never used: {granted - used}"


# ------------------------------------------------------------------------------ kfp train step


def test_train_task_launches_a_trainjob_on_a_current_cluster(tmp_path, monkeypatch):
    registry = str(tmp_path / "reg")
    shared = os.path.join(registry, "_runs", job_name("run-7"), "model")
    write_chief_outputs(shared, replicas=2, accuracy=0.8, per_second=10.0)
    with FakeKubernetes(Scenario([("Running", ""), ("Succeeded", "")])) as k8s:
        monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path, k8s.url))
        monkeypatch.setattr("tfrecord_suite.launch.job.current_namespace", lambda: "ml")
        metrics = train_step(
            f"{registry}/digits@1.0.0",
            tmp_path,
            model=Artifact("minio://b/run-7/model", path=str(tmp_path / "model")),
            workers=2,
            placement=GPU.to_json(),
            run_id="run-7",
            pod_name="tfrecord-suite-x7-system-container-impl-123",
            pod_uid="0b9c-77",
            service_account="default-editor",
            trainer_image="registry.example.com/t/tfrecord-suite-gpu:v1",
        )["metrics"]
        (job,) = k8s.created
        (lease,) = [o for o in k8s.objects_created if o["kind"] == "Job"]
        lease_uid = next(u for u, (kind, _, _) in k8s.uids.items() if kind == "Job")
        assert k8s.objects == {}  # the lease is deleted after the job
    assert job["kind"] == "TrainJob"
    # what the downward API told the step's pod: the job is owned by the step's lease, which
    # that pod owns, and its nodes run as the run's own account
    assert job["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": lease["metadata"]["name"],
         "uid": lease_uid}
    ]  # fmt: skip
    assert lease["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "tfrecord-suite-x7-system-container-impl-123",
            "uid": "0b9c-77",
        }
    ]
    assert lease["spec"]["parallelism"] == 0 and lease["spec"]["ttlSecondsAfterFinished"] == 0
    node = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    pod = node["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "default-editor"
    assert job["spec"]["trainer"]["numNodes"] == 2
    assert job["spec"]["trainer"]["image"] == "registry.example.com/t/tfrecord-suite-gpu:v1"
    assert job["spec"]["trainer"]["args"][:6] == [
        "--dataset", f"{registry}/digits@1.0.0", "--model-dir", shared,
        "--strategy", "multi_worker",
    ]  # fmt: skip
    assert metrics.logged["test_accuracy"] == 0.8
    assert (tmp_path / "model" / "export" / "saved_model.pb").read_text() == "pb"


def test_train_task_without_a_job_api_fails_without_retrying(tmp_path, monkeypatch):
    from tfrecord_suite.errors import RetryWillNotHelp

    with FakeKubernetes(Scenario([("Running", "")]), serves=()) as k8s:
        monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path, k8s.url))
        with pytest.raises(RetryWillNotHelp, match="no multi-node training API on this cluster"):
            train_step(f"{tmp_path}/reg/digits@1.0.0", tmp_path, workers=2)
        assert not k8s.created


@pytest.mark.slow
def test_train_step_with_two_nodes_trains_through_a_trainjob(
    published_digits, tmp_path, monkeypatch
):
    """The kfp train step with workers=2 on a cluster serving TrainJobs: discovery -> TrainJob
    -> the stand-in plays Trainer v2 and JobSet, running the runtime's two nodes as processes
    with the runtime's environment and no TF_CONFIG -> the trainer derives TF_CONFIG, and
    MultiWorkerMirroredStrategy trains on two workers."""
    operator = LocalJobSet([sys.executable, "-m", "tfrecord_suite.cli"], dict(os.environ))
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
            run_id="run-trainjob",
        )
        model, metrics = out["model"], out["metrics"]
        (job,) = k8s.created
        assert job["kind"] == "TrainJob"
        assert k8s.deleted == [("ml", job_name("run-trainjob"), "Foreground")]
        logs = {pod: open(path).read() for pod, path in operator.logs.items()}
    assert model.metadata["strategy"] == "CollectiveAllReduceStrategy"  # = MultiWorkerMirrored
    assert model.metadata["replicas"] == 2
    # each node was given no TF_CONFIG; both joined one 2-replica cluster, so both derived it
    assert all("CollectiveAllReduceStrategy, 2 replicas" in text for text in logs.values())
    assert len(logs) == 2
    assert os.path.isfile(os.path.join(model_dir, "export", "saved_model.pb"))
    assert 0.0 <= metrics.logged["test_accuracy"] <= 1.0


def test_auto_falls_back_to_a_tfjob_where_the_trainer_is_too_old(tmp_path, monkeypatch):
    """Kubeflow 1.11 installs Trainer v2.1 (its TrainJob has no runtimePatches) beside the
    Training Operator: the cluster serves both, refuses our TrainJob, and --launcher auto
    launches a TFJob instead (with --launcher trainjob the refusal says to upgrade)."""
    from tfrecord_suite.errors import RetryWillNotHelp

    v21 = os.path.join(
        os.path.dirname(__file__), "..", "fakes", "schemas", "kubeflow-trainer-v2.1.0",
        "trainer.kubeflow.org_trainjobs.yaml",
    )  # fmt: skip
    registry = str(tmp_path / "reg")
    write_chief_outputs(
        os.path.join(registry, "_runs", job_name("run-11"), "model"), 2, accuracy=0.8,
        per_second=10.0,
    )  # fmt: skip
    steps = Scenario([("Running", ""), ("Succeeded", "")])
    with FakeKubernetes(steps, trainjob_crd=v21) as k8s:
        monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path, k8s.url))
        monkeypatch.setattr("tfrecord_suite.launch.job.current_namespace", lambda: "ml")
        train_step(f"{registry}/digits@1.0.0", tmp_path, workers=2, run_id="run-11")
        assert [job["kind"] for job in k8s.created] == ["TFJob"]
        assert any(p.endswith("/trainjobs") for m, p in k8s.requests if m == "POST")
    with FakeKubernetes(steps, trainjob_crd=v21) as k8s:
        monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path, k8s.url))
        with pytest.raises((JobError, RetryWillNotHelp), match=r"predates v2\.2"):
            train_step(
                f"{registry}/digits@1.0.0", tmp_path, workers=2, run_id="run-11",
                launcher="trainjob",
            )  # fmt: skip
        assert not k8s.created


def test_nodes_get_the_runs_secrets_and_no_api_token():
    """The Secrets the pipeline was compiled with reach every node, in the shape the steps get
    them (launch/credentials.py), valid against each job API's schema; no node mounts a
    service-account token (TFJob: in its pod; TrainJob: in the runtime)."""
    from tfrecord_suite.launch.credentials import Credentials
    from tfrecord_suite.launch.tfjob import render_tfjob

    gcs = Credentials("gcs-sa-key", "gcs-key", "regcred")
    trainjob = render_trainjob(config(credentials=gcs))
    assert validate_crd(trainjob, TRAINJOB_CRD) == []
    env = {e["name"]: e.get("value") for e in trainjob["spec"]["trainer"]["env"]}
    assert env["GOOGLE_APPLICATION_CREDENTIALS"] == gcs.key_file
    patch = trainjob["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    pod = patch["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert {"name": "tfrs-storage-credentials", "secret": {"secretName": "gcs-sa-key"}} in (
        pod["volumes"]
    )
    mounts = pod["containers"][0]["volumeMounts"]
    assert {m["mountPath"] for m in mounts} == {"/dev/shm", os.path.dirname(gcs.key_file)}
    runtime = _runtime()["spec"]["template"]["spec"]["replicatedJobs"][0]
    assert runtime["template"]["spec"]["template"]["spec"]["automountServiceAccountToken"] is False

    s3 = Credentials("bucket-keys", "s3-keys")
    tfjob = render_tfjob(config(credentials=s3))
    from fakes.fakek8s import validate_tfjob

    assert validate_tfjob(tfjob) == []
    for replica in tfjob["spec"]["tfReplicaSpecs"].values():
        spec = replica["template"]["spec"]
        assert spec["automountServiceAccountToken"] is False
        refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in spec["containers"][0]["env"]
                if "valueFrom" in e}  # fmt: skip
        assert refs["AWS_ACCESS_KEY_ID"] == {"name": "bucket-keys", "key": "AWS_ACCESS_KEY_ID"}
        assert refs["AWS_ENDPOINT_URL"]["optional"] is True
    assert tfjob["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"


def test_default_trainer_requests_fit_a_small_node():
    from tfrecord_suite.launch.placement import fits_small_node

    for placement in (Placement(), Placement(accelerator_type="nvidia-l4")):
        assert fits_small_node(placement.requests()), placement.requests()
