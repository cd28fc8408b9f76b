"""What runs on the one-node cluster besides the node: cluster DNS, JobSet and the Kubeflow
Trainer, and Kubeflow Pipelines (``kfp.py``), each installed from its project's own manifests
with the images built here (``images.py``), as steps of :func:`node.up`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from cluster import host
from cluster.host import ClusterError
from cluster.node import Cluster, Step
from realparts import controlplane

REPO = Path(__file__).resolve().parent.parent.parent


def steps(trainer: bool, kfp: bool) -> list[Step]:
    """The add-ons' steps, in order (DNS always)."""
    out = [Step("cluster DNS", install_dns)]
    if trainer:
        out.append(Step("JobSet and Trainer", install_trainer))
    if kfp:
        from cluster import kubeflow_pipelines

        out += kubeflow_pipelines.steps()
    return out


# -------------------------------------------------------------------------------------- DNS


def install_dns(cluster: Cluster) -> None:
    """CoreDNS as kubeadm installs it, answering ``cluster.local`` only (``config/coredns.yaml``)."""
    text = host.substitute(
        (host.CONFIG / "coredns.yaml").read_text(),
        IMAGE=cluster.system_images["coredns"],
        DNS_IP=host.DNS_IP,
    )
    cluster.apply(text)
    cluster.kubectl("-n", "kube-system", "rollout", "status", "deployment/coredns",
                    "--timeout=180s")  # fmt: skip


# ---------------------------------------------------------------------------------- Trainer


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


def trainer_manifests(cluster: Cluster) -> str:
    """The Trainer's standalone install (its ``overlays/manager``, JobSet included) as one stream.

    The overlay takes JobSet from a GitHub release URL, which cannot be reached here; that
    release file is JobSet's ``config/default`` built with its image set, and JobSet's module
    holds that kustomization. So both modules' manifests are copied out of the module cache and
    the overlay's one remote resource is pointed at the copy; nothing else differs.
    """
    pins = controlplane.versions()
    root = cluster.state / "manifests"
    trainer = copy_writable(
        module_dir(f"github.com/kubeflow/trainer/v2@{pins['TRAINER_VERSION']}") / "manifests",
        root / "trainer",
    )
    copy_writable(module_dir(f"sigs.k8s.io/jobset@{pins['JOBSET_VERSION']}") / "config",
                  root / "jobset")  # fmt: skip
    third_party = trainer / "third-party" / "jobset" / "kustomization.yaml"
    release = (
        "https://github.com/kubernetes-sigs/jobset/releases/download/"
        f"{pins['JOBSET_VERSION']}/manifests.yaml"
    )
    point_at_copy(third_party, release, "../../../jobset/default")
    name, tag = cluster.system_images["jobset"].rsplit(":", 1)
    # config/default names its image controller:latest (the release sets it)
    point_at_copy(
        third_party, "images:\n", f"images:\n  - name: controller\n    newName: {name}\n"
        f"    newTag: {tag}\n",
    )  # fmt: skip
    return cluster.kubectl("kustomize", str(trainer / "overlays" / "manager")).stdout


def install_trainer(cluster: Cluster) -> None:
    """JobSet, the Trainer's controller and CRDs, and our ClusterTrainingRuntime; wait for them."""
    cluster.apply(trainer_manifests(cluster))
    for deployment in ("jobset-controller-manager", "kubeflow-trainer-controller-manager"):
        cluster.kubectl("-n", "kubeflow-system", "rollout", "status", f"deployment/{deployment}",
                        "--timeout=300s")  # fmt: skip
    runtime = cluster.kubectl("kustomize", str(REPO / "k8s" / "trainer-runtime")).stdout
    # the webhooks answer a little after the deployments are ready
    cluster.wait(
        "the TensorFlow ClusterTrainingRuntime (the Trainer's webhook)",
        lambda: cluster.kubectl("apply", "--server-side", "--field-manager=tfrs-cluster",
                                "-f", "-", stdin=runtime, check=False).returncode == 0,
        120,
    )  # fmt: skip
