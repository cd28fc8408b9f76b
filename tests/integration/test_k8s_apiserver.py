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
import uuid
from pathlib import Path

import pytest
import yaml

from tfrecord_suite.launch.data_service import objects
from tfrecord_suite.launch.job import JobConfig, job_name
from tfrecord_suite.launch.placement import Placement
from tfrecord_suite.launch.tfjob import TFJob
from tfrecord_suite.launch.trainjob import TrainJob

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "k8s"
UPSTREAM = REPO / "tests" / "fakes" / "schemas" / "kubeflow-pipelines"
PROFILE = "kubeflow-user-example-com"
#: The accounts pipeline runs use: standalone KFP's runner account, and a profile's.
RUN_ACCOUNTS = {"standalone": ("kubeflow", "pipeline-runner"), "multi-user": (PROFILE, "default-editor")}  # fmt: skip
#: Pod Security Standards: Kubeflow enforces baseline in profile namespaces; we hold our pods to
#: restricted, so the API server's warnings for it are failures here.
PSS_LABELS = {
    "pod-security.kubernetes.io/enforce": "baseline",
    "pod-security.kubernetes.io/warn": "restricted",
}
#: A common 4 vCPU / 16 GB node after the kubelet's reservations (GKE e2-standard-4: 3920m
#: CPU, about 12.4 GiB allocatable; other clouds leave a little more).
NODE_4X16 = {"cpu": "4", "memory": "16Gi"}
NODE_4X16_ALLOCATABLE = {"cpu": "3920m", "memory": "12700Mi"}


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
    Kubeflow's Kubernetes roles. One 4 vCPU / 16 GB node for the scheduler."""
    for ns in ("kubeflow", PROFILE):
        _ensure_namespace(k8s, ns)
    (runner_role,) = _docs(UPSTREAM / "2.17.0" / "pipeline-runner-role.yaml")
    runner_role["metadata"]["namespace"] = "kubeflow"
    cluster_roles = _docs(UPSTREAM / "kubeflow-manifests-v1.10.2" / "kubeflow-roles.yaml")
    cluster_roles += _docs(UPSTREAM / "2.17.0" / "view-edit-cluster-roles.yaml")
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
    with contextlib.suppress(Exception):
        k8s.add_node("node-4x16", **NODE_4X16, allocatable=NODE_4X16_ALLOCATABLE)
    return k8s


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
                   journal_claim=False, service_account="default", labels={})  # fmt: skip
    _apply_then_update(kubeflow, made, k8s_namespace)
