"""What the suite declares about its pods holds on the one-node cluster (tests/cluster), enforced
by the parts that enforce it in a real cluster rather than by our reading of the rules:

- **NetworkPolicy**, by kube-network-policies v0.8.0 (SIG Network's reference engine, an add-on
  of the cluster; tests/cluster/netpol says the one change this kernel needs): the shared tf.data
  service's policy as ``k8s/data-service`` ships it admits the trainer pods of its namespace and
  nothing else; a run's own service, as the launcher creates it, admits that run's trainers (its
  job's nodes, and the step's own pod) and no other run's. Each refused client reaches a server
  with no policy at the same time, so the refusal is the policy's, not a broken network.
- **Pod Security restricted**, by the API server's PodSecurity admission in namespaces that
  enforce it (stricter than a Kubeflow profile's ``baseline``): the pods the cluster itself makes from our objects
  (the StatefulSets' dispatchers and workers; a TrainJob's nodes, made by JobSet, are
  test_cluster_training's) are admitted and run, checked on the pods as stored, with the UID
  the runtime ran them as; the lease's Job template draws no warning; a template that loses a
  hardening field is refused, and the API server's message names the field.
- **The tf.data service as the suite deploys it**: the train step trains through the shared
  service to the accuracy it reaches without it; a worker pod, and the dispatcher pod, deleted
  mid-pass (the StatefulSet brings each back at its name, the dispatcher with its journal) each
  end with a reader's pass complete and no example lost, and a train step reading through the
  service at the same moment completing (docs/how-to/data-service.md's guarantee).
- **Nothing outlives its run**: a failed TrainJob kept for inspection goes, with the JobSet and
  pods the Trainer and JobSet made for it, when its kept lease ends.

Every object the launcher makes is made as the run's account (k8s/base's Role, its own token);
the admin only sets up what Kubeflow or a namespace's owner would (namespaces, volumes, the
shared service, the step's and the clients' pods) and deletes pods to kill them.

What stands in: the node's folder, as a PersistentVolume, for the bucket (mounted in the pods
that read the data: the shared service's workers through an overlay, as a user's overlay would
add a credential); the services' CPU requests, scaled to this 2-core machine; one node, so
another host is another pod on the same bridge. Markers ``cluster``, ``slow``.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import api_calls, launch_as, stored_job, write_csv
from test_cluster import pod_log, wait_pod
from test_cluster_training import (
    ROOT,
    SHARED_CLAIM,
    STEP_ACCOUNT,
    cluster_image,
    host_volume,
    pods_as_stored,
    publish_digits,
    publish_on_node,
    ran_restricted,
    run_account,
    run_train_step,
    shared_claim,
    shared_folder,
    start_train_step,
)

from realparts.processes import wait_for
from tfrecord_suite.images import IMAGE_UID, ImageSet
from tfrecord_suite.launch import data_service_k8s as data_service
from tfrecord_suite.launch import job as job_module
from tfrecord_suite.launch.credentials import Credentials
from tfrecord_suite.launch.job import JobConfig, job_name
from tfrecord_suite.launch.kube import (
    RUN_LABEL,
    TRAINER_LABELS,
    JobError,
    container_security,
    label_value,
    pod_security,
)
from tfrecord_suite.launch.lease import Lease, lease_name
from tfrecord_suite.launch.placement import Placement
from tfrecord_suite.launch.train_step import StepLaunch, cluster_input_service, train_in_job
from tfrecord_suite.launch.trainjob import JOBSET_NAME_LABEL, TrainJob
from tfrecord_suite.podinfo import RUN_ID_LABEL, PodInfo
from tfrecord_suite.train.trainer import TrainConfig

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(3600)]

#: The shared service's name in k8s/data-service.
SHARED = "tfrs-data"
#: What the services' pods request here: this 2-core machine, which Kubeflow Pipelines shares,
#: cannot give what they ask for (a worker 3 CPUs, the dispatcher 0.5); their limits stay
SMALL_REQUESTS = {"cpu": "100m", "memory": "512Mi"}
#: How long a client that must be refused keeps trying (a refused connection here is a dropped
#: SYN: each try times out)
REFUSED_WINDOW = 30
#: The stand-in step pod is never placed: no scheduler has this name (it needs no kubelet).
UNSCHEDULED = "tfrs-unscheduled"

#: A client's connection check, run by Python in the component image (no TensorFlow): connect
#: to every HOST:PORT at once, each retried until it connects or the window (seconds, the first
#: argument) ends; print one JSON object, target -> "connected" or the last error. A client
#: that must connect may need a few tries: without NRI the engine learns a new pod's address
#: from the API server, a moment after the pod's first packet.
CONNECT = """
import concurrent.futures, json, socket, sys, time
window, targets = float(sys.argv[1]), sys.argv[2:]
def check(target):
    host, port = target.rsplit(":", 1)
    deadline, error = time.monotonic() + window, ""
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=3).close()
            return "connected"
        except OSError as exc:
            error = f"{type(exc).__name__}: {exc}"
        if time.monotonic() > deadline:
            return error
        time.sleep(1)
with concurrent.futures.ThreadPoolExecutor(len(targets)) as pool:
    print(json.dumps(dict(zip(targets, pool.map(check, targets)))))
"""

#: One pass over a version's training split through a tf.data service, by the trainer's own
#: reader, counting each example by its ``id``: one JSON line per batch (``batch``), then the
#: result (``expected``: examples in the split, read from the files without the service;
#: ``lost``: those never served; ``repeated``: examples served more than once). Paced, so that
#: a test can kill a server mid-pass.
READ_PASS = """
import collections, json, sys, time
from tfrecord_suite.train.reader import dataset_for_split
from tfrecord_suite.train.reader_config import ReaderConfig
ref, address, pause = sys.argv[1], sys.argv[2], float(sys.argv[3])
config = ReaderConfig(batch_size=32, repeat=False)
def ids(dataset, paced=False):
    seen = collections.Counter()
    for n, (features, _) in enumerate(dataset):
        seen.update(features["id"].numpy().ravel().tolist())
        if paced:
            print(json.dumps({"batch": n}), flush=True)
            time.sleep(pause)
    return seen
expected = ids(dataset_for_split(ref, "train", config))
served = ids(dataset_for_split(ref, "train", config, service=address), paced=True)
print(json.dumps({"expected": len(expected), "lost": len(set(expected) - set(served)),
                  "repeated": sum(served.values()) - len(served),
                  "unexpected": len(set(served) - set(expected))}))
"""


# ------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def enforcing(one_node_cluster):
    """The cluster with its NetworkPolicy engine running (installed now where the cluster was
    brought up before the engine was one of its add-ons) and Kubeflow Trainer (the train step's
    launcher is ``trainjob``: its pod lists TrainJobs, which a cluster brought up without the
    Trainer does not serve)."""
    from cluster import node

    node.add(one_node_cluster, trainer=True)
    one_node_cluster.kubectl("-n", "kube-system", "rollout", "status",
                             "daemonset/kube-network-policies", "--timeout=180s")  # fmt: skip
    return one_node_cluster


@pytest.fixture(scope="module")
def image(enforcing) -> str:
    return cluster_image(enforcing)


@pytest.fixture(scope="module")
def namespace(enforcing, cluster_module_namespace) -> Iterator[str]:
    """The module's namespace (Pod Security restricted enforced), with the claim of the node's
    shared folder and an unpoliced server, ``open``, that every client reaches."""
    from kubernetes import client

    ns = cluster_module_namespace
    core = client.CoreV1Api(enforcing.api_client())
    core.create_namespaced_pod(ns, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "open"},
        "spec": {"automountServiceAccountToken": False,
                 "securityContext": pod_security(),
                 "containers": [{"name": "open", "image": enforcing.system_images["probe"],
                                 "imagePullPolicy": "Never", "args": ["serve", ":8080"],
                                 "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                                 "securityContext": container_security()}]},
    })  # fmt: skip
    wait_pod(core, ns, "open", {"Running"}, timeout=300)
    with shared_claim(enforcing, ns):
        yield ns


@pytest.fixture(scope="module")
def runner(enforcing, namespace, tmp_path_factory):
    """The run's account: k8s/base's launcher Role, its own token."""
    return run_account(enforcing, namespace, tmp_path_factory.mktemp("runner"))


def _open_address(cluster: Any, namespace: str) -> str:
    from kubernetes import client

    ip = client.CoreV1Api(cluster.api_client()).read_namespaced_pod("open", namespace).status.pod_ip
    return f"{ip}:8080"


@pytest.fixture(scope="module")
def shared_service(enforcing, image, namespace, tmp_path_factory) -> Iterator[None]:
    """``k8s/data-service`` applied as a namespace's owner applies it, through an overlay of what
    this node needs: our image, requests this machine can give, the node's shared folder in the
    workers (where they would read the bucket) and a volume for the dispatcher's journal claim
    (the node has no provisioner). Ready when it yields."""
    cluster = enforcing
    overlay = tmp_path_factory.mktemp("overlay")
    shipped = ROOT / "k8s" / "data-service"
    name, tag = image.rsplit(":", 1)
    shipped_image = ImageSet().image("component").rsplit(":", 1)[0]  # what k8s/images names
    small = {"resources": {"requests": SMALL_REQUESTS}}
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        # a kustomization may name its base by a relative path only
        "resources": [os.path.relpath(shipped, overlay)],
        "images": [{"name": shipped_image, "newName": name, "newTag": tag}],
        "patches": [
            {"patch": yaml.safe_dump({
                "apiVersion": "apps/v1", "kind": "StatefulSet",
                "metadata": {"name": f"{SHARED}-dispatcher"},
                "spec": {"template": {"spec": {"containers": [{"name": "dispatcher", **small}]}}},
            })},
            {"patch": yaml.safe_dump({
                "apiVersion": "apps/v1", "kind": "StatefulSet",
                "metadata": {"name": f"{SHARED}-worker"},
                "spec": {"template": {"spec": {
                    "containers": [{"name": "worker", **small, "volumeMounts": [
                        {"name": "shared", "mountPath": str(shared_folder(cluster))}]}],
                    "volumes": [{"name": "shared",
                                 "persistentVolumeClaim": {"claimName": SHARED_CLAIM}}],
                }}},
            })},
        ],
    }  # fmt: skip
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    rendered = cluster.kubectl("kustomize", str(overlay)).stdout
    objects = [d for d in yaml.safe_load_all(rendered) if d]
    journal = shared_folder(cluster) / f"journal-{namespace}"
    journal.mkdir(mode=0o777)
    journal.chmod(0o777)
    with host_volume(cluster, namespace, _journal_claim(objects), journal):
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=rendered)
        _wait_ready(cluster, namespace, SHARED)
        try:
            yield
        finally:
            try:
                cluster.kubectl("delete", "-n", namespace, "--wait", "--ignore-not-found",
                                "-f", "-", stdin=rendered)  # fmt: skip
            finally:
                shutil.rmtree(journal, ignore_errors=True)


def _journal_claim(objects: list[dict]) -> str:
    """The claim the dispatcher's StatefulSet makes for its journal (``<template>-<set>-0``)."""
    (dispatcher,) = [o for o in objects if o["metadata"]["name"].endswith("-dispatcher")]
    (template,) = dispatcher["spec"]["volumeClaimTemplates"]
    return f"{template['metadata']['name']}-{dispatcher['metadata']['name']}-0"


def _wait_ready(cluster: Any, namespace: str, name: str) -> None:
    """Wait until every pod of the service ``name`` is ready, as the how-to says to."""
    for role in ("dispatcher", "worker"):
        cluster.kubectl("-n", namespace, "rollout", "status", f"statefulset/{name}-{role}",
                        "--timeout=900s")  # fmt: skip


def _targets(name: str, workers: int) -> list[str]:
    """The dispatcher's and each worker's ``host:port``, as the trainers reach them."""
    dispatcher = data_service.dispatcher_address(name).removeprefix("grpc://")
    return [dispatcher, *data_service.worker_names(name, workers)]


def _service_pods(cluster: Any, namespace: str, name: str) -> list[dict[str, Any]]:
    return pods_as_stored(cluster, namespace, f"app.kubernetes.io/name={name}")


def _connections(
    cluster: Any, namespace: str, image: str, clients: dict[str, dict[str, str]],
    targets: list[str], window: float,
) -> dict[str, dict[str, str]]:  # fmt: skip
    """Start a client pod per ``clients`` entry (``name -> its labels``), all at once, each
    connecting to every target (:data:`CONNECT`); ``name -> target -> result``."""
    from kubernetes import client

    core = client.CoreV1Api(cluster.api_client())
    for name, labels in clients.items():
        core.create_namespaced_pod(namespace, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                     "securityContext": pod_security(runAsUser=IMAGE_UID),
                     "containers": [{"name": "client", "image": image,
                                     "command": ["python", "-c", CONNECT, str(window), *targets],
                                     "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}},
                                     "securityContext": container_security()}]},
        })  # fmt: skip
    out = {}
    for name in clients:
        pod = wait_pod(core, namespace, name, {"Succeeded", "Failed"}, timeout=window + 600)
        log = pod_log(core, namespace, name)
        assert pod.status.phase == "Succeeded", log
        out[name] = json.loads(log.strip().splitlines()[-1])
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    return out


def _step_pod_stand_in(cluster: Any, namespace: str, pipeline_run: str) -> PodInfo:
    """A pod standing for the train step's own, as its downward API describes it: the lease's
    owner. Never placed (no scheduler has its scheduler's name), restricted like the step's."""
    from kubernetes import client

    name = f"step-{uuid.uuid4().hex[:6]}"
    pod = client.CoreV1Api(cluster.api_client()).create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {**TRAINER_LABELS, RUN_ID_LABEL: pipeline_run}},
        "spec": {"schedulerName": UNSCHEDULED, "automountServiceAccountToken": False,
                 "serviceAccountName": STEP_ACCOUNT,
                 "securityContext": pod_security(runAsUser=IMAGE_UID),
                 "containers": [{"name": "main", "image": cluster.system_images["probe"],
                                 "securityContext": container_security()}]},
    })  # fmt: skip
    return PodInfo(run_id=pipeline_run, pod_name=name, pod_uid=pod.metadata.uid,
                   service_account=STEP_ACCOUNT)  # fmt: skip


def _warnings(result: Any) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("Warning:")]


# ------------------------------------------------------------------- NetworkPolicy, Pod Security


def test_the_shared_service_answers_the_trainers_of_its_namespace_only(
    enforcing, image, namespace, shared_service
):
    """``k8s/data-service`` as a user applies it: a trainer pod of the namespace reaches the
    dispatcher and both workers; a pod without the trainer labels reaches none of them, while
    it reaches the unpoliced server. The servers' pods, made by the StatefulSet controller in a
    namespace enforcing restricted, were admitted and run as the images' user."""
    cluster = enforcing
    targets = _targets(SHARED, 2)
    open_server = _open_address(cluster, namespace)
    results = _connections(
        cluster, namespace, image,
        {"trainer": dict(TRAINER_LABELS), "stranger": {"app.kubernetes.io/name": "tfrecord-suite"}},
        [open_server, *targets], REFUSED_WINDOW,
    )  # fmt: skip
    assert results["trainer"] == dict.fromkeys([open_server, *targets], "connected")
    assert results["stranger"][open_server] == "connected"
    refused = {t: results["stranger"][t] for t in targets}
    assert all("timed out" in r for r in refused.values()), refused

    pods = _service_pods(cluster, namespace, SHARED)
    assert sorted(p["metadata"]["name"] for p in pods) == [
        f"{SHARED}-dispatcher-0", f"{SHARED}-worker-0", f"{SHARED}-worker-1"]  # fmt: skip
    assert {p["metadata"]["name"]: ran_restricted(p) for p in pods} == {
        p["metadata"]["name"]: [] for p in pods
    }


def test_a_runs_own_service_answers_that_runs_trainers_only(
    enforcing, image, namespace, runner, monkeypatch, tmp_path
):
    """The run's own service (``--input-service cluster:2``) as the launcher makes it, as the
    run's account, under the step's lease: the run's job nodes and the step's own pod (labelled
    as the compiled pipeline and Kubeflow label them) reach the dispatcher and both workers;
    another run's node, and an unlabelled pod, reach none of them. Its pods were admitted and
    run under restricted; its lease's Job template draws no Pod Security warning from the API
    server. Leaving, the launcher deletes it all."""
    cluster = enforcing
    launch_as(monkeypatch, tmp_path, runner)  # the step's namespace
    for constant in ("WORKER_RESOURCES", "DISPATCHER_RESOURCES"):
        shipped = getattr(data_service, constant)
        monkeypatch.setattr(data_service, constant, {**shipped, "requests": SMALL_REQUESTS})
    pipeline_run = f"run-{uuid.uuid4().hex[:8]}"
    pod = _step_pod_stand_in(cluster, namespace, pipeline_run)
    name = f"{job_name(pipeline_run)}-data"
    launch = StepLaunch(runner.api, pipeline_run, pod, None, Credentials(), [], 2, image)
    lease = Lease(runner.api, lease_name(job_name(pipeline_run)), image, namespace=namespace,
                  run_id=pipeline_run, owner=pod.owner_reference())  # fmt: skip
    journal = shared_folder(cluster) / f"journal-{name}"
    journal.mkdir(mode=0o777)
    journal.chmod(0o777)
    config = TrainConfig(dataset="/unread/registry/d@1.0.0", model_dir="/unread/model")
    try:
        with (
            host_volume(cluster, namespace, f"journal-{name}-dispatcher-0", journal),
            lease,
        ):
            launch.lease = lease
            with cluster_input_service(config, launch) as served:
                assert served.input_service == data_service.dispatcher_address(name)
                nodes = JobConfig(name=job_name(pipeline_run), image=image, trainer_args=[],
                                  workers=2, run_id=pipeline_run)  # fmt: skip
                other = JobConfig(name=job_name("another"), image=image, trainer_args=[],
                                  workers=2, run_id="another")  # fmt: skip
                targets = _targets(name, 2)
                open_server = _open_address(cluster, namespace)
                results = _connections(
                    cluster, namespace, image,
                    {"run-node": nodes.node_pod_metadata()["labels"],
                     "run-step": {**TRAINER_LABELS, RUN_ID_LABEL: pipeline_run},
                     "other-run-node": other.node_pod_metadata()["labels"],
                     "unlabelled": {}},
                    [open_server, *targets], REFUSED_WINDOW,
                )  # fmt: skip
                pods = _service_pods(cluster, namespace, name)
            lease_template = lease.body()
    finally:
        shutil.rmtree(journal, ignore_errors=True)
    everything = [open_server, *targets]
    assert results["run-node"] == dict.fromkeys(everything, "connected")
    assert results["run-step"] == dict.fromkeys(everything, "connected")
    for stranger in ("other-run-node", "unlabelled"):
        assert results[stranger][open_server] == "connected", results[stranger]
        refused = {t: results[stranger][t] for t in targets}
        assert all("timed out" in r for r in refused.values()), (stranger, refused)

    assert sorted(p["metadata"]["name"] for p in pods) == [
        f"{name}-dispatcher-0", f"{name}-worker-0", f"{name}-worker-1"]  # fmt: skip
    assert all(p["metadata"]["labels"][RUN_LABEL] == label_value(pipeline_run) for p in pods)
    assert {p["metadata"]["name"]: ran_restricted(p) for p in pods} == {
        p["metadata"]["name"]: [] for p in pods
    }
    # the launcher deleted what it made on leaving (their pods go once stopped)
    wait_for(lambda: not _service_pods(cluster, namespace, name), timeout=180,
             what="the run's service pods gone")  # fmt: skip
    # the lease never makes a pod (parallelism 0): its template is judged as the Job is created
    # (warn=restricted), here as the run's account, renamed so as not to meet the real one
    lease_template["metadata"]["name"] += "-check"
    created = cluster.control_plane.kubectl(
        "create", "-n", namespace, "--dry-run=server", "-f", "-",
        stdin=json.dumps(lease_template), kubeconfig=runner.kubeconfig,
    )  # fmt: skip
    assert _warnings(created) == [], created.stderr


def test_a_template_that_loses_a_hardening_field_is_refused_by_the_admission(
    enforcing, image, namespace, runner
):
    """The run's worker StatefulSet with ``allowPrivilegeEscalation`` dropped from its
    container, created as the run's account: the API server warns that its pods would violate
    restricted, naming the field, and refuses every pod the StatefulSet controller then tries to
    make, saying why in the controller's event."""
    from kubernetes import client

    (worker,) = [
        o for o in data_service.objects("tfrs-broken", 1, image)
        if o["kind"] == "StatefulSet" and o["metadata"]["name"] == "tfrs-broken-worker"
    ]  # fmt: skip
    (container,) = worker["spec"]["template"]["spec"]["containers"]
    del container["securityContext"]["allowPrivilegeEscalation"]
    created = enforcing.control_plane.kubectl(
        "create", "-n", namespace, "-f", "-", stdin=json.dumps(worker),
        kubeconfig=runner.kubeconfig,
    )  # fmt: skip
    (warning,) = _warnings(created)
    assert 'violate PodSecurity "restricted' in warning and "allowPrivilegeEscalation" in warning
    core = client.CoreV1Api(enforcing.api_client())

    def refusal() -> str:
        events = core.list_namespaced_event(
            namespace, field_selector="involvedObject.name=tfrs-broken-worker"
        )
        return next((e.message for e in events.items if e.reason == "FailedCreate"), "")

    wait_for(lambda: refusal(), timeout=120, what="the StatefulSet controller's refused pod")
    message = refusal()
    assert "forbidden: violates PodSecurity" in message, message
    assert "allowPrivilegeEscalation != false" in message, message
    assert pods_as_stored(enforcing, namespace, "app.kubernetes.io/name=tfrs-broken") == []
    client.AppsV1Api(runner.api).delete_namespaced_stateful_set("tfrs-broken-worker", namespace)


# ----------------------------------------------------------------- the tf.data service, for real


@pytest.fixture(scope="module")
def digits(enforcing, tmp_path_factory) -> Iterator[dict[str, Any]]:
    data = publish_digits(shared_folder(enforcing), tmp_path_factory.mktemp("digits"))
    yield data
    shutil.rmtree(data["work"], ignore_errors=True)


@pytest.fixture(scope="module")
def numbered(enforcing, tmp_path_factory) -> Iterator[dict[str, Any]]:
    """A version whose rows carry their number (``id``), 8 training shards (4 each worker)."""
    from tfrecord_suite.shard.step import ShardConfig, run_shard

    base = tmp_path_factory.mktemp("numbered")
    rows = [[i, (i % 97) / 97.0, "ab"[i % 2]] for i in range(3000)]
    csv = write_csv(str(base / "rows.csv"), ["id", "x", "label"], rows)
    run_shard(ShardConfig(input=csv, output=str(base / "staged"), label="label", num_shards=8))
    data = publish_on_node(shared_folder(enforcing), str(base / "staged"), "numbered")
    yield data
    shutil.rmtree(data["work"], ignore_errors=True)


def _metrics_json(result: dict[str, Any]) -> dict[str, Any]:
    return json.loads((result["out"] / "model" / "metrics.json").read_text())


def test_the_train_step_trains_through_the_shared_service_as_well_as_without_it(
    enforcing, image, namespace, runner, shared_service, digits
):
    """The train step's pod (the compiled component's command, the run's account), training
    itself: once reading through the shared service's dispatcher and two worker pods, once
    reading the files itself; the same model, batch and epochs reach the same test accuracy
    (within what one sharding of the digits to the next moves it, test_cluster_training)."""
    steps = (enforcing, image, shared_folder(enforcing))
    address = data_service.dispatcher_address(SHARED)
    same = {"workers": 1, "batch_size": 64}
    alone = run_train_step(steps, namespace, digits, "alone", **same)
    served = run_train_step(steps, namespace, digits, "served", input_service=address, **same)
    assert _metrics_json(served)["input"]["service"] == {"input_service": address}
    assert "service" not in _metrics_json(alone)["input"]
    a1 = alone["output"]["artifacts"]["metrics"]["artifacts"][0]["metadata"]["test_accuracy"]
    a2 = served["output"]["artifacts"]["metrics"]["artifacts"][0]["metadata"]["test_accuracy"]
    print(f"test accuracy: alone {a1:.3f}, through the service {a2:.3f}")
    assert a1 > 0.9 and a2 > 0.9
    assert abs(a1 - a2) <= 0.08, (a1, a2)


def _reader_pod(
    name: str, image: str, ref: str, address: str, pause: float, shared: Path
) -> dict[str, Any]:
    """A trainer-labelled pod reading one paced pass through the service (:data:`READ_PASS`),
    with the node's shared folder, where it finds the files to count against."""
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": TRAINER_LABELS},
        "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                 "securityContext": pod_security(runAsUser=IMAGE_UID),
                 "containers": [{"name": "reader", "image": image,
                                 "command": ["python", "-c", READ_PASS, ref, address, str(pause)],
                                 "env": [{"name": "HOME", "value": "/tmp"}],
                                 "resources": {"requests": {"cpu": "50m", "memory": "512Mi"}},
                                 "securityContext": container_security(),
                                 "volumeMounts": [{"name": "shared",
                                                   "mountPath": str(shared)}]}],
                 "volumes": [{"name": "shared",
                              "persistentVolumeClaim": {"claimName": SHARED_CLAIM}}]},
    }  # fmt: skip


@pytest.mark.parametrize("victim", [f"{SHARED}-worker-0", f"{SHARED}-dispatcher-0"])
def test_a_server_killed_mid_pass_loses_no_example(
    enforcing, image, namespace, runner, shared_service, digits, numbered, victim, record_property
):
    """A train step (120 epochs of the digits) and a reader's paced pass over a numbered
    version read through the shared service at once. Once the reader is a quarter into its pass
    and the step past its first epoch, the ``victim`` pod is deleted at once (no grace: a kill);
    its StatefulSet brings it back at its name (the dispatcher onto its journal's volume). The
    pass ends with every example served at least once (its repeats, a worker's share read
    again, are the test's ``repeated`` property), and the step completes."""
    from kubernetes import client

    cluster = enforcing
    core = client.CoreV1Api(cluster.api_client())
    address = data_service.dispatcher_address(SHARED)
    shared = shared_folder(cluster)
    role = victim.rsplit("-", 2)[1]
    step, reader = f"step-{role}", f"reader-{role}"
    out = start_train_step((cluster, image, shared), namespace, digits, step, workers=1,
                           batch_size=64, epochs=120, input_service=address)  # fmt: skip
    core.create_namespaced_pod(
        namespace, _reader_pod(reader, image, numbered["ref"], address, 0.5, shared)
    )
    wait_for(lambda: "Epoch 2/" in pod_log(core, namespace, step), timeout=900,
             what="the train step past its first epoch", interval=1)  # fmt: skip
    # 3000 rows, about 2400 in training: 75 batches of 32
    wait_for(lambda: pod_log(core, namespace, reader).count('"batch"') >= 18, timeout=900,
             what="the reader a quarter into its pass", interval=1)  # fmt: skip
    before = core.read_namespaced_pod(victim, namespace).metadata.uid
    core.delete_namespaced_pod(victim, namespace, grace_period_seconds=0)
    # both were mid-way when it went
    read_by_then = pod_log(core, namespace, reader).count('"batch"')
    assert read_by_then < 60, read_by_then
    assert core.read_namespaced_pod(step, namespace).status.phase == "Running"

    pod = wait_pod(core, namespace, reader, {"Succeeded", "Failed"}, timeout=1800)
    log = pod_log(core, namespace, reader)
    assert pod.status.phase == "Succeeded", log[-4000:]
    result = json.loads(log.strip().splitlines()[-1])
    record_property("repeated", result["repeated"])
    print(f"{victim} killed: {result}")
    assert result["expected"] > 2000 and result["lost"] == 0 and result["unexpected"] == 0, result
    stepped = wait_pod(core, namespace, step, {"Succeeded", "Failed"}, timeout=1800)
    assert stepped.status.phase == "Succeeded", pod_log(core, namespace, step)[-6000:]
    output = json.loads((out / "executor_output.json").read_text())
    (metrics,) = output["artifacts"]["metrics"]["artifacts"]
    assert metrics["metadata"]["test_accuracy"] > 0.9, metrics  # and it learned
    # it came back at its name as a new pod, and the service is whole again for what follows
    assert core.read_namespaced_pod(victim, namespace).metadata.uid != before
    _wait_ready(cluster, namespace, SHARED)


# -------------------------------------------------------------------- nothing outlives its run


def _jobsets(cluster: Any, namespace: str) -> list[str]:
    from kubernetes import client

    items = client.CustomObjectsApi(cluster.api_client()).list_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets"
    )["items"]
    return [j["metadata"]["name"] for j in items]


def test_a_kept_failed_trainjob_goes_with_its_nodes_when_the_kept_lease_ends(
    enforcing, image, namespace, runner, monkeypatch, tmp_path
):
    """``keep_failed_tfjob`` on Kubeflow Trainer: the run's TrainJob of two nodes fails (their
    trainer finds no dataset), as the run's account, under the step's lease; the launcher keeps
    it for inspection, with the JobSet and the failed node pods the Trainer and JobSet made, and
    keeps the lease. When the kept lease ends, the garbage collector takes the TrainJob and,
    through the owners the Trainer and JobSet set, its JobSet, Jobs and pods, while the step's
    pod still exists: nothing of the run outlives it, and no call of the launcher's did it."""
    from kubernetes import client

    from tfrecord_suite.launch.trainjob import COMPLETION_INDEX

    kept_for = 20  # FINISHED_TTL_SECONDS: an hour
    monkeypatch.setattr(job_module, "FINISHED_TTL_SECONDS", kept_for)
    launch_as(monkeypatch, tmp_path, runner)  # the step's namespace
    pipeline_run = f"run-{uuid.uuid4().hex[:8]}"
    pod = _step_pod_stand_in(enforcing, namespace, pipeline_run)
    name = job_name(pipeline_run)
    lease = Lease(runner.api, lease_name(name), image, namespace=namespace,
                  run_id=pipeline_run, owner=pod.owner_reference(), renew_seconds=5,
                  seconds=60)  # fmt: skip
    config = TrainConfig(dataset="/nowhere/registry/digits@1.0.0", model_dir="/unused")
    launch = StepLaunch(runner.api, pipeline_run, pod, None, Credentials(), [TrainJob], 0, image)
    where = Placement(cpu_request="100m", memory_request="512Mi")
    with pytest.raises(JobError, match=r"TrainJob .* Failed") as failed, lease:
        launch.lease = lease
        train_in_job(config, 2, where, launch, image, keep_failed=True)
    print(str(failed.value)[-2000:])
    kept = stored_job(enforcing.api_client(), TrainJob, namespace, name)
    assert kept is not None, "the failed TrainJob was not kept"
    (owner,) = kept["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", lease.name, lease.uid)
    assert name in _jobsets(enforcing, namespace)
    # the failed nodes stay with their logs (a node whose Job failed first may take the
    # other's pod with it)
    nodes = pods_as_stored(enforcing, namespace, f"{JOBSET_NAME_LABEL}={name}")
    assert nodes and {p["metadata"]["labels"].get(COMPLETION_INDEX) for p in nodes} <= {"0", "1"}
    assert all(p["status"]["phase"] == "Failed" for p in nodes), [p["status"] for p in nodes]
    assert client.BatchV1Api(runner.api).read_namespaced_job(lease.name, namespace)

    def gone() -> bool:
        return (stored_job(enforcing.api_client(), TrainJob, namespace, name) is None
                and name not in _jobsets(enforcing, namespace)
                and not pods_as_stored(enforcing, namespace, f"{JOBSET_NAME_LABEL}={name}"))  # fmt: skip

    started = time.monotonic()
    wait_for(gone, timeout=kept_for + 300, what="the kept TrainJob, its JobSet and pods gone",
             interval=2)  # fmt: skip
    print(f"kept TrainJob and its nodes gone {time.monotonic() - started:.0f} s after the step")
    assert client.CoreV1Api(enforcing.api_client()).read_namespaced_pod(pod.pod_name, namespace)
    # the lease's end, not a call of the launcher's
    calls = api_calls(enforcing.control_plane, runner.user)
    assert [c for c in calls if c[0] == "delete" and (name in c[2] or lease.name in c[2])] == []


def test_a_retry_runs_its_own_trainjob_not_the_one_an_earlier_lease_owns(
    enforcing, image, namespace, runner
):
    """An earlier attempt's TrainJob of this run, owned by the earlier attempt's lease, is
    running when the step is retried under a lease of its own: the retry does not adopt it (the
    garbage collector deletes it with that lease) but waits. The earlier lease then ends; the
    collector takes its TrainJob, and through the owners the Trainer and JobSet set, its JobSet
    and pods, while the retry creates the TrainJob anew under the same name: the Trainer makes it
    a JobSet of that name again, and its nodes run to the end (each printing the trainer's help,
    a job that succeeds at once)."""
    import threading

    from kubernetes import client

    from tfrecord_suite.launch.job import JobLauncher
    from tfrecord_suite.launch.trainjob import render_trainjob

    run = f"run-{uuid.uuid4().hex[:8]}"
    name = job_name(run)
    where = Placement(cpu_request="100m", memory_request="512Mi")

    def config(lease: Lease) -> JobConfig:
        return JobConfig(name=name, image=image, trainer_args=["--help"], workers=2,
                         namespace=namespace, placement=where, run_id=run,
                         owner=lease.owner_reference(), poll_seconds=2)  # fmt: skip

    custom = client.CustomObjectsApi(runner.api)
    earlier = Lease(runner.api, f"{name}-lease-1", image, namespace=namespace, run_id=run,
                    seconds=600)  # fmt: skip
    earlier.acquire()
    custom.create_namespaced_custom_object(
        TrainJob.group, TrainJob.version, namespace, TrainJob.plural, render_trainjob(config(earlier))
    )  # fmt: skip
    earlier_pods = wait_for(
        lambda: pods_as_stored(enforcing, namespace, f"{JOBSET_NAME_LABEL}={name}"),
        timeout=300, what="the earlier TrainJob's nodes",
    )  # fmt: skip

    def creates() -> list[int]:
        return [c[1] for c in api_calls(enforcing.control_plane, runner.user, "trainjobs")
                if c[0] == "create"]  # fmt: skip

    out: dict[str, Any] = {}
    with Lease(runner.api, f"{name}-lease-2", image, namespace=namespace, run_id=run,
               seconds=120, renew_seconds=5) as lease:  # fmt: skip

        def retry() -> None:
            try:
                out["result"] = JobLauncher(TrainJob, runner.api).run(config(lease))
            except Exception as exc:  # the assertions below say what it was
                out["error"] = exc

        thread = threading.Thread(target=retry, daemon=True)
        thread.start()
        wait_for(lambda: creates().count(409) >= 1, timeout=60, what="the retry's create refused")
        time.sleep(5)
        assert thread.is_alive() and creates()[-1] == 409  # waiting, not adopted
        # the earlier lease ends (as its deadline would end it, sooner)
        client.BatchV1Api(enforcing.api_client()).delete_namespaced_job(
            earlier.name, namespace, propagation_policy="Background"
        )
        thread.join(timeout=900)
    assert "result" in out, out
    assert out["result"]["state"] == "Succeeded"
    assert creates()[-1] == 201  # its own, created anew
    logs = out["result"]["replicas"]
    assert sorted(logs) == ["node-0", "node-1"] and all(
        n["exit_code"] == 0 and "Show this message and exit." in n["log"] for n in logs.values()
    ), logs
    # nodes of its own, not the earlier attempt's
    assert not {n["pod"] for n in logs.values()} & {p["metadata"]["name"] for p in earlier_pods}
    # deleted at its end (foreground: it goes once the JobSet and pods have)
    wait_for(lambda: stored_job(enforcing.api_client(), TrainJob, namespace, name) is None, timeout=180,
             what="the retry's TrainJob deleted")  # fmt: skip
