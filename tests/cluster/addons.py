"""What runs on the one-node cluster besides the node: cluster DNS, the NetworkPolicy engine,
JobSet and the Kubeflow Trainer, and Kubeflow Pipelines (``kubeflow_pipelines.py``), each
installed from its project's own manifests with the images built here (``images.py``), as steps
of :func:`node.up`."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import yaml

from cluster import host, images, kubeflow_pipelines
from cluster.bringup import Cluster, Step
from cluster.manifests import copy_writable, module_dir, point_at_copy, small_node
from realparts.parts import ensure_built, versions

REPO = Path(__file__).resolve().parent.parent.parent


def steps(trainer: bool, kfp: bool) -> list[Step]:
    """The add-ons' steps, in order (DNS always)."""
    out = [Step("cluster DNS", install_dns), Step("NetworkPolicy engine", install_network_policies)]
    if trainer:
        out.append(Step("JobSet and Trainer", install_trainer))
    if kfp:
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


# ----------------------------------------------------------------------- NetworkPolicy engine

#: The engine's patch for this kernel (its header says why), and what names its image.
NETPOL = Path(__file__).resolve().parent / "netpol"
#: The nftables table the engine keeps its rules in (``host.FOREIGN_TABLES``: removed with the
#: network when the cluster goes down).
NETPOL_TABLE = ("inet", "kube-network-policies")


def network_policy_image() -> str:
    """The engine's image: ours, not upstream's (built from the patched source), tagged with the
    pinned version and the patch's digest."""
    version = versions()["KUBE_NETWORK_POLICIES_VERSION"]
    return f"localhost/tfrs-cluster/kube-network-policies:{version}-{images.content_tag(NETPOL)}"


def build_network_policy_image() -> str:
    """Build the engine where podman lacks its image: the module's source at the pinned version,
    ``netpol/nfqueue-compat.patch`` applied, its command built as upstream's Dockerfile builds
    it (static, ``/bin/netpol``), run as root as upstream's distroless image is.

    build.sh's ``bin/netpol`` is the unpatched build, which cannot write its rules on this
    kernel; its ``install.yaml`` is what :func:`network_policy_manifests` deploys.
    """
    image = network_policy_image()
    if images.exists(image):
        return image
    version = versions()["KUBE_NETWORK_POLICIES_VERSION"]
    module = module_dir(f"sigs.k8s.io/kube-network-policies@{version}")
    with tempfile.TemporaryDirectory(prefix="tfrs-netpol-") as tmp:
        source = copy_writable(module, Path(tmp) / "source")
        # outside a repository, `git apply` applies a patch as `patch -p1` would, and refuses
        # one that no longer applies cleanly
        subprocess.run(["git", "apply", str(NETPOL / "nfqueue-compat.patch")], cwd=source,
                       check=True, capture_output=True)  # fmt: skip
        binary = images.go_build(source, "./cmd", Path(tmp) / "netpol", goflags="-mod=mod")
        images.build_rootfs(image, {"/bin/netpol": binary}, user="0", cmd=["/bin/netpol"])
    return image


def network_policy_manifests(image: str) -> str:
    """Upstream's ``install.yaml`` (kept by build.sh beside the engine), changed only where this
    cluster needs it; each change says why."""
    source = ensure_built("kube-network-policies") / "install.yaml"
    docs = [d for d in yaml.safe_load_all(source.read_text()) if d]
    (daemonset,) = [d for d in docs if d["kind"] == "DaemonSet"]
    pod = daemonset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    # v0.8.0's install.yaml still names the v0.7.0 image; and ours is the patched build
    container["image"] = image
    # The API server refuses privileged containers (kube-apiserver's --allow-privileged is off
    # by default, and tests/realparts/controlplane.py leaves it off). The engine needs no more
    # than the NET_ADMIN capability upstream adds beside it, in the host's network namespace
    # (hostNetwork): nftables and the nfnetlink queue are both netlink, gated by NET_ADMIN.
    del container["securityContext"]["privileged"]
    # The two host folders serve the engine's NRI client alone (pods' IPs straight from the
    # runtime, before the API server has them: kubernetes/kubernetes#85966). Our containerd
    # runs with NRI off (config/containerd.toml): no socket at /var/run/nri, pods' network
    # namespaces under the state folder, not /var/run/netns; and containerd would create the
    # missing /var/run/nri on the host. Without them the client fails to connect, says so in the
    # log ("nri plugin exited"), and the engine takes pods' IPs from the API server alone: a
    # pod's first packets, sent before its IP is published, can meet a policy that does not know
    # it yet. (--disable-nri would say the same, but v0.8.0 parses it and never uses it: main.go
    # does not hand it to the controller's Config.)
    nri = {"nri-plugin", "netns"}
    pod["volumes"] = [v for v in pod["volumes"] if v["name"] not in nri]
    container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] not in nri]
    return yaml.safe_dump_all(docs, sort_keys=False)


def install_network_policies(cluster: Cluster) -> None:
    """kube-network-policies (SIG Network's reference NetworkPolicy engine) on the node, from
    upstream's DaemonSet; wait until its pod is ready and its rules are in the kernel."""
    image = build_network_policy_image()
    cluster.load_images([image])
    cluster.apply(small_node(network_policy_manifests(image)))
    cluster.kubectl("-n", "kube-system", "rollout", "status", "daemonset/kube-network-policies",
                    "--timeout=180s")  # fmt: skip
    cluster.wait(
        "the NetworkPolicy engine's nftables table",
        lambda: host.run("nft", "list", "table", *NETPOL_TABLE, check=False).returncode == 0,
        120,
    )


# ---------------------------------------------------------------------------------- Trainer


def trainer_manifests(cluster: Cluster) -> str:
    """The Trainer's standalone install (its ``overlays/manager``, JobSet included) as one stream.

    The overlay takes JobSet from a GitHub release URL, which cannot be reached here; that
    release file is JobSet's ``config/default`` built with its image set, and JobSet's module
    holds that kustomization. So both modules' manifests are copied out of the module cache and
    the overlay's one remote resource is pointed at the copy; nothing else differs.
    """
    pins = versions()
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
    cluster.apply(small_node(trainer_manifests(cluster)))
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
