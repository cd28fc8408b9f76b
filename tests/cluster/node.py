"""A one-node Kubernetes cluster on this machine: ``make cluster-up`` / ``make cluster-down``.

Everything is built from published sources by ``tests/realparts/build.sh`` (versions pinned in
``tests/realparts/versions.env``) and started here, one step after another (:data:`STEPS`, run by
:func:`up`, which times each, reports it and saves the state after it, as kind's create
actions do):

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

State (processes, certificates, kubeconfigs, containerd's images) lives in one folder,
``$TFRS_CLUSTER_DIR`` (default ``/var/lib/tfrecord-suite/cluster``); ``state.json`` there lets
another process (a test session, ``cluster-down``) find the running cluster. Every process is
started in a session of its own and outlives the one that started it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cluster import host, images
from cluster.host import NODE_IP, NODE_NAME, ClusterError
from realparts import controlplane, processes
from realparts.processes import free_port

STATE_ENV = "TFRS_CLUSTER_DIR"
DEFAULT_STATE = Path("/var/lib/tfrecord-suite/cluster")
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
#: Parts of build.sh the cluster runs.
PARTS = {
    "etcd": "ETCD_VERSION",
    "kubernetes": "KUBERNETES_VERSION",
    "kubernetes-node": "KUBERNETES_VERSION",
    "pause": "KUBERNETES_VERSION",
    "containerd": "CONTAINERD_VERSION",
    "runc": "RUNC_VERSION",
    "cni-plugins": "CNI_PLUGINS_VERSION",
    "coredns": "COREDNS_VERSION",
    "jobset": "JOBSET_VERSION",
    "trainer": "TRAINER_VERSION",
    "seaweedfs": "SEAWEEDFS_VERSION",
    "kfp": "KFP_VERSION",
    "kfp-ui": "KFP_VERSION",
    "argo": "ARGO_VERSION",
    "grpcwebproxy": "GRPC_WEB_VERSION",
    "kube-network-policies": "KUBE_NETWORK_POLICIES_VERSION",
}
#: The parts whose build.sh name is not their folder's
BUILD_NAMES = {"kfp": "kfp-backend"}


def state_dir() -> Path:
    """``$TFRS_CLUSTER_DIR`` or the default."""
    return Path(os.environ.get(STATE_ENV) or DEFAULT_STATE)


def part(name: str) -> Path:
    """The built folder of a part (``build.sh`` builds it first when it is missing)."""
    folder = controlplane.cache_root() / f"{name}-{controlplane.versions()[PARTS[name]]}"
    if not (folder / ".complete").exists():
        controlplane.build(BUILD_NAMES.get(name, name))
    return folder


# ------------------------------------------------------------------------------ the running one


@dataclasses.dataclass
class Cluster:
    """A cluster, running or being brought up: its state folder, control plane and processes.

    Attributes:
        state: The state folder.
        plane: The control plane (None until its step has run).
        pids: Each started process's id.
        system_images: ``part -> image`` of the cluster's own images (:func:`system_images`).
        loaded_ids: podman's image ID of each image loaded into the node.
        steps: ``step -> seconds it took`` of each step done, in order.
        sysctls: The host's kernel tunables before the kubelet started.

    """

    state: Path
    plane: controlplane.ControlPlane | None = None
    pids: dict[str, int] = dataclasses.field(default_factory=dict)
    system_images: dict[str, str] = dataclasses.field(default_factory=dict)
    loaded_ids: dict[str, str] = dataclasses.field(default_factory=dict)
    steps: dict[str, float] = dataclasses.field(default_factory=dict)
    sysctls: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def control_plane(self) -> controlplane.ControlPlane:
        """The control plane (an error before its step has run)."""
        if self.plane is None:
            raise ClusterError("the control plane has not been started")
        return self.plane

    @property
    def containerd_socket(self) -> Path:
        return self.state / "run" / "containerd.sock"

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> Any:
        """The built ``kubectl`` as the cluster's admin."""
        return self.control_plane.kubectl(*args, stdin=stdin, check=check)

    def apply(self, stream: str, manager: str = "tfrs-cluster") -> None:
        """``kubectl apply --server-side`` of a YAML or JSON stream, as the admin."""
        self.kubectl("apply", "--server-side", "--force-conflicts", f"--field-manager={manager}",
                     "-f", "-", stdin=stream)  # fmt: skip

    def api_client(self, **kwargs: Any) -> Any:
        """A ``kubernetes`` client as the admin (see ``ControlPlane.api_client``)."""
        return self.control_plane.api_client(**kwargs)

    def ctr(self, *args: str) -> str:
        """``ctr`` against the cluster's containerd, namespace ``k8s.io``."""
        return subprocess.run(
            [str(part("containerd") / "bin" / "ctr"), "--address", str(self.containerd_socket),
             "--namespace", "k8s.io", *args],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip

    def load_images(self, names: list[str]) -> None:
        """Load these images from podman's storage into the node where it lacks them or holds
        an older build (podman's image ID differs from the one loaded)."""
        ctr = part("containerd") / "bin" / "ctr"
        have = images.loaded(ctr, self.containerd_socket)
        ids = {n: images.image_id(n) for n in names}
        stale = [n for n in names if n not in have or self.loaded_ids.get(n) != ids[n]]
        if stale:
            images.load(stale, ctr, self.containerd_socket)
            self.loaded_ids.update({n: ids[n] for n in stale})
            self.save()

    def image_digest(self, name: str) -> str:
        """The digest the node's containerd holds the loaded image ``name`` by (tagged
        ``REPO@DIGEST`` there: :func:`images.pin`)."""
        return images.pin(part("containerd") / "bin" / "ctr", self.containerd_socket, name)

    def alive(self) -> dict[str, bool]:
        """Whether each of its processes still runs."""
        return {name: host.running(pid, name) for name, pid in self.pids.items()}

    def log(self, name: str) -> str:
        """The last lines of a process's log."""
        return processes.log_tail(self.state / "logs" / f"{name}.log")

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        """Start one of the cluster's processes; it outlives the process that started it."""
        log = self.state / "logs" / f"{name}.log"
        self.pids[name] = processes.spawn(argv, log, env, die_with_parent=False).pid
        self.save()

    def wait(self, what: str, ready: Callable[[], Any], timeout: float, process: str = "") -> None:
        """Wait until ``ready()``; where ``process`` is named, fail as soon as it exits."""
        try:
            processes.wait_for(
                ready,
                timeout,
                what,
                alive=(lambda: self.alive()[process]) if process else None,
                log=(lambda: self.log(process)) if process else None,
                interval=1,
            )
        except processes.WaitError as exc:
            raise ClusterError(str(exc)) from None

    def save(self) -> None:
        plane = self.plane
        saved: dict[str, Any] = {
            "pids": self.pids,
            "system_images": self.system_images,
            "loaded_ids": self.loaded_ids,
            "steps": self.steps,
            "sysctls": self.sysctls,
        }
        if plane is not None:
            saved["plane"] = {
                "url": plane.url,
                "workdir": str(plane.workdir),
                "bin_dir": str(plane.bin_dir),
                "ca_file": str(plane.ca_file),
                "admin_kubeconfig": str(plane.admin_kubeconfig),
            }
        (self.state / "state.json").write_text(json.dumps(saved, indent=2))

    @classmethod
    def load(cls, state: Path | None = None) -> Cluster | None:
        """The cluster whose state is in ``state``, or None where there is none."""
        state = state or state_dir()
        path = state / "state.json"
        if not path.exists():
            return None
        saved = json.loads(path.read_text())
        plane = None
        if "plane" in saved:
            paths = {k: Path(v) for k, v in saved["plane"].items() if k != "url"}
            plane = controlplane.ControlPlane(url=saved["plane"]["url"], **paths)
        return cls(state, plane, saved["pids"], saved["system_images"], saved["loaded_ids"],
                   saved["steps"], saved["sysctls"])  # fmt: skip


# --------------------------------------------------------------------------------- the steps


def _control_plane(cluster: Cluster) -> None:
    pki = cluster.state / "pki"
    ca = controlplane._CA()
    kubelet_client = _write_cert(
        pki, "apiserver-kubelet-client",
        ca.issue("kube-apiserver-kubelet-client", ("system:masters",)),
    )  # fmt: skip
    cluster.plane = controlplane.start(
        cluster.state / "control-plane",
        part("kubernetes"),
        part("etcd"),
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


def _ca(cluster: Cluster) -> controlplane._CA:
    workdir = cluster.control_plane.workdir
    return controlplane._CA.load(
        (workdir / "ca.crt").read_bytes(), (workdir / "ca.key").read_bytes()
    )


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
    path = [tools, part("containerd") / "bin", part("runc") / "bin"]
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
        PAUSE_IMAGE=cluster.system_images["pause"], RUNC=part("runc") / "bin" / "runc",
        CNI_BIN=part("cni-plugins") / "bin", CNI_CONF=cni / "net.d",
    )  # fmt: skip
    binary = part("containerd") / "bin" / "containerd"
    cluster.spawn("containerd", [str(binary), "--config", str(config)], _node_env(state))
    cluster.wait("containerd", lambda: cluster.containerd_socket.exists() and cluster.ctr("version"),
                 60, "containerd")  # fmt: skip
    cluster.load_images(list(cluster.system_images.values()))


def _kubelet(cluster: Cluster) -> None:
    state, plane = cluster.state, cluster.control_plane
    pki, ca = state / "pki", _ca(cluster)
    client_cert = _write_cert(
        pki, "kubelet-client", ca.issue(f"system:node:{NODE_NAME}", ("system:nodes",))
    )
    _write_cert(
        pki, "kubelet-serving", ca.issue(NODE_NAME, hosts=(NODE_IP, NODE_NAME), server=True)
    )
    kubeconfig = _kubeconfig(plane, *client_cert, state / "kubelet.kubeconfig")
    (state / "resolv.conf").write_text("# pods get cluster DNS only (nothing is forwarded)\n")
    config = host.render(
        Path("kubelet.yaml"), state / "kubelet.yaml", NODE_IP=NODE_IP, PORT=free_port(),
        HEALTHZ_PORT=free_port(), PKI=pki, CA_FILE=plane.ca_file, STATE=state,
        CLUSTER_DOMAIN=controlplane.CLUSTER_DOMAIN, DNS_IP=host.DNS_IP,
    )  # fmt: skip
    cluster.spawn(
        "kubelet",
        [
            str(part("kubernetes-node") / "bin" / "kubelet"),
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
    cert = _write_cert(state / "pki", "kube-proxy", _ca(cluster).issue("system:kube-proxy"))
    config = host.render(
        Path("kube-proxy.yaml"), state / "kube-proxy.yaml",
        KUBECONFIG=_kubeconfig(plane, *cert, state / "kube-proxy.kubeconfig"),
        NODE_NAME=NODE_NAME, POD_CIDR=host.POD_CIDR, NODE_IP=NODE_IP,
        HEALTHZ_PORT=free_port(), METRICS_PORT=free_port(),
    )  # fmt: skip
    binary = part("kubernetes-node") / "bin" / "kube-proxy"
    cluster.spawn("kube-proxy", [str(binary), f"--config={config}", "--v=1"], _node_env(state))
    cluster.wait(
        "kube-proxy's rules for the kubernetes Service",
        lambda: "10.96.0.1" in host.run("nft", "list", "table", "ip", "kube-proxy").stdout,
        90,
        "kube-proxy",
    )


def _write_cert(folder: Path, name: str, pair: tuple[bytes, bytes]) -> tuple[Path, Path]:
    cert, key = folder / f"{name}.crt", folder / f"{name}.key"
    cert.write_bytes(pair[0])
    key.write_bytes(pair[1])
    key.chmod(0o600)
    return cert, key


def _kubeconfig(plane: controlplane.ControlPlane, cert: Path, key: Path, path: Path) -> Path:
    user = {"client-certificate": str(cert), "client-key": str(key)}
    path.write_text(controlplane._kubeconfig(plane.url, plane.ca_file, user))
    return path


# ------------------------------------------------------------------------------ system images


def system_images() -> dict[str, str]:
    """``part -> image name`` of the cluster's own images (the upstream names)."""
    pins = controlplane.versions()
    pause_tag = (part("pause") / "TAG").read_text().strip()
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
        "pause": (part("pause") / "bin" / "pause", "/pause", "65535"),
        "coredns": (part("coredns") / "bin" / "coredns", "/coredns", images.NONROOT),
        "jobset": (part("jobset") / "bin" / "jobset", "/manager", images.NONROOT),
        "trainer": (
            part("trainer") / "bin" / "trainer-controller-manager",
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


@dataclasses.dataclass(frozen=True)
class Step:
    """One step of bringing the cluster up.

    Attributes:
        name: What it does, as the progress line says it.
        run: Does it, given the cluster as the steps before left it.

    """

    name: str
    run: Callable[[Cluster], None]


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


def run_steps(cluster: Cluster, steps: tuple[Step, ...] | list[Step]) -> None:
    """Run each step not done yet, in order: time it, say it, save the state after it."""
    for step in steps:
        if step.name in cluster.steps:
            continue
        started = time.monotonic()
        try:
            step.run(cluster)
        except Exception as exc:
            cluster.save()
            raise ClusterError(f"{step.name}: {exc}") from exc
        cluster.steps[step.name] = round(time.monotonic() - started, 1)
        cluster.save()
        print(f"  {step.name}: {cluster.steps[step.name]:.0f} s", flush=True)


def up(
    state: Path | None = None,
    trainer: bool = True,
    kfp: bool = True,
    suite_images: tuple[str, ...] = (),
) -> Cluster:
    """Bring the cluster up, or take the one running from ``state`` on: run every step it has
    not done yet, the add-ons asked for included."""
    from cluster import addons

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
    if suite_images:
        steps.append(Step("suite images", lambda c: c.load_images(list(suite_images))))
        cluster.steps.pop("suite images", None)  # loads only what changed: run it each time
    todo = [s.name for s in steps if s.name not in cluster.steps]
    run_steps(cluster, steps)
    if todo:
        print(f"cluster up in {time.monotonic() - started:.0f} s; "
              f"KUBECONFIG={cluster.control_plane.admin_kubeconfig}")  # fmt: skip
    return cluster


def add(cluster: Cluster, trainer: bool = False, kfp: bool = False) -> Cluster:
    """Install the add-ons asked for on a running cluster, where not done yet."""
    from cluster import addons

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
