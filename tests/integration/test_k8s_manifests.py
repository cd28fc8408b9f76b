"""The Kubernetes manifests under k8s/: valid objects, the right namespace and account for each
kind of Kubeflow install, least privilege, images from one place, a CronJob that can start.

What a real cluster does with them beyond this (the CronJob's pod run for real in podman,
tests/e2e/test_images_real.py; the launcher's calls against the Role, test_trainjob.py) is
tested where it runs."""

import glob
import os
import re

import pytest
import yaml

from fakes import manifests
from tfrecord_suite import images

K8S_VERSION = "1.30.0"
OVERLAYS = {"standalone": ("kubeflow", "pipeline-runner"), "multi-user": (None, "default-editor")}


def _validate(doc):
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    if doc["apiVersion"].startswith(("kubeflow.org", "trainer.kubeflow.org")):
        return  # CRDs: validated against their own schemas in test_trainjob.py
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def _all_files():
    return sorted(glob.glob(os.path.join(manifests.K8S, "**", "*.yaml"), recursive=True))


def test_every_object_is_valid_kubernetes():
    kinds = set()
    for path in _all_files():
        rel = os.path.relpath(path, manifests.K8S)
        for doc in manifests.load(rel):
            if isinstance(doc, list) or doc.get("kind") in ("Kustomization", "Component"):
                continue  # a JSON patch, or kustomize's own files
            kinds.add(doc["kind"])
            _validate(doc)
    assert {"Role", "RoleBinding", "ServiceAccount", "CronJob", "ResourceQuota"} <= kinds
    assert {"PriorityClass", "ClusterTrainingRuntime"} <= kinds


def test_rbac_is_least_privilege_and_namespaced():
    for path in _all_files():
        for doc in manifests.load(os.path.relpath(path, manifests.K8S)):
            if not isinstance(doc, dict):
                continue
            assert doc.get("kind") not in ("ClusterRole", "ClusterRoleBinding"), path
            for rule in doc.get("rules", []):
                for key in ("apiGroups", "resources", "verbs"):
                    assert "*" not in rule[key], f"wildcard in {key}: {rule}"
                assert not set(rule["verbs"]) & {"update", "patch", "escalate", "bind"}


def test_no_secrets_in_manifests_or_compiled_pipelines():
    text = "".join(open(p).read() for p in _all_files())
    root = os.path.join(manifests.K8S, "..")
    for path in glob.glob(os.path.join(root, "pipelines", "*.yaml")):
        text += open(path).read()
    for marker in (
        "BEGIN PRIVATE KEY",
        "private_key",
        "AKIA",
        "password:",
        "GOOGLE_APPLICATION_CREDENTIALS",
    ):
        assert marker not in text


def test_the_cronjob_can_start_in_an_image_without_entrypoint():
    """Kubernetes runs `command` (else the image's ENTRYPOINT) with `args`; the image has no
    ENTRYPOINT, so args alone would exec `retrain` itself (issue #29)."""
    for overlay in OVERLAYS:
        pod = manifests.pod_spec(manifests.cronjob(overlay))
        (container,) = pod["containers"]
        assert container["command"] == ["tfrecord-suite"]
        assert container["args"][0] == "retrain"
    dockerfile = open(os.path.join(manifests.K8S, "..", images.IMAGE_FILES["component"][1])).read()
    assert not re.search(r"^ENTRYPOINT", dockerfile, re.M)


def test_cronjob_pod_is_locked_down_and_out_of_the_mesh():
    job = manifests.cronjob("standalone")
    template = job["spec"]["jobTemplate"]["spec"]["template"]
    assert template["metadata"]["labels"]["sidecar.istio.io/inject"] == "false"
    assert template["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
    pod = template["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["HOME"] == "/tmp"  # the only writable place
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/tmp"}
    assert "--namespace=$(KFP_NAMESPACE)" not in container["args"]  # standalone: none


def test_multi_user_cronjob_presents_a_token_for_the_kfp_api():
    pod = manifests.pod_spec(manifests.cronjob("multi-user"))
    (container,) = pod["containers"]
    token = next(v for v in pod["volumes"] if v["name"] == "kfp-token")
    (source,) = token["projected"]["sources"]
    assert source["serviceAccountToken"]["audience"] == "pipelines.kubeflow.org"
    mount = next(m for m in container["volumeMounts"] if m["name"] == "kfp-token")
    from tfrecord_suite.kfp.endpoint import SA_TOKEN_PATH

    assert os.path.join(mount["mountPath"], source["serviceAccountToken"]["path"]) == SA_TOKEN_PATH
    assert container["args"][-2:] == ["--namespace=$(KFP_NAMESPACE)", "--auth=service-account"]
    env = {e["name"]: e for e in container["env"]}
    assert env["KFP_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def test_multi_user_overlay_names_one_profile_namespace():
    (kustomization,) = manifests.load("overlays/multi-user/kustomization.yaml")
    patch = next(p for p in kustomization["patches"] if p["target"]["kind"] == "RoleBinding")
    (op,) = yaml.safe_load(patch["patch"])
    assert op["value"] == {
        "kind": "ServiceAccount",
        "name": "default-editor",
        "namespace": kustomization["namespace"],
    }


def test_quota_counts_both_job_kinds():
    (quota,) = manifests.load("base/resourcequota.yaml")
    hard = quota["spec"]["hard"]
    assert "count/trainjobs.trainer.kubeflow.org" in hard
    assert "count/tfjobs.kubeflow.org" in hard


def test_images_come_from_one_place():
    """The images component names exactly images.py's images, and every image a manifest
    names is one it rewrites: a user sets their registry in k8s/images alone."""
    rewrites = manifests.image_rewrites()
    assert set(rewrites) <= {ref.rpartition(":")[0] for ref, _ in images.ALL_IMAGES.values()}
    for name, new in rewrites.items():
        assert new == f"{name}:{images.DEFAULT_TAG}"
    for path in _all_files():
        for doc in manifests.load(os.path.relpath(path, manifests.K8S)):
            for image in manifests.images_in(doc):
                assert image.rpartition(":")[0] in rewrites, (path, image)
    for target in ("base", "trainer-runtime"):
        (kustomization,) = manifests.load(f"{target}/kustomization.yaml")
        assert "../images" in kustomization.get("components", []), target


# --------------------------------------------------------------------- rendered with kustomize

needs_kubectl = pytest.mark.skipif(
    manifests.kubectl() is None, reason="kubectl (kustomize) not installed"
)


@needs_kubectl
@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_overlays_render_into_the_namespace_runs_use(overlay):
    docs = manifests.render(f"overlays/{overlay}")
    (kustomization,) = manifests.load(f"overlays/{overlay}/kustomization.yaml")
    namespace, runner = OVERLAYS[overlay]
    namespace = namespace or kustomization["namespace"]
    assert {d["metadata"]["namespace"] for d in docs} == {namespace}
    for doc in docs:
        _validate(doc)
    binding = next(d for d in docs if d["metadata"]["name"] == "tfrecord-suite-launcher"
                   and d["kind"] == "RoleBinding")  # fmt: skip
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": runner, "namespace": namespace}
    ]
    cron = next(d for d in docs if d["kind"] == "CronJob")
    # the stand-in rendering the podman test uses where kubectl is missing
    assert cron["spec"] == manifests.cronjob(overlay)["spec"]


@needs_kubectl
def test_a_registry_set_in_the_images_component_reaches_every_manifest(tmp_path):
    import shutil

    copy = tmp_path / "k8s"
    shutil.copytree(manifests.K8S, copy)
    component = copy / "images" / "kustomization.yaml"
    data = yaml.safe_load(component.read_text())
    for image in data["images"]:
        image["newName"] = image["name"].replace(
            "ghcr.io/tfrecord-suite", "europe-docker.pkg.dev/p/ml"
        )
        image["newTag"] = "2026.11"
    component.write_text(yaml.safe_dump(data))
    import subprocess

    for target in ("overlays/standalone", "overlays/multi-user", "cluster"):
        out = subprocess.run(
            ["kubectl", "kustomize", str(copy / target)], capture_output=True, text=True, check=True
        ).stdout
        found = [i for d in yaml.safe_load_all(out) if d for i in manifests.images_in(d)]
        assert found and all(i.startswith("europe-docker.pkg.dev/p/ml/") for i in found), found
        assert all(i.endswith(":2026.11") for i in found)
