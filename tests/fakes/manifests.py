"""The k8s/ manifests as a cluster would get them.

``render(target)`` is ``kubectl kustomize`` (kustomize v5), with the kubectl ``make real-parts``
builds (the conftest's ``kubectl`` fixture skips a test without one, and fails it under CI).
``cronjob(overlay)`` needs no kubectl: the base CronJob with the overlay's JSON patches applied
(RFC 6902, as kustomize applies them), the images component's rewrite and the base's replacement
(the image into the container's TFRECORD_SUITE_IMAGE); a test checks that it equals kubectl's
rendering wherever kubectl is there.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from typing import Any

import yaml

K8S = os.path.join(os.path.dirname(__file__), "..", "..", "k8s")


def load(path: str) -> list[dict[str, Any]]:
    """The YAML documents of one file under k8s/."""
    with open(os.path.join(K8S, path)) as fh:
        return [d for d in yaml.safe_load_all(fh) if d]


def kubectl() -> str | None:
    """The kubectl the suite builds (``make real-parts``: Kubernetes at the pinned version,
    kustomize embedded), else one on ``PATH``; None where neither is there."""
    from realparts import parts

    built = parts.built("kubernetes")
    if built is not None and (built / "bin" / "kubectl").exists():
        return str(built / "bin" / "kubectl")
    return shutil.which("kubectl")


def render(target: str) -> list[dict[str, Any]]:
    """``kubectl kustomize k8s/<target>``."""
    return render_dir(os.path.join(K8S, target))


def render_dir(folder: str) -> list[dict[str, Any]]:
    """``kubectl kustomize FOLDER`` (a copy of k8s/ a test changed, say)."""
    out = subprocess.run(
        [kubectl() or "kubectl", "kustomize", folder],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def image_rewrites() -> dict[str, str]:
    """``name -> newName:newTag`` of the images component (k8s/images)."""
    (component,) = load("images/kustomization.yaml")
    return {i["name"]: f"{i.get('newName', i['name'])}:{i['newTag']}" for i in component["images"]}


def cronjob(overlay: str) -> dict[str, Any]:
    """The CronJob of ``overlays/<overlay>`` without kubectl: base + the overlay's patches."""
    import jsonpatch

    (job,) = load("base/cronjob.yaml")
    (kustomization,) = load(f"overlays/{overlay}/kustomization.yaml")
    for patch in kustomization.get("patches", []):
        if patch["target"].get("kind") != "CronJob":
            continue
        if "path" in patch:
            ops = load(f"overlays/{overlay}/{patch['path']}")[0]
        else:
            ops = yaml.safe_load(patch["patch"])
        job = jsonpatch.apply_patch(job, ops)
    job = copy.deepcopy(job)
    job["metadata"]["namespace"] = kustomization["namespace"]
    for container in pod_spec(job)["containers"]:
        name, _, _ = container["image"].rpartition(":")
        container["image"] = image_rewrites().get(name, container["image"])
        # the base's replacement: the container's image, as rewritten, into its environment
        for var in container.get("env", []):
            if var["name"] == "TFRECORD_SUITE_IMAGE":
                var["value"] = container["image"]
    return job


def retrain_settings() -> dict[str, Any]:
    """k8s/base/retrain.yaml: what the CronJob's ConfigMap holds (and CI reads)."""
    (settings,) = load("base/retrain.yaml")
    return settings


def pod_spec(cronjob_doc: dict[str, Any]) -> dict[str, Any]:
    """The pod spec a CronJob's jobs run."""
    return cronjob_doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def images_in(doc: Any) -> list[str]:
    """Every ``image:`` value anywhere in a manifest."""
    if isinstance(doc, dict):
        found = [doc["image"]] if isinstance(doc.get("image"), str) else []
        return found + [i for v in doc.values() for i in images_in(v)]
    if isinstance(doc, list):
        return [i for v in doc for i in images_in(v)]
    return []


def expand(text: str, env: dict[str, str]) -> str:
    """A container argument as the kubelet expands it: ``$(VAR)`` becomes the value of the
    container's variable VAR when it has one and stays as written otherwise; ``$$`` is a
    literal ``$`` (Kubernetes' ``third_party/forked/golang/expansion/expand.go``)."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i) and ")" in text[i + 2 :]:
            end = text.index(")", i + 2)
            name = text[i + 2 : end]
            out.append(env[name] if name in env else text[i : end + 1])
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


# ------------------------------------------------------------ everything the suite puts on a cluster


def kustomizations(kind: str = "Kustomization") -> list[str]:
    """The folders under k8s/ (relative) whose kustomization.yaml is of ``kind``: the targets a
    user applies (``Kustomization``, the default kind), or the components they add
    (``Component``)."""
    found = []
    for folder, _, files in sorted(os.walk(K8S)):
        if "kustomization.yaml" in files:
            rel = os.path.relpath(folder, K8S)
            (doc,) = load(os.path.join(rel, "kustomization.yaml"))
            if doc.get("kind", "Kustomization") == kind:
                found.append(rel)
    return found


def render_with_every_component(workdir: str) -> list[dict[str, Any]]:
    """A profile's overlay and the cluster's objects with every opt-in component added (the
    priority opt-in, each credentials component): a copy of k8s/ under ``workdir``, and a
    kustomization beside the others that adds them all."""
    copy_dir = os.path.join(workdir, "k8s")
    shutil.copytree(K8S, copy_dir)
    everything = os.path.join(copy_dir, "every-component")
    os.makedirs(everything)
    with open(os.path.join(everything, "kustomization.yaml"), "w") as fh:
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": ["../overlays/multi-user", "../cluster"],
                # k8s/images is in every target already
                "components": [f"../{c}" for c in kustomizations("Component") if c != "images"],
            },
            fh,
        )
    return render_dir(everything)


def launched_objects() -> list[dict[str, Any]]:
    """Every object the train step's launcher creates, as it renders them for a run that uses
    every option: a TrainJob and a TFJob of three GPU nodes with a priority class, a storage
    Secret of each kind and a pull Secret; the run's tf.data service; the step's lease."""
    from tfrecord_suite import images
    from tfrecord_suite.launch import data_service_k8s as data_service
    from tfrecord_suite.launch.credentials import Credentials
    from tfrecord_suite.launch.job import JobConfig
    from tfrecord_suite.launch.kube import run_trainers
    from tfrecord_suite.launch.lease import Lease
    from tfrecord_suite.launch.placement import Placement
    from tfrecord_suite.launch.tfjob import render_tfjob
    from tfrecord_suite.launch.trainjob import render_trainjob

    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "tfrs-train-x-lease", "uid": "u"}
    placement = Placement(accelerator_type="nvidia-l4", accelerator_count=2,
                          priority_class="tfrecord-suite-gpu-training")  # fmt: skip
    made = []
    for storage_type in ("gcs-key", "s3-keys"):
        credentials = Credentials("storage", storage_type, "regcred")
        job = JobConfig(name=f"tfrs-train-{storage_type}", image=images.trainer_image(
            "nvidia.com/gpu"), trainer_args=["--dataset", "gs://b/r/d@1.0.0"], workers=3,
            namespace="ns", placement=placement, service_account="default-editor",
            run_id="run-1", owner=owner, credentials=credentials)  # fmt: skip
        made += [render_trainjob(job), render_tfjob(job)]
    made += data_service.objects(
        "tfrs-train-x-data", 2, images.COMPONENT_IMAGE, service_account="default-editor",
        labels={"tfrecord-suite/run": "run-1"}, owner=owner,
        credentials=Credentials("storage", "gcs-key", "regcred"),
        clients=run_trainers("run-1", "run-1"),
    )  # fmt: skip
    lease = Lease(object(), "tfrs-train-x-lease", images.COMPONENT_IMAGE, namespace="ns",
                  run_id="run-1", owner={"apiVersion": "v1", "kind": "Pod", "name": "step",
                                         "uid": "p"})  # fmt: skip
    made.append(lease.body())
    return made


def _merge_named(base: list[Any], patch: list[Any]) -> list[Any]:
    """Lists of named objects (containers, volumes, env) merged by name; others replaced."""
    if not all(isinstance(x, dict) and "name" in x for x in [*base, *patch]):
        return copy.deepcopy(patch)
    out = {x["name"]: copy.deepcopy(x) for x in base}
    for item in patch:
        out[item["name"]] = _merge(out.get(item["name"], {}), item)
    return list(out.values())


def _merge(base: Any, patch: Any) -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        out = copy.deepcopy(base)
        for key, value in patch.items():
            out[key] = _merge(base.get(key), value) if key in base else copy.deepcopy(value)
        return out
    if isinstance(base, list) and isinstance(patch, list):
        return _merge_named(base, patch)
    return copy.deepcopy(patch)


def trainjob_node_pod(trainjob: dict[str, Any], runtime: dict[str, Any]) -> dict[str, Any]:
    """The pod template of a TrainJob's nodes: its runtime's, with the TrainJob's runtime patch
    merged in (named list items by name) and its trainer's image, command, arguments,
    environment and resources on the trainer container, as Kubeflow Trainer makes it. A
    restatement for checking what the pods would be; the one-node cluster runs the real one."""
    from tfrecord_suite.launch.trainjob import NODE

    (job,) = [j for j in runtime["spec"]["template"]["spec"]["replicatedJobs"]
              if j["name"] == NODE]  # fmt: skip
    pod = copy.deepcopy(job["template"]["spec"]["template"])
    for patch in trainjob["spec"].get("runtimePatches", []):
        for replicated in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
            if replicated["name"] == NODE:
                pod = _merge(pod, replicated["template"]["spec"]["template"])
    trainer = trainjob["spec"]["trainer"]
    (container,) = [c for c in pod["spec"]["containers"] if c["name"] == NODE]
    container.update({k: trainer[k] for k in ("image", "command", "args") if k in trainer})
    container["env"] = _merge_named(container.get("env", []), trainer.get("env", []))
    container["resources"] = trainer.get("resourcesPerNode", {})
    return pod


def pod_templates(docs: list[dict[str, Any]], runtime: dict[str, Any] | None = None
                  ) -> dict[str, dict[str, Any]]:  # fmt: skip
    """``"Kind/name[/replica]" -> pod template`` (``metadata`` and ``spec``) of every object
    in ``docs`` that makes pods: workloads (a StatefulSet's claim templates become its pod's
    volumes), the lease Job, CronJobs, TFJob replicas, the runtime's nodes, and a TrainJob's
    nodes (on ``runtime``, the ClusterTrainingRuntime it names)."""
    out = {}
    for doc in docs:
        kind, name = doc["kind"], doc["metadata"]["name"]
        spec = doc.get("spec") or {}
        if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
            template = copy.deepcopy(spec["template"])
            for claim in spec.get("volumeClaimTemplates", []):
                claim_name = claim["metadata"]["name"]
                template["spec"].setdefault("volumes", []).append(
                    {"name": claim_name,
                     "persistentVolumeClaim": {"claimName": f"{claim_name}-{name}-0"}})  # fmt: skip
            out[f"{kind}/{name}"] = template
        elif kind == "CronJob":
            out[f"{kind}/{name}"] = spec["jobTemplate"]["spec"]["template"]
        elif kind == "TFJob":
            for replica, replica_spec in spec["tfReplicaSpecs"].items():
                out[f"{kind}/{name}/{replica}"] = replica_spec["template"]
        elif kind == "ClusterTrainingRuntime":
            for job in spec["template"]["spec"]["replicatedJobs"]:
                out[f"{kind}/{name}/{job['name']}"] = job["template"]["spec"]["template"]
        elif kind == "TrainJob" and runtime is not None:
            out[f"{kind}/{name}"] = trainjob_node_pod(doc, runtime)
    return out
