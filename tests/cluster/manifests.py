"""Upstream's manifests made to fit this cluster, shared by the add-ons (``addons.py``) and
Kubeflow Pipelines (``kubeflow_pipelines.py``): copied out of Go's read-only module cache, their
remote resources pointed at the local copies, their CPU requests capped for the one node."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import yaml

from cluster.host import ClusterError

#: The most CPU an add-on's container may request. The node has two CPUs for everything: as
#: shipped, JobSet's controller asks for 500m and Kubeflow Pipelines' deployments for ~700m
#: together, which would leave too little for the pods under test to be scheduled. A request
#: reserves CPU, it does not use or limit it, so capping it changes where pods fit, not how
#: the add-ons run (their limits stay as shipped).
ADDON_CPU_REQUEST = "50m"


def small_node(stream: str) -> str:
    """An add-on's manifests with each container's CPU request capped at
    :data:`ADDON_CPU_REQUEST` (docs/how-to/one-node-cluster.md lists this change)."""
    from kubernetes.utils.quantity import parse_quantity

    cap = parse_quantity(ADDON_CPU_REQUEST)
    documents = [d for d in yaml.safe_load_all(stream) if d]
    for document in documents:
        pod = (document.get("spec") or {}).get("template", {}).get("spec", {})
        for container in [*pod.get("containers", []), *pod.get("initContainers", [])]:
            requests = (container.get("resources") or {}).get("requests") or {}
            if "cpu" in requests and parse_quantity(requests["cpu"]) > cap:
                requests["cpu"] = ADDON_CPU_REQUEST
    return yaml.safe_dump_all(documents, sort_keys=False)


def module_dir(module: str) -> Path:
    """The folder of a Go module (``path@version``) in Go's module cache, downloaded first."""
    out = subprocess.run(
        ["go", "mod", "download", "-json", module],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "GOFLAGS": "-mod=mod"},
    ).stdout
    return Path(json.loads(out)["Dir"])


def copy_writable(source: Path, target: Path) -> Path:
    """Copy a folder out of a read-only cache (Go's modules) so kustomize files can be edited."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    for path in [target, *target.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    return target


def point_at_copy(kustomization: Path, remote: str, local: str) -> None:
    """Replace one remote resource of a kustomization (a GitHub URL, unreachable here) with the
    local copy of the same files; fail where the kustomization no longer names it."""
    text = kustomization.read_text()
    if remote not in text:
        raise ClusterError(f"{kustomization} no longer names {remote}: see what it installs")
    kustomization.write_text(text.replace(remote, local))
