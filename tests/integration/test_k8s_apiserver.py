"""Against a real Kubernetes API server (tests/realparts: etcd, kube-apiserver with RBAC and the
default admission plugins, the controller manager and the scheduler, built from the pinned
modules): every manifest the suite ships or generates applies; the accounts runs use can make
every call the launcher makes and nothing outside the grant, as the real authorizer decides;
the garbage collector deletes what the launcher made when its pod goes; a cancelled launcher
deletes its job; the default requests fit a common 4 vCPU / 16 GB node as the real scheduler
sees it.

No kubelet or job operator runs: where the launcher waits on a pod or a job to move, the test
writes the status they would write (tests/realparts/standins.py), as the admin.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import yaml

from fakes.pod_security import kubeflow_profile_labels
from realparts import standins
from realparts.processes import WaitError, wait_for
from tfrecord_suite.launch import discovery
from tfrecord_suite.launch.data_service_k8s import DataServiceLauncher, objects
from tfrecord_suite.launch.job import JobConfig, JobLauncher, job_name
from tfrecord_suite.launch.kube import JobError
from tfrecord_suite.launch.placement import SMALL_NODE, Placement
from tfrecord_suite.launch.tfjob import TFJob
from tfrecord_suite.launch.trainjob import TrainJob

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "k8s"
UPSTREAM = REPO / "tests" / "fakes" / "schemas" / "kubeflow-pipelines"
PROFILE = "kubeflow-user-example-com"
#: The accounts pipeline runs use: standalone KFP's runner account, and a profile's.
RUN_ACCOUNTS = {"standalone": ("kubeflow", "pipeline-runner"), "multi-user": (PROFILE, "default-editor")}  # fmt: skip
#: Pod Security Standards: a profile's namespace as Kubeflow's profile controller labels it
#: (baseline enforced, fakes/pod_security.kubeflow_profile_labels); we hold our pods to
#: restricted, so the API server's warnings for it are failures here.
PSS_LABELS = {
    **{k: v for k, v in kubeflow_profile_labels().items() if k.startswith("pod-security.")},
    "pod-security.kubernetes.io/warn": "restricted",
}
#: A common 4 vCPU / 16 GB node, and what it leaves for pods after the kubelet's reservations
#: and the usual daemon sets (launch.placement.SMALL_NODE, which the defaults are chosen for).
NODE_4X16 = {"cpu": "4", "memory": "16Gi"}
NODE_4X16_ALLOCATABLE = SMALL_NODE


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _ensure_namespace(k8s, name: str) -> None:
    k8s.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": name, "labels": PSS_LABELS},
            }
        ]
    )


@pytest.fixture(scope="module")
def kubeflow(k8s):
    """What a Kubeflow install gives the namespaces runs use, from the upstream files
    (tests/fakes/schemas/kubeflow-pipelines/SOURCE.md): standalone KFP's pipeline-runner account
    and Role in kubeflow; a profile namespace whose default-editor the profile controller binds
    to kubeflow-edit, the ClusterRole that aggregates KFP's kubeflow-pipelines-edit and
    Kubeflow's Kubernetes roles. Three nodes of 4 vCPU / 16 GB for the scheduler."""
    for ns in ("kubeflow", PROFILE):
        _ensure_namespace(k8s, ns)
    (runner_role,) = _docs(UPSTREAM / "2.17.0" / "pipeline-runner-role.yaml")
    runner_role["metadata"]["namespace"] = "kubeflow"
    cluster_roles = _docs(UPSTREAM / "kubeflow-manifests-v1.10.2" / "kubeflow-roles.yaml")
    cluster_roles += _docs(UPSTREAM / "2.17.0" / "view-edit-cluster-roles.yaml")
    # an aggregated role's rules are the aggregation controller's once it filled them: applied
    # again (another module's fixture), they would conflict
    cluster_roles = [{k: v for k, v in d.items() if k != "rules" or not d.get("aggregationRule")}
                     for d in cluster_roles]  # fmt: skip
    accounts = [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": name, "namespace": ns}}
        for ns, name in RUN_ACCOUNTS.values()
    ]  # fmt: skip
    bindings = [
        # manifests/kustomize/base/pipeline/pipeline-runner-rolebinding.yaml
        _binding("kubeflow", "pipeline-runner-binding", "Role", "pipeline-runner",
                 "pipeline-runner"),
        # the profile controller's binding of a profile's default-editor
        _binding(PROFILE, "default-editor", "ClusterRole", "kubeflow-edit", "default-editor"),
    ]  # fmt: skip
    k8s.apply([runner_role, *cluster_roles, *accounts, *bindings])
    for node in ("node-4x16-a", "node-4x16-b", "node-4x16-c"):
        with contextlib.suppress(Exception):  # a node of an earlier module's fixture
            k8s.add_node(node, **NODE_4X16, allocatable=NODE_4X16_ALLOCATABLE)
    # the nodes' kubelets: what the scheduler places runs, and what is deleted goes
    with standins.Kubelet(k8s.api_client()):
        yield k8s


def _binding(ns, name, role_kind, role, account, account_ns=None):
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": account_ns or ns}],
    }


def _render(k8s, target: str) -> list[dict]:
    out = k8s.kubectl("kustomize", str(K8S / target)).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _warnings(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("Warning:")]


def _apply_then_update(k8s, docs: list[dict], namespace: str | None = None) -> None:
    """Server-side apply (strict field validation), then a server-side dry run of an update
    (every object relabelled): both must pass, with no warning (Pod Security included)."""
    extra = ("-n", namespace) if namespace else ()
    applied = k8s.apply(docs, *extra)
    assert _warnings(applied) == [], applied.stderr
    updated = json.loads(json.dumps(docs))
    for doc in updated:
        doc["metadata"].setdefault("labels", {})["tfrecord-suite/updated"] = "dry-run"
    result = k8s.apply(updated, *extra, "--dry-run=server")
    assert _warnings(result) == [], result.stderr
    assert result.stdout.count("serverside-applied") == len(docs), result.stdout


# ------------------------------------------------------------------------ the manifests apply


@pytest.mark.parametrize("target", ["overlays/standalone", "overlays/multi-user", "cluster"])
def test_every_kustomize_target_applies_and_updates(kubeflow, target):
    docs = _render(kubeflow, target)
    assert docs
    _apply_then_update(kubeflow, docs)


def test_the_data_service_manifests_apply_and_update(kubeflow, k8s_namespace):
    _ensure_namespace(kubeflow, k8s_namespace)
    _apply_then_update(kubeflow, _render(kubeflow, "data-service"), k8s_namespace)


def _config(namespace: str, **overrides) -> JobConfig:
    base = dict(
        name=job_name(f"run-{uuid.uuid4().hex}"),
        namespace=namespace,
        image="ghcr.io/tfrecord-suite/tfrecord-suite:0.1.0",
        trainer_args=["--dataset", "gs://b/reg/digits@1.0.0", "--model-dir", "gs://b/m"],
        workers=2,
        run_id=f"run-{uuid.uuid4().hex[:8]}",
        poll_seconds=0.2,
        timeout_seconds=120,
    )
    base.update(overrides)
    return JobConfig(**base)


@pytest.mark.parametrize("kind", [TrainJob, TFJob], ids=["trainjob", "tfjob"])
@pytest.mark.parametrize(
    "placement",
    [Placement(), Placement(accelerator_type="nvidia-l4", accelerator_count=1, shm_size="8Gi")],
    ids=["cpu", "gpu"],
)
def test_the_jobs_the_launcher_makes_apply_and_update(kubeflow, k8s_namespace, kind, placement):
    _ensure_namespace(kubeflow, k8s_namespace)
    job = kind.render(_config(k8s_namespace, placement=placement))
    _apply_then_update(kubeflow, [job], k8s_namespace)


def test_the_data_service_the_launcher_makes_applies_and_updates(kubeflow, k8s_namespace):
    _ensure_namespace(kubeflow, k8s_namespace)
    made = objects("tfrs-data-r1", 2, "ghcr.io/tfrecord-suite/tfrecord-suite:0.1.0",
                   service_account="default", labels={})  # fmt: skip
    _apply_then_update(kubeflow, made, k8s_namespace)


# ------------------------------------------------------------------ permissions, both ways


@pytest.fixture(scope="module")
def installed(kubeflow):
    """Our overlays applied over Kubeflow's accounts (the launcher Role bound to each)."""
    from kubernetes import client

    for target in ("overlays/standalone", "overlays/multi-user", "cluster"):
        kubeflow.apply(_render(kubeflow, target))
    # the API server refuses what a quota counts until the quota controller has computed its
    # usage ("status unknown for quota"): a cluster does that seconds after the apply
    core = client.CoreV1Api(kubeflow.api_client())

    def counted() -> bool:
        quotas = [q for ns, _ in RUN_ACCOUNTS.values()
                  for q in core.list_namespaced_resource_quota(ns).items]  # fmt: skip
        return bool(quotas) and all(
            q.status and set(q.spec.hard) <= set(q.status.used or {}) for q in quotas
        )

    wait_for(counted, timeout=120, what="the quota controller counts our quotas")
    return kubeflow


def _as_account(k8s, namespace: str, account: str):
    """An API client presenting ``account``'s own token (TokenRequest), as its pod would."""
    return k8s.api_client(token=k8s.token(namespace, account))


def _exists(k8s, kind, namespace: str, name: str) -> bool:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    custom = client.CustomObjectsApi(k8s.api_client())
    try:
        custom.get_namespaced_custom_object(kind.group, kind.version, namespace, kind.plural, name)
        return True
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise


def _wait_gone(k8s, kind, namespace: str, name: str) -> None:
    """Deleted with background propagation, a job goes at once (the collector its pods after)."""
    wait_for(lambda: not _exists(k8s, kind, namespace, name), what=f"{kind.kind} {name} deleted")


def _operate(k8s, kind, namespace, name, state, failing_node=None) -> threading.Thread:
    """In the background, once the launcher created the job: play its operator to ``state``."""

    def run():
        wait_for(lambda: _exists(k8s, kind, namespace, name), what=f"{kind.kind} {name}")
        standins.play_operator(
            k8s.api_client(), kind, namespace, name, state, "done", failing_node=failing_node
        )

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("install", list(RUN_ACCOUNTS))
@pytest.mark.parametrize("kind", [TrainJob, TFJob], ids=["trainjob", "tfjob"])
def test_the_run_account_makes_every_call_the_launcher_makes(installed, install, kind):
    """Discovery, create, poll, list the nodes' pods, read their logs, delete: as the run's
    own token, each call authorized by the real RBAC authorizer, for a job that succeeds and one
    whose node fails."""
    ns, account = RUN_ACCOUNTS[install]
    api = _as_account(installed, ns, account)
    assert discovery.choose_launchers("auto", api) == [TrainJob, TFJob]
    ok = _config(ns, service_account=account)
    operator = _operate(installed, kind, ns, ok.name, "Succeeded")
    result = JobLauncher(kind, api).run(ok)
    operator.join()
    assert result["state"] == "Succeeded" and len(result["replicas"]) == 2
    for node in result["replicas"].values():
        # no kubelet serves logs here (the API server answers with nothing), but never 403
        assert "403" not in node["log"], node
    _wait_gone(installed, kind, ns, ok.name)

    bad = _config(ns, service_account=account)
    node = "node-1" if kind is TrainJob else "worker-0"
    operator = _operate(installed, kind, ns, bad.name, "Failed", failing_node=node)
    with pytest.raises(JobError, match=rf"--- {node} .*exit code 1\)"):
        JobLauncher(kind, api).run(bad)
    operator.join()
    _wait_gone(installed, kind, ns, bad.name)


@pytest.mark.parametrize("install", list(RUN_ACCOUNTS))
def test_the_run_account_runs_its_data_service(installed, install):
    """The tf.data service of --input-service cluster:N: create (and, retried, adopt) the
    Service and StatefulSets, wait until the controller's pods are ready, delete them."""
    from kubernetes import client

    ns, account = RUN_ACCOUNTS[install]
    api = _as_account(installed, ns, account)
    name = f"tfrs-data-{uuid.uuid4().hex[:6]}"
    service = DataServiceLauncher(api, sleep=lambda s: time.sleep(0.2), timeout_seconds=120)
    first = service.running(name, 2, "img:1", run_id="r1", namespace=ns, service_account=account)
    with first as address:
        assert address.startswith(f"grpc://{name}-dispatcher-0.{name}:")
        retried = service.running(name, 2, "img:1", run_id="r1", namespace=ns,
                                  service_account=account)  # fmt: skip
        with retried:
            pass
    apps = client.AppsV1Api(installed.api_client())
    wait_for(
        lambda: not [s for s in apps.list_namespaced_stateful_set(ns).items
                     if s.metadata.name.startswith(name)],
        what="the data service's StatefulSets deleted",
    )  # fmt: skip


def _forbidden(call, *args, **kwargs) -> bool:
    from kubernetes.client.exceptions import ApiException

    try:
        call(*args, **kwargs)
    except ApiException as exc:
        return exc.status == 403
    return False


@pytest.fixture
def launcher_only(installed, k8s_namespace):
    """``(namespace, account)``: a fresh namespace whose account holds only our launcher Role,
    bound to it as k8s/base binds it to a run's account."""
    _ensure_namespace(installed, k8s_namespace)
    rendered = _render(installed, "overlays/standalone")
    (role,) = [d for d in rendered if d["kind"] == "Role" and "launcher" in d["metadata"]["name"]]
    role["metadata"]["namespace"] = k8s_namespace
    installed.apply([
        role,
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": "only-launcher", "namespace": k8s_namespace}},
        _binding(k8s_namespace, "only-launcher", "Role", role["metadata"]["name"],
                 "only-launcher"),
    ])  # fmt: skip
    return k8s_namespace, "only-launcher", role


def _granted(role: dict) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_launcher_role_grants_exactly_what_the_launcher_calls(installed, launcher_only):
    """Holding only our Role, the launcher does everything it does in a run (discovery; a
    TrainJob and a TFJob that succeed and fail; a tf.data service made, adopted by a retry,
    deleted), every call allowed; and the API server's audit log shows it used every verb the
    Role grants: least privilege that is also sufficient."""
    from tfrecord_suite.launch.lease import Lease

    ns, account, role = launcher_only
    api = _as_account(installed, ns, account)
    assert discovery.choose_launchers("auto", api) == [TrainJob, TFJob]
    lease = Lease(api, "tfrs-train-x-lease", "img", namespace=ns, run_id="r", seconds=60,
                  renew_seconds=0.5)  # fmt: skip
    with lease:
        # a retried step adopts the lease of the run's earlier attempt
        Lease(api, "tfrs-train-x-lease", "img", namespace=ns, run_id="r").acquire()
        for kind in (TrainJob, TFJob):
            for state, node in (("Succeeded", None), ("Failed", "node-1" if kind is TrainJob else "worker-0")):  # fmt: skip
                config = _config(ns, owner=lease.owner_reference())
                operator = _operate(installed, kind, ns, config.name, state, failing_node=node)
                with contextlib.suppress(JobError):
                    JobLauncher(kind, api).run(config)
                operator.join()
        service = DataServiceLauncher(api, sleep=lambda s: time.sleep(0.2), timeout_seconds=120)
        owner = lease.owner_reference()
        with (
            service.running("tfrs-data-x", 1, "img:1", run_id="r", namespace=ns, owner=owner),
            # a retried step adopts them
            service.running("tfrs-data-x", 1, "img:1", run_id="r", namespace=ns, owner=owner),
        ):
            pass
        assert lease.renewals >= 1
    used = set()
    for event in installed.requests_by(f"system:serviceaccount:{ns}:{account}"):
        ref = event.get("objectRef")
        if not ref:
            continue  # discovery: a non-resource URL every authenticated account may read
        assert event["responseStatus"]["code"] < 400 or event["responseStatus"]["code"] in (
            404,
            409,
        ), event
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        used.add((ref.get("apiGroup", ""), resource, event["verb"]))
    granted = _granted(role)
    assert used <= granted, f"called without a grant: {used - granted}"
    assert granted <= used, f"granted but never called: {granted - used}"


def test_calls_outside_the_launcher_grant_are_forbidden(installed, launcher_only):
    """An account holding only our launcher Role (bound as k8s/base binds it) may not read
    secrets, exec into pods, change jobs in place, or touch another namespace."""
    from kubernetes import client

    k8s = installed
    k8s_namespace, account, _ = launcher_only
    admin = client.CoreV1Api(k8s.api_client())
    admin.create_namespaced_secret(
        k8s_namespace,
        client.V1Secret(metadata=client.V1ObjectMeta(name="s"), string_data={"k": "v"}),
    )
    api = _as_account(k8s, k8s_namespace, account)
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    custom = client.CustomObjectsApi(api)
    job = TrainJob.render(_config(k8s_namespace))
    custom.create_namespaced_custom_object(*_gv(TrainJob), k8s_namespace, "trainjobs", job)
    assert _forbidden(core.read_namespaced_secret, "s", k8s_namespace)
    assert _forbidden(core.list_namespaced_secret, k8s_namespace)
    assert _forbidden(core.list_namespaced_config_map, k8s_namespace)
    assert _forbidden(
        custom.patch_namespaced_custom_object, *_gv(TrainJob), k8s_namespace, "trainjobs",
        job["metadata"]["name"], {"metadata": {"labels": {"x": "y"}}},
    )  # fmt: skip
    assert _forbidden(
        custom.list_namespaced_custom_object, *_gv(TrainJob), k8s_namespace, "trainjobs"
    )
    assert _forbidden(core.create_namespaced_pod, k8s_namespace, standins.node_pod(
        {**job, "metadata": {**job["metadata"], "uid": "x"}}, "p", "node", 0))  # fmt: skip
    assert _forbidden(core.connect_post_namespaced_pod_exec, "p", k8s_namespace, command=["sh"])
    for other in ("kube-system", "kubeflow", PROFILE):
        assert _forbidden(core.list_namespaced_pod, other)
        assert _forbidden(
            custom.create_namespaced_custom_object, *_gv(TrainJob), other, "trainjobs",
            {**job, "metadata": {**job["metadata"], "namespace": other}},
        )  # fmt: skip
        assert _forbidden(apps.delete_namespaced_stateful_set, "x", other)
    # and the run accounts of both installs cannot reach beyond their own namespace
    for ns, account in RUN_ACCOUNTS.values():
        run = client.CoreV1Api(_as_account(k8s, ns, account))
        assert _forbidden(run.list_namespaced_secret, "kube-system")
        assert _forbidden(run.list_namespaced_pod, k8s_namespace)


def _gv(kind) -> tuple[str, str]:
    return kind.group, kind.version


# ------------------------------------------------------------- ownership, GC and cancellation


def _owner_pod(k8s, namespace: str) -> dict[str, str]:
    """A pod standing for the train step's own pod (never scheduled); its ownerReference as
    the step computes it (podinfo.PodInfo.owner_reference)."""
    from kubernetes import client

    from tfrecord_suite.podinfo import PodInfo

    core = client.CoreV1Api(k8s.api_client())
    pod = core.create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"step-{uuid.uuid4().hex[:6]}"},
        "spec": {"schedulerName": "tfrs-unscheduled", "automountServiceAccountToken": False,
                 "containers": [{"name": "main", "image": "img"}]},
    })  # fmt: skip
    info = PodInfo(pod_name=pod.metadata.name, pod_uid=pod.metadata.uid)
    return info.owner_reference()


@pytest.mark.parametrize("kind", [TrainJob, TFJob], ids=["trainjob", "tfjob"])
def test_deleting_the_step_pod_makes_the_garbage_collector_delete_its_job(installed, kind):
    """The launcher dies with its pod (kill -9, node lost): the job it created names the pod
    as its owner, so the garbage collector deletes the job, and the job's pods with it."""
    from kubernetes import client

    ns, account = RUN_ACCOUNTS["standalone"]
    owner = _owner_pod(installed, ns)
    config = _config(ns, service_account=account, owner=owner)
    launcher = JobLauncher(kind, _as_account(installed, ns, account))
    launcher._create_or_adopt(config)  # what run() does first; the launcher then "dies"
    pods = standins.play_operator(installed.api_client(), kind, ns, config.name, "Running")
    core = client.CoreV1Api(installed.api_client())
    core.delete_namespaced_pod(owner["name"], ns)
    _wait_gone(installed, kind, ns, config.name)
    remaining = {p.metadata.name for p in core.list_namespaced_pod(ns).items}
    wait_for(lambda: not set(pods) & {p.metadata.name for p in core.list_namespaced_pod(ns).items},
              what="the job's pods collected")  # fmt: skip
    assert owner["name"] not in remaining


def test_deleting_the_step_pod_makes_the_garbage_collector_delete_its_data_service(installed):
    from kubernetes import client

    ns, account = RUN_ACCOUNTS["multi-user"]
    owner = _owner_pod(installed, ns)
    api = _as_account(installed, ns, account)
    name = f"tfrs-data-{uuid.uuid4().hex[:6]}"
    made = objects(name, 1, "img:1", service_account=account,
                   labels={}, owner=owner)  # fmt: skip
    service = DataServiceLauncher(api)
    for body in made:
        service._create_or_adopt(ns, body)
    client.CoreV1Api(installed.api_client()).delete_namespaced_pod(owner["name"], ns)
    apps = client.AppsV1Api(installed.api_client())
    core = client.CoreV1Api(installed.api_client())
    wait_for(
        lambda: not [s for s in apps.list_namespaced_stateful_set(ns).items
                     if s.metadata.name.startswith(name)]
        and not [s for s in core.list_namespaced_service(ns).items if s.metadata.name == name],
        what="the data service collected",
    )  # fmt: skip


LAUNCH = """
import json, logging, sys
logging.basicConfig(level=logging.INFO)
from tfrecord_suite.launch.job import JobConfig, JobLauncher, kubernetes_client
from tfrecord_suite.launch.kube import JobCancelled
from tfrecord_suite.launch.{module} import {kind}
config = JobConfig(**json.loads(sys.argv[1]))
try:
    JobLauncher({kind}, kubernetes_client()).run(config)
except JobCancelled as exc:
    print("cancelled:", exc)
    sys.exit(143)
"""


@pytest.mark.parametrize("kind", [TrainJob, TFJob], ids=["trainjob", "tfjob"])
def test_a_cancelled_launcher_deletes_its_job(installed, kind, tmp_path):
    """kfp cancels a step with SIGTERM: the launcher, run as the run's account from a
    kubeconfig of its token, deletes the job it created before it exits."""
    ns, account = RUN_ACCOUNTS["standalone"]
    kubeconfig = installed.kubeconfig_for_token(
        installed.token(ns, account), tmp_path / "kubeconfig", namespace=ns
    )
    config = _config(ns, service_account=account, poll_seconds=0.5)
    module = "trainjob" if kind is TrainJob else "tfjob"
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCH.format(module=module, kind=kind.kind),
         json.dumps({k: v for k, v in vars(config).items() if k not in ("placement", "credentials")})],
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:

        def created() -> bool:
            if proc.poll() is not None:
                raise AssertionError(
                    f"the launcher exited {proc.returncode}:\n{proc.stdout.read()}"
                )
            return _exists(installed, kind, ns, config.name)

        wait_for(created, what="job created")
        standins.play_operator(installed.api_client(), kind, ns, config.name, "Running")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, out
    assert "cancelled" in out
    _wait_gone(installed, kind, ns, config.name)


# --------------------------------------------------------- requests that fit a common node


def _schedule(k8s, namespace: str, name: str, containers: list[dict], timeout=60.0) -> str:
    """Create a pod with these containers' requests and let the real scheduler place it on the
    cluster's 4 vCPU / 16 GB nodes: '' when bound, else the scheduler's reason. The pod is
    removed after (grace 0: no kubelet to wait for)."""
    from kubernetes import client

    core = client.CoreV1Api(k8s.api_client())
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [
                {"name": c.get("name", f"c{i}"), "image": "img",
                 "resources": c.get("resources") or {}}
                for i, c in enumerate(containers)
            ],
        },
    }  # fmt: skip
    core.create_namespaced_pod(namespace, pod)

    def placed_or_refused() -> tuple[str] | None:
        """``("",)`` once the pod is bound, ``(why,)`` once it is refused; None until then."""
        got = core.read_namespaced_pod(name, namespace)
        if got.spec.node_name:
            return ("",)
        reason = ""
        for condition in got.status.conditions or []:
            if condition.type == "PodScheduled" and condition.reason == "Unschedulable":
                reason = condition.message
        return (reason,) if reason else None

    try:
        (reason,) = wait_for(placed_or_refused, timeout, f"pod {name} placed", interval=0.2)
        return reason
    except WaitError:
        return f"not scheduled within {timeout:.0f} s"
    finally:
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)


def _compiled_step_requests(pipeline: str) -> dict[str, dict]:
    doc = next(yaml.safe_load_all((REPO / "pipelines" / f"{pipeline}.yaml").read_text()))
    out = {}
    for name, executor in doc["deploymentSpec"]["executors"].items():
        res = executor.get("container", {}).get("resources", {})
        requests = {k: res[f"resource{k.title()}Request"] for k in ("cpu", "memory")
                    if f"resource{k.title()}Request" in res}  # fmt: skip
        limits = {k: res[f"resource{k.title()}Limit"] for k in ("cpu", "memory")
                  if f"resource{k.title()}Limit" in res}  # fmt: skip
        out[name.removeprefix("exec-")] = {"requests": requests, "limits": limits}
    return out


def test_every_pod_of_a_default_run_fits_a_4_vcpu_16_gb_node(kubeflow, k8s_namespace):
    """Each pod the suite makes by default (each step of the compiled pipelines, each node of a
    CPU TrainJob or TFJob, each pod of the tf.data service), as the real scheduler places it on
    a node of 4 vCPU / 16 GB after the kubelet's reservations."""
    _ensure_namespace(kubeflow, k8s_namespace)
    pods: dict[str, list[dict]] = {}
    for pipeline in ("retraining", "data", "training"):
        for step, resources in _compiled_step_requests(pipeline).items():
            pods[f"{pipeline}-{step}"] = [{"name": "main", "resources": resources}]
    config = _config(k8s_namespace)
    trainjob = TrainJob.render(config)
    pods["trainjob-node"] = [{"name": "node", "resources": trainjob["spec"]["trainer"]["resourcesPerNode"]}]  # fmt: skip
    for rtype, spec in TFJob.render(config)["spec"]["tfReplicaSpecs"].items():
        pods[f"tfjob-{rtype.lower()}"] = spec["template"]["spec"]["containers"]
    for sts in [o for o in objects("tfrs-data-fit", 2, "img") if o["kind"] == "StatefulSet"]:
        pods[sts["metadata"]["name"].removeprefix("tfrs-")] = sts["spec"]["template"]["spec"]["containers"]  # fmt: skip
    pending = {}
    for name, containers in sorted(pods.items()):
        reason = _schedule(kubeflow, k8s_namespace, name.lower().replace("_", "-"), containers)
        if reason:
            pending[name] = (reason, [c.get("resources") for c in containers])
    assert pending == {}, "\n".join(f"{n}: {r} {res}" for n, (r, res) in pending.items())


LEASED = """
import json, sys
from tfrecord_suite.launch.data_service_k8s import DataServiceLauncher
from tfrecord_suite.launch.job import JobConfig, JobLauncher, kubernetes_client
from tfrecord_suite.launch.lease import Lease
from tfrecord_suite.launch.trainjob import TrainJob

name, ns, owner = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
api = kubernetes_client()
with Lease(api, name + "-lease", "img", namespace=ns, run_id=name, owner=owner,
           seconds=8, renew_seconds=2) as lease:
    with DataServiceLauncher(api, timeout_seconds=120).running(
            name + "-data", 1, "img", run_id=name, owner=lease.owner_reference(), namespace=ns):
        print("running", flush=True)
        JobLauncher(TrainJob, api).run(JobConfig(
            name=name, image="img", trainer_args=[], workers=2, namespace=ns, run_id=name,
            owner=lease.owner_reference(), poll_seconds=0.5))
"""


def test_a_killed_launcher_leaves_nothing_past_its_lease(installed, tmp_path):
    """The step's process is killed (SIGKILL: no cleanup) while its pod object stays, as when
    Kubeflow terminates a run: the real Job controller fails the lease at its deadline once the
    renewals stop, the TTL controller deletes it, and the garbage collector deletes the TrainJob
    and the tf.data service it owns. While renewed, the lease outlives its first deadline."""
    from kubernetes import client

    ns, account = RUN_ACCOUNTS["standalone"]
    owner = _owner_pod(installed, ns)
    kubeconfig = installed.kubeconfig_for_token(
        installed.token(ns, account), tmp_path / "kubeconfig", namespace=ns
    )
    name = job_name(f"lease-{uuid.uuid4().hex}")
    apps = client.AppsV1Api(installed.api_client())
    core = client.CoreV1Api(installed.api_client())
    batch = client.BatchV1Api(installed.api_client())

    def alive() -> set[str]:
        found = {j.metadata.name for j in batch.list_namespaced_job(ns).items}
        found |= {s.metadata.name for s in apps.list_namespaced_stateful_set(ns).items}
        found |= {s.metadata.name for s in core.list_namespaced_service(ns).items}
        if _exists(installed, TrainJob, ns, name):
            found.add(name)
        return {f for f in found if f.startswith(name)}

    proc = subprocess.Popen(
        [sys.executable, "-c", LEASED, name, ns, json.dumps(owner)],
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_for(lambda: name in alive() or proc.poll() is not None, timeout=120,
                  what="the TrainJob created")  # fmt: skip
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(14)  # past the lease's first deadline (8 s): renewed, all still there
        assert alive() == {name, f"{name}-lease", f"{name}-data",
                           f"{name}-data-dispatcher", f"{name}-data-worker"}  # fmt: skip
        proc.kill()
        proc.wait()
        killed = time.monotonic()
        wait_for(lambda: not alive(), timeout=90, what=f"nothing left of {name}")
        gone_after = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
    assert gone_after < 60
    # the step's pod is still there: it was the lease that ended them
    assert owner["name"] in {p.metadata.name for p in core.list_namespaced_pod(ns).items}


# ------------------------------------------------- the priority class, bounded by quota


@pytest.fixture(scope="module")
def quota_limited_plane(tmp_path_factory):
    """A second control plane whose API server runs with k8s/priority/admission-config.yaml,
    as the opt-in asks an administrator to start it."""
    from realparts import controlplane, parts

    plane = controlplane.start(
        tmp_path_factory.mktemp("k8s-priority"),
        parts.built("kubernetes"),
        parts.built("etcd"),
        extra_args={"kube-apiserver": [
            f"--admission-control-config-file={K8S / 'priority' / 'admission-config.yaml'}"]},
    )  # fmt: skip
    try:
        yield plane
    finally:
        plane.stop()


def test_the_priority_class_is_admitted_only_where_a_quota_scoped_to_it_allows(
    quota_limited_plane,
):
    """With the opt-in's admission configuration, a pod at the suite's priority class is
    refused in a namespace without k8s/base's quota scoped to the class, admitted in one with
    it, and bounded by it; pods without the class are not affected."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    plane = quota_limited_plane
    (priority,) = [d for d in _render(plane, "cluster") if d["kind"] == "PriorityClass"]
    plane.apply([priority])
    quota = [d for d in _docs(K8S / "base" / "resourcequota.yaml")
             if d["metadata"]["name"] == "tfrecord-suite-priority"]  # fmt: skip
    for ns in ("no-quota", "with-quota"):
        _ensure_namespace(plane, ns)
    plane.apply(quota, "-n", "with-quota")
    core = client.CoreV1Api(plane.api_client())

    def pod(name: str, priority_class: str | None) -> dict:
        spec = {"schedulerName": "tfrs-unscheduled", "automountServiceAccountToken": False,
                "containers": [{"name": "c", "image": "img"}]}  # fmt: skip
        if priority_class:
            spec["priorityClassName"] = priority_class
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}

    def create(ns: str, body: dict) -> str:
        try:
            core.create_namespaced_pod(ns, body)
            return ""
        except ApiException as exc:
            return f"{exc.status} {json.loads(exc.body)['message']}"

    name = priority["metadata"]["name"]
    refused = create("no-quota", pod("p", name))
    # the API server answers this refusal with 500 (an InternalError), not 403
    assert refused.startswith("500 insufficient quota to match these scopes"), refused
    assert create("no-quota", pod("plain", None)) == ""

    def counted() -> bool:
        q = core.read_namespaced_resource_quota("tfrecord-suite-priority", "with-quota")
        return bool(q.status and q.status.used is not None and "pods" in q.status.used)

    wait_for(counted, timeout=120, what="the quota controller counts the scoped quota")
    limit = int(quota[0]["spec"]["hard"]["pods"])
    for i in range(limit):
        assert create("with-quota", pod(f"p{i}", name)) == ""
    over = create("with-quota", pod("one-too-many", name))
    assert over.startswith("403") and "exceeded quota: tfrecord-suite-priority" in over
