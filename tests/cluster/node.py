"""A one-node Kubernetes cluster on this machine: ``make cluster-up`` / ``make cluster-down``.

Everything is built from published sources by ``tests/realparts/build.sh`` (versions pinned in
``tests/realparts/versions.env``; ``tests/realparts/parts.py`` finds and builds each part) and
started here, one step after another (:data:`STEPS`, run by :func:`up` through
``bringup.run_steps``, which times each, reports it and saves the state after it, as kind's
create actions do):

* the control plane of ``tests/realparts/controlplane.py`` (etcd, kube-apiserver with RBAC, Node
  authorization and the default admission plugins, kube-controller-manager, kube-scheduler),
  listening on the node's bridge address so that pods reach it as ``kubernetes.default``;
* containerd (with runc) and the kubelet, joined as node :data:`host.NODE_NAME`, with its client
  certificate and the API server's certificate for the kubelet's own port;
* pod networking on a bridge of our own and the service network by kube-proxy in nftables mode
  (``host.py`` says what that changes on the machine);
* the add-ons of ``addons.py``: CoreDNS, the NetworkPolicy engine, JobSet and the Kubeflow
  Trainer; and Kubeflow Pipelines (``kubeflow_pipelines.py``).

The parts' configuration files are in ``config/`` beside this module, with ``${NAME}``
placeholders filled in when they are written into the state folder.

The running cluster and its state folder are ``bringup.Cluster`` (``bringup.py``); the
certificates its parts use are issued by the control plane's CA
(``tests/realparts/certificates.py``). Every process is started in a session of its own and
outlives the one that started it.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from cluster import addons, host, images
from cluster.bringup import Cluster, Step, run_steps, state_dir
from cluster.host import NODE_IP, NODE_NAME
from realparts import controlplane
from realparts.certificates import CertificateAuthority, write_pair
from realparts.parts import ensure_built, versions
from realparts.processes import free_ports

#: Processes in the order they start; :func:`down` stops them in reverse.
PROCESSES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "containerd",
    "kubelet",
    "kube-proxy",
)
# --------------------------------------------------------------------------------- the steps


def _control_plane(cluster: Cluster) -> None:
    pki = cluster.state / "pki"
    ca = CertificateAuthority()
    kubelet_client = write_pair(
        pki, "apiserver-kubelet-client",
        ca.issue("kube-apiserver-kubelet-client", ("system:masters",)),
    )  # fmt: skip
    cluster.plane = controlplane.start(
        cluster.state / "control-plane",
        ensure_built("kubernetes"),
        ensure_built("etcd"),
        address=NODE_IP,
        ca=ca,
        extra_args={
            "kube-apiserver": [
                f"--kubelet-client-certificate={kubelet_client[0]}",
                f"--kubelet-client-key={kubelet_client[1]}",
                "--kubelet-preferred-address-types=InternalIP",
                # a real address: the API server keeps `kubernetes.default`'s endpoints
                "--endpoint-reconciler-type=lease",
            ],
            # a real node: the node lifecycle controller runs as in any cluster
            "kube-controller-manager": ["--controllers=*"],
        },
        # the cluster outlives `make cluster-up`
        die_with_parent=False,
    )
    cluster.pids.update({name: p.pid for name, p in cluster.plane.processes.items()})


def _ca(cluster: Cluster) -> CertificateAuthority:
    workdir = cluster.control_plane.workdir
    return CertificateAuthority.read(workdir / "ca.crt", workdir / "ca.key")


def _node_env(state: Path) -> dict[str, str]:
    """The environment of containerd, the kubelet and kube-proxy.

    containerd finds its shim, the shim its runc, on ``PATH``. And ``PATH`` holds no
    ``iptables``: where it finds one, the kubelet adds chains and a rule of its own to the
    host's ``filter`` table (``KUBE-FIREWALL`` in ``INPUT`` and ``OUTPUT``) and kube-proxy
    cleans up other modes' iptables chains; the host's tables are not the cluster's to change.
    kube-proxy needs ``nft``, which sits beside ``iptables`` in ``/usr/sbin``, so it gets a
    folder of its own.
    """
    tools = state / "bin"
    tools.mkdir(exist_ok=True)
    nft = tools / "nft"
    if not nft.exists():
        nft.symlink_to(shutil.which("nft") or "/usr/sbin/nft")
    path = [tools, ensure_built("containerd") / "bin", ensure_built("runc") / "bin"]
    return {**os.environ, "PATH": ":".join([*map(str, path), "/usr/local/bin", "/usr/bin", "/bin"])}


def _containerd(cluster: Cluster) -> None:
    """containerd with runc and the CNI bridge (``config/containerd.toml``, ``cni.conflist``).

    The CNI bridge is not the pods' gateway (the plugin would then switch on the host-wide
    ``ip_forward``; the bridge already has the node's address), and a pod gets a route to the
    service network only, no default route: it reaches pods, Services and the node.
    """
    state, run = cluster.state, cluster.state / "run"
    cni = state / "cni"
    (cni / "net.d").mkdir(parents=True, exist_ok=True)
    host.render(Path("cni.conflist"), cni / "net.d" / "10-tfrs.conflist", BRIDGE=host.BRIDGE,
                IPAM_DIR=cni / "ipam", POD_CIDR=host.POD_CIDR, NODE_IP=NODE_IP,
                SERVICE_CIDR=controlplane.SERVICE_CIDR)  # fmt: skip
    config = host.render(
        Path("containerd.toml"), state / "containerd.toml", STATE=state, RUN=run,
        PAUSE_IMAGE=cluster.system_images["pause"], RUNC=ensure_built("runc") / "bin" / "runc",
        CNI_BIN=ensure_built("cni-plugins") / "bin", CNI_CONF=cni / "net.d",
    )  # fmt: skip
    binary = ensure_built("containerd") / "bin" / "containerd"
    cluster.spawn("containerd", [str(binary), "--config", str(config)], _node_env(state))
    cluster.wait("containerd", lambda: cluster.containerd_socket.exists() and cluster.ctr("version"),
                 60, "containerd")  # fmt: skip
    cluster.load_images(list(cluster.system_images.values()))


def _kubelet(cluster: Cluster) -> None:
    state, plane = cluster.state, cluster.control_plane
    pki, ca = state / "pki", _ca(cluster)
    client_cert = write_pair(
        pki, "kubelet-client", ca.issue(f"system:node:{NODE_NAME}", ("system:nodes",))
    )
    write_pair(pki, "kubelet-serving", ca.issue(NODE_NAME, hosts=(NODE_IP, NODE_NAME), server=True))
    kubeconfig = _kubeconfig(plane, *client_cert, state / "kubelet.kubeconfig")
    (state / "resolv.conf").write_text("# pods get cluster DNS only (nothing is forwarded)\n")
    port, healthz_port = free_ports(2)
    config = host.render(
        Path("kubelet.yaml"), state / "kubelet.yaml", NODE_IP=NODE_IP, PORT=port,
        HEALTHZ_PORT=healthz_port, PKI=pki, CA_FILE=plane.ca_file, STATE=state,
        CLUSTER_DOMAIN=controlplane.CLUSTER_DOMAIN, DNS_IP=host.DNS_IP,
    )  # fmt: skip
    cluster.spawn(
        "kubelet",
        [
            str(ensure_built("kubernetes-node") / "bin" / "kubelet"),
            f"--config={config}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={state / 'kubelet'}",
            f"--hostname-override={NODE_NAME}",
            f"--node-ip={NODE_IP}",
            "--v=1",
        ],
        _node_env(state),
    )
    try:
        cluster.wait("the kubelet's node", lambda: _node_ready(cluster), 180, "kubelet")
    finally:
        # the kubelet has set its kernel tunables by now: the host gets its own back
        host.restore_sysctls(cluster.sysctls)


def _node_ready(cluster: Cluster) -> bool:
    from kubernetes import client

    node = client.CoreV1Api(cluster.api_client()).read_node(NODE_NAME)
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def _kube_proxy(cluster: Cluster) -> None:
    state, plane = cluster.state, cluster.control_plane
    cert = write_pair(state / "pki", "kube-proxy", _ca(cluster).issue("system:kube-proxy"))
    healthz_port, metrics_port = free_ports(2)
    config = host.render(
        Path("kube-proxy.yaml"), state / "kube-proxy.yaml",
        KUBECONFIG=_kubeconfig(plane, *cert, state / "kube-proxy.kubeconfig"),
        NODE_NAME=NODE_NAME, POD_CIDR=host.POD_CIDR, NODE_IP=NODE_IP,
        HEALTHZ_PORT=healthz_port, METRICS_PORT=metrics_port,
    )  # fmt: skip
    binary = ensure_built("kubernetes-node") / "bin" / "kube-proxy"
    cluster.spawn("kube-proxy", [str(binary), f"--config={config}", "--v=1"], _node_env(state))
    cluster.wait(
        "kube-proxy's rules for the kubernetes Service",
        lambda: "10.96.0.1" in host.run("nft", "list", "table", "ip", "kube-proxy").stdout,
        90,
        "kube-proxy",
    )


def _kubeconfig(plane: controlplane.ControlPlane, cert: Path, key: Path, path: Path) -> Path:
    user = {"client-certificate": str(cert), "client-key": str(key)}
    path.write_text(controlplane.kubeconfig_text(plane.url, plane.ca_file, user))
    return path


# ------------------------------------------------------------------------------ system images


def system_images() -> dict[str, str]:
    """``part -> image name`` of the cluster's own images (the upstream names)."""
    pins = versions()
    pause_tag = (ensure_built("pause") / "TAG").read_text().strip()
    return {
        "pause": f"registry.k8s.io/pause:{pause_tag}",
        "coredns": f"registry.k8s.io/coredns/coredns:{pins['COREDNS_VERSION']}",
        "jobset": f"registry.k8s.io/jobset/jobset:{pins['JOBSET_VERSION']}",
        "trainer": f"ghcr.io/kubeflow/trainer/trainer-controller-manager:{pins['TRAINER_VERSION']}",
    }


def build_system_images() -> dict[str, str]:
    """Build the images of :func:`system_images` that podman does not hold yet."""
    names = system_images()
    binaries = {
        "pause": (ensure_built("pause") / "bin" / "pause", "/pause", "65535"),
        "coredns": (ensure_built("coredns") / "bin" / "coredns", "/coredns", images.NONROOT),
        "jobset": (ensure_built("jobset") / "bin" / "jobset", "/manager", images.NONROOT),
        "trainer": (
            ensure_built("trainer") / "bin" / "trainer-controller-manager",
            "/manager",
            images.NONROOT,
        ),
    }
    for key, image in names.items():
        binary, path, user = binaries[key]
        images.build_static(image, binary, path, user)
    # not a system image: the tests' network probe, small enough to load with them
    names["probe"] = images.build_probe()
    return names


def _system_images(cluster: Cluster) -> None:
    cluster.system_images = build_system_images()


# -------------------------------------------------------------------------------------- up


def _preflight(cluster: Cluster) -> None:
    host.preflight()


def _network(cluster: Cluster) -> None:
    cluster.sysctls = host.read_sysctls()
    host.network_up(cluster.state)


#: The node itself, in order; :func:`up` runs the add-ons' steps after these.
STEPS = (
    Step("preflight", _preflight),
    Step("system images", _system_images),
    Step("network", _network),
    Step("control plane", _control_plane),
    Step("containerd", _containerd),
    Step("kubelet", _kubelet),
    Step("kube-proxy", _kube_proxy),
)


def up(
    state: Path | None = None,
    trainer: bool = True,
    kfp: bool = True,
    suite_images: tuple[str, ...] = (),
) -> Cluster:
    """Bring the cluster up, or take the one running from ``state`` on: run every step it has
    not done yet, the add-ons asked for included."""
    state = state or state_dir()
    cluster = Cluster.load(state)
    if cluster is not None and not all(cluster.alive().values()):
        down(state)
        cluster = None
    if cluster is None:
        for sub in ("logs", "run", "pki", "tmp", "pod-logs"):
            (state / sub).mkdir(parents=True, exist_ok=True)
        cluster = Cluster(state)
    started = time.monotonic()
    steps = [*STEPS, *addons.steps(trainer=trainer, kfp=kfp)]
    todo = [s.name for s in steps if s.name not in cluster.steps]
    run_steps(cluster, steps)
    if suite_images:  # each time: it loads only what changed
        cluster.load_images(list(suite_images))
    if todo:
        print(f"cluster up in {time.monotonic() - started:.0f} s; "
              f"KUBECONFIG={cluster.control_plane.admin_kubeconfig}")  # fmt: skip
    return cluster


def add(cluster: Cluster, trainer: bool = False, kfp: bool = False) -> Cluster:
    """Install the add-ons asked for on a running cluster, where not done yet."""
    run_steps(cluster, addons.steps(trainer=trainer, kfp=kfp))
    return cluster


# ------------------------------------------------------------------------------------- down

#: What the cluster runs (anything else naming the state folder, a `tail -f` of a log, is left).
_PROGRAMS = {*PROCESSES, "containerd-shim-runc-v2"}


def down(state: Path | None = None) -> None:
    """Stop everything :func:`up` started and remove what it made; safe to repeat."""
    state = state or state_dir()
    cluster = Cluster.load(state)
    pids = cluster.pids if cluster else {}
    for name in ("kube-proxy", "kubelet"):
        if name in pids:
            host.kill(pids[name], name)
    host.kill_pods()
    if "containerd" in pids:
        host.kill(pids["containerd"], "containerd")
    for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
        if name in pids:
            host.kill(pids[name], name)
    for pid, program in host.processes_naming(state, _PROGRAMS).items():
        host.kill(pid, program, timeout=5)  # shims, and what a failed start left
    host.kill_pods()
    host.network_down()
    if cluster is not None and cluster.sysctls:
        host.restore_sysctls(cluster.sysctls)
    if state.exists():
        host.unmount_under(state)
        shutil.rmtree(state, ignore_errors=True)
