"""The k8s/ manifests as a cluster would get them.

``render(target)`` is ``kubectl kustomize`` (kustomize v5) where kubectl is installed.
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
    """The kubectl binary (it embeds kustomize), if installed."""
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
