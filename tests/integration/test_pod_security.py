"""Every pod the suite renders or ships passes the Pod Security Standards' ``restricted``
profile: the k8s/ targets (and every opt-in component on top of them), and what the launcher
creates (a TrainJob's nodes on our runtime, a TFJob's replicas, the run's tf.data service, the
step's lease). Checked against the rules restated once in tests/fakes/pod_security.py, and, on
the real API server (marker ``k8s``), by the real PodSecurity admission of a namespace that
enforces ``restricted``: every template created as a pod (server-side dry run) is admitted."""

from __future__ import annotations

import copy

import pytest

from fakes import manifests
from fakes.pod_security import kubeflow_profile_labels, violations

#: renders k8s/ with the kubectl the suite builds (conftest's ``kubectl``: fails under CI without)
needs_kubectl = pytest.mark.usefixtures("kubectl")


def _runtime() -> dict:
    (runtime,) = manifests.load("trainer-runtime/clustertrainingruntime.yaml")
    return runtime


def _launched_templates() -> dict[str, dict]:
    return manifests.pod_templates(manifests.launched_objects(), runtime=_runtime())


@pytest.fixture(scope="module")
def shipped_templates(tmp_path_factory) -> dict[str, dict]:
    """``"target: Kind/name" -> pod template`` of every k8s/ target and of them all with every
    opt-in component."""
    out = {}
    for target in manifests.kustomizations():
        for key, template in manifests.pod_templates(manifests.render(target)).items():
            out[f"{target}: {key}"] = template
    rendered = manifests.render_with_every_component(str(tmp_path_factory.mktemp("k8s")))
    for key, template in manifests.pod_templates(rendered).items():
        out[f"every component: {key}"] = template
    return out


def test_what_the_docs_and_the_cluster_say_a_profile_enforces_is_what_kubeflow_sets():
    """Kubeflow 1.10.2's profile controller, as its default install deploys it, enforces Pod
    Security ``baseline`` on a profile's namespace and warns at nothing; docs/deploy.md says
    that level, and the one-node cluster's profile takes its labels from the same vendored
    files (no Pod Security label of its own)."""
    import re
    from pathlib import Path

    labels = kubeflow_profile_labels()
    assert {k: v for k, v in labels.items() if k.startswith("pod-security.")} == {
        "pod-security.kubernetes.io/enforce": "baseline"
    }
    assert labels["pipelines.kubeflow.org/enabled"] == "true"  # KFP's profile controller's
    repo = Path(__file__).resolve().parents[2]
    said = re.findall(
        r"Kubeflow 1\.10 profile enforces `(\w+)`", (repo / "docs/deploy.md").read_text()
    )
    assert said == [labels["pod-security.kubernetes.io/enforce"]]
    profile = (repo / "tests/cluster/kfp/profile.yaml").read_text()
    assert "labels: ${LABELS}" in profile and "pod-security" not in profile.split("---")[0]


def test_every_pod_the_launcher_creates_is_restricted():
    templates = _launched_templates()
    assert {k.split("/")[0] + "/" + k.split("/")[-1] for k in templates} >= {
        "TrainJob/tfrs-train-gcs-key", "TFJob/Chief", "TFJob/Worker",
        "StatefulSet/tfrs-train-x-data-dispatcher", "StatefulSet/tfrs-train-x-data-worker",
        "Job/tfrs-train-x-lease",
    }  # fmt: skip
    assert {key: violations(t) for key, t in templates.items() if violations(t)} == {}


@needs_kubectl
def test_every_pod_k8s_ships_is_restricted(shipped_templates):
    kinds = {key.split(": ")[1].rsplit("/", 1)[0].split("/")[0] for key in shipped_templates}
    assert kinds >= {"CronJob", "StatefulSet", "ClusterTrainingRuntime"}
    assert {k: violations(t) for k, t in shipped_templates.items() if violations(t)} == {}


#: ``name -> (change to a restricted pod template, the control it breaks)``: each rule the
#: check restates can fail.
BROKEN = {
    "host network": (lambda s: s.update(hostNetwork=True), "host namespaces"),
    "hostPath": (lambda s: s["volumes"].append({"name": "h", "hostPath": {"path": "/"}}), "hostPath"),
    "privileged": (lambda s: s["containers"][0]["securityContext"].update(privileged=True), "privileged"),
    "host port": (lambda s: s["containers"][0].update(ports=[{"containerPort": 1, "hostPort": 1}]), "host ports"),
    "escalation": (lambda s: s["containers"][0]["securityContext"].pop("allowPrivilegeEscalation"), "privilege escalation"),
    "root": (lambda s: s["securityContext"].pop("runAsNonRoot"), "running as non-root"),
    "uid 0": (lambda s: s["containers"][0]["securityContext"].update(runAsUser=0), "non-root user"),
    "no seccomp": (lambda s: s["securityContext"].pop("seccompProfile"), "seccomp"),
    "unconfined": (lambda s: s["securityContext"].update(seccompProfile={"type": "Unconfined"}), "seccomp"),
    "capabilities kept": (lambda s: s["containers"][0]["securityContext"].pop("capabilities"), "must drop ALL"),
    "capability added": (lambda s: s["containers"][0]["securityContext"]["capabilities"].update(add=["NET_ADMIN"]), "adds"),
    "unsafe sysctl": (lambda s: s["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}]), "sysctls"),
    "selinux": (lambda s: s["securityContext"].update(seLinuxOptions={"type": "spc_t"}), "SELinux"),
    "proc mount": (lambda s: s["containers"][0]["securityContext"].update(procMount="Unmasked"), "/proc"),
    "volume type": (lambda s: s["volumes"].append({"name": "n", "nfs": {"server": "x", "path": "/"}}), "volume types"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BROKEN))
def test_the_check_refuses_each_control_broken(case):
    """A restricted template (the data service's worker) changed in one way is refused for
    that control."""
    change, control = BROKEN[case]
    template = copy.deepcopy(_launched_templates()["StatefulSet/tfrs-train-x-data-worker"])
    assert violations(template) == []
    change(template["spec"])
    found = violations(template)
    assert found and all(control in v for v in found), found


def test_a_tfjob_without_capabilities_or_seccomp_is_refused():
    """The TFJob as the launcher rendered it before (no capabilities dropped, no seccomp
    profile) would not have passed: the defect the check is here for."""
    template = copy.deepcopy(_launched_templates()["TFJob/tfrs-train-gcs-key/Chief"])
    del template["spec"]["securityContext"]
    template["spec"]["containers"][0]["securityContext"] = {
        "allowPrivilegeEscalation": False, "runAsNonRoot": True}  # fmt: skip
    found = violations(template)
    assert any("seccomp" in v for v in found) and any("drop ALL" in v for v in found), found


# ---------------------------------------------------------------- the real admission (marker k8s)


def _as_pod(name: str, template: dict) -> dict:
    """The template as a pod of its own, less the objects it names that this namespace lacks
    (its service account and priority class: the ServiceAccount and Priority admission would
    refuse it for them; neither is a Pod Security control)."""
    spec = copy.deepcopy(template["spec"])
    spec.pop("serviceAccountName", None)
    spec.pop("priorityClassName", None)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": (template.get("metadata") or {}).get("labels", {})},
        "spec": {"restartPolicy": "Never", **spec},
    }


@pytest.mark.k8s
@needs_kubectl
def test_the_real_admission_admits_every_pod_where_restricted_is_enforced(k8s, shipped_templates):
    """A namespace labelled ``pod-security.kubernetes.io/enforce: restricted``: each template,
    as a pod, created with a server-side dry run, is admitted by the API server's PodSecurity
    plugin (k8s.io/pod-security-admission) without a warning; a pod that breaks a control is
    refused there, so the admission is on."""
    namespace = "tfrs-restricted"
    k8s.apply([{"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": namespace, "labels": {
                    "pod-security.kubernetes.io/enforce": "restricted",
                    "pod-security.kubernetes.io/warn": "restricted"}}}])  # fmt: skip
    templates = {**shipped_templates, **_launched_templates()}
    pods = [_as_pod(f"pod-{i}", t) for i, t in enumerate(templates.values())]
    result = k8s.apply(pods, "-n", namespace, "--dry-run=server")
    assert [line for line in result.stderr.splitlines() if line.startswith("Warning:")] == []
    broken = _as_pod("broken", templates["StatefulSet/tfrs-train-x-data-worker"])
    broken["spec"]["hostNetwork"] = True
    with pytest.raises(Exception, match="violates PodSecurity"):
        k8s.apply([broken], "-n", namespace, "--dry-run=server")
