"""A run's own tf.data service on Kubernetes (``--input-service cluster:N``), against the API
server stand-in (tests/fakes/fakek8s.py): the objects the train step creates, that it waits for
their pods, names the dispatcher to the trainers, adopts its own on a retry, refuses another
run's, and deletes them whatever happens. The same objects run for real in podman
(tests/e2e/test_images_real.py, through k8s/data-service, which they are generated into)."""

import os

import pytest
from support import write_csv

from fakes.chief import write_chief_outputs
from fakes.fakek8s import Artifact, FakeKubernetes, Scenario, kubeconfig, train_step
from tfrecord_suite import images
from tfrecord_suite.errors import RetryWillNotHelp, UserError
from tfrecord_suite.launch.credentials import Credentials
from tfrecord_suite.launch.data_service import (
    DataServiceLauncher,
    dispatcher_address,
    objects,
    write_manifests,
)
from tfrecord_suite.launch.job import JobError, job_name
from tfrecord_suite.launch.lease import lease_name
from tfrecord_suite.registry.datasets import Registry
from tfrecord_suite.shard.step import ShardConfig, run_shard
from tfrecord_suite.train.trainer import TrainConfig, served_input

K8S = os.path.join(os.path.dirname(__file__), "..", "..", "k8s")
OWNER = {"apiVersion": "v1", "kind": "Pod", "name": "train-pod", "uid": "u-1"}
SUCCESS = Scenario([("Succeeded", "")])


def _launcher(k8s, **kw):
    return DataServiceLauncher(k8s.api_client(), sleep=lambda s: None, **kw)


SERVICE_OBJECTS = {
    ("services", "Service", ""),
    ("statefulsets", "StatefulSet", "-dispatcher"),
    ("statefulsets", "StatefulSet", "-worker"),
    ("poddisruptionbudgets", "PodDisruptionBudget", "-worker"),
    ("networkpolicies", "NetworkPolicy", ""),
}


def test_the_service_runs_while_training_and_is_deleted_after():
    creds = Credentials("bucket-keys", "s3-keys", "regcred")
    with FakeKubernetes(SUCCESS) as k8s:
        with _launcher(k8s).running(
            "tfrs-train-abc-data", 3, "reg/img:1", run_id="run-1", service_account="sa",
            owner=OWNER, namespace="ml", credentials=creds,
        ) as address:  # fmt: skip
            assert address == "grpc://tfrs-train-abc-data-dispatcher-0.tfrs-train-abc-data:5050"
            kinds = {(o["kind"], o["metadata"]["name"]) for o in k8s.objects.values()}
            assert kinds == {(k, f"tfrs-train-abc-data{s}") for _, k, s in SERVICE_OBJECTS}
        assert k8s.objects == {}
        assert sorted(d[:3] for d in k8s.objects_deleted) == sorted(
            (p, "ml", f"tfrs-train-abc-data{s}") for p, _, s in SERVICE_OBJECTS
        )
    # validated by the stand-in against the Kubernetes client's OpenAPI types
    for obj in k8s.objects_created:
        assert obj["metadata"]["ownerReferences"] == [OWNER]
        assert obj["metadata"]["labels"]["tfrecord-suite/run"] == "run-1"
    created = {o["metadata"]["name"]: o for o in k8s.objects_created if o["kind"] == "StatefulSet"}
    workers = created["tfrs-train-abc-data-worker"]
    pod = workers["spec"]["template"]["spec"]
    assert workers["spec"]["replicas"] == 3 and pod["serviceAccountName"] == "sa"
    assert pod["containers"][0]["image"] == "reg/img:1"
    # the workers read the data with the run's Secrets; both pull with its pull Secret
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"]["name"] == "bucket-keys"
    dispatcher = created["tfrs-train-abc-data-dispatcher"]
    dpod = dispatcher["spec"]["template"]["spec"]
    assert "AWS_ACCESS_KEY_ID" not in {e["name"] for e in dpod["containers"][0]["env"]}
    assert pod["imagePullSecrets"] == dpod["imagePullSecrets"] == [{"name": "regcred"}]
    # the journal is on a claim, which outlives the dispatcher's pod and goes with the set
    assert [t["metadata"]["name"] for t in dispatcher["spec"]["volumeClaimTemplates"]] == [
        "journal"
    ]
    assert dispatcher["spec"]["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Delete"


def test_the_pods_are_locked_down_fit_a_small_node_and_admit_only_trainers():
    """Restricted pods (Pod Security Standards "restricted": non-root, no privilege escalation,
    no capabilities, RuntimeDefault seccomp; also no API token, read-only root), requests that
    fit a 4 vCPU / 16 GB node, a memory limit, workers spread over nodes, a disruption budget,
    and a NetworkPolicy whose only peers are trainer pods and the service's own."""
    from tfrecord_suite.launch.job import JobConfig
    from tfrecord_suite.launch.placement import SMALL_NODE, fits_small_node

    made = {(o["kind"], o["metadata"]["name"]): o for o in objects("s", 2, "img")}
    for component in ("dispatcher", "worker"):
        sts = made[("StatefulSet", f"s-{component}")]
        pod = sts["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        (container,) = pod["containers"]
        security = container["securityContext"]
        assert security["allowPrivilegeEscalation"] is False
        assert security["readOnlyRootFilesystem"] is True
        assert security["capabilities"] == {"drop": ["ALL"]}
        assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
        resources = container["resources"]
        assert fits_small_node(resources["requests"]), (component, resources, SMALL_NODE)
        assert fits_small_node(resources["limits"]) and "memory" in resources["limits"]
    anti = made[("StatefulSet", "s-worker")]["spec"]["template"]["spec"]["affinity"]
    (term,) = anti["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    budget = made[("PodDisruptionBudget", "s-worker")]["spec"]
    assert budget["maxUnavailable"] == 1
    assert budget["selector"]["matchLabels"]["app.kubernetes.io/component"] == "worker"
    policy = made[("NetworkPolicy", "s")]["spec"]
    assert policy["policyTypes"] == ["Ingress"]
    (rule,) = policy["ingress"]
    peers = [p["podSelector"]["matchLabels"] for p in rule["from"]]
    trainer = JobConfig(name="j", image="i", trainer_args=[], workers=2).labels()
    assert peers[0].items() <= trainer.items()  # a job's nodes are admitted
    assert peers[1] == policy["podSelector"]["matchLabels"]
    assert sorted(p["port"] for p in rule["ports"]) == [5050, 5051]


def test_the_service_is_deleted_when_training_fails():
    with FakeKubernetes(SUCCESS) as k8s:
        running = _launcher(k8s).running("s", 1, "img", run_id="r", namespace="ml")
        with pytest.raises(RuntimeError, match="boom"), running:
            raise RuntimeError("boom")
        assert k8s.objects == {} and len(k8s.objects_deleted) == len(SERVICE_OBJECTS)


def test_pods_that_never_get_ready_fail_the_step_and_leave_nothing():
    with FakeKubernetes(SUCCESS) as k8s:
        k8s.pods_ready = False
        clock = iter(range(0, 10_000, 100))
        launcher = _launcher(k8s, clock=lambda: next(clock), timeout_seconds=300)
        with (
            pytest.raises(JobError, match=r"not ready after 300 s: s-dispatcher 0/1, s-worker 0/2"),
            launcher.running("s", 2, "img", run_id="r", namespace="ml"),
        ):
            pass
        assert k8s.objects == {}


PLURALS = {kind: plural for plural, kind, _ in SERVICE_OBJECTS}


def test_a_retried_step_adopts_its_own_service_but_not_another_runs():
    with FakeKubernetes(SUCCESS) as k8s:
        for body in objects("s", 1, "img", labels={"tfrecord-suite/run": "run-1"}):
            k8s.objects[(PLURALS[body["kind"]], "ml", body["metadata"]["name"])] = body
        with _launcher(k8s).running("s", 1, "img", run_id="run-1", namespace="ml") as address:
            assert address == dispatcher_address("s")
            assert k8s.objects_created == []  # adopted, not created again
        for body in objects("s", 1, "img", labels={"tfrecord-suite/run": "run-1"}):
            k8s.objects[(PLURALS[body["kind"]], "ml", body["metadata"]["name"])] = body
        with (
            pytest.raises(
                JobError, match=r"Service ml/s already exists and belongs to another run"
            ),
            _launcher(k8s).running("s", 1, "img", run_id="run-2", namespace="ml"),
        ):
            pass


@pytest.fixture(scope="module")
def four_files(tmp_path_factory):
    """A version of 4 train shard files in a registry of its own."""
    base = tmp_path_factory.mktemp("four")
    csv = write_csv(str(base / "rows.csv"), ["x", "label"], [[i, "ab"[i % 2]] for i in range(400)])
    staged = str(base / "staged")
    run_shard(ShardConfig(input=csv, output=staged, label="label", num_shards=4,
                          splits="train=100"))  # fmt: skip
    registry = Registry(str(base / "reg"))
    return f"{registry.root}/rows@{registry.publish(staged, 'rows').version}"


def test_train_step_gives_the_job_nodes_its_runs_service(four_files, tmp_path, monkeypatch):
    """cluster:2 in the train step: the service is started for the run before the job, each
    node reads through its dispatcher (--input-service grpc://...), and both are gone after."""
    registry = four_files.rsplit("/", 1)[0]
    shared = os.path.join(registry, "_runs", job_name("run-7"), "model")
    write_chief_outputs(shared, replicas=2, accuracy=0.8, per_second=10.0)
    with FakeKubernetes(Scenario([("Running", ""), ("Succeeded", "")]), serves=("tfjobs",)) as k8s:
        monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path, k8s.url))
        monkeypatch.setattr("tfrecord_suite.launch.job.current_namespace", lambda: "ml")
        train_step(
            four_files,
            tmp_path,
            model=Artifact("minio://b/run-7/model", path=str(tmp_path / "model")),
            workers=2,
            run_id="run-7",
            pod_name="train-pod",
            pod_uid="u-1",
            service_account="default-editor",
            input_service="cluster:2",
        )
        (job,) = k8s.created
        assert k8s.objects == {}  # deleted after the job
    name = f"{job_name('run-7')}-data"
    args = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--input-service") + 1] == dispatcher_address(name)
    created = {(o["kind"], o["metadata"]["name"]): o for o in k8s.objects_created}
    lease = created.pop(("Job", lease_name(job_name("run-7"))))
    assert set(created) == {(k, f"{name}{s}") for _, k, s in SERVICE_OBJECTS}
    worker = created[("StatefulSet", f"{name}-worker")]
    assert worker["spec"]["replicas"] == 2
    assert worker["spec"]["template"]["spec"]["serviceAccountName"] == "default-editor"
    assert worker["spec"]["template"]["spec"]["containers"][0]["image"] == images.COMPONENT_IMAGE
    # the service and the job are the lease's; the lease is the step pod's
    assert lease["metadata"]["ownerReferences"][0]["name"] == "train-pod"
    for obj in [*created.values(), job]:
        (owner,) = obj["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"]) == ("Job", lease["metadata"]["name"])


def test_too_few_files_for_the_workers_is_refused_before_anything_starts(
    four_files, tmp_path, monkeypatch
):
    with FakeKubernetes(SUCCESS) as k8s:
        monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path, k8s.url))
        with pytest.raises(
            RetryWillNotHelp, match=r"4 shard files for 2 input pipeline\(s\) and 3"
        ):
            train_step(four_files, tmp_path, workers=2, input_service="cluster:3")
        assert k8s.requests == []


def test_cluster_workers_outside_the_pipeline_say_what_to_use(tmp_path):
    config = TrainConfig(
        dataset=f"{tmp_path}/r/d@1", model_dir=str(tmp_path), input_service="cluster:2"
    )
    with (
        pytest.raises(UserError, match="worker pods are started by the pipeline's train step"),
        served_input(config),
    ):
        pass


def test_k8s_data_service_is_what_the_launcher_makes():
    """k8s/data-service holds these objects for a long-lived service, generated, not edited."""
    folder = os.path.join(K8S, "data-service")
    import yaml

    with open(os.path.join(folder, "workers.yaml")) as fh:
        replicas = next(d for d in yaml.safe_load_all(fh) if d)["spec"]["replicas"]
    assert write_manifests(folder, "tfrs-data", replicas, images.COMPONENT_IMAGE, check=True) == []
