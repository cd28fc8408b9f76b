"""A run's own tf.data service on Kubernetes (``--input-service cluster:N``), against the real
API server (tests/realparts, marker ``k8s``), as the run's account holding only the launcher's
Role: the objects the train step creates, that it waits for their pods, names the dispatcher to
the trainers, adopts its own on a retry, refuses another run's, and deletes them whatever
happens. The real StatefulSet controller makes the pods and the real scheduler places them; the
stand-in kubelet (tests/realparts/standins.py) starts them and binds their claims. The same
objects run for real in podman (tests/e2e/test_images_real.py, through k8s/data-service, which
they are generated into)."""

import os
import time

import pytest
from support import api_calls, launch_as, write_csv

from fakes.artifacts import Artifact, train_step
from fakes.chief import write_chief_outputs
from realparts.local_operator import LocalOperator, node_program
from realparts.processes import wait_for
from realparts.standins import Kubelet
from tfrecord_suite import images
from tfrecord_suite.errors import RetryWillNotHelp, UserError
from tfrecord_suite.launch.credentials import Credentials
from tfrecord_suite.launch.data_service_k8s import (
    DataServiceLauncher,
    dispatcher_address,
    objects,
    write_manifests,
)
from tfrecord_suite.launch.job import job_name
from tfrecord_suite.launch.kube import JobError
from tfrecord_suite.launch.lease import lease_name
from tfrecord_suite.registry.datasets import Registry
from tfrecord_suite.shard.step import ShardConfig, run_shard
from tfrecord_suite.train.reader import dataset_for_split
from tfrecord_suite.train.reader_config import ReaderConfig
from tfrecord_suite.train.trainer import TrainConfig, served_input

K8S = os.path.join(os.path.dirname(__file__), "..", "..", "k8s")
#: No scheduler has this name: a pod of it is never placed (deleting it needs no kubelet).
UNSCHEDULED = "tfrs-unscheduled"

#: ``(resource, kind, name suffix)`` of what the service is made of
SERVICE_OBJECTS = {
    ("services", "Service", ""),
    ("statefulsets", "StatefulSet", "-dispatcher"),
    ("statefulsets", "StatefulSet", "-worker"),
    ("poddisruptionbudgets", "PodDisruptionBudget", "-worker"),
    ("networkpolicies", "NetworkPolicy", ""),
}


def _launcher(runner, **kw):
    return DataServiceLauncher(runner.api, sleep=lambda s: time.sleep(0.2), **kw)


def _stored(k8s, namespace):
    """``(kind, name) -> object`` of every Service, StatefulSet, PodDisruptionBudget,
    NetworkPolicy and Job in ``namespace``, as the server holds them (JSON field names)."""
    from kubernetes import client

    api = k8s.api_client()
    listings = (
        client.CoreV1Api(api).list_namespaced_service,
        client.AppsV1Api(api).list_namespaced_stateful_set,
        client.PolicyV1Api(api).list_namespaced_pod_disruption_budget,
        client.NetworkingV1Api(api).list_namespaced_network_policy,
        client.BatchV1Api(api).list_namespaced_job,
    )
    out = {}
    for listing in listings:
        for item in listing(namespace).items:
            obj = api.sanitize_for_serialization(item)
            kind = type(item).__name__.removeprefix("V1")
            out[(kind, obj["metadata"]["name"])] = obj
    return out


def _pods(k8s, namespace):
    """The pods in ``namespace``, but for the one standing for the step's own (never placed)."""
    from kubernetes import client

    pods = client.CoreV1Api(k8s.api_client()).list_namespaced_pod(namespace).items
    return [p for p in pods if p.spec.scheduler_name != UNSCHEDULED]


def _all_gone(k8s, namespace):
    """Wait (while the stand-in kubelet runs) until the service's objects and pods are gone."""
    wait_for(lambda: not _stored(k8s, namespace) and not _pods(k8s, namespace), timeout=90,
             what=f"everything in {namespace} deleted")  # fmt: skip


def _deleted_by(k8s, runner):
    """``(resource, name)`` of each object the runner deleted (200: accepted)."""
    return sorted(
        (uri.split("?")[0].split("/")[-2], uri.split("?")[0].split("/")[-1])
        for verb, code, uri in api_calls(k8s, runner.user)
        if verb == "delete" and code == 200
    )


def _owner_pod(k8s, namespace, name="train-pod"):
    """A pod standing for the train step's own (never scheduled): the objects' owner."""
    from kubernetes import client

    pod = client.CoreV1Api(k8s.api_client()).create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"schedulerName": UNSCHEDULED, "automountServiceAccountToken": False,
                 "containers": [{"name": "main", "image": "img"}]},
    })  # fmt: skip
    return {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": pod.metadata.uid}


def _account(k8s, namespace, name):
    k8s.apply([{"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": name, "namespace": namespace}}])  # fmt: skip


@pytest.mark.k8s
def test_the_service_runs_while_training_and_is_deleted_after(k8s, k8s_nodes, k8s_runner):
    ns = k8s_runner.namespace
    creds = Credentials("bucket-keys", "s3-keys", "regcred")
    owner = _owner_pod(k8s, ns)
    _account(k8s, ns, "sa")
    with Kubelet(k8s.api_client(), ns):
        with _launcher(k8s_runner, timeout_seconds=120).running(
            "tfrs-train-abc-data", 3, "reg/img:1", run_id="run-1", service_account="sa",
            owner=owner, namespace=ns, credentials=creds,
        ) as address:  # fmt: skip
            assert address == "grpc://tfrs-train-abc-data-dispatcher-0.tfrs-train-abc-data:5050"
            stored = _stored(k8s, ns)
            assert set(stored) == {(k, f"tfrs-train-abc-data{s}") for _, k, s in SERVICE_OBJECTS}
            # every pod made by the real StatefulSet controller, ready
            pods = _pods(k8s, ns)
            assert len(pods) == 4 and all(p.status.phase == "Running" for p in pods)
        _all_gone(k8s, ns)
    # the launcher deleted each object itself (not the garbage collector)
    assert _deleted_by(k8s, k8s_runner) == sorted(
        (r, f"tfrs-train-abc-data{s}") for r, _, s in SERVICE_OBJECTS
    )
    for obj in stored.values():
        assert obj["metadata"]["ownerReferences"] == [owner]
        assert obj["metadata"]["labels"]["tfrecord-suite/run"] == "run-1"
    workers = stored[("StatefulSet", "tfrs-train-abc-data-worker")]
    pod = workers["spec"]["template"]["spec"]
    assert workers["spec"]["replicas"] == 3 and pod["serviceAccountName"] == "sa"
    assert pod["containers"][0]["image"] == "reg/img:1"
    # the workers read the data with the run's Secrets; both pull with its pull Secret
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"]["name"] == "bucket-keys"
    dispatcher = stored[("StatefulSet", "tfrs-train-abc-data-dispatcher")]
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


@pytest.mark.k8s
def test_the_service_is_deleted_when_training_fails(k8s, k8s_nodes, k8s_runner):
    ns = k8s_runner.namespace
    with Kubelet(k8s.api_client(), ns):
        running = _launcher(k8s_runner, timeout_seconds=120).running(
            "s", 1, "img", run_id="r", namespace=ns
        )
        with pytest.raises(RuntimeError, match="boom"), running:
            raise RuntimeError("boom")
        _all_gone(k8s, ns)
    assert len(_deleted_by(k8s, k8s_runner)) == len(SERVICE_OBJECTS)


@pytest.mark.k8s
def test_pods_that_never_get_ready_fail_the_step_and_leave_nothing(k8s, k8s_nodes, k8s_runner):
    """Running, never Ready (a readiness check that keeps failing): the step gives up at its
    timeout, saying which sets wait, and deletes everything."""
    ns = k8s_runner.namespace
    with Kubelet(k8s.api_client(), ns, ready=False):
        clock = iter(range(0, 10_000, 100))
        launcher = _launcher(k8s_runner, clock=lambda: next(clock), timeout_seconds=300)
        with (
            pytest.raises(JobError, match=r"not ready after 300 s: s-dispatcher 0/1, s-worker 0/2"),
            launcher.running("s", 2, "img", run_id="r", namespace=ns),
        ):
            pass
        _all_gone(k8s, ns)


@pytest.mark.k8s
def test_a_claim_that_never_binds_is_named_with_the_schedulers_reason(k8s, k8s_nodes, k8s_runner):
    """Where the namespace has no default StorageClass, the dispatcher's journal claim never
    binds: the real scheduler's reason for the Pending pod is in the error, with the cause."""
    ns = k8s_runner.namespace
    with Kubelet(k8s.api_client(), ns, provision=False):
        clock = iter(range(0, 10_000, 5))
        launcher = _launcher(k8s_runner, clock=lambda: next(clock), timeout_seconds=300)
        with (
            pytest.raises(JobError) as err,
            launcher.running("s", 1, "img", run_id="r", namespace=ns),
        ):
            pass
        _all_gone(k8s, ns)
    text = str(err.value)
    assert "s-dispatcher 0/1" in text
    assert (
        "s-dispatcher-0 is Pending: 0/" in text
        and "unbound immediate PersistentVolumeClaims" in text
    )
    assert "default StorageClass" in text


@pytest.mark.k8s
def test_a_retried_step_adopts_its_own_service_but_not_another_runs(k8s, k8s_nodes, k8s_runner):
    ns = k8s_runner.namespace

    def earlier_attempt():  # what a first attempt of run-1 created
        k8s.apply(objects("s", 1, "img", labels={"tfrecord-suite/run": "run-1"}), "-n", ns)
        return {k: o["metadata"]["uid"] for k, o in _stored(k8s, ns).items()}

    with Kubelet(k8s.api_client(), ns):
        uids = earlier_attempt()
        with _launcher(k8s_runner, timeout_seconds=120).running(
            "s", 1, "img", run_id="run-1", namespace=ns
        ) as address:
            assert address == dispatcher_address("s")
            # adopted, not created again: the same objects
            assert {k: o["metadata"]["uid"] for k, o in _stored(k8s, ns).items()} == uids
        creates = [c[1] for c in api_calls(k8s, k8s_runner.user) if c[0] == "create"]
        assert creates == [409] * len(SERVICE_OBJECTS)
        _all_gone(k8s, ns)
        earlier_attempt()
        with (
            pytest.raises(
                JobError, match=rf"Service {ns}/s already exists and belongs to another run"
            ),
            _launcher(k8s_runner).running("s", 1, "img", run_id="run-2", namespace=ns),
        ):
            pass
        # not its own: left alone, all of it (deleted here, while the stand-in kubelet runs)
        assert set(_stored(k8s, ns)) == {(k, f"s{s}") for _, k, s in SERVICE_OBJECTS}
        assert len(_deleted_by(k8s, k8s_runner)) == len(SERVICE_OBJECTS)  # the first's only
        for body in objects("s", 1, "img"):
            k8s.kubectl("delete", "-n", ns, body["kind"].lower(), body["metadata"]["name"],
                        "--cascade=foreground")  # fmt: skip
        _all_gone(k8s, ns)


@pytest.fixture(scope="module")
def four_files(tmp_path_factory):
    """A version of 4 train shard files in a registry of its own."""
    base = tmp_path_factory.mktemp("four")
    return _four_files_version(base, str(base / "reg"))


def _four_files_version(base, registry_root: str) -> str:
    """400 rows in 4 train shard files, published under ``registry_root``; the reference."""
    csv = write_csv(str(base / "rows.csv"), ["x", "label"], [[i, "ab"[i % 2]] for i in range(400)])
    staged = str(base / "staged")
    run_shard(ShardConfig(input=csv, output=staged, label="label", num_shards=4,
                          splits="train=100"))  # fmt: skip
    registry = Registry(registry_root)
    return f"{registry.root}/rows@{registry.publish(staged, 'rows').version}"


@pytest.mark.k8s
@pytest.mark.parametrize("store", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_train_step_gives_the_job_nodes_its_runs_service(
    k8s, k8s_nodes, k8s_runner, four_files, tmp_path, monkeypatch, request, store
):
    """cluster:2 in the train step: the service is started for the run before the job, each
    node reads through its dispatcher (--input-service grpc://...), and both are gone after.
    Its workers request what the compiled placement says (--service-cpu-request and
    --service-memory-request; a memory request above the default limit raises the limit).
    A version on s3:// (shards the reader stages): each worker is told to stage its share of
    that version first (its place in the dispatcher's list, the nodes' count of input
    pipelines), given the time to with a startup probe, and the nodes read the workers'
    copies (--served-copies)."""
    from tfrecord_suite.launch.placement import Placement
    from tfrecord_suite.registry.datasets import resolve_dataset
    from tfrecord_suite.train.served import SERVED_DIR

    ns = k8s_runner.namespace
    if store == "s3":
        four_files = _four_files_version(tmp_path, f"{request.getfixturevalue('s3_bucket')}/reg")
    registry = four_files.rsplit("/", 1)[0]
    shared = os.path.join(registry, "_runs", job_name("run-7"), "model")
    write_chief_outputs(shared, replicas=2, accuracy=0.8, per_second=10.0)
    owner = _owner_pod(k8s, ns)
    _account(k8s, ns, "default-editor")
    seen = {}
    launch_as(monkeypatch, tmp_path, k8s_runner)
    with (
        Kubelet(k8s.api_client(), ns),
        LocalOperator(k8s, ns, tmp_path / "nodes", program=lambda n: node_program(),
                      on_start=lambda job: seen.update(_stored(k8s, ns))) as operator,
    ):  # fmt: skip
        train_step(
            four_files,
            tmp_path,
            model=Artifact("minio://b/run-7/model", path=str(tmp_path / "model")),
            workers=2,
            run_id="run-7",
            pod_name=owner["name"],
            pod_uid=owner["uid"],
            service_account="default-editor",
            input_service="cluster:2",
            launcher="tfjob",
            placement=Placement(
                service_cpu_request="250m", service_memory_request="12Gi"
            ).to_json(),
        )
        (job,) = [j.object for j in operator.jobs.values()]
        _all_gone(k8s, ns)  # the service, the job and the lease
    name = f"{job_name('run-7')}-data"
    args = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--input-service") + 1] == dispatcher_address(name)
    lease = seen.pop(("Job", lease_name(job_name("run-7"))))
    assert set(seen) == {(k, f"{name}{s}") for _, k, s in SERVICE_OBJECTS}
    worker = seen[("StatefulSet", f"{name}-worker")]
    assert worker["spec"]["replicas"] == 2
    assert worker["spec"]["template"]["spec"]["serviceAccountName"] == "default-editor"
    assert worker["spec"]["template"]["spec"]["containers"][0]["image"] == images.COMPONENT_IMAGE
    assert worker["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "250m", "memory": "12Gi"},
        "limits": {"memory": "12Gi"},
    }
    container = worker["spec"]["template"]["spec"]["containers"][0]
    staging = [a for a in container["args"] if a.startswith("--stage-")]
    if store == "s3":
        assert staging == [
            f"--stage-dataset={resolve_dataset(four_files)[1]}",
            "--stage-pipelines=2",
            f"--stage-workers={name}-worker-0.{name}:5051,{name}-worker-1.{name}:5051",
        ]
        assert container["startupProbe"]["exec"]["command"][-1] == "/tmp/tfrs-data-service.ready"
        assert args[args.index("--served-copies") + 1] == SERVED_DIR
    else:  # TensorFlow reads the files: nothing staged
        assert not staging and "startupProbe" not in container and "--served-copies" not in args
    # the service and the job are the lease's; the lease is the step pod's
    assert lease["metadata"]["ownerReferences"] == [owner]
    for obj in [*seen.values(), job]:
        (ref,) = obj["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"]) == (
            "Job",
            lease["metadata"]["name"],
            lease["metadata"]["uid"],
        )


def test_too_few_files_for_the_workers_is_refused_before_anything_starts(
    four_files, tmp_path, monkeypatch
):
    """Before any Kubernetes API is even looked for (the kubeconfig names none)."""
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    with pytest.raises(RetryWillNotHelp, match=r"4 shard files for 2 input pipeline\(s\) and 3"):
        train_step(four_files, tmp_path, workers=2, input_service="cluster:3")


@pytest.mark.s3
def test_a_dataset_on_s3_through_a_shared_service_is_refused_saying_what_serves_it(
    s3_bucket, tmp_path
):
    """A shared service (grpc://, k8s/data-service) has no worker that stages: the reader
    refuses before any pass, naming the services whose workers stage their shares."""
    ref = _four_files_version(tmp_path, f"{s3_bucket}/reg")
    with pytest.raises(UserError, match=r"/rows/.*staged to local disk .*local:N, or cluster:N"):
        dataset_for_split(ref, "train", ReaderConfig(batch_size=8), service="grpc://h:5050")


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
