"""Kubeflow Pipelines 2.17.0 on the one-node cluster: the last steps of :func:`node.up`.

Upstream's multi-user install for any Kubernetes (``manifests/kustomize/env/
platform-agnostic-multi-user`` of the release's source archive), changed only as
``kfp/kustomization.yaml`` lists, with every image built here:

* from the archive and the pinned modules (``tests/realparts/build.sh kfp``), under their
  upstream names: the API server, persistence agent, scheduled-workflow controller, driver and
  launcher (static Go, on BusyBox as upstream's are on Alpine), the UI (Node, built with npm),
  Argo's workflow controller and executor;
* stand-ins, renamed in the overlay, each saying why: MariaDB for MySQL, our gRPC server over the
  ml-metadata wheel for ML Metadata's C++ server (``mlmd/``), grpcwebproxy for Envoy, SeaweedFS at
  the suite's pin, Debian's netcat for Alpine's, the profile controller's Python.

Then the profile namespace :data:`PROFILE`, as Kubeflow's profile controller makes it (its
accounts and role bindings, and the labels it sets in Kubeflow 1.10.2's default install: Pod
Security ``baseline`` enforced, Kubeflow Pipelines enabled), and given what KFP's own profile controller (``sync.py``, running as upstream
deploys it) returns for it: the harness posts the namespace to it as Metacontroller would, since
Metacontroller cannot be built here, and applies what it answers.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from cluster import host, images
from cluster.bringup import Cluster, Step
from cluster.manifests import copy_writable, point_at_copy, small_node
from realparts.parts import ensure_built, versions

HERE = Path(__file__).resolve().parent
OVERLAY = HERE / "kfp"
NAMESPACE = "kubeflow"
#: The profile namespace runs go to: Kubeflow's example profile, as k8s/overlays/multi-user has it
PROFILE = "kubeflow-user-example-com"
#: The profile's owner, as Kubeflow's example profile has it
PROFILE_OWNER = "user@example.com"
#: Kubeflow's own aggregated roles (kubeflow-admin, -edit, -view), which a profile's bindings
#: name; from the kubeflow/manifests release the suite's docs target
KUBEFLOW_ROLES = (
    HERE.parent / "fakes" / "schemas" / "kubeflow-pipelines" / "kubeflow-manifests-v1.10.2"
    / "kubeflow-roles.yaml"
)  # fmt: skip


def steps() -> list[Step]:
    """Kubeflow Pipelines' steps of :func:`node.up`."""
    return [
        Step("Kubeflow Pipelines images", load_images),
        Step("Kubeflow Pipelines", install),
        Step(f"profile {PROFILE}", make_profile),
    ]


# ------------------------------------------------------------------------------------ images


def _stand_in(name: str, context: Path, containerfile: Path | None = None) -> str:
    """A stand-in image built from a Containerfile, tagged with the digest of its sources."""
    image = f"localhost/tfrs-kfp/{name}:{images.content_tag(containerfile or context)}"
    images.build_containerfile(image, context, containerfile)
    return image


def _upstream(image: str, files: dict[str, Path], **kwargs: Any) -> str:
    """An image under its upstream name, laid out as upstream's Dockerfile lays it out."""
    images.build_rootfs(image, files, **kwargs)
    return image


def build_images() -> dict[str, str]:
    """Build what podman lacks; ``key -> image`` of every image the install runs."""
    from fakes.podman_harness import ensure_python_base

    pins = versions()
    kfp, version = ensure_built("kfp") / "bin", pins["KFP_VERSION"]
    argo, argo_version = ensure_built("argo") / "bin", pins["ARGO_VERSION"]
    ghcr = "ghcr.io/kubeflow"
    # what Argo's Dockerfile puts into /etc of both its images
    hack = ensure_built("argo") / "hack"
    argo_etc = {"/etc/nsswitch.conf": hack / "nsswitch.conf",
                "/etc/ssh/ssh_known_hosts": hack / "ssh_known_hosts"}  # fmt: skip
    # upstream's CMDs (backend/Dockerfile, Dockerfile.persistenceagent, .scheduledworkflow)
    shell = ["/bin/sh", "-c"]
    out = {
        "api-server": _upstream(
            f"{ghcr}/kfp-api-server:{version}",
            # no /samples: --sampleconfig then names no file, and loading samples is skipped
            {"/bin/apiserver": kfp / "apiserver",
             "/config/config.json": ensure_built("kfp") / "backend/src/apiserver/config/config.json"},
            # what upstream's release build passes it (healthz reports them)
            busybox=True, workdir="/bin",
            env={"LOG_LEVEL": "info", "TAG_NAME": version, "COMMIT_SHA": pins["KFP_COMMIT"]},
            cmd=[*shell, "/bin/apiserver --config=/config --sampleconfig=/config/sample_config"
                 ".json -logtostderr=true --logLevel=${LOG_LEVEL}"],
        ),
        "persistence-agent": _upstream(
            f"{ghcr}/kfp-persistence-agent:{version}",
            {"/bin/persistence_agent": kfp / "persistence_agent"},
            busybox=True, workdir="/bin",
            env={"NAMESPACE": "", "TTL_SECONDS_AFTER_WORKFLOW_FINISH": "86400",
                 "NUM_WORKERS": "2", "LOG_LEVEL": "info", "EXECUTIONTYPE": "Workflow"},
            cmd=[*shell, "persistence_agent --logtostderr=true --namespace=${NAMESPACE} "
                 "--ttlSecondsAfterWorkflowFinish=${TTL_SECONDS_AFTER_WORKFLOW_FINISH} "
                 "--numWorker ${NUM_WORKERS} --executionType ${EXECUTIONTYPE} "
                 "--logLevel=${LOG_LEVEL}"],
        ),
        "scheduled-workflow": _upstream(
            f"{ghcr}/kfp-scheduled-workflow-controller:{version}",
            {"/bin/controller": kfp / "controller"},
            busybox=True, workdir="/bin", env={"NAMESPACE": "", "LOG_LEVEL": "info"},
            cmd=[*shell, "/bin/controller --logtostderr=true --namespace=${NAMESPACE} "
                 "--logLevel=${LOG_LEVEL} --clientQPS=${CLIENT_QPS:-5} "
                 "--clientBurst=${CLIENT_BURST:-10} "
                 "--recurringRunResyncIntervalSeconds=${RESYNC_INTERVAL_SECONDS:-30} "
                 "--metricsPort=${METRICS_PORT:-9090} "
                 '--userIdentityHeader="${USER_IDENTITY_HEADER:-}" '
                 '--userIdentityValue="${USER_IDENTITY_VALUE:-}"'],
        ),
        "driver": _upstream(
            f"{ghcr}/kfp-driver:{version}", {"/bin/driver": kfp / "driver"},
            busybox=True, workdir="/bin", entrypoint=["/bin/driver"],
        ),
        "launcher": _upstream(
            f"{ghcr}/kfp-launcher:{version}", {"/bin/launcher-v2": kfp / "launcher-v2"},
            busybox=True, workdir="/bin", entrypoint=["/bin/launcher-v2"],
        ),
        "workflow-controller": _upstream(
            f"quay.io/argoproj/workflow-controller:{argo_version}",
            {"/bin/workflow-controller": argo / "workflow-controller", **argo_etc},
            user="8737", entrypoint=["workflow-controller"], env={"PATH": "/bin"},
        ),
        "argoexec": _upstream(
            f"quay.io/argoproj/argoexec:{argo_version}",
            # upstream's /etc/mime.types is Alpine's mailcap; Debian's media-types here
            {"/bin/argoexec": argo / "argoexec", "/etc/mime.types": Path("/etc/mime.types"),
             **argo_etc},
            user="8737", entrypoint=["argoexec"], env={"PATH": "/bin"},
        ),
        "grpcwebproxy": _upstream(
            f"localhost/tfrs-kfp/grpcwebproxy:{pins['GRPC_WEB_VERSION']}",
            {"/bin/grpcwebproxy": ensure_built("grpcwebproxy") / "bin" / "grpcwebproxy"},
            entrypoint=["/bin/grpcwebproxy"],
        ),
        "seaweedfs": _upstream(
            f"localhost/tfrs-kfp/seaweedfs:{pins['SEAWEEDFS_VERSION'].rsplit('-', 1)[-1]}",
            {"/usr/bin/weed": ensure_built("seaweedfs") / "bin" / "weed"},
            busybox=True, user="1000", entrypoint=["/usr/bin/weed"],
        ),
    }  # fmt: skip
    ensure_python_base()  # the Debian base of the images below
    kfp_images = OVERLAY / "images"
    out |= {
        "mariadb": _stand_in("mariadb", kfp_images / "mariadb"),
        "wait": _stand_in("wait", kfp_images / "wait"),
        "profile-controller": _stand_in("profile-controller", kfp_images / "profile-controller"),
        "mlmd-server": _stand_in("mlmd-server", HERE / "mlmd"),
    }
    out["ui"] = f"{ghcr}/kfp-frontend:{version}"
    images.build_containerfile(
        out["ui"], ensure_built("kfp-ui"), kfp_images / "ui" / "Containerfile"
    )
    return out


def load_images(cluster: Cluster) -> None:
    """Build the images and load them into the node."""
    cluster.load_images(list(build_images().values()))


# ---------------------------------------------------------------------------------- install

#: Argo's remote kustomizations in upstream's manifests -> the same folders of Argo's module
_ARGO_REMOTES = {
    "third-party/argo/base": "base/workflow-controller?ref={v}&timeout=60s",
    "third-party/argo/installs/namespace": "namespace-install/workflow-controller-rbac?ref={v}",
    "third-party/argo/installs/namespace/cluster-scoped": "base/crds/minimal?ref={v}",
    "third-party/argo/installs/cluster": (
        "base/crds/minimal?ref={v}",
        "cluster-install-no-crds/workflow-controller-rbac?ref={v}",
    ),
}


#: The stand-ins the overlay renames to ours (their tags are filled in)
_RENAMED = ("mariadb", "mlmd-server", "grpcwebproxy", "seaweedfs", "wait", "profile-controller")


def manifests(cluster: Cluster) -> str:
    """Upstream's manifests with our overlay, as one stream (``kubectl kustomize``)."""
    pins = versions()
    root = cluster.state / "manifests" / "kfp"
    upstream = copy_writable(ensure_built("kfp") / "manifests" / "kustomize", root / "upstream")
    copy_writable(ensure_built("argo") / "manifests", root / "argo")
    for folder, remotes in _ARGO_REMOTES.items():
        kustomization = upstream / folder / "kustomization.yaml"
        depth = len(Path(folder).parts) + 1  # up to root/, from upstream/<folder>/
        for remote in (remotes,) if isinstance(remotes, str) else remotes:
            remote = remote.format(v=pins["ARGO_VERSION"])
            local = "../" * depth + "argo/" + remote.split("?", 1)[0]
            point_at_copy(
                kustomization, "https://github.com/argoproj/argo-workflows/manifests/" + remote,
                local,
            )  # fmt: skip
    data = cluster.state / "kfp-data"
    for claim in ("mysql", "seaweedfs"):
        # the pods run as 999 and 1000; a hostPath volume is not chowned to their fsGroup
        (data / claim).mkdir(parents=True, exist_ok=True)
        (data / claim).chmod(0o777)
    tags = {
        f"{key.upper().replace('-', '_')}_TAG": image.rsplit(":", 1)[1]
        for key, image in build_images().items()
        if key in _RENAMED
    }
    host.render(OVERLAY / "kustomization.yaml", root / "kustomization.yaml", **tags)
    host.render(OVERLAY / "volumes.yaml", root / "volumes.yaml", DATA=data)
    shutil.copy(OVERLAY / "delete.yaml", root / "delete.yaml")
    return cluster.kubectl("kustomize", str(root)).stdout


def install(cluster: Cluster) -> None:
    """Apply the manifests and wait until every Deployment of Kubeflow Pipelines is ready."""
    cluster.apply(small_node(manifests(cluster)))
    from kubernetes import client

    apps = client.AppsV1Api(cluster.api_client())
    for deployment in apps.list_namespaced_deployment(NAMESPACE).items:
        cluster.kubectl("-n", NAMESPACE, "rollout", "status", f"deployment/{deployment.metadata.name}",
                        "--timeout=600s")  # fmt: skip


# ---------------------------------------------------------------------------------- profile


def make_profile(cluster: Cluster, namespace: str = PROFILE, owner: str = PROFILE_OWNER) -> None:
    """The profile namespace, as Kubeflow's profile controller and KFP's make it."""
    from fakes.pod_security import kubeflow_profile_labels

    cluster.apply(KUBEFLOW_ROLES.read_text())
    stream = (OVERLAY / "profile.yaml").read_text()
    labels = json.dumps(kubeflow_profile_labels())
    cluster.apply(host.substitute(stream, NAMESPACE=namespace, OWNER=owner, LABELS=labels))
    for child in sync_profile(cluster, namespace):
        cluster.apply(json.dumps(child))


def sync_profile(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    """What KFP's profile controller (sync.py) returns for ``namespace``, asked as
    Metacontroller's DecoratorController would ask it (the namespace, no attachments yet)."""
    from kubernetes import client

    core = client.CoreV1Api(cluster.api_client())
    parent = cluster.api_client().sanitize_for_serialization(core.read_namespace(namespace))
    service = core.read_namespaced_service("kubeflow-pipelines-profile-controller", NAMESPACE)
    attachments = {"Secret.v1": {}, "ConfigMap.v1": {}, "Deployment.apps/v1": {}, "Service.v1": {}}
    request = urllib.request.Request(
        f"http://{service.spec.cluster_ip}/sync",
        data=json.dumps({"object": parent, "attachments": attachments}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)["attachments"]


# --------------------------------------------------------------------------- reaching it, as a user


def node_port_url(cluster: Cluster, service: str, port: str | int | None = None) -> str:
    """``http://NODE_IP:NODEPORT`` of a NodePort Service of Kubeflow Pipelines (the first port,
    or the one of that name or number)."""
    from kubernetes import client

    spec = client.CoreV1Api(cluster.api_client()).read_namespaced_service(service, NAMESPACE).spec
    ports = [p for p in spec.ports if port is None or port in (p.name, p.port)]
    return f"http://{host.NODE_IP}:{ports[0].node_port}"


def api_url(cluster: Cluster) -> str:
    """The KFP API server's HTTP endpoint, from this machine."""
    return node_port_url(cluster, "ml-pipeline", "http")


def ui_url(cluster: Cluster) -> str:
    """The KFP UI, from this machine."""
    return node_port_url(cluster, "ml-pipeline-ui")


def token(cluster: Cluster, account: str, namespace: str = PROFILE, seconds: int = 7200) -> str:
    """A token of ``account`` for the KFP API (audience ``pipelines.kubeflow.org``), as
    ``kubectl create token ACCOUNT --audience pipelines.kubeflow.org`` gives one."""
    from kubernetes import client

    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(
            audiences=["pipelines.kubeflow.org"], expiration_seconds=seconds
        )
    )
    core = client.CoreV1Api(cluster.api_client())
    return core.create_namespaced_service_account_token(account, namespace, request).status.token


def object_store(cluster: Cluster, namespace: str = PROFILE) -> dict[str, str]:
    """The profile's own keys to the cluster's object store (the Secret KFP's profile
    controller made for it) as boto3's environment: ``in_cluster`` the address pods use,
    ``AWS_ENDPOINT_URL`` the one this machine reaches (the Service's cluster IP)."""
    import base64

    from kubernetes import client

    core = client.CoreV1Api(cluster.api_client())
    secret = core.read_namespaced_secret("mlpipeline-minio-artifact", namespace).data
    service = core.read_namespaced_service("seaweedfs", NAMESPACE).spec
    return {
        "AWS_ACCESS_KEY_ID": base64.b64decode(secret["accesskey"]).decode(),
        "AWS_SECRET_ACCESS_KEY": base64.b64decode(secret["secretkey"]).decode(),
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://{service.cluster_ip}:9000",
        "in_cluster": f"http://seaweedfs.{NAMESPACE}:9000",
    }


def s3_client(store: dict[str, str]) -> Any:
    """A boto3 S3 client of :func:`object_store`'s keys, from this machine."""
    import boto3

    return boto3.session.Session().client(
        "s3",
        endpoint_url=store["AWS_ENDPOINT_URL"],
        region_name=store["AWS_REGION"],
        aws_access_key_id=store["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=store["AWS_SECRET_ACCESS_KEY"],
    )


# ------------------------------------------------------------------------ the suite, as a user

#: Where the cluster's images of the suite come from: not the defaults, so that a pod naming a
#: default image cannot start (nothing is ever pulled, and the node holds only these names) and
#: every pod a run makes shows it uses what was compiled
SUITE_REGISTRY = "registry.tfrs.test/ml"
SUITE_TAG = "cluster"
#: The Secret holding the profile's object-store keys for the suite's steps (the docs' name)
STORAGE_SECRET = "tfrecord-suite-storage"
#: CPU and memory per step on the 2-CPU node (``--step-resources``; the defaults ask for a
#: common 4-CPU node's share)
SMALL_STEPS = (
    "fingerprint=100m/256Mi,shard=500m/2Gi,version=200m/1Gi,resolve_dataset=100m/256Mi,"
    "train=200m/2Gi,evaluate=300m/2Gi,register=200m/1Gi,promote=100m/256Mi,report=100m/256Mi"
)


def suite_images(cluster: Cluster) -> Any:
    """The suite's component image built from this checkout under :data:`SUITE_REGISTRY` and
    :data:`SUITE_TAG`, loaded into the node; the ``ImageSet`` naming it pinned by the digest
    the node holds it by, as a user pins what they pushed (``NAME:TAG@DIGEST``)."""
    from tfrecord_suite.images import ImageSet

    image_set = ImageSet(SUITE_REGISTRY, SUITE_TAG)
    name = images.suite_image("component", image_set)
    cluster.load_images([name])
    return ImageSet(SUITE_REGISTRY, SUITE_TAG, (("component", cluster.image_digest(name)),))


def storage_secret(cluster: Cluster, namespace: str = PROFILE) -> dict[str, str]:
    """The Secret :data:`STORAGE_SECRET` in ``namespace``, made from the profile's own object
    store keys as the docs' ``kubectl create secret generic`` makes it; the store's environment
    (:func:`object_store`)."""
    store = object_store(cluster, namespace)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": STORAGE_SECRET, "namespace": namespace},
        "stringData": {
            "AWS_ACCESS_KEY_ID": store["AWS_ACCESS_KEY_ID"],
            "AWS_SECRET_ACCESS_KEY": store["AWS_SECRET_ACCESS_KEY"],
            "AWS_ENDPOINT_URL": store["in_cluster"],
            "AWS_REGION": store["AWS_REGION"],
        },
    }
    cluster.apply(json.dumps(secret))
    return store


def profile_prefix(namespace: str = PROFILE) -> str:
    """The part of KFP's bucket a profile's keys may write (sync.py's policy: private/<ns>/)."""
    return f"s3://mlpipeline/private/{namespace}"


def apply_suite_overlay(
    cluster: Cluster,
    image_set: Any,
    namespace: str = PROFILE,
    retrain: dict[str, Any] | None = None,
) -> Path:
    """``kubectl apply -k k8s/overlays/multi-user`` from a copy of ``k8s/`` edited as
    docs/deploy.md tells a user to: ``k8s/images`` set to ``image_set``'s registry and tag, and
    the component image's digest where the set pins it (the profile named in the overlay is
    already this one); with ``retrain``, those settings in
    ``k8s/base/retrain.yaml`` and the S3 keys' component (``k8s/credentials/s3-keys``) added to
    the overlay, as that component's comment says. Returns the copy."""
    import yaml

    from tfrecord_suite.images import DEFAULT_REGISTRY, DEFAULT_TAG

    # a copy of its own: the tests on the other pytest-xdist worker may be applying theirs
    overlay = Path(tempfile.mkdtemp(prefix="suite-k8s-", dir=cluster.state)) / "k8s"
    shutil.copytree(HERE.parent.parent / "k8s", overlay)
    images_file = overlay / "images" / "kustomization.yaml"
    text = images_file.read_text()
    for old, new in ((f"newName: {DEFAULT_REGISTRY}/", f"newName: {image_set.registry}/"),
                     (f"newTag: {DEFAULT_TAG}", f"newTag: {image_set.tag}")):  # fmt: skip
        if old not in text:
            raise AssertionError(f"{images_file} no longer holds {old!r}: see what it sets")
        text = text.replace(old, new)
    images_file.write_text(text)
    digest = dict(image_set.digests).get("component")
    if digest:  # docs/deploy.md: `digest:` under the image
        doc = yaml.safe_load(images_file.read_text())
        (entry,) = [e for e in doc["images"] if e["name"].endswith("/tfrecord-suite")]
        entry["digest"] = digest
        images_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    multi_user = overlay / "overlays" / "multi-user" / "kustomization.yaml"
    if f"namespace: {namespace}" not in multi_user.read_text():
        raise AssertionError(f"{multi_user} does not name the profile {namespace}")
    if retrain:
        settings_file = overlay / "base" / "retrain.yaml"
        settings = yaml.safe_load(settings_file.read_text())
        settings_file.write_text(yaml.safe_dump({**settings, **retrain}, sort_keys=False))
        with multi_user.open("a") as fh:
            fh.write("components:\n  - ../../credentials/s3-keys\n")
    cluster.kubectl("apply", "-k", str(overlay / "overlays" / "multi-user"))
    return overlay


@dataclasses.dataclass
class KfpProfile:
    """Kubeflow Pipelines on the one-node cluster as a user of its profile reaches it.

    Attributes:
        cluster: The cluster (tests/cluster/bringup.py).
        host: The API server's URL from this machine.
        ui: The UI's URL from this machine.
        namespace: The profile namespace runs go to.
        token_file: A token of the profile's default-editor for the KFP API (audience
            pipelines.kubeflow.org), as ``kubectl create token`` writes one.
        images: The ImageSet the cluster's suite images carry (not the defaults).
        store: The profile's object-store keys as boto3's environment (this machine's
            endpoint; ``in_cluster`` the pods').
        root: The part of the object store the profile may write (``s3://...``).

    """

    cluster: Cluster
    host: str
    ui: str
    namespace: str
    token_file: str
    images: Any
    store: dict[str, str]
    root: str

    def submit_args(self, pipeline: str) -> list[str]:
        """``tfrecord-suite submit`` flags for ``pipeline`` on this profile, as a user gives
        them: endpoint and token, the cluster's registry, the storage Secret, small steps."""
        return [
            "--host", self.host, "--namespace", self.namespace, "--token-file", self.token_file,
            "--pipeline", pipeline, "--image-registry", self.images.registry,
            "--image-tag", self.images.tag, "--storage-secret", STORAGE_SECRET,
            "--storage-secret-type", "s3-keys", "--step-resources", SMALL_STEPS,
            *(["--image-digests", self.images.digests_text] if self.images.digests else []),
        ]  # fmt: skip

    def s3(self) -> Any:
        """A boto3 client of the profile's keys."""
        return s3_client(self.store)


def user_profile(cluster: Cluster, folder: Path, overlay: bool = True) -> KfpProfile:
    """The profile set up as docs/deploy.md tells a user: the suite's images under the cluster's
    own registry and tag, ``k8s/overlays/multi-user`` applied with them (unless not
    ``overlay``), a storage Secret of the profile's keys, and a token for the API in
    ``folder``."""
    image_set = suite_images(cluster)
    if overlay:
        apply_suite_overlay(cluster, image_set)
    store = storage_secret(cluster)
    token_file = folder / "token"
    token_file.write_text(token(cluster, "default-editor"))
    return KfpProfile(
        cluster=cluster,
        host=api_url(cluster),
        ui=ui_url(cluster),
        namespace=PROFILE,
        token_file=str(token_file),
        images=image_set,
        store=store,
        root=profile_prefix(),
    )
