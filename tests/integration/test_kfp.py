"""The suite's pipelines on Kubeflow Pipelines 2.17.0's real backend (the one-node cluster's:
tests/cluster/kubeflow_pipelines.py), submitted as a user submits them: ``tfrecord-suite submit``
with the profile's namespace and a token of its account, images under the cluster's own
registry and tag, small real data in the profile's part of the cluster's object store.

Each run's result is read back as the UI shows it: its state and tasks through the KFP API, its
executions and artifacts from ML Metadata through the UI's gRPC-web endpoint
(realparts.mlmd.run_lineage). Markers ``cluster`` and ``kfp``: ``make test-cluster`` runs them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.kfp, pytest.mark.slow, pytest.mark.timeout(3600)]

#: The header Kubeflow's authenticating proxy adds to the UI's requests for the profile's owner
OWNER = {"kubeflow-userid": "user@example.com"}


def submit(profile: Any, pipeline: str, *args: str, wait: bool = True) -> dict[str, Any]:
    """``tfrecord-suite submit`` as a user runs it; its JSON summary."""
    argv = [sys.executable, "-m", "tfrecord_suite.cli", "submit", *profile.submit_args(pipeline),
            *args, "--json"]  # fmt: skip
    if wait:
        argv += ["--wait", "--timeout", "2400"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=2700)
    assert proc.returncode == 0, f"submit failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return summary_of(proc.stdout)


def summary_of(output: str) -> dict[str, Any]:
    """``submit --json``'s summary: the last JSON object that starts a line of its output
    (progress lines and a pod's log lines come before it)."""
    start = ("\n" + output).rfind("\n{")
    assert start >= 0, output[-3000:]
    return json.JSONDecoder().raw_decode(output[start:])[0]


def client(profile: Any) -> Any:
    """A ``kfp.Client`` of the profile's account (what the UI's API calls see)."""
    from tfrecord_suite.kfp.endpoint import KfpEndpoint

    return KfpEndpoint(profile.host, profile.namespace, token_file=profile.token_file).client(
        profile.namespace
    )


def lineage(profile: Any, run_id: str) -> dict[str, dict[str, Any]]:
    """``task display name -> execution`` of a run, from ML Metadata as the UI reads it."""
    from realparts import mlmd

    executions = mlmd.run_lineage(profile.ui, run_id, OWNER)["executions"]
    return {e["name"]: e for e in executions if e["name"]}


def run_pods(profile: Any, run_id: str) -> list[Any]:
    """Every pod a run made in the profile (KFP labels each with the run's id)."""
    from kubernetes import client as k8s

    core = k8s.CoreV1Api(profile.cluster.api_client())
    return core.list_namespaced_pod(
        profile.namespace, label_selector=f"pipeline/runid={run_id}"
    ).items


def assert_images_compiled(profile: Any, pods: list[Any]) -> None:
    """Each container of these pods runs an image the cluster's registry names or one of KFP's
    own (driver, launcher, Argo's executor): none names the suite's default registry, which the
    node does not hold."""
    from tfrecord_suite.images import DEFAULT_REGISTRY

    assert pods
    seen = set()
    for pod in pods:
        for container in [*pod.spec.containers, *(pod.spec.init_containers or [])]:
            seen.add(container.image)
            assert not container.image.startswith(DEFAULT_REGISTRY), (pod.metadata.name, seen)
    assert f"{profile.images.registry}/tfrecord-suite:{profile.images.tag}" in seen, seen


@pytest.fixture(scope="module")
def penguins(kfp_profile) -> dict[str, str]:
    """The penguins table in the profile's part of the object store; the pipelines' inputs."""
    root = kfp_profile.root
    bucket, _, prefix = root.removeprefix("s3://").partition("/")
    with tempfile.TemporaryDirectory() as tmp:
        from tfrecord_suite import demo_data

        path = demo_data.write_penguins(os.path.join(tmp, "penguins.csv"))
        kfp_profile.s3().upload_file(path, bucket, f"{prefix}/raw/penguins.csv")
    return {
        "input_uri": f"{root}/raw/penguins.csv",
        "registry_root": f"{root}/registry-{time.strftime('%H%M%S')}",
        "dataset_name": "penguins",
    }


def params(values: dict[str, Any]) -> list[str]:
    """``--param k=v`` for each."""
    return [arg for key, value in values.items() for arg in ("--param", f"{key}={value}")]


@pytest.fixture(scope="module")
def data_run(kfp_profile, penguins) -> dict[str, Any]:
    """The data pipeline's first run on the penguins (its submit summary)."""
    return submit(kfp_profile, "data", *params(penguins))


@pytest.fixture(scope="module")
def dataset_ref(data_run, penguins) -> str:
    """The dataset version the data run published."""
    assert data_run["state"] == "SUCCEEDED", data_run
    return f"{penguins['registry_root']}/{penguins['dataset_name']}@1.0.0"


def test_data_pipeline_runs_on_the_backend(kfp_profile, data_run):
    """The data pipeline (fingerprint, shard, version) succeeds; the staged and published
    datasets' metadata read back as the UI shows it; every pod ran the compiled images."""
    assert data_run["state"] == "SUCCEEDED", data_run
    assert data_run["backend"] == "2.17.0" and data_run["namespace"] == kfp_profile.namespace
    tasks = lineage(kfp_profile, data_run["run_id"])
    staged = tasks["Shard to TFRecords (Beam)"]["outputs"]["staged"]
    assert staged["type"] == "system.Dataset"
    assert staged["properties"]["records"] == 344.0 and staged["properties"]["bad_rows"] == 0.0
    dataset = tasks["Publish dataset version"]["outputs"]["dataset"]["properties"]
    assert dataset["version"] == "1.0.0" and dataset["name"] == "penguins"
    assert_images_compiled(kfp_profile, run_pods(kfp_profile, data_run["run_id"]))


#: What docs/deploy.md ("Caching") says a second identical retraining run does, step by step
#: (the steps' display names): CACHED where it is a cache hit, COMPLETE where it runs again
CACHED_AGAIN = {
    "Fingerprint input": "COMPLETE",
    "Shard to TFRecords (Beam)": "CACHED",
    "Publish dataset version": "COMPLETE",
    "Train (tf.distribute)": "CACHED",
    "Evaluate against the stable model": "COMPLETE",
    "Register model": "COMPLETE",
    "Report": "COMPLETE",
}


def test_retraining_pipeline_reports_its_metrics_and_a_second_run_is_cached(kfp_profile, penguins):
    """The retraining pipeline, raw data to a promoted model, succeeds. Its artifacts read
    back as the UI shows them: the train step's scalar metrics and confusion matrix (a
    ClassificationMetrics of the species), the evaluation's decision, the registered model and
    the report. Submitted again unchanged it reuses the compiled version, and its steps are
    cached exactly where docs/deploy.md says: the shard step (same input fingerprint) and
    training (same dataset reference, digest and parameters); the rest run again."""
    values = {**penguins, "registry_root": f"{penguins['registry_root']}-retrain",
              "model_registry": f"{kfp_profile.root}/models-{time.strftime('%H%M%S')}",
              "label": "species", "epochs": 3}  # fmt: skip
    first = submit(kfp_profile, "retraining", *params(values))
    assert first["state"] == "SUCCEEDED", first
    tasks = lineage(kfp_profile, first["run_id"])
    train = tasks["Train (tf.distribute)"]["outputs"]
    metrics = train["metrics"]["properties"]
    assert train["metrics"]["type"] == "system.Metrics"
    assert 0.5 < metrics["test_accuracy"] <= 1.0 and metrics["examples_per_second"] > 0
    # a struct property as KFP's launcher stores it in ML Metadata: wrapped in {"struct": ...}
    matrix = train["classification_metrics"]["properties"]["confusionMatrix"]["struct"]
    assert train["classification_metrics"]["type"] == "system.ClassificationMetrics"
    assert len(matrix["annotationSpecs"]) == 3 == len(matrix["rows"])  # three species
    # the test split's 33 penguins, each counted once
    assert sum(sum(row["row"]) for row in matrix["rows"]) == 33
    evaluation = tasks["Evaluate against the stable model"]["outputs"]["evaluation"]
    assert evaluation["properties"]["decision"] == "promote"  # no baseline yet
    registered = tasks["Register model"]["outputs"]["registered"]["properties"]
    assert registered["model"] == "penguins" and registered["version"] == 1.0
    assert tasks["Report"]["outputs"]["summary"]["type"] == "system.Markdown"
    assert_images_compiled(kfp_profile, run_pods(kfp_profile, first["run_id"]))

    second = submit(kfp_profile, "retraining", *params(values))
    assert second["state"] == "SUCCEEDED", second
    assert second["version_id"] == first["version_id"]  # the same compiled version, reused
    again = lineage(kfp_profile, second["run_id"])
    assert {name: again[name]["state"] for name in CACHED_AGAIN} == CACHED_AGAIN
    # a cached step's outputs are the first run's
    assert again["Train (tf.distribute)"]["outputs"]["model"]["uri"] == train["model"]["uri"]
    # the API shows the skipped executor's task as KFP 2.17 does (its API has no CACHED)
    run = client(kfp_profile).get_run(second["run_id"])
    states = {t.display_name: t.state for t in run.run_details.task_details}
    assert states["train"] == "SUCCEEDED", states


#: The trainer nodes' and the launching step's requests, so two nodes, the step and the
#: cluster's own pods fit the 2-CPU node
SMALL_JOB = ["--cpu-request", "300m", "--memory-request", "2Gi"]


def trainjob_objects(profile: Any) -> tuple[list[dict], list[Any]]:
    """The profile's TrainJobs and their JobSet's pods."""
    from kubernetes import client as k8s

    api = profile.cluster.api_client()
    jobs = k8s.CustomObjectsApi(api).list_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", profile.namespace, "trainjobs"
    )["items"]
    pods = (
        k8s.CoreV1Api(api)
        .list_namespaced_pod(profile.namespace, label_selector="jobset.sigs.k8s.io/jobset-name")
        .items
    )
    return jobs, pods


def test_training_pipeline_launches_its_trainjob_as_the_runs_own_account(kfp_profile, dataset_ref):
    """The training pipeline with workers=2: its train step, inside the KFP run, creates a
    TrainJob as the run's own account (the profile's default-editor, which k8s/ binds the
    launcher Role to), the Trainer and JobSet run its two nodes from the compiled images, both
    train, and the step deletes the TrainJob when done."""
    account = f"system:serviceaccount:{kfp_profile.namespace}:default-editor"
    seen_jobs: dict[str, dict] = {}
    seen_images: set[str] = set()
    started = submit(kfp_profile, "training", "--launcher", "trainjob", *SMALL_JOB,
                     *params({"dataset_ref": dataset_ref, "workers": 2, "epochs": 3,
                              "batch_size": 32}), wait=False)  # fmt: skip
    kfp = client(kfp_profile)
    deadline = time.monotonic() + 2400
    while time.monotonic() < deadline:
        jobs, pods = trainjob_objects(kfp_profile)
        seen_jobs.update({j["metadata"]["name"]: j for j in jobs})
        seen_images.update(c.image for p in pods for c in p.spec.containers)
        run = kfp.get_run(started["run_id"])
        if run.state in ("SUCCEEDED", "FAILED", "CANCELED"):
            break
        time.sleep(5)
    assert run.state == "SUCCEEDED", run.error
    (job,) = seen_jobs.values()
    assert job["spec"]["trainer"]["numNodes"] == 2
    assert seen_images == {f"{kfp_profile.images.registry}/tfrecord-suite:{kfp_profile.images.tag}"}
    created = [
        e for e in kfp_profile.cluster.control_plane.requests_by(account)
        if e["verb"] == "create" and e["objectRef"].get("resource") == "trainjobs"
    ]  # fmt: skip
    assert created and created[0]["responseStatus"]["code"] == 201, created
    assert not trainjob_objects(kfp_profile)[0]  # deleted when training was done
    model = lineage(kfp_profile, started["run_id"])["Train (tf.distribute)"]["outputs"]["model"]
    assert model["properties"]["replicas"] == 2.0
    assert model["properties"]["strategy"] == "CollectiveAllReduceStrategy"
    assert_images_compiled(kfp_profile, run_pods(kfp_profile, started["run_id"]))


def test_a_run_cancelled_mid_train_leaves_nothing_running(kfp_profile, dataset_ref):
    """Terminated from the API while its TrainJob's two nodes train, the run ends (KFP 2.17
    reports a terminated run as FAILED: nothing in it writes CANCELED) and within a minute its
    TrainJob and the nodes' pods are gone: Argo signals the step, whose launcher deletes the
    job it made."""
    started = submit(kfp_profile, "training", "--launcher", "trainjob", *SMALL_JOB,
                     *params({"dataset_ref": dataset_ref, "workers": 2, "epochs": 500,
                              "batch_size": 32}), wait=False)  # fmt: skip
    from realparts.processes import wait_for

    def nodes_training() -> bool:
        _, pods = trainjob_objects(kfp_profile)
        return len([p for p in pods if p.status.phase == "Running"]) == 2

    wait_for(nodes_training, 1800, "the TrainJob's two nodes running", interval=3)
    time.sleep(20)  # well into training
    kfp = client(kfp_profile)
    kfp.terminate_run(started["run_id"])
    cancelled = time.monotonic()
    wait_for(lambda: trainjob_objects(kfp_profile) == ([], []), 60,
             "the TrainJob and its pods deleted", interval=2)  # fmt: skip
    gone = time.monotonic() - cancelled
    run = wait_for(
        lambda: (r := kfp.get_run(started["run_id"])).state in ("FAILED", "CANCELED") and r,
        300, "the run's end", interval=5,
    )  # fmt: skip
    print(f"TrainJob and nodes gone {gone:.0f} s after the run was terminated; run {run.state}")
    assert run.state in ("FAILED", "CANCELED")


def test_a_recurring_run_starts_runs_on_its_schedule(kfp_profile, penguins):
    """A recurring run of the data pipeline every 20 seconds (six cron fields, seconds first;
    one run at a time) starts at least two runs of its own; it is then deleted and its runs
    terminated."""
    kfp = client(kfp_profile)
    job = submit(kfp_profile, "data", "--schedule", "*/20 * * * * *", *params(penguins),
                 wait=False)  # fmt: skip
    recurring = job["recurring_run_id"]

    def own_runs() -> list[Any]:
        runs = kfp.list_runs(namespace=kfp_profile.namespace, page_size=100).runs or []
        return [r for r in runs if r.recurring_run_id == recurring]

    from realparts.processes import wait_for

    def ended(run_id: str) -> bool:
        """Terminate the run unless it has ended; True once asked or ended. A run the
        scheduled-workflow controller has just made may have no workflow yet (the API server
        answers 500, "workflow ... not found"), and one that ends meanwhile cannot be
        terminated (400, "Row not found"): both raise, and are asked again."""
        if kfp.get_run(run_id).state in ("PENDING", "RUNNING"):
            kfp.terminate_run(run_id)
        return True

    try:
        runs = wait_for(lambda: len(own_runs()) >= 2 and own_runs(), 1200,
                        "two runs of the recurring run", interval=10)  # fmt: skip
    finally:
        kfp.delete_recurring_run(recurring)
        for run in own_runs():
            wait_for(lambda r=run: ended(r.run_id), 120, f"ending run {run.run_id}", interval=5)
    created = sorted(r.created_at for r in runs)
    assert created[1] > created[0]


def test_the_cronjob_starts_a_run_and_its_role_denies_the_rest(kfp_profile, penguins):
    """The retraining CronJob of k8s/ (multi-user overlay, its own account and narrow Role,
    its projected token) runs in the profile as deployed and starts a run on the API server.
    The real API server authorizes what that account may do (SubjectAccessReview on
    pipelines.kubeflow.org): reading the run it made is allowed, terminating it is refused."""
    from cluster import kubeflow_pipelines as kfp
    from kubernetes import client as k8s

    from tfrecord_suite.kfp.endpoint import KfpEndpoint

    cluster, ns = kfp_profile.cluster, kfp_profile.namespace
    settings = {
        "input": penguins["input_uri"],
        # a registry of its own: with --if-changed it submits when no version holds this input
        "registry": f"{kfp_profile.root}/retrain-{time.strftime('%H%M%S')}",
        "dataset": "penguins",
        "storage-secret": kfp.STORAGE_SECRET,
        "storage-secret-type": "s3-keys",
        "step-resources": kfp.SMALL_STEPS,
        "params": {"label": "species", "epochs": 2, "batch_size": 64},
    }
    kfp.apply_suite_overlay(cluster, kfp_profile.images, retrain=settings)
    job = f"retrain-{time.strftime('%H%M%S')}"
    # what the CronJob controller does at the schedule, now (set-up, as the admin)
    cluster.kubectl("-n", ns, "create", "job", job, "--from=cronjob/tfrecord-suite-retrain")
    core = k8s.CoreV1Api(cluster.api_client())
    from realparts.processes import wait_for

    def finished() -> Any:
        status = k8s.BatchV1Api(cluster.api_client()).read_namespaced_job(job, ns).status
        return (status.succeeded or status.failed) and status

    status = wait_for(finished, 900, f"the CronJob's Job {job}", interval=5)
    (pod,) = core.list_namespaced_pod(ns, label_selector=f"job-name={job}").items
    log = core.read_namespaced_pod_log(pod.metadata.name, ns, _preload_content=False).data
    assert status.succeeded, log.decode()[-4000:]
    summary = summary_of(log.decode())
    assert summary["submitted"], summary
    run_id = summary["run_id"]

    token = tempfile.NamedTemporaryFile("w", suffix=".token", delete=False)
    token.write(kfp.token(cluster, "tfrecord-suite-retrain", ns))
    token.close()
    as_cronjob = KfpEndpoint(kfp_profile.host, ns, token_file=token.name).client(ns)
    assert as_cronjob.get_run(run_id).run_id == run_id  # its Role: runs get
    with pytest.raises(Exception) as denied:
        as_cronjob.terminate_run(run_id)  # no terminate in its Role
    assert getattr(denied.value, "status", None) == 403, denied.value
    assert "terminate" in str(denied.value) and "runs" in str(denied.value), denied.value
    client(kfp_profile).terminate_run(run_id)  # as the profile's editor: allowed
    os.unlink(token.name)


def test_the_launcher_refuses_a_top_level_null_as_kfp_mlmd_says(kfp_profile, tmp_path):
    """The rule src/tfrecord_suite/kfp/mlmd.py restates, checked against KFP 2.17's own
    launcher: an output artifact whose metadata holds a null at its top level fails the task
    after its work is done; the same null inside a list or a struct is stored, the struct and
    the list wrapped and the number a double, as the module says a downstream step reads
    them back."""
    from kfp import compiler
    from mlmd_rule_pipeline import build

    from tfrecord_suite.kfp.mlmd import mlmd_problems

    package = str(tmp_path / "rule.yaml")
    compiler.Compiler().compile(build(kfp_profile.images.component), package)
    kfp = client(kfp_profile)
    results = {}
    for case, metadata in {"top": {"n": None}, "nested": {"l": [1, None], "s": {"a": None},
                                                          "i": 3, "t": "x"}}.items():  # fmt: skip
        run = kfp.create_run_from_pipeline_package(
            package, {"metadata": json.dumps(metadata)}, namespace=kfp_profile.namespace,
            experiment_name="tfrs-mlmd-rule",
        )  # fmt: skip
        results[case] = (kfp.wait_for_run_completion(run.run_id, timeout=900), metadata)
    top, nested = results["top"][0], results["nested"][0]
    assert mlmd_problems(results["top"][1]) and not mlmd_problems(results["nested"][1])
    assert top.state == "FAILED" and nested.state == "SUCCEEDED", (top.state, nested.state)
    from kubernetes import client as k8s

    core = k8s.CoreV1Api(kfp_profile.cluster.api_client())
    logs = "".join(
        core.read_namespaced_pod_log(pod.metadata.name, kfp_profile.namespace, container="main",
                                     _preload_content=False).data.decode()
        for pod in run_pods(kfp_profile, top.run_id) if "-impl-" in pod.metadata.name
    )  # fmt: skip
    # the launcher's own message, after the step's code had succeeded
    assert "unsupported value type" in logs and "NullValue" in logs, logs[-3000:]
    stored = lineage(kfp_profile, nested.run_id)["describe"]["outputs"]["out"]["properties"]
    assert stored["i"] == 3.0 and stored["t"] == "x"
    assert stored["l"] == {"list": [1.0, None]} and stored["s"] == {"struct": {"a": None}}
