"""Kubeflow Trainer v2: the TrainJob and the TensorFlow runtime; TF_CONFIG from a JobSet node's
environment; and, against the real API server (tests/realparts, marker ``k8s``): the objects the
launcher renders accepted by Trainer v2.3.0's CRDs with strict field validation, and refused
where they break them; discovery; the launcher's lifecycle; the kfp train step; and, end to
end, the train step with two nodes trained for real (MultiWorkerMirroredStrategy).

No Trainer, JobSet or kubelet runs on that server: the local operator
(tests/realparts/local_operator.py) runs each TrainJob's nodes as local processes, with the
environment the real ClusterTrainingRuntime gives them, and serves their logs to the API server
as a kubelet does. An older cluster (Kubeflow 1.11: Trainer v2.1.0 beside the Training Operator)
is a second real control plane with those releases' CRDs."""

import json
import os
import re
import signal
import time

import pytest
import yaml
from support import api_calls, kept, launch_as, launcher_account, launcher_job_config, unavailable

from fakes.artifacts import Artifact, train_step
from fakes.chief import write_chief_outputs
from realparts.local_operator import LocalOperator, node_program
from realparts.processes import wait_for
from tfrecord_suite import images
from tfrecord_suite.launch import discovery
from tfrecord_suite.launch.job import (
    NODE_GRACE_SECONDS,
    JobLauncher,
    LauncherUnavailable,
    job_name,
)
from tfrecord_suite.launch.kube import JobCancelled, JobError
from tfrecord_suite.launch.placement import Placement
from tfrecord_suite.launch.tfjob import TFJob
from tfrecord_suite.launch.trainjob import RUNTIME_NAME, TrainJob, render_trainjob
from tfrecord_suite.train import strategy

K8S = os.path.join(os.path.dirname(__file__), "..", "..", "k8s")
RUNTIME_YAML = os.path.join(K8S, "trainer-runtime", "clustertrainingruntime.yaml")
GPU = Placement(accelerator_type="nvidia-l4", accelerator_count=2, shm_size="16Gi")
TPU = Placement(accelerator_type="tpu-v5-lite-podslice", accelerator_count=4, tpu_topology="2x2")


def config(**kw):
    """:func:`support.launcher_job_config` as this module's tests launch it."""
    return launcher_job_config(**{"placement": GPU, "service_account": "default-editor", **kw})


def _runtime():
    with open(RUNTIME_YAML) as fh:
        return yaml.safe_load(fh)


# ------------------------------------------------------------------------ rendered objects


def test_trainjob_carries_the_run():
    job = render_trainjob(config())
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
    pod = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"][
        "replicatedJobs"
    ][0]["template"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "2x2"
    assert job["spec"]["trainer"]["resourcesPerNode"] == {
        "requests": {"cpu": "8", "memory": "32Gi"},
        "limits": {"google.com/tpu": "4"},
    }


def test_runtime_gives_each_node_what_the_trainer_reads():
    runtime = _runtime()
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
    # stopped as a TFJob's nodes are (launch/job.py)
    pod = rjob["template"]["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == NODE_GRACE_SECONDS


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


def test_placement_refuses_an_unknown_launcher():
    with pytest.raises(ValueError, match="--launcher 'mpijob': use one of auto, trainjob"):
        Placement(launcher="mpijob")


# ------------------------------------------------------------- the real CRDs judge the objects


@pytest.mark.k8s
def test_the_real_crd_accepts_every_trainjob_the_launcher_renders(k8s, k8s_namespace):
    """Created (server-side dry run) with strict field validation, as the launcher creates
    them: every placement, and each kind of Secret the nodes get."""
    from kubernetes import client

    from tfrecord_suite.launch.credentials import Credentials

    custom = client.CustomObjectsApi(k8s.api_client())
    variants = {
        "cpu": config(placement=Placement()),
        "gpu": config(),
        "tpu": config(workers=2, placement=TPU),
        "gcs-key": config(credentials=Credentials("gcs-sa-key", "gcs-key", "regcred")),
        "s3-keys": config(credentials=Credentials("bucket-keys", "s3-keys")),
        "no-owner": config(owner=None, service_account=""),
    }
    for variant, cfg in variants.items():
        cfg.namespace = k8s_namespace
        job = render_trainjob(cfg)
        created = custom.create_namespaced_custom_object(
            TrainJob.group, TrainJob.version, k8s_namespace, TrainJob.plural, job,
            dry_run="All", field_validation="Strict",
        )  # fmt: skip
        # nothing dropped: the server would store all that was sent (and its defaults)
        assert kept(job, created) == [], variant


BAD_TRAINJOBS = {
    # Trainer v2.1's field, gone in v2.2: strict decoding refuses it
    "unknown field": (
        lambda job: job["spec"].update(podTemplateOverrides=[]),
        400, 'strict decoding error: unknown field "spec.podTemplateOverrides"',
    ),
    "wrong type": (
        lambda job: job["spec"]["trainer"].update(numNodes="4"),
        422, "spec.trainer.numNodes in body must be of type integer",
    ),
    "missing field": (
        lambda job: job["spec"]["runtimeRef"].pop("name"),
        422, "spec.runtimeRef.name: Required value",
    ),
    # the CRD's CEL rule (x-kubernetes-validations)
    "long name": (
        lambda job: job["metadata"].update(name="t" * 64),
        422, "metadata.name must be no more than 63 characters",
    ),
}  # fmt: skip


@pytest.mark.k8s
@pytest.mark.parametrize("case", list(BAD_TRAINJOBS))
def test_the_real_crd_refuses_a_broken_trainjob(k8s, k8s_namespace, case):
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    breaks, status, message = BAD_TRAINJOBS[case]
    job = render_trainjob(config(namespace=k8s_namespace, owner=None))
    breaks(job)
    with pytest.raises(ApiException) as err:
        client.CustomObjectsApi(k8s.api_client()).create_namespaced_custom_object(
            TrainJob.group, TrainJob.version, k8s_namespace, TrainJob.plural, job,
            dry_run="All", field_validation="Strict",
        )  # fmt: skip
    assert err.value.status == status
    assert message in json.loads(err.value.body)["message"]


# ------------------------------------------------------------------ an older cluster, discovery


class OlderCluster:
    """A second real control plane, serving the job APIs a test asks for (none at first): the
    Training Operator v1.8.1's TFJob, and Trainer v2.1.0's TrainJob (Kubeflow 1.11's: no
    runtimePatches). ``runner``: the launcher's account in its namespace ``ml``. The tests
    using it go from serving nothing to serving both, in file order (any order works)."""

    def __init__(self, plane, kubeconfig):
        from realparts import controlplane

        self.plane = plane
        old = controlplane.crd_documents("crds-old")
        tfjob = [d for d in controlplane.crd_documents() if d["spec"]["group"] == "kubeflow.org"]
        self.docs = {"tfjobs": tfjob, "trainjobs": old}
        plane.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}])
        self.runner = launcher_account(plane, "ml", kubeconfig)

    def serve(self, *plurals: str) -> None:
        """Make the cluster serve exactly these job APIs (installing or deleting CRDs)."""
        for plural, docs in self.docs.items():
            names = [d["metadata"]["name"] for d in docs]
            if plural in plurals:
                self.plane.apply(docs)  # served once established: waited for below
            else:
                self.plane.kubectl("delete", "crd", "--ignore-not-found", "--wait", *names)
        kinds = {"tfjobs": TFJob, "trainjobs": TrainJob}
        wait_for(
            lambda: all(discovery.serves(self.plane.api_client(), k) == (p in plurals)
                        for p, k in kinds.items()),
            what=f"the cluster serves {plurals}",
        )  # fmt: skip


@pytest.fixture(scope="module")
def older_cluster(k8s, tmp_path_factory):
    from realparts import controlplane, parts

    if parts.built("crds-old") is None:
        unavailable("real parts not built (crds-old): run `make real-parts`")
    work = tmp_path_factory.mktemp("k8s-older")
    plane = controlplane.start(work / "plane", parts.built("kubernetes"), parts.built("etcd"))
    try:
        yield OlderCluster(plane, work / "kubeconfig")
    finally:
        plane.stop()


@pytest.mark.k8s
def test_train_task_without_a_job_api_fails_without_retrying(older_cluster, tmp_path, monkeypatch):
    from tfrecord_suite.errors import RetryWillNotHelp

    old = older_cluster
    old.serve()
    launch_as(monkeypatch, tmp_path, old.runner)
    with pytest.raises(RetryWillNotHelp, match="no multi-node training API on this cluster"):
        train_step(f"{tmp_path}/reg/digits@1.0.0", tmp_path, workers=2)
    assert [c for c in api_calls(old.plane, old.runner.user) if c[0] == "create"] == []


@pytest.mark.k8s
def test_discovery_picks_what_the_cluster_serves(k8s, older_cluster, k8s_runner):
    """As the launcher's account, which needs no grant for it; nothing is created."""
    old, api = older_cluster, older_cluster.runner.api
    before = len(api_calls(old.plane, old.runner.user))
    old.serve()
    with pytest.raises(LauncherUnavailable) as err:
        discovery.choose_launcher("auto", api)
    text = str(err.value)
    assert "neither TrainJob" in text and "Kubeflow Trainer v2.2" in text
    assert "kubectl apply -k k8s/trainer-runtime" in text and "Training Operator v1" in text
    assert "\n" not in text
    old.serve("tfjobs")
    assert discovery.choose_launchers("auto", api) == [TFJob]
    with pytest.raises(LauncherUnavailable, match="does not serve trainjobs"):
        discovery.choose_launcher("trainjob", api)
    old.serve("tfjobs", "trainjobs")
    assert discovery.choose_launchers("auto", api) == [TrainJob, TFJob]
    # the current cluster (Trainer v2.3.0 beside the Training Operator)
    for requested, expected in (("auto", TrainJob), ("trainjob", TrainJob), ("tfjob", TFJob)):
        assert discovery.choose_launcher(requested, k8s_runner.api) is expected
    # discovery only: each call a read of /apis/<group>/<version>, which needs no grant
    calls = api_calls(old.plane, old.runner.user)[before:] + api_calls(k8s, k8s_runner.user)
    assert calls and all(verb == "get" and re.fullmatch(r"/apis/[^/]+/[^/]+", uri)
                         for verb, _, uri in calls), calls  # fmt: skip


@pytest.mark.k8s
def test_auto_falls_back_to_a_tfjob_where_the_trainer_is_too_old(
    older_cluster, tmp_path, monkeypatch
):
    """Kubeflow 1.11 installs Trainer v2.1 (its TrainJob has no runtimePatches) beside the
    Training Operator: the real server refuses our TrainJob (strict decoding), and --launcher
    auto launches a TFJob instead; with --launcher trainjob the refusal says to upgrade."""
    from tfrecord_suite.errors import RetryWillNotHelp

    old = older_cluster
    old.serve("tfjobs", "trainjobs")
    registry = str(tmp_path / "reg")
    write_chief_outputs(
        os.path.join(registry, "_runs", job_name("run-11"), "model"), 2, accuracy=0.8,
        per_second=10.0,
    )  # fmt: skip
    launch_as(monkeypatch, tmp_path, old.runner)
    with LocalOperator(old.plane, "ml", tmp_path / "nodes", program=lambda n: node_program()) as op:
        train_step(f"{registry}/digits@1.0.0", tmp_path, workers=2, run_id="run-11")
        assert [job.kind for job in op.jobs.values()] == ["TFJob"]
    assert _job_creates(old) == [("trainjobs", 400), ("tfjobs", 201)]
    with pytest.raises((JobError, RetryWillNotHelp), match=r"predates v2\.2"):
        train_step(
            f"{registry}/digits@1.0.0", tmp_path, workers=2, run_id="run-11",
            launcher="trainjob",
        )  # fmt: skip
    assert _job_creates(old)[2:] == [("trainjobs", 400)]  # and no TFJob


def _job_creates(old):
    """``(plural, response code)`` of each TrainJob or TFJob the runner created."""
    return [(r, code) for verb, code, uri in api_calls(old.plane, old.runner.user)
            for r in ("trainjobs", "tfjobs") if verb == "create" and f"/{r}?" in uri + "?"]  # fmt: skip


# ------------------------------------------------------------------------------ lifecycle


@pytest.fixture(scope="module")
def runtime(k8s):
    """The TensorFlow runtime (k8s/trainer-runtime) installed on the real server."""
    out = k8s.kubectl("kustomize", os.path.join(K8S, "trainer-runtime")).stdout
    k8s.apply([d for d in yaml.safe_load_all(out) if d])
    return RUNTIME_NAME


def _gone(k8s, kind, namespace, name):
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        client.CustomObjectsApi(k8s.api_client()).get_namespaced_custom_object(
            kind.group, kind.version, namespace, kind.plural, name
        )
        return False
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise


def _live(k8s_runner, **kw):
    """A job config in the runner's namespace, polled every 0.2 s, owned by nobody (an owner
    that does not exist would make the garbage collector delete the job at once)."""
    return config(namespace=k8s_runner.namespace, owner=None, service_account="",
                  poll_seconds=0.2, **kw)  # fmt: skip


NODE_OK = "{node}: epoch 1/1\n{node}: done\n"
TRACEBACK = "Traceback (most recent call last):\nValueError: --epochs must be at least 1\n"


@pytest.mark.k8s
def test_success_polls_reports_and_deletes(k8s, k8s_runner, runtime, tmp_path):
    ns = k8s_runner.namespace
    program = lambda node: node_program(NODE_OK.format(node=node))  # noqa: E731
    with LocalOperator(k8s, ns, tmp_path, program=program):
        result = JobLauncher(TrainJob, k8s_runner.api).run(_live(k8s_runner))
    assert result["kind"] == "TrainJob" and result["state"] == "Succeeded"
    assert sorted(result["replicas"]) == ["node-0", "node-1", "node-2", "node-3"]
    assert result["replicas"]["node-0"]["pod"].startswith("tfrs-train-abc-node-0-0-")
    # each node's log, read through the API server (pods/log) from the node's process
    assert result["replicas"]["node-2"]["log"] == NODE_OK.format(node="node-2")
    calls = api_calls(k8s, k8s_runner.user, "trainjobs")
    (create,) = [c for c in calls if c[0] == "create"]
    # strict field validation: an older Trainer refuses runtimePatches instead of dropping them
    assert create[1] == 201 and "fieldValidation=Strict" in create[2]
    assert [c[:2] for c in calls if c[0] == "delete"] == [("delete", 200)]
    assert {c[1] for c in api_calls(k8s, k8s_runner.user, "pods/log")} == {200}
    wait_for(lambda: _gone(k8s, TrainJob, ns, "tfrs-train-abc"), what="the TrainJob deleted")


@pytest.mark.k8s
def test_failing_node_fails_the_task_with_its_error(k8s, k8s_runner, runtime, tmp_path):
    ns = k8s_runner.namespace

    def program(node):  # node-1 fails; the others train on until the job is deleted
        return (
            node_program("starting\n" + TRACEBACK, 1)
            if node == "node-1"
            else node_program("training\n", None)
        )

    with LocalOperator(k8s, ns, tmp_path, program=program), pytest.raises(JobError) as err:
        JobLauncher(TrainJob, k8s_runner.api).run(_live(k8s_runner))
    text = str(err.value)
    assert (
        f"TrainJob {ns}/tfrs-train-abc Failed: jobset failed due to one or more job failures"
        in text
    )
    assert re.search(
        r"--- node-1 \(pod tfrs-train-abc-node-0-1-\w+, phase Failed, exit code 1\)", text
    )
    assert "ValueError: --epochs must be at least 1" in text
    assert "node-0 (" not in text
    wait_for(lambda: _gone(k8s, TrainJob, ns, "tfrs-train-abc"), what="the TrainJob deleted")


@pytest.mark.k8s
def test_cancellation_deletes_the_trainjob(k8s, k8s_runner, runtime, tmp_path):
    ns, calls = k8s_runner.namespace, []

    def sleep(seconds):
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # what kfp does to a cancelled task's pod
        time.sleep(seconds)

    with LocalOperator(k8s, ns, tmp_path, program=lambda n: node_program("", None)):
        launcher = JobLauncher(TrainJob, k8s_runner.api, sleep=sleep)
        with pytest.raises(JobCancelled, match="deleting the TrainJob"):
            launcher.run(_live(k8s_runner, keep_on_failure=True))
        assert [c[1] for c in api_calls(k8s, k8s_runner.user, "trainjobs") if c[0] == "delete"] == [
            200
        ]
        wait_for(lambda: _gone(k8s, TrainJob, ns, "tfrs-train-abc"), what="the TrainJob deleted")


def _create_as_earlier_attempt(k8s, job):
    from kubernetes import client

    return client.CustomObjectsApi(k8s.api_client()).create_namespaced_custom_object(
        TrainJob.group, TrainJob.version, job["metadata"]["namespace"], TrainJob.plural, job
    )


@pytest.mark.k8s
def test_retried_task_adopts_its_own_trainjob_but_not_another_runs(
    k8s, k8s_runner, runtime, tmp_path
):
    ns = k8s_runner.namespace
    with LocalOperator(k8s, ns, tmp_path, program=lambda n: node_program()) as operator:
        earlier = _create_as_earlier_attempt(k8s, render_trainjob(_live(k8s_runner)))
        result = JobLauncher(TrainJob, k8s_runner.api).run(_live(k8s_runner))
        assert result["state"] == "Succeeded"
        assert list(operator.jobs) == [earlier["metadata"]["uid"]]  # the one job, adopted
    assert [c[1] for c in api_calls(k8s, k8s_runner.user, "trainjobs") if c[0] == "create"] == [409]
    wait_for(lambda: _gone(k8s, TrainJob, ns, "tfrs-train-abc"), what="the TrainJob deleted")

    other = _create_as_earlier_attempt(
        k8s, render_trainjob(_live(k8s_runner, run_id="someone-else"))
    )
    with pytest.raises(JobError, match=r"belongs to another run \(someone-else\)"):
        JobLauncher(TrainJob, k8s_runner.api).run(_live(k8s_runner))
    assert not _gone(k8s, TrainJob, ns, "tfrs-train-abc")  # not ours: left alone
    assert other["metadata"]["labels"]["tfrecord-suite/run"] == "someone-else"


@pytest.mark.k8s
def test_a_refused_trainjob_names_the_likely_cause(k8s, k8s_runner, runtime):
    """The API server's refusal, in its own words, and the hint: here a field Trainer v2.3.0's
    CRD does not have (strict decoding: 400); an older Trainer refusing runtimePatches is
    test_auto_falls_back_to_a_tfjob_where_the_trainer_is_too_old."""
    assert "predates v2.2" in TrainJob.creation_hint(
        400, '{"message": "strict decoding error: unknown field \\"spec.runtimePatches\\""}'
    )
    assert "kubectl apply -k k8s/trainer-runtime" in TrainJob.creation_hint(
        422, '{"message": "ClusterTrainingRuntime tfrecord-suite-tensorflow not found"}'
    )
    bad = render_trainjob(_live(k8s_runner))
    launcher = JobLauncher(TrainJob, k8s_runner.api)
    launcher.kind = type(TrainJob)()
    launcher.kind.render = lambda c: {**bad, "spec": {**bad["spec"], "podSpecOverrides": []}}
    with pytest.raises(
        JobError,
        match=rf"could not create TrainJob {k8s_runner.namespace}/tfrs-train-abc: 400 Bad Request: "
        r'.*strict decoding error: unknown field "spec.podSpecOverrides"',
    ):
        launcher.run(_live(k8s_runner))


# ------------------------------------------------------------------------------ kfp train step


def _step_pod(k8s, namespace):
    """A pod standing for the train step's own (never scheduled): the lease's owner."""
    from kubernetes import client

    return client.CoreV1Api(k8s.api_client()).create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train-op-pod"},
        "spec": {"schedulerName": "tfrs-unscheduled", "automountServiceAccountToken": False,
                 "containers": [{"name": "main", "image": "img"}]},
    })  # fmt: skip


@pytest.mark.k8s
def test_train_task_launches_a_trainjob_on_a_current_cluster(
    k8s, k8s_runner, runtime, tmp_path, monkeypatch
):
    from kubernetes import client

    ns = k8s_runner.namespace
    registry = str(tmp_path / "reg")
    shared = os.path.join(registry, "_runs", job_name("run-7"), "model")
    write_chief_outputs(shared, replicas=2, accuracy=0.8, per_second=10.0)
    pod = _step_pod(k8s, ns)
    leases = []
    batch = client.BatchV1Api(k8s.api_client())

    def seen(job):  # the lease, as the server holds it while the job runs
        leases.extend(j.to_dict() for j in batch.list_namespaced_job(ns).items)

    launch_as(monkeypatch, tmp_path, k8s_runner)
    with LocalOperator(k8s, ns, tmp_path / "nodes", program=lambda n: node_program(),
                       on_start=seen) as operator:  # fmt: skip
        metrics = train_step(
            f"{registry}/digits@1.0.0",
            tmp_path,
            model=Artifact("minio://b/run-7/model", path=str(tmp_path / "model")),
            workers=2,
            placement=GPU.to_json(),
            run_id="run-7",
            pod_name=pod.metadata.name,
            pod_uid=pod.metadata.uid,
            service_account="default-editor",
            trainer_image="registry.example.com/t/tfrecord-suite-gpu:v1",
        )["metrics"]
        (job,) = [j.object for j in operator.jobs.values()]
    (lease,) = leases
    assert job["kind"] == "TrainJob"
    # what the downward API told the step's pod: the job is owned by the step's lease, which
    # that pod owns, and its nodes run as the run's own account
    assert job["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": lease["metadata"]["name"],
         "uid": lease["metadata"]["uid"]}
    ]  # fmt: skip
    (owner,) = lease["metadata"]["owner_references"]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "Pod",
        pod.metadata.name,
        pod.metadata.uid,
    )
    assert lease["spec"]["parallelism"] == 0 and lease["spec"]["ttl_seconds_after_finished"] == 0
    node = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    node_pod = node["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert node_pod["serviceAccountName"] == "default-editor"
    assert job["spec"]["trainer"]["numNodes"] == 2
    assert job["spec"]["trainer"]["image"] == "registry.example.com/t/tfrecord-suite-gpu:v1"
    assert job["spec"]["trainer"]["args"][:6] == [
        "--dataset", f"{registry}/digits@1.0.0", "--model-dir", shared,
        "--strategy", "multi_worker",
    ]  # fmt: skip
    assert metrics.logged["test_accuracy"] == 0.8
    assert (tmp_path / "model" / "export" / "saved_model.pb").read_text() == "pb"
    # the lease went after the job, and the job with the step
    wait_for(lambda: not batch.list_namespaced_job(ns).items, what="the lease deleted")
    wait_for(lambda: _gone(k8s, TrainJob, ns, job["metadata"]["name"]), what="the TrainJob deleted")


@pytest.mark.k8s
@pytest.mark.slow
def test_train_step_with_two_nodes_trains_through_a_trainjob(
    k8s, k8s_runner, runtime, published_digits, tmp_path, monkeypatch, caplog
):
    """The kfp train step with workers=2 on a cluster serving TrainJobs: discovery -> TrainJob
    on the real server -> the local operator runs the real runtime's two nodes as processes with
    the runtime's environment and no TF_CONFIG -> the trainer derives TF_CONFIG, and
    MultiWorkerMirroredStrategy trains on two workers; their log tails come back through the
    API server."""
    import logging

    caplog.set_level(logging.INFO, logger="tfrecord_suite.launch.job")
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
            run_id="run-trainjob",
        )
        model, metrics = out["model"], out["metrics"]
        (job,) = operator.jobs.values()
        logs = operator.logs()
    assert job.kind == "TrainJob" and job.name == job_name("run-trainjob")
    assert model.metadata["strategy"] == "CollectiveAllReduceStrategy"  # = MultiWorkerMirrored
    assert model.metadata["replicas"] == 2
    # each node was given no TF_CONFIG; both joined one 2-replica cluster, so both derived it
    assert len(logs) == 2
    assert all("CollectiveAllReduceStrategy, 2 replicas" in text for text in logs.values())
    # and the launcher read each node's last lines through the API server (pods/log)
    tails = "\n".join(r.getMessage() for r in caplog.records if "log tail" in r.getMessage())
    for text in logs.values():
        assert text.strip().splitlines()[-1] in tails
    assert os.path.isfile(os.path.join(model_dir, "export", "saved_model.pb"))
    assert 0.0 <= metrics.logged["test_accuracy"] <= 1.0
    wait_for(lambda: _gone(k8s, TrainJob, k8s_runner.namespace, job.name), what="deleted")


def test_nodes_get_the_runs_secrets_and_no_api_token():
    """The Secrets the pipeline was compiled with reach every node, in the shape the steps get
    them (launch/credentials.py); no node mounts a service-account token (TFJob: in its pod;
    TrainJob: in the runtime). The real CRDs accept them: test_the_real_crd_accepts_*."""
    from tfrecord_suite.launch.credentials import Credentials
    from tfrecord_suite.launch.tfjob import render_tfjob

    gcs = Credentials("gcs-sa-key", "gcs-key", "regcred")
    trainjob = render_trainjob(config(credentials=gcs))
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
