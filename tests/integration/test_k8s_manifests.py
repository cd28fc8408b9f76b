"""The Kubernetes manifests under k8s/: the right namespace and account for each kind of Kubeflow
install, least privilege, images from one place, a CronJob that can start; and, as the real API
server's authorizer decides (tests/realparts, marker ``k8s``), that the account a run uses holds
what a run needs once k8s/ binds the launcher's Role to it, with KFP's released roles installed.

That every object applies to a real API server (server-side apply, strict field validation, Pod
Security) is tests/integration/test_k8s_apiserver.py; the CronJob's pod runs for real in podman
(tests/e2e/test_images_real.py)."""

import glob
import json
import os
import re

import pytest
import yaml

from fakes import manifests
from tfrecord_suite import images

OVERLAYS = {"standalone": ("kubeflow", "pipeline-runner"), "multi-user": (None, "default-editor")}


def _all_files():
    return sorted(glob.glob(os.path.join(manifests.K8S, "**", "*.yaml"), recursive=True))


def test_rbac_is_least_privilege_and_namespaced():
    for path in _all_files():
        for doc in manifests.load(os.path.relpath(path, manifests.K8S)):
            if not isinstance(doc, dict):
                continue
            assert doc.get("kind") not in ("ClusterRole", "ClusterRoleBinding"), path
            for rule in doc.get("rules", []):
                for key in ("apiGroups", "resources", "verbs"):
                    assert "*" not in rule[key], f"wildcard in {key}: {rule}"
                assert not set(rule["verbs"]) & {"update", "escalate", "bind"}
                if "patch" in rule["verbs"]:  # only the step's lease is patched (its deadline)
                    assert (rule["apiGroups"], rule["resources"]) == (["batch"], ["jobs"])


def test_no_secrets_in_manifests_or_compiled_pipelines():
    text = "".join(open(p).read() for p in _all_files())
    root = os.path.join(manifests.K8S, "..")
    for path in glob.glob(os.path.join(root, "pipelines", "*.yaml")):
        text += open(path).read()
    for marker in ("BEGIN PRIVATE KEY", "private_key", "AKIA", "password:"):
        assert marker not in text
    # a key file only ever from a mounted Secret (k8s/credentials, launch/credentials.py)
    from tfrecord_suite.launch.credentials import Credentials

    for value in re.findall(r"GOOGLE_APPLICATION_CREDENTIALS\s+value: (\S+)", text):
        assert value == Credentials("s").key_file


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
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert set(mounts) == {"/tmp", "/etc/tfrecord-suite"}
    assert mounts["/etc/tfrecord-suite"]["readOnly"] is True  # the settings ConfigMap
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
    quota, _ = manifests.load("base/resourcequota.yaml")
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
    for target in ("base", "trainer-runtime", "data-service"):
        (kustomization,) = manifests.load(f"{target}/kustomization.yaml")
        assert "../images" in kustomization.get("components", []), target


# --------------------------------------------------------------------- rendered with kustomize

#: renders k8s/ with the kubectl the suite builds (conftest's ``kubectl``: fails under CI without)
needs_kubectl = pytest.mark.usefixtures("kubectl")


@needs_kubectl
@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_overlays_render_into_the_namespace_runs_use(overlay):
    docs = manifests.render(f"overlays/{overlay}")
    (kustomization,) = manifests.load(f"overlays/{overlay}/kustomization.yaml")
    namespace, runner = OVERLAYS[overlay]
    namespace = namespace or kustomization["namespace"]
    assert {d["metadata"]["namespace"] for d in docs} == {namespace}
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


# ------------------------------------------- the account a run uses holds what the run needs

UPSTREAM = os.path.join(os.path.dirname(__file__), "..", "fakes", "schemas", "kubeflow-pipelines")

#: What the pods of every pipeline run ask the Kubernetes API for, as the run's account, and
#: the upstream code that asks (kubeflow/pipelines unless said otherwise).
RUN_NEEDS = {
    ("", "configmaps", "get"): "the root driver reads the kfp-launcher ConfigMap "
    "(backend/src/v2/config/env.go FromConfigMap)",
    ("", "secrets", "get"): "the launcher reads the object store's credentials, "
    "mlpipeline-minio-artifact (backend/src/v2/objectstore/object_store.go)",
    ("argoproj.io", "workflowtaskresults", "create"): "Argo's executor records each step's "
    "outputs (argoproj/argo-workflows workflow/executor/taskresult.go)",
    ("argoproj.io", "workflowtaskresults", "patch"): "the same",
}
#: Argo 3.4/3.5 (KFP up to 2.5) fall back to patching the pod where workflowtaskresults are
#: refused; Argo 3.6 (KFP 2.14) removed the fallback (argo-workflows #13100).
ARGO_35_FALLBACK = {("", "pods", "patch")}


def _rules(doc):
    return [
        (group, resource, verb)
        for rule in doc.get("rules") or []
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    ]


def _load(*parts):
    with open(os.path.join(UPSTREAM, *parts)) as fh:
        return [d for d in yaml.safe_load_all(fh) if d]


def _ours():
    return set(_rules(manifests.load("base/role.yaml")[0]))


def _refused(k8s, namespace, account, needs):
    """The needs ``(group, resource[/subresource], verb)`` in ``namespace`` that the real API
    server's authorizer refuses ``account`` (a SelfSubjectAccessReview with its own token)."""
    from kubernetes import client

    authz = client.AuthorizationV1Api(k8s.api_client(token=k8s.token(namespace, account)))
    refused = []
    for group, resource, verb in sorted(needs):
        name, _, sub = resource.partition("/")
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                  "spec": {"resourceAttributes": {"namespace": namespace, "group": group,
                                                  "resource": name, "subresource": sub,
                                                  "verb": verb}}}  # fmt: skip
        if not authz.create_self_subject_access_review(review).status.allowed:
            refused.append((group, resource, verb))
    return refused


def _account(name, namespace):
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": namespace}}  # fmt: skip


def _binding(namespace, name, role_kind, role, account):
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]}  # fmt: skip


def _overlay_rbac(k8s, overlay, namespace, kinds=("Role", "RoleBinding", "ServiceAccount")):
    """The overlay's Roles, RoleBindings and accounts, rendered (the real parts' kubectl),
    moved into ``namespace``."""
    out = k8s.kubectl("kustomize", os.path.join(manifests.K8S, "overlays", overlay)).stdout
    docs = [d for d in yaml.safe_load_all(out) if d and d["kind"] in kinds]
    for doc in docs:
        doc["metadata"]["namespace"] = namespace
        for subject in doc.get("subjects") or []:
            subject["namespace"] = namespace
    return docs


def _aggregated(role):
    """A ClusterRole to apply: an aggregated one without its (empty) rules, which the
    aggregation controller owns once it filled them (reapplied, they would conflict)."""
    if role.get("aggregationRule"):
        role = {k: v for k, v in role.items() if k != "rules"}
    return role


def _until_allowed(k8s, namespace, account, needs):
    """Wait (the API server's RBAC cache, the aggregation controller) until nothing of
    ``needs`` is refused; the refusals that stay after 60 s."""
    from realparts.processes import WaitError, wait_for

    try:
        wait_for(lambda: not _refused(k8s, namespace, account, needs), 60, "RBAC", interval=0.5)
    except WaitError:
        return _refused(k8s, namespace, account, needs)
    return []


@pytest.mark.k8s
@pytest.mark.parametrize("tag", ["2.5.0", "2.17.0"])
def test_standalone_runs_as_pipeline_runner_which_holds_what_a_run_needs(k8s, k8s_namespace, tag):
    """Standalone KFP runs every pod of a run as pipeline-runner (the API server's default
    runner account): KFP's own Role gives it what the driver, launcher and Argo's executor ask
    for, and k8s/ adds the job launcher's Role (nothing else) by binding it to that account.
    A fresh namespace stands for KFP's own (kubeflow)."""
    ns = k8s_namespace
    (role,) = _load(tag, "pipeline-runner-role.yaml")
    role["metadata"]["namespace"] = ns
    k8s.apply([
        role, _account("pipeline-runner", ns),
        # manifests/kustomize/base/pipeline/pipeline-runner-rolebinding.yaml
        _binding(ns, "pipeline-runner-binding", "Role", "pipeline-runner", "pipeline-runner"),
    ])  # fmt: skip
    needs = set(RUN_NEEDS)
    if tuple(map(int, tag.split("."))) < (2, 14, 0):  # Argo 3.5: the pod-patch fallback
        needs = {n for n in needs if n[1] != "workflowtaskresults"} | ARGO_35_FALLBACK
    assert _until_allowed(k8s, ns, "pipeline-runner", needs) == []
    # without our binding the job launcher could not create its job: the binding matters
    assert ("trainer.kubeflow.org", "trainjobs", "create") in _refused(
        k8s, ns, "pipeline-runner", _ours()
    )
    binding = manifests.load("base/rolebinding.yaml")[0]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "pipeline-runner", "namespace": "kubeflow"}
    ]
    k8s.apply(_overlay_rbac(k8s, "standalone", ns, kinds=("Role", "RoleBinding")))
    assert _until_allowed(k8s, ns, "pipeline-runner", needs | _ours()) == []


@pytest.mark.k8s
@pytest.mark.parametrize("tag", ["2.5.0", "2.17.0"])
def test_multi_user_runs_as_default_editor_which_holds_what_a_run_needs(k8s, k8s_namespace, tag):
    """Multi-user Kubeflow (1.10: KFP 2.5.0) runs a profile's pipelines as default-editor, bound
    by the profile controller to kubeflow-edit, which the real aggregation controller fills from
    Kubeflow's Kubernetes roles (kubeflow/manifests common/kubeflow-roles) and KFP's
    kubeflow-pipelines-edit; the overlay binds the job launcher's Role to default-editor. A
    fresh namespace stands for the profile's."""
    ns = k8s_namespace
    cluster_roles = [_aggregated(d) for d in _load("kubeflow-manifests-v1.10.2", "kubeflow-roles.yaml")
                     + _load(tag, "view-edit-cluster-roles.yaml")
                     if d.get("kind") == "ClusterRole"]  # fmt: skip
    k8s.apply([
        *cluster_roles, _account("default-editor", ns),
        # the profile controller's binding of a profile's default-editor
        _binding(ns, "default-editor", "ClusterRole", "kubeflow-edit", "default-editor"),
    ])  # fmt: skip
    assert _until_allowed(k8s, ns, "default-editor", set(RUN_NEEDS)) == []
    assert ("trainer.kubeflow.org", "trainjobs", "create") in _refused(
        k8s, ns, "default-editor", _ours()
    )
    (kustomization,) = manifests.load("overlays/multi-user/kustomization.yaml")
    patch = next(p for p in kustomization["patches"] if p["target"]["kind"] == "RoleBinding")
    assert yaml.safe_load(patch["patch"])[0]["value"]["name"] == "default-editor"
    k8s.apply(_overlay_rbac(k8s, "multi-user", ns))
    assert _until_allowed(k8s, ns, "default-editor", set(RUN_NEEDS) | _ours()) == []

    # and the CronJob's account may create runs there (the KFP API server's
    # SubjectAccessReview: create on runs.pipelines.kubeflow.org in the run's namespace),
    # through a Role of ours that holds no more than kubeflow-pipelines-edit
    # (test_k8s_retrain.py: exactly what retrain asks for)
    (binding,) = manifests.load("overlays/multi-user/retrain-rolebinding.yaml")
    (role,) = manifests.load("overlays/multi-user/retrain-role.yaml")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}  # fmt: skip
    ours = set(_rules(role))
    account = binding["subjects"][0]["name"]
    assert {
        ("pipelines.kubeflow.org", r, "create") for r in ("runs", "experiments", "pipelines")
    } <= ours
    assert _until_allowed(k8s, ns, account, ours) == []
    k8s.apply([_account("pipelines-editor", ns),
               _binding(ns, "pipelines-editor", "ClusterRole", "kubeflow-pipelines-edit",
                        "pipelines-editor")])  # fmt: skip
    assert _until_allowed(k8s, ns, "pipelines-editor", ours) == []


@needs_kubectl
def test_the_priority_class_preempts_nobody_unless_opted_in_and_bounded(tmp_path):
    """k8s/cluster's PriorityClass is no tenant's way to preempt another: never the default,
    preempting nobody (preemptionPolicy Never), not on the shared runtime; a TFJob runs at it
    only when compiled to. k8s/priority opts in to preemption for the runtime's nodes, and the
    admission configuration it ships admits pods of the class only in namespaces with a quota
    scoped to it, which k8s/base gives (Kubernetes: limit priority class consumption)."""
    import shutil

    from tfrecord_suite.launch.job import JobConfig
    from tfrecord_suite.launch.placement import Placement
    from tfrecord_suite.launch.tfjob import render_tfjob

    def priority_and_runtime(docs):
        (priority,) = [d for d in docs if d["kind"] == "PriorityClass"]
        (runtime,) = [d for d in docs if d["kind"] == "ClusterTrainingRuntime"]
        job = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]
        return priority, job["template"]["spec"]["template"]["spec"]

    priority, pod = priority_and_runtime(manifests.render("cluster"))
    name = priority["metadata"]["name"]
    assert priority["globalDefault"] is False and priority["preemptionPolicy"] == "Never"
    assert "priorityClassName" not in pod
    for replica in render_tfjob(JobConfig(name="j", image="i", trainer_args=[], workers=2))["spec"][
        "tfReplicaSpecs"
    ].values():
        assert "priorityClassName" not in replica["template"]["spec"]
    job = render_tfjob(
        JobConfig(name="j", image="i", trainer_args=[], workers=2,
                  placement=Placement(priority_class=name))
    )  # fmt: skip
    for replica in job["spec"]["tfReplicaSpecs"].values():
        assert replica["template"]["spec"]["priorityClassName"] == name

    copy = tmp_path / "k8s"
    shutil.copytree(manifests.K8S, copy)
    kustomization = copy / "cluster" / "kustomization.yaml"
    doc = yaml.safe_load(kustomization.read_text())
    kustomization.write_text(yaml.safe_dump({**doc, "components": ["../priority"]}))
    priority, pod = priority_and_runtime(manifests.render_dir(str(copy / "cluster")))
    assert priority["preemptionPolicy"] == "PreemptLowerPriority"
    assert pod["priorityClassName"] == name
    (admission,) = manifests.load("priority/admission-config.yaml")
    (plugin,) = admission["plugins"]
    (limited,) = plugin["configuration"]["limitedResources"]
    assert limited["resource"] == "pods"
    assert limited["matchScopes"] == [
        {"scopeName": "PriorityClass", "operator": "In", "values": [name]}
    ]
    _, quota = manifests.load("base/resourcequota.yaml")
    assert quota["spec"]["scopeSelector"]["matchExpressions"] == limited["matchScopes"]
    assert int(quota["spec"]["hard"]["pods"]) > 0


@pytest.mark.k8s
def test_the_priority_opt_in_applies_to_the_real_server(k8s, tmp_path):
    """k8s/cluster with k8s/priority, server-side applied (a dry run, strict field validation)
    to the real API server with Trainer v2.3.0's CRDs. Renamed: a class's preemption policy
    cannot change in place, and the session's server may hold k8s/cluster's already."""
    import shutil

    copy = tmp_path / "k8s"
    shutil.copytree(manifests.K8S, copy)
    kustomization = copy / "cluster" / "kustomization.yaml"
    doc = yaml.safe_load(kustomization.read_text())
    kustomization.write_text(yaml.safe_dump({**doc, "components": ["../priority"]}))
    out = k8s.kubectl("kustomize", str(copy / "cluster")).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert {d["kind"] for d in docs} == {"PriorityClass", "ClusterTrainingRuntime"}
    text = json.dumps(docs)
    (priority,) = [d["metadata"]["name"] for d in docs if d["kind"] == "PriorityClass"]
    renamed = json.loads(text.replace(f'"{priority}"', f'"{priority}-opt-in"').replace(
        '"name": "tfrecord-suite-tensorflow"', '"name": "tfrecord-suite-tensorflow-opt-in"'))  # fmt: skip
    assert json.dumps(renamed).count("-opt-in") == 3  # both names, and the class the pods take
    applied = k8s.apply(renamed, "--dry-run=server")
    assert "Warning" not in applied.stderr, applied.stderr
    assert applied.stdout.count("serverside-applied") == 2, applied.stdout


@needs_kubectl
def test_data_service_dispatcher_lists_every_worker_by_the_name_it_advertises():
    """Static sharding refuses a worker the dispatcher's list does not name, and a worker
    restarted under another name stalls the epoch (tests/integration/test_data_service.py): the
    list must be exactly the worker pods' stable names, as each worker advertises itself."""
    from tfrecord_suite.cli.main import main

    docs = {(d["kind"], d["metadata"]["name"]): d for d in manifests.render("data-service")}
    service, dispatcher, workers = (docs[k] for k in (("Service", "tfrs-data"),
                                                      ("StatefulSet", "tfrs-data-dispatcher"),
                                                      ("StatefulSet", "tfrs-data-worker")))  # fmt: skip
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"]
    for sts in (dispatcher, workers):
        assert sts["spec"]["serviceName"] == "tfrs-data"
        labels = sts["spec"]["template"]["metadata"]["labels"]
        assert set(service["spec"]["selector"].items()) <= set(labels.items())
        assert labels["sidecar.istio.io/inject"] == "false"

    def container(sts):
        (c,) = sts["spec"]["template"]["spec"]["containers"]
        assert c["command"] == ["tfrecord-suite"]
        # each command's flags parse as the CLI the image runs them
        assert c["args"][0] == "data-service"
        command = main.commands["data-service"].commands[c["args"][1]]
        command.make_context(command.name, list(c["args"][2:]))
        return c

    flags = dict(a.split("=", 1) for a in container(dispatcher)["args"][2:])
    listed = flags["--worker-addresses"].split(",")
    worker = container(workers)
    wflags = dict(a.split("=", 1) for a in worker["args"][2:])
    advertised = [
        manifests.expand(wflags["--address"], {"POD_NAME": f"tfrs-data-worker-{i}"})
        for i in range(workers["spec"]["replicas"])
    ]
    assert listed == advertised
    assert all(a.endswith(f":{wflags['--port']}") for a in listed)
    assert wflags["--dispatcher"] == f"tfrs-data-dispatcher-0.tfrs-data:{flags['--port']}"
    assert workers["spec"]["podManagementPolicy"] == "Parallel"
    env = {e["name"]: e for e in worker["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    # the journal outlives the dispatcher's pod, so a restarted dispatcher resumes its jobs
    mounts = dispatcher["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    (mount,) = [m for m in mounts if m["mountPath"] == flags["--work-dir"]]
    assert [t["metadata"]["name"] for t in dispatcher["spec"]["volumeClaimTemplates"]] == [
        mount["name"]
    ]
    # every pod runs as the service's own account, which mounts no token
    account = docs[("ServiceAccount", "tfrs-data")]
    assert account["automountServiceAccountToken"] is False
    for sts in (dispatcher, workers):
        assert sts["spec"]["template"]["spec"]["serviceAccountName"] == "tfrs-data"
    assert ("NetworkPolicy", "tfrs-data") in docs
    assert ("PodDisruptionBudget", "tfrs-data-worker") in docs


@pytest.mark.k8s
@needs_kubectl
@pytest.mark.parametrize("component", ["gcs-key", "s3-keys", "image-pull"])
def test_credential_components_give_the_cronjob_what_the_steps_get(
    k8s, k8s_namespace, tmp_path, component
):
    """Each k8s/credentials component, added to an overlay, gives the CronJob's pod its Secret
    in the shape every step and launched pod gets it (launch/credentials.py), under the name
    its comment tells the settings file to use."""
    import shutil

    from tfrecord_suite.launch.credentials import Credentials

    copy = tmp_path / "k8s"
    shutil.copytree(manifests.K8S, copy)
    overlay = copy / "overlays" / "standalone" / "kustomization.yaml"
    doc = yaml.safe_load(overlay.read_text())
    doc["components"] = [f"../../credentials/{component}"]
    overlay.write_text(yaml.safe_dump(doc))
    (cron,) = [d for d in manifests.render_dir(str(copy / "overlays" / "standalone"))
               if d["kind"] == "CronJob"]  # fmt: skip
    # the real API server takes it (server-side dry run, strict field validation)
    cron["metadata"]["namespace"] = k8s_namespace
    applied = k8s.apply([cron], "--dry-run=server")
    assert "Warning" not in applied.stderr, applied.stderr
    pod = manifests.pod_spec(cron)
    (container,) = pod["containers"]
    comment = (copy / "credentials" / component / "kustomization.yaml").read_text()
    if component == "image-pull":
        creds = Credentials(image_pull_secrets="tfrecord-suite-registry")
        assert pod["imagePullSecrets"] == creds.image_pull_secret_refs()
        assert "image-pull-secrets: tfrecord-suite-registry" in comment
        return
    creds = Credentials("tfrecord-suite-storage", component)
    assert f"storage-secret: {creds.storage_secret}" in comment
    assert f"storage-secret-type: {component}" in comment
    env = [e for e in container["env"] if e["name"] not in ("HOME", "TFRECORD_SUITE_IMAGE")]
    assert env == creds.env()
    mounts = [m for m in container["volumeMounts"] if m["mountPath"].startswith("/var/run")]
    assert [m["mountPath"] for m in mounts] == [m["mountPath"] for m in creds.volume_mounts()]
    for mount in mounts:
        volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
        assert volume["secret"] == creds.volumes()[0]["secret"]
