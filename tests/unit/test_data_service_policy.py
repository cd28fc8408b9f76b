"""A run's tf.data service answers that run's trainers only: its NetworkPolicy admits the pods
of the run's TrainJob or TFJob and the run's own train step pod (when it trains itself), each by
the labels those pods really carry, and no other run's pods nor any other trainer of the
namespace. A shared service (k8s/data-service) admits every trainer pod of its namespace, as
its kustomization says. Whether a CNI enforces it is the one-node cluster's to prove."""

from __future__ import annotations

import pytest
import yaml

from fakes import manifests
from tfrecord_suite.kfp.compile import compile_pipeline
from tfrecord_suite.launch.credentials import Credentials
from tfrecord_suite.launch.data_service_k8s import objects
from tfrecord_suite.launch.job import JobConfig
from tfrecord_suite.launch.kube import TRAINER_LABELS, label_value
from tfrecord_suite.launch.tfjob import render_tfjob
from tfrecord_suite.launch.train_step import StepLaunch
from tfrecord_suite.launch.trainjob import render_trainjob
from tfrecord_suite.podinfo import RUN_ID_LABEL, PodInfo


def admitted(policy: dict, labels: dict[str, str]) -> bool:
    """Whether a pod of this namespace with ``labels`` may reach the policy's pods (its peers
    are ORed; a peer's matchLabels must all be among the pod's labels)."""
    return any(
        peer["podSelector"]["matchLabels"].items() <= labels.items()
        for rule in policy["spec"]["ingress"]
        for peer in rule["from"]
    )


def _launch(run_id: str, fallback: str = "minio://b/run/model") -> StepLaunch:
    """The train step's launch as :func:`~tfrecord_suite.launch.train_step.launching` makes it
    for a pod of pipeline run ``run_id`` (empty: the pod does not know its run)."""
    pod = PodInfo(run_id=run_id, pod_name="step", pod_uid="u", service_account="sa")
    return StepLaunch(None, run_id or fallback, pod, None, Credentials(), [], 2, "img")


def _policy(launch: StepLaunch) -> dict:
    made = objects("svc", 2, "img", labels={}, clients=launch.trainers())
    (policy,) = [o for o in made if o["kind"] == "NetworkPolicy"]
    return policy


def _node_labels(launch: StepLaunch) -> dict[str, dict[str, str]]:
    """``what -> labels`` of the pods of the run's job, each kind as the launcher renders it."""
    config = JobConfig(name="j", image="i", trainer_args=[], workers=2, run_id=launch.run_key)
    (runtime,) = manifests.load("trainer-runtime/clustertrainingruntime.yaml")
    tfjob = render_tfjob(config)["spec"]["tfReplicaSpecs"]
    return {
        "TrainJob node": manifests.trainjob_node_pod(render_trainjob(config), runtime)["metadata"][
            "labels"
        ],
        "TFJob chief": tfjob["Chief"]["template"]["metadata"]["labels"],
        "TFJob worker": tfjob["Worker"]["template"]["metadata"]["labels"],
    }


@pytest.fixture(scope="module")
def step_pod_labels(tmp_path_factory) -> dict[str, str]:
    """The labels the compiled pipeline gives the train step's pod (KFP's driver applies the
    executor's podMetadata); KFP's API server adds ``pipeline/runid`` on every pod of a run."""
    path = compile_pipeline(str(tmp_path_factory.mktemp("p") / "p.yaml"))
    with open(path) as fh:
        docs = list(yaml.safe_load_all(fh))
    executors = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    return dict(executors["exec-train"]["podMetadata"]["labels"])


def test_a_runs_service_admits_its_job_nodes_and_its_step_pod(step_pod_labels):
    launch = _launch("run-1")
    policy = _policy(launch)
    for what, labels in _node_labels(launch).items():
        assert admitted(policy, labels), what
    assert admitted(policy, {**step_pod_labels, RUN_ID_LABEL: "run-1"})


def test_no_other_runs_pods_and_no_other_trainer_reach_it(step_pod_labels):
    policy = _policy(_launch("run-1"))
    for what, labels in _node_labels(_launch("run-2")).items():
        assert not admitted(policy, labels), what
    assert not admitted(policy, {**step_pod_labels, RUN_ID_LABEL: "run-2"})
    assert not admitted(policy, dict(TRAINER_LABELS))  # any trainer of the namespace: no more
    assert not admitted(policy, step_pod_labels)  # a trainer step outside any run


def test_a_step_pod_that_does_not_know_its_run_still_admits_its_job_nodes_only(step_pod_labels):
    """Without the run's id (the downward API not compiled in) the run is named after the model
    artifact: its job's nodes carry that, and no step pod can be told apart, so none is
    admitted."""
    launch = _launch("", fallback="minio://b/run-9/model")
    policy = _policy(launch)
    assert launch.run_key == "minio://b/run-9/model"
    for what, labels in _node_labels(launch).items():
        assert labels["tfrecord-suite/run"] == label_value(launch.run_key)
        assert admitted(policy, labels), what
    assert not admitted(policy, step_pod_labels)


def test_the_shared_service_admits_every_trainer_of_its_namespace():
    (policy,) = manifests.load("data-service/networkpolicy.yaml")
    assert admitted(policy, dict(TRAINER_LABELS))
    assert not admitted(policy, {"app.kubernetes.io/name": "tfrecord-suite"})
