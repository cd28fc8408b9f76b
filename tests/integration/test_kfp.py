"""The suite's pipelines on Kubeflow Pipelines 2.17.0's real backend (the one-node cluster's:
tests/cluster/kubeflow_pipelines.py), submitted as a user submits them: ``tfrecord-suite submit``
with the profile's namespace and a token of its account, images under the cluster's own
registry and tag, small real data in the profile's part of the cluster's object store.

Each run's result is read back as the UI shows it: its state and tasks through the KFP API, its
executions and artifacts from ML Metadata through the UI's gRPC-web endpoint
(realparts.mlmd.run_lineage). Markers ``cluster`` and ``kfp``: ``make test-cluster`` runs them.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
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
    node does not hold. Every container of the suite's image names it as the profile's images
    do: by the digest they are pinned by (``k8s/images``' ``digest:``, ``--image-digests``),
    and then the node ran that very image (its ``imageID`` has the digest); or by registry and
    tag where nothing pins one (the deploy page's walk sets those two only)."""
    from tfrecord_suite.images import DEFAULT_REGISTRY

    assert pods
    pinned = profile.images.component
    digest = pinned.rpartition("@")[2] if "@" in pinned else ""
    assert not digest or digest.startswith("sha256:"), pinned
    seen, ran = set(), []
    for pod in pods:
        statuses = {s.name: s for s in [*(pod.status.container_statuses or []),
                                        *(pod.status.init_container_statuses or [])]}  # fmt: skip
        for container in [*pod.spec.containers, *(pod.spec.init_containers or [])]:
            seen.add(container.image)
            assert not container.image.startswith(DEFAULT_REGISTRY), (pod.metadata.name, seen)
            if container.image.startswith(f"{profile.images.registry}/"):
                assert container.image == pinned, (pod.metadata.name, container.image)
                status = statuses.get(container.name)
                if status is not None and status.image_id:
                    assert status.image_id.endswith(digest), (pod.metadata.name, status.image_id)
                    ran.append(pod.metadata.name)
    assert pinned in seen and ran, (seen, ran)


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
    """The data pipeline's first run on the penguins (its submit summary), in 4 training shards:
    a run's tf.data service of two workers reads whole files of each of two trainers'."""
    return submit(kfp_profile, "data", *params({**penguins, "num_shards": 4}))


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
    # every metrics artifact of the run holds numbers only (what Compare runs lines up); the
    # gate's decision is a Markdown artifact of its own
    from tfrecord_suite.steps.mlmd import LAUNCHER_PROPERTIES

    for execution in tasks.values():
        for output in execution["outputs"].values():
            if output["type"] == "system.Metrics":
                scalars = {k: v for k, v in output["properties"].items()
                           if k not in LAUNCHER_PROPERTIES}  # fmt: skip
                assert scalars and all(isinstance(v, float) for v in scalars.values()), scalars
    evaluate = tasks["Evaluate against the stable model"]["outputs"]
    assert set(evaluate["evaluation"]["properties"]) - set(LAUNCHER_PROPERTIES) == {
        "candidate_accuracy"
    }
    assert evaluate["decision"]["type"] == "system.Markdown"
    assert evaluate["decision"]["properties"]["decision"] == "promote"  # no baseline yet
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


def test_a_run_cancelled_mid_train_is_over_within_a_minute(kfp_profile, dataset_ref):
    """Terminated from the API while its TrainJob's two nodes train, the run is over within a
    minute, all of it: the run ended (KFP 2.17 reports a terminated run as FAILED: nothing in
    it writes CANCELED), none of its pods (KFP's drivers and steps, labelled with the run's
    id, and the TrainJob's nodes) still Pending or Running, the TrainJob and its nodes' pods
    deleted (Argo signals the step, whose launcher deletes the job it made). The TrainJob
    watched is the run's own: named after the run, owned by the run's lease, which the run's
    own train step pod owns."""
    from kubernetes import client as k8s

    from realparts.processes import WaitError, wait_for
    from tfrecord_suite.launch.job import job_name
    from tfrecord_suite.launch.lease import lease_name

    started = submit(kfp_profile, "training", "--launcher", "trainjob", *SMALL_JOB,
                     *params({"dataset_ref": dataset_ref, "workers": 2, "epochs": 500,
                              "batch_size": 32}), wait=False)  # fmt: skip
    run_id, ns = started["run_id"], kfp_profile.namespace
    name = job_name(run_id)

    def own_job() -> tuple[dict | None, list[Any]]:
        jobs, pods = trainjob_objects(kfp_profile)
        job = next((j for j in jobs if j["metadata"]["name"] == name), None)
        nodes = [p for p in pods if p.metadata.labels["jobset.sigs.k8s.io/jobset-name"] == name]
        return job, nodes

    def nodes_training() -> dict | None:
        job, nodes = own_job()
        return job if len([p for p in nodes if p.status.phase == "Running"]) == 2 else None

    job = wait_for(nodes_training, 1800, f"the TrainJob {name}'s two nodes running", interval=3)
    # the run's own: its lease owns it, and the run's train step pod owns the lease
    api = kfp_profile.cluster.api_client()
    (owner,) = job["metadata"]["ownerReferences"]
    lease = k8s.BatchV1Api(api).read_namespaced_job(lease_name(name), ns)
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", lease.metadata.name,
                                                            lease.metadata.uid)  # fmt: skip
    (step_ref,) = lease.metadata.owner_references
    step = k8s.CoreV1Api(api).read_namespaced_pod(step_ref.name, ns)
    assert step.metadata.uid == step_ref.uid and step.metadata.labels["pipeline/runid"] == run_id
    time.sleep(20)  # well into training
    kfp = client(kfp_profile)
    kfp.terminate_run(run_id)
    cancelled = time.monotonic()
    left: dict[str, Any] = {}

    def over() -> bool:
        job, nodes = own_job()
        left.update(
            trainjob=job and job["metadata"]["name"],
            nodes=[p.metadata.name for p in nodes],
            live=[p.metadata.name for p in run_pods(kfp_profile, run_id)
                  if p.status.phase in ("Pending", "Running")],
            state=kfp.get_run(run_id).state,
        )  # fmt: skip
        return not (left["trainjob"] or left["nodes"] or left["live"]) and left["state"] in (
            "FAILED", "CANCELED")  # fmt: skip

    try:
        wait_for(over, 60, "the run over", interval=2)
    except WaitError:
        pytest.fail(f"60 s after the run was terminated, still: {left}")
    print(f"run {left['state']}, its pods and TrainJob gone "
          f"{time.monotonic() - cancelled:.0f} s after it was terminated")  # fmt: skip


def _selected(selector: dict[str, str], labels: dict[str, str] | None) -> bool:
    """Whether a NetworkPolicy's ``matchLabels`` selects a pod of these labels."""
    return all((labels or {}).get(k) == v for k, v in selector.items())


@dataclasses.dataclass
class Watched:
    """What a training run made while it ran, polled every few seconds (:func:`watch`).

    Attributes:
        state: The run's final state.
        seconds: From submission to its end.
        trainjob: The run's TrainJob (named after the run), as last seen.
        pods: ``name -> labels`` of every pod of the run seen Running: KFP's (labelled with
            the run's id), the TrainJob's nodes, the service's.
        images: Every image a pod of the TrainJob or the service ran.
        step_pod: The pod that owned the run's lease: the train step's.
        policy: The run's service's NetworkPolicy (None: no service).
        logs: ``pod -> log`` of the service's workers, the longest read while they lived.

    """

    state: str = ""
    seconds: float = 0.0
    trainjob: dict | None = None
    pods: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    images: set[str] = dataclasses.field(default_factory=set)
    step_pod: str = ""
    policy: Any = None
    logs: dict[str, str] = dataclasses.field(default_factory=dict)


def watch(profile: Any, run_id: str, timeout: float = 2400) -> Watched:
    """Poll the run's objects until it ends (see :class:`Watched`)."""
    from kubernetes import client as k8s

    from tfrecord_suite.launch.job import job_name
    from tfrecord_suite.launch.lease import lease_name

    api = profile.cluster.api_client()
    core, net, batch = k8s.CoreV1Api(api), k8s.NetworkingV1Api(api), k8s.BatchV1Api(api)
    ns, job = profile.namespace, job_name(run_id)
    service = f"{job}-data"
    kfp_client, seen, started = client(profile), Watched(), time.monotonic()
    while time.monotonic() - started < timeout:
        jobs, all_nodes = trainjob_objects(profile)
        seen.trainjob = next((j for j in jobs if j["metadata"]["name"] == job), seen.trainjob)
        nodes = [p for p in all_nodes if p.metadata.labels["jobset.sigs.k8s.io/jobset-name"] == job]
        served = core.list_namespaced_pod(ns, label_selector=f"app.kubernetes.io/name={service}")
        for pod in [*run_pods(profile, run_id), *nodes, *served.items]:
            if pod.status.phase == "Running":
                seen.pods[pod.metadata.name] = pod.metadata.labels
        seen.images.update(c.image for p in [*nodes, *served.items] for c in p.spec.containers)
        seen.policy = next((p for p in net.list_namespaced_network_policy(ns).items
                            if p.metadata.name == service), seen.policy)  # fmt: skip
        with contextlib.suppress(k8s.exceptions.ApiException):  # the lease, while it lives
            (owner,) = batch.read_namespaced_job(lease_name(job), ns).metadata.owner_references
            seen.step_pod = owner.name
        for pod in served.items:
            running = any(c.state.running for c in pod.status.container_statuses or [])
            if (pod.metadata.labels.get("app.kubernetes.io/component") != "worker"
                    or pod.metadata.deletion_timestamp is not None or not running):  # fmt: skip
                continue
            with contextlib.suppress(k8s.exceptions.ApiException):
                log = core.read_namespaced_pod_log(pod.metadata.name, ns)
                # a live container's log only grows; a read as the container goes can answer
                # kubelet's "unable to retrieve container logs for ..." instead (CI, 2026-11-29):
                # keep what was read before unless this read extends it
                if log.startswith(seen.logs.get(pod.metadata.name, "")):
                    seen.logs[pod.metadata.name] = log
        seen.state = kfp_client.get_run(run_id).state
        if seen.state in ("SUCCEEDED", "FAILED", "CANCELED"):
            break
        time.sleep(5)
    seen.seconds = time.monotonic() - started
    return seen


def test_two_trainjob_nodes_train_on_s3_through_the_runs_own_service_as_without_it(
    kfp_profile, dataset_ref
):
    """The training pipeline with workers=2 on the version on the cluster's object store
    (SeaweedFS, s3://), twice and at once: its train step, inside the KFP run, creates the run's TrainJob
    (named after the run) as the run's own account (the profile's default-editor, which k8s/
    binds the launcher Role to), the Trainer and JobSet run its two nodes on the compiled image
    (by its digest), both train, and the step deletes the TrainJob when done. The second run
    reads through its own tf.data service (cluster:2): each service worker stages its share of
    the shards before it serves (its log says which, each shard once), and the run scores what
    the first scored reading the shards itself. The service's NetworkPolicy, enforced by the
    cluster's engine, admits the run's real trainers by the labels they carry: both nodes as
    the Trainer and JobSet made them and KFP's pod of the train step (the one that owns the
    run's lease), and no other pod of the run."""
    from test_cluster_training import host_volume, shared_folder

    from tfrecord_suite.launch.job import job_name

    account = f"system:serviceaccount:{kfp_profile.namespace}:default-editor"
    common = {
        "dataset_ref": dataset_ref,
        "workers": 2,
        "epochs": 12,
        "batch_size": 16,
        "learning_rate": 0.01,
    }
    # both runs at once, as a user comparing the two would start them (their waits overlap:
    # most of a run is pods starting, not training): two nodes each, the steps, the service's
    # dispatcher and two workers on the 2-CPU node
    small = ["--cpu-request", "150m", "--memory-request", "2Gi"]
    alone_run = submit(kfp_profile, "training", "--launcher", "trainjob", *small,
                       *params(common), wait=False)["run_id"]  # fmt: skip
    served_run = submit(kfp_profile, "training", "--launcher", "trainjob", *small,
                        "--service-cpu-request", "100m", "--service-memory-request", "1Gi",
                        *params({**common, "input_service": "cluster:2"}),
                        wait=False)["run_id"]  # fmt: skip
    name = f"{job_name(served_run)}-data"
    journal = shared_folder(kfp_profile.cluster) / f"journal-{name}"
    journal.mkdir(mode=0o777, exist_ok=True)
    journal.chmod(0o777)
    # the node has no volume provisioner: the dispatcher's journal claim gets a volume of the
    # node's folder, as a cluster's default StorageClass would give it one
    volume = host_volume(kfp_profile.cluster, kfp_profile.namespace,
                         f"journal-{name}-dispatcher-0", journal)  # fmt: skip
    with volume, concurrent.futures.ThreadPoolExecutor(2) as pool:
        alone, served = pool.map(lambda run: watch(kfp_profile, run), (alone_run, served_run))
    assert alone.state == "SUCCEEDED", alone
    assert alone.trainjob["spec"]["trainer"]["numNodes"] == 2
    assert alone.images == {kfp_profile.images.component}  # pinned by its digest
    created = [e for e in kfp_profile.cluster.control_plane.requests_by(account)
               if e["verb"] == "create" and e["objectRef"].get("resource") == "trainjobs"
               and e["objectRef"].get("name") == job_name(alone_run)]  # fmt: skip
    assert [e["responseStatus"]["code"] for e in created] == [201], created
    assert job_name(alone_run) not in {  # deleted when training was done
        j["metadata"]["name"] for j in trainjob_objects(kfp_profile)[0]
    }
    model = lineage(kfp_profile, alone_run)["Train (tf.distribute)"]["outputs"]["model"]
    assert model["properties"]["replicas"] == 2.0
    assert model["properties"]["strategy"] == "CollectiveAllReduceStrategy"
    assert_images_compiled(kfp_profile, run_pods(kfp_profile, alone_run))

    assert served.state == "SUCCEEDED", served
    assert served.images == {kfp_profile.images.component}  # nodes, dispatcher, workers
    assert_images_compiled(kfp_profile, run_pods(kfp_profile, served_run))
    staged = {pod: line for pod, log in served.logs.items() for line in log.splitlines()
              if line.startswith("staged ")}  # fmt: skip
    assert sorted(staged) == [f"{name}-worker-0", f"{name}-worker-1"], served.logs
    assert all(" of 4 train shards of penguins@1.0.0 " in line for line in staged.values())
    assert sum(int(line.split()[1]) for line in staged.values()) == 4, staged  # each shard once

    def accuracy(run: str) -> float:
        metrics = lineage(kfp_profile, run)["Train (tf.distribute)"]["outputs"]["metrics"]
        return metrics["properties"]["test_accuracy"]

    with_service, without = accuracy(served_run), accuracy(alone_run)
    print(f"test accuracy {with_service:.3f} through the service ({served.seconds:.0f} s), "
          f"{without:.3f} without ({alone.seconds:.0f} s); staged: {staged}")  # fmt: skip
    assert with_service >= 0.85 and without >= 0.85, (with_service, without)
    assert abs(with_service - without) <= 0.1, (with_service, without)

    assert served.policy is not None
    selectors = [peer.pod_selector.match_labels for rule in served.policy.spec.ingress
                 for peer in rule._from if peer.pod_selector is not None]  # fmt: skip
    trainers = {
        pod
        for pod, labels in served.pods.items()
        if "app.kubernetes.io/name" not in labels or labels["app.kubernetes.io/name"] != name
    }
    admitted = {pod for pod in trainers
                if any(_selected(s, served.pods[pod]) for s in selectors)}  # fmt: skip
    nodes = {pod for pod in trainers if "jobset.sigs.k8s.io/jobset-name" in served.pods[pod]}
    assert len(nodes) == 2 and served.step_pod in trainers, (served.pods, served.step_pod)
    assert admitted == {*nodes, served.step_pod}, (admitted, selectors, served.pods)


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
    pipelines.kubeflow.org): reading the run it made is allowed, terminating it is refused.
    With k8s/images pinning the component image by digest, the CronJob and the run it submits
    run it by that digest."""
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
    # k8s/images pins the component image by digest: the CronJob runs it so, and compiles the
    # run it submits for it, whose steps run it so too (imageID: the node ran that image)
    assert_images_compiled(kfp_profile, [pod])

    def a_step_ran() -> list[Any]:
        pods = run_pods(kfp_profile, run_id)
        started = [s for p in pods for s in (p.status.container_statuses or []) if s.image_id
                   and s.image.startswith(kfp_profile.images.registry)]  # fmt: skip
        return pods if started else []

    assert_images_compiled(kfp_profile, wait_for(a_step_ran, 900, "a step of the CronJob's run",
                                                 interval=5))  # fmt: skip

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


def test_the_launcher_refuses_a_top_level_null_as_steps_mlmd_says(kfp_profile, tmp_path):
    """The rule src/tfrecord_suite/steps/mlmd.py restates, checked against KFP 2.17's own
    launcher: an output artifact whose metadata holds a null at its top level fails the task
    after its work is done; the same null inside a list or a struct is stored, the struct and
    the list wrapped and the number a double, as the module says a downstream step reads
    them back."""
    from kfp import compiler
    from mlmd_rule_pipeline import build

    from tfrecord_suite.steps.mlmd import mlmd_problems

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
