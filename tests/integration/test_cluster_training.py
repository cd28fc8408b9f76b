"""Multi-node training for real on the one-node cluster: the kfp train step, in the component
image, in a pod of its own, launches a TrainJob on our TensorFlow ClusterTrainingRuntime
(k8s/trainer-runtime) under Kubeflow Trainer v2.3.0 and JobSet v0.12.0 (built from their
modules, installed from their own manifests); the two nodes find each other through JobSet's
headless Service and cluster DNS and train with MultiWorkerMirroredStrategy to the same quality
as the same step training alone in its pod. Marker ``cluster``.

The step runs exactly as its compiled component says (``components/training/train/component.yaml``:
its command, ``kfp.dsl.executor_main`` on an executor input), as the run's account with the
suite's launcher Role (k8s/base), told about itself through the downward API as the compiled
pipelines do (tfrecord_suite.podinfo), in a namespace that enforces Pod Security
``restricted`` (stricter than a Kubeflow profile's ``baseline``). The test writes the executor input itself, and the
artifacts and the dataset registry live on a folder of the node that the step's pod and the
nodes mount at the same path, standing in for the bucket: a PersistentVolume of that folder
claimed in the test's namespace (:func:`shared_claim`; a restricted pod may mount a claim, never
a hostPath), which the runtime is applied with.

Why a hand-written executor input where Kubeflow Pipelines runs on this cluster: this file
measures the trainer (two nodes against one, their weights bit for bit, 24 epochs each), which
does not depend on who starts the step; through KFP each of its runs would add a driver, a
launcher and the data pipeline before it, minutes each. The launch from a real KFP run, as the
run's account, with its artifacts in the object store, is tests/integration/test_kfp.py's.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import launcher_account

from fakes.pod_security import violations
from realparts.processes import WaitError, wait_for
from tfrecord_suite import podinfo
from tfrecord_suite.images import IMAGE_UID, ImageSet
from tfrecord_suite.kfp import catalog
from tfrecord_suite.launch.kube import TRAINER_LABELS, container_security, pod_security
from tfrecord_suite.launch.lease import lease_name

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(3600)]

ROOT = Path(__file__).resolve().parents[2]
TRAIN_COMPONENT = Path(catalog.folder("train", str(ROOT / "components"))) / "component.yaml"
STEP_ACCOUNT = "pipeline-runner"
#: What each trainer requests: two of them and the step's pod fit beside the system pods and
#: Kubeflow Pipelines in this machine's 2 CPUs (the CPU trainer's default asks for 3).
SMALL = {"cpu_request": "200m", "memory_request": "1Gi"}
#: The suite's images on the cluster, under a registry name of their own: loaded into the node
#: under the default ghcr.io name, a build of this checkout would stand for the published image
CLUSTER_IMAGES = ImageSet(registry="registry.tfrs.test/ml", tag="cluster")
#: The claim of the node's shared folder in each test namespace (:func:`shared_claim`)
SHARED_CLAIM = "tfrs-shared"


def _documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def cluster_image(cluster: Any) -> str:
    """The component image under :data:`CLUSTER_IMAGES`' name, built from this checkout (podman
    reuses the layers nothing changed; an image another checkout left under that name would
    run that checkout's code) and loaded into the node."""
    from cluster import images

    image = images.suite_image("component", CLUSTER_IMAGES)
    cluster.load_images([image])
    return image


def shared_folder(cluster: Any) -> Path:
    """The node's folder that stands for the bucket (world-writable: the pods run as UID 10001,
    and a hostPath volume takes no fsGroup)."""
    shared = cluster.state / "shared"
    shared.mkdir(exist_ok=True)
    shared.chmod(0o777)
    return shared


@contextlib.contextmanager
def host_volume(cluster: Any, namespace: str, claim: str, folder: Path) -> Iterator[str]:
    """A PersistentVolume of the node's ``folder``, bound ahead to the claim ``claim`` of
    ``namespace`` (the node has no volume provisioner; whoever makes the claim, a test or a
    StatefulSet's template, finds it bound), deleted after. Yields the volume's name."""
    from kubernetes import client

    core = client.CoreV1Api(cluster.api_client())
    name = f"{namespace}-{claim}"
    core.create_persistent_volume({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                 "claimRef": {"namespace": namespace, "name": claim},
                 "hostPath": {"path": str(folder), "type": "Directory"}},
    })  # fmt: skip
    try:
        yield name
    finally:
        core.delete_persistent_volume(name)


@contextlib.contextmanager
def shared_claim(cluster: Any, namespace: str) -> Iterator[None]:
    """The claim :data:`SHARED_CLAIM` of the node's shared folder in ``namespace``."""
    from kubernetes import client

    with host_volume(cluster, namespace, SHARED_CLAIM, shared_folder(cluster)) as volume:
        client.CoreV1Api(cluster.api_client()).create_namespaced_persistent_volume_claim(
            namespace,
            {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": SHARED_CLAIM},
             "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                      "volumeName": volume, "resources": {"requests": {"storage": "1Gi"}}}},
        )  # fmt: skip
        yield


@pytest.fixture(scope="module")
def trainer_installed(one_node_cluster):
    """The cluster with JobSet, the Trainer and our ClusterTrainingRuntime installed."""
    from cluster import node

    node.add(one_node_cluster, trainer=True)
    return one_node_cluster


@pytest.fixture(scope="module")
def trainer_cluster(trainer_installed):
    """The Trainer's cluster with the suite's component image loaded, and our runtime given
    the claim of the node's shared folder (:func:`shared_claim`: each namespace a TrainJob runs
    in needs it); the runtime is put back as shipped afterwards."""
    cluster = trainer_installed
    image = cluster_image(cluster)
    shared = shared_folder(cluster)
    shipped = cluster.kubectl("kustomize", str(ROOT / "k8s" / "trainer-runtime")).stdout
    (runtime,) = _documents(shipped)
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    pod["spec"].setdefault("volumes", []).append(
        {"name": "shared", "persistentVolumeClaim": {"claimName": SHARED_CLAIM}}
    )
    pod["spec"]["containers"][0].setdefault("volumeMounts", []).append(
        {"name": "shared", "mountPath": str(shared)}
    )
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=tfrs-tests",
                    "-f", "-", stdin=json.dumps(runtime))  # fmt: skip
    try:
        yield cluster, image, shared
    finally:
        cluster.kubectl("apply", "--server-side", "--force-conflicts",
                        "--field-manager=tfrs-tests", "-f", "-", stdin=shipped)  # fmt: skip


@pytest.fixture
def shared_namespace(trainer_installed, cluster_namespace) -> Iterator[str]:
    """:func:`cluster_namespace` with the claim of the node's shared folder."""
    with shared_claim(trainer_installed, cluster_namespace):
        yield cluster_namespace


def publish_on_node(shared: Path, staged: str, dataset: str) -> dict[str, Any]:
    """Publish ``staged`` shards as ``dataset`` into a registry of its own in a new folder of
    the node's shared folder: that folder (``work``), the version's ``ref`` and ``digest``."""
    from tfrecord_suite.registry.datasets import Registry

    work = shared / f"t-{uuid.uuid4().hex[:8]}"
    registry = Registry(str(work / "registry"))
    result = registry.publish(staged, dataset)
    # the step and the trainers run as UID 10001 (the image's user)
    for path in [work, *work.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o666)
    return {
        "work": work,
        "ref": f"{registry.root}/{dataset}@{result.version}",
        "digest": result.manifest.content_digest,
    }


def publish_digits(shared: Path, tmp: Path) -> dict[str, Any]:
    """The digits dataset sharded (4 training shards) and published on the node
    (:func:`publish_on_node`); ``tmp`` a folder of this machine's for the raw and staged files."""
    from tfrecord_suite import demo_data
    from tfrecord_suite.shard.step import ShardConfig, run_shard

    raw = demo_data.write_digits(str(tmp / "digits"))
    staged = str(tmp / "staged")
    run_shard(ShardConfig(input=raw, output=staged, num_shards=4))
    return publish_on_node(shared, staged, "digits")


@pytest.fixture(scope="module")
def digits_on_node(trainer_cluster, tmp_path_factory):
    """The digits dataset sharded and published into a registry on the node's shared folder."""
    _, _, shared = trainer_cluster
    data = publish_digits(shared, tmp_path_factory.mktemp("digits"))
    yield data
    shutil.rmtree(data["work"], ignore_errors=True)


def run_account(cluster: Any, namespace: str, tmp_path: Path) -> Any:
    """The run's account with the suite's launcher Role (k8s/base/role.yaml), as installed
    (``support.launcher_account``: its token, an ApiClient presenting it, a kubeconfig)."""
    return launcher_account(cluster.control_plane, namespace, tmp_path / "kubeconfig",
                            account=STEP_ACCOUNT)  # fmt: skip


def _step_pod(name: str, image: str, executor_input: dict[str, Any], run_id: str) -> dict:
    """The train step's pod as a Kubeflow backend would make it from the compiled pipeline:
    the component's command, the trainer labels and the images' user the pipeline gives its
    train task (kfp/step_policies.py), and the rest of what Pod Security ``restricted`` asks for, which
    Kubeflow's driver adds to every step's pod (the Kubeflow Pipelines tests run the real one)."""
    spec = yaml.safe_load(TRAIN_COMPONENT.read_text())
    container = spec["deploymentSpec"]["executors"]["exec-train"]["container"]
    args = [json.dumps(executor_input) if a == "{{$}}" else a for a in container["args"]]
    env = [
        {"name": var, "valueFrom": {"fieldRef": {"fieldPath": path}}}
        for var, path in podinfo.FIELDS.items()
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {podinfo.RUN_ID_LABEL: run_id, **TRAINER_LABELS}},
        "spec": {
            "restartPolicy": "Never",
            "serviceAccountName": STEP_ACCOUNT,
            "securityContext": pod_security(runAsUser=IMAGE_UID),
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": container["command"],
                    "args": args,
                    "env": [*env, {"name": "TFRECORD_SUITE_IMAGE", "value": image}],
                    "resources": {"requests": {"cpu": "100m", "memory": "1Gi"}},
                    "securityContext": container_security(),
                    "volumeMounts": [{"name": "shared", "mountPath": "@SHARED@"}],
                }
            ],
            "volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": SHARED_CLAIM}}],
        },
    }


def _executor_input(out: Path, parameters: dict[str, Any]) -> dict[str, Any]:
    schemas = {
        "model": "system.Model",
        "metrics": "system.Metrics",
        "classification_metrics": "system.ClassificationMetrics",
        "report": "system.Markdown",
    }
    return {
        "inputs": {"parameterValues": parameters},
        "outputs": {
            "artifacts": {
                name: {
                    "artifacts": [
                        {
                            "name": name,
                            "type": {"schemaTitle": schema, "schemaVersion": "0.0.1"},
                            "uri": str(out / name),
                            "metadata": {},
                        }
                    ]
                }
                for name, schema in schemas.items()
            },
            "outputFile": str(out / "executor_output.json"),
        },
    }


def start_train_step(trainer_cluster, namespace, data, name, **parameters) -> Path:
    """Create the train step's pod; return the folder its artifacts go to."""
    from kubernetes import client

    cluster, image, shared = trainer_cluster
    out = data["work"] / name
    out.mkdir(mode=0o777)
    out.chmod(0o777)
    params = {
        "dataset_ref": data["ref"],
        "dataset_digest": data["digest"],
        "epochs": 24,
        "learning_rate": 0.005,
        "launcher": "trainjob",
        "trainer_image": image,
        **parameters,
    }
    pod = _step_pod(name, image, _executor_input(out, params), f"run-{name}-{uuid.uuid4().hex[:6]}")
    pod = json.loads(json.dumps(pod).replace("@SHARED@", str(shared)))
    client.CoreV1Api(cluster.api_client()).create_namespaced_pod(namespace, pod)
    return out


def _trainjobs(cluster: Any, namespace: str) -> list[dict[str, Any]]:
    from kubernetes import client

    return client.CustomObjectsApi(cluster.api_client()).list_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", namespace, "trainjobs"
    )["items"]


def pods_as_stored(cluster: Any, namespace: str, selector: str) -> list[dict[str, Any]]:
    """The pods of ``selector`` in ``namespace`` as the API server holds them (JSON: the
    client's models know no field newer than their release, such as a container's ``user``)."""
    from kubernetes import client

    core = client.CoreV1Api(cluster.api_client())
    reply = core.list_namespaced_pod(namespace, label_selector=selector, _preload_content=False)
    return json.loads(reply.data)["items"]


def _node_pods(cluster: Any, namespace: str) -> list[dict[str, Any]]:
    """The pods of any TrainJob's JobSet in ``namespace``."""
    return pods_as_stored(cluster, namespace, "jobset.sigs.k8s.io/jobset-name")


def ran_restricted(pod: dict[str, Any]) -> list[str]:
    """What a pod, as the API server admitted it and the kubelet ran it, lacks of Pod Security
    ``restricted``: the profile's controls on the stored pod (tests/fakes/pod_security.py), and
    each container the runtime reports running as another user than the images' (or not at
    all: ``status.containerStatuses[].user``). Empty when nothing."""
    out = violations(pod)
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        uid = ((status.get("user") or {}).get("linux") or {}).get("uid")
        if uid != IMAGE_UID:
            out.append(f"container {status['name']} ran as user {uid}")
    return out


def run_train_step(trainer_cluster, namespace, data, name, **parameters) -> dict[str, Any]:
    """Run the train step's pod to the end; its executor output, log and the TrainJobs seen."""
    from kubernetes import client

    cluster = trainer_cluster[0]
    out = start_train_step(trainer_cluster, namespace, data, name, **parameters)
    core = client.CoreV1Api(cluster.api_client())
    trainjobs: dict[str, dict] = {}
    trainer_pods: dict[str, dict[str, Any]] = {}  # each as last seen
    phase = ""

    def finished() -> bool:
        nonlocal phase
        phase = core.read_namespaced_pod(name, namespace).status.phase
        trainjobs.update({j["metadata"]["name"]: j for j in _trainjobs(cluster, namespace)})
        trainer_pods.update({p["metadata"]["name"]: p for p in _node_pods(cluster, namespace)})
        return phase in ("Succeeded", "Failed")

    with contextlib.suppress(WaitError):  # the assertion below says how it ended
        wait_for(finished, 1800, f"train step {name}", interval=3)
    log = core.read_namespaced_pod_log(name, namespace, _preload_content=False).data.decode()
    assert phase == "Succeeded", f"train step {name}: {phase}\n{log[-6000:]}"
    output = json.loads((out / "executor_output.json").read_text())
    return {"output": output, "log": log, "trainjobs": trainjobs, "trainer_pods": trainer_pods,
            "out": out}  # fmt: skip


def _metrics(result: dict[str, Any]) -> dict[str, float]:
    (metrics,) = result["output"]["artifacts"]["metrics"]["artifacts"]
    return metrics["metadata"]


def _model(result: dict[str, Any]) -> dict[str, Any]:
    (model,) = result["output"]["artifacts"]["model"]["artifacts"]
    return model["metadata"]


def test_train_step_launches_a_trainjob_whose_two_nodes_train_as_well_as_one(
    trainer_cluster, digits_on_node, shared_namespace, tmp_path
):

    cluster = trainer_cluster[0]
    ns = shared_namespace
    run_account(cluster, ns, tmp_path)
    placement = json.dumps(SMALL)

    # the same global batch (the component's batch_size is per replica), so the same steps at
    # the same learning rate: synchronous data parallelism should end where one worker does
    one = run_train_step(trainer_cluster, ns, digits_on_node, "one", workers=1, batch_size=64,
                         placement=placement)  # fmt: skip
    assert not one["trainjobs"]  # one worker trains in the step's own pod
    two = run_train_step(trainer_cluster, ns, digits_on_node, "two", workers=2, batch_size=32,
                         placement=placement)  # fmt: skip

    # the step created one TrainJob on our runtime, whose JobSet ran two node pods
    (job,) = two["trainjobs"].values()
    assert job["spec"]["runtimeRef"]["name"] == "tfrecord-suite-tensorflow"
    assert job["spec"]["trainer"]["numNodes"] == 2
    # owned by the step's lease (launch/lease.py), a Job the step's pod owns
    (owner,) = job["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Job", lease_name(job["metadata"]["name"]))
    assert len(two["trainer_pods"]) == 2, list(two["trainer_pods"])
    # JobSet made them in a namespace that enforces Pod Security restricted: admitted, and run
    # as the images' user
    assert {n: ran_restricted(p) for n, p in two["trainer_pods"].items()} == {
        n: [] for n in two["trainer_pods"]
    }
    # the step reports each node's log tail: both joined one 2-replica collective and ended
    # with the same weights, bit for bit (each step applied the same all-reduced gradients)
    digests = []
    for rank in (0, 1):
        tail = two["log"].split(f"node-{rank} (")[1].split("log tail:")[1][:4000]
        assert "(CollectiveAllReduceStrategy, 2 replicas)" in tail
        digests.append(re.search(r"weights: ([0-9a-f]{64})", tail)[1])
    assert digests[0] == digests[1], digests
    # and deleted it when training was done
    assert not _trainjobs(cluster, ns)

    assert _model(one)["replicas"] == 1
    assert _model(two)["strategy"] == "CollectiveAllReduceStrategy"  # MultiWorkerMirrored
    assert _model(two)["replicas"] == 2
    assert os.path.isfile(two["out"] / "model" / "export" / "saved_model.pb")
    a1, a2 = _metrics(one)["test_accuracy"], _metrics(two)["test_accuracy"]
    print(f"test accuracy: one worker {a1:.3f}, two nodes {a2:.3f}")
    assert a1 > 0.9 and a2 > 0.9  # both learned (chance is 0.1)
    # one run's last-epoch test accuracy moves by several points from one sharding of the
    # digits to the next (a constant learning rate to the end, ~180 test digits): agreement
    # within that spread, not closer (the weights' digests above are the exact check)
    assert abs(a1 - a2) <= 0.08, (a1, a2)


def test_a_job_whose_nodes_cannot_be_scheduled_says_why(
    trainer_installed, shared_namespace, tmp_path, caplog
):
    """Nodes that ask for more than any node has stay Pending until the job's deadline (24
    hours by default). The launcher, as the run's account, names the scheduler's reason while
    it waits, and in the failure, instead of only "Pending" and, a day later, "exceeded its
    active deadline"."""
    import logging

    from tfrecord_suite.launch.job import JobConfig, JobLauncher
    from tfrecord_suite.launch.kube import JobError
    from tfrecord_suite.launch.placement import Placement
    from tfrecord_suite.launch.trainjob import TrainJob

    cluster = trainer_installed
    runner = run_account(cluster, shared_namespace, tmp_path)
    config = JobConfig(
        name="too-big",
        image=cluster.system_images["probe"],  # never started
        trainer_args=["--dataset", "/nowhere/d@1.0.0", "--model-dir", "/tmp/m"],
        workers=2,
        namespace=shared_namespace,
        placement=Placement(cpu_request="64"),
        timeout_seconds=45,
        poll_seconds=3,
    )
    with caplog.at_level(logging.INFO), pytest.raises(JobError) as failed:
        JobLauncher(TrainJob, runner.api).run(config)
    waiting = [r.getMessage() for r in caplog.records if "Insufficient cpu" in r.getMessage()]
    assert waiting and "node-0" in waiting[0], caplog.text  # said while it waited
    assert "Insufficient cpu" in str(failed.value), failed.value  # and in the failure


def test_deleting_the_step_mid_train_leaves_nothing_running(
    trainer_cluster, digits_on_node, shared_namespace, tmp_path
):
    """A run's step pod deleted while its two nodes train: the garbage collector deletes its
    lease and the TrainJob the lease owns, the Trainer its JobSet, and the kubelet stops the
    nodes' containers."""
    from kubernetes import client

    cluster = trainer_cluster[0]
    ns = shared_namespace
    run_account(cluster, ns, tmp_path)
    start_train_step(trainer_cluster, ns, digits_on_node, "cancel", workers=2, epochs=500,
                     batch_size=32, placement=json.dumps(SMALL))  # fmt: skip

    def both_running() -> bool:
        running = [p for p in _node_pods(cluster, ns) if p["status"]["phase"] == "Running"]
        return len(running) == 2

    try:
        wait_for(both_running, 600, "both nodes running", interval=2)
    except WaitError:
        raise AssertionError([p["status"]["phase"] for p in _node_pods(cluster, ns)]) from None
    time.sleep(15)  # well into training
    core = client.CoreV1Api(cluster.api_client())
    core.delete_namespaced_pod("cancel", ns)
    with contextlib.suppress(WaitError):  # the assertions below say what is left
        wait_for(
            lambda: not (_trainjobs(cluster, ns) or _node_pods(cluster, ns)),
            180,
            "the TrainJob and its nodes' pods gone",
            interval=2,
        )
    assert not _trainjobs(cluster, ns)
    # a pod object goes only once the kubelet has stopped its containers
    assert not _node_pods(cluster, ns)
