"""A one-node Kubernetes cluster on this machine: ``make cluster-up`` / ``make cluster-down``.

Everything is built from published sources by ``tests/realparts/build.sh`` (versions pinned in
``tests/realparts/versions.env``) and started here:

* the control plane of ``tests/realparts/controlplane.py`` (etcd, kube-apiserver with RBAC, Node
  authorization and the default admission plugins, kube-controller-manager, kube-scheduler),
  listening on the node's bridge address so that pods reach it as ``kubernetes.default``;
* containerd (with runc) and the kubelet, joined as node :data:`NODE_NAME`, with its client
  certificate and the API server's certificate for the kubelet's own port;
* pod networking: a bridge of our own (:data:`BRIDGE`, :data:`NODE_IP` on :data:`POD_CIDR`), the
  CNI bridge plugin putting each pod's network namespace on it; the service network
  (:data:`controlplane.SERVICE_CIDR`) by kube-proxy in nftables mode (its own ``kube-proxy``
  tables); a table of our own (:data:`NFT_TABLE`) that drops whatever a pod sends towards any
  other interface, so nothing leaves the bridge and the loopback range;
* CoreDNS (cluster DNS at :data:`DNS_IP`, answering only ``cluster.local``: no forwarding);
* optionally JobSet and the Kubeflow Trainer controller from their modules' own manifests, and
  our TensorFlow ClusterTrainingRuntime (``k8s/trainer-runtime``).

What it changes on the host, and undoes in :func:`down`: the bridge and its routes, forwarding
on that bridge only (``net.ipv4.conf.tfrs0.forwarding``; the host-wide ``ip_forward`` is left
alone), the nftables tables named above, ``/kubepods`` cgroups, mounts under the state folder.
The kubelet sets five kernel tunables when it starts (``vm.overcommit_memory``,
``kernel.panic``, ...; it has no setting to only warn); they are put back to the host's values
as soon as the node is up, and again by :func:`down`.

State (processes, certificates, kubeconfigs, containerd's images) lives in one folder,
``$TFRS_CLUSTER_DIR`` (default ``/var/lib/tfrecord-suite/cluster``); ``state.json`` there lets
another process (a test session, ``cluster-down``) find the running cluster.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from cluster import images
from realparts import controlplane

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
STATE_ENV = "TFRS_CLUSTER_DIR"
DEFAULT_STATE = Path("/var/lib/tfrecord-suite/cluster")
NODE_NAME = "tfrs-node"
BRIDGE = "tfrs0"
POD_CIDR = "10.244.0.0/24"
NODE_IP = "10.244.0.1"
DNS_IP = "10.96.0.10"
NFT_TABLE = "tfrs-cluster"
#: The tunables the kubelet sets at start-up (pkg/kubelet/cm/container_manager_linux.go).
KUBELET_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
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
}


class ClusterError(RuntimeError):
    """The cluster could not be brought up (the failing step and its log are in the message)."""


def state_dir() -> Path:
    """``$TFRS_CLUSTER_DIR`` or the default."""
    return Path(os.environ.get(STATE_ENV) or DEFAULT_STATE)


def part(name: str) -> Path:
    """The built folder of a part (``build.sh`` builds it first when it is missing)."""
    folder = controlplane.cache_root() / f"{name}-{controlplane.versions()[PARTS[name]]}"
    if not (folder / ".complete").exists():
        controlplane.build(name)
    return folder


# ------------------------------------------------------------------------------ the running one


@dataclasses.dataclass
class Cluster:
    """A running cluster: its control plane, its processes' ids and where its state is."""

    state: Path
    plane: controlplane.ControlPlane
    pids: dict[str, int]
    system_images: dict[str, str]
    #: podman's image ID of each image loaded into the node
    loaded_ids: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def containerd_socket(self) -> Path:
        return self.state / "run" / "containerd.sock"

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> Any:
        """The built ``kubectl`` as the cluster's admin."""
        return self.plane.kubectl(*args, stdin=stdin, check=check)

    def api_client(self, **kwargs: Any) -> Any:
        """A ``kubernetes`` client as the admin (see ``ControlPlane.api_client``)."""
        return self.plane.api_client(**kwargs)

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

    def alive(self) -> dict[str, bool]:
        """Whether each of its processes still runs."""
        return {name: _running(pid, name) for name, pid in self.pids.items()}

    def save(self) -> None:
        (self.state / "state.json").write_text(
            json.dumps(
                {
                    "url": self.plane.url,
                    "workdir": str(self.plane.workdir),
                    "bin_dir": str(self.plane.bin_dir),
                    "ca_file": str(self.plane.ca_file),
                    "admin_kubeconfig": str(self.plane.admin_kubeconfig),
                    "pids": self.pids,
                    "system_images": self.system_images,
                    "loaded_ids": self.loaded_ids,
                },
                indent=2,
            )
        )

    @classmethod
    def load(cls, state: Path | None = None) -> Cluster | None:
        """The cluster whose state is in ``state``, or None where there is none."""
        state = state or state_dir()
        path = state / "state.json"
        if not path.exists():
            return None
        saved = json.loads(path.read_text())
        plane = controlplane.ControlPlane(
            url=saved["url"],
            workdir=Path(saved["workdir"]),
            bin_dir=Path(saved["bin_dir"]),
            ca_file=Path(saved["ca_file"]),
            admin_kubeconfig=Path(saved["admin_kubeconfig"]),
        )
        return cls(state, plane, saved["pids"], saved["system_images"], saved["loaded_ids"])


def _running(pid: int, name: str) -> bool:
    """Whether ``pid`` is still the process ``name`` we started (not ended, not a reused id).

    A process that has just been started may show no command line yet: Popen returns at the
    point of no return of its exec, before the kernel has set up the new program's memory.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return False
    if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):  # ended, not yet reaped
        return False
    return not argv0 or Path(argv0).name == name


# ------------------------------------------------------------------------------------ helpers


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise ClusterError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


def _spawn(state: Path, name: str, argv: list[str], env: dict[str, str] | None = None) -> int:
    """Start a process of the cluster in a session of its own (it outlives ``make``)."""
    with open(state / "logs" / f"{name}.log", "ab") as log:
        process = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
    return process.pid


def _tail(state: Path, name: str, lines: int = 30) -> str:
    path = state / "logs" / f"{name}.log"
    text = path.read_text(errors="replace") if path.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


def _wait(what: str, ready: Any, timeout: float, alive: Any = None, log: str = "") -> None:
    """Poll ``ready()`` until it is true; fail early when ``alive()`` says a process died."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            raise ClusterError(f"{what}: the process exited\n{log and log()}")
        try:
            if ready():
                return
        except Exception as exc:
            last = exc
        time.sleep(1)
    raise ClusterError(f"{what}: not ready after {timeout:.0f} s ({last})\n{log and log()}")


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name


def _read_sysctls() -> dict[str, str]:
    return {name: _sysctl_path(name).read_text().strip() for name in KUBELET_SYSCTLS}


def _restore_sysctls(saved: dict[str, str]) -> None:
    for name, value in saved.items():
        with contextlib.suppress(OSError):
            if _sysctl_path(name).read_text().strip() != value:
                _sysctl_path(name).write_text(value)


# ---------------------------------------------------------------------------------- preflight


def preflight() -> None:
    """Refuse, saying why, where the cluster cannot run: not root, tools missing."""
    if os.geteuid() != 0:
        raise ClusterError("the cluster needs root (containerd, the kubelet, the bridge)")
    missing = [exe for exe in ("nft", "ip", "podman", "mount") if shutil.which(exe) is None]
    if missing:
        raise ClusterError(
            f"{', '.join(missing)} not installed: apt-get install nftables iproute2 podman "
            "(make cluster-up does)"
        )
    if (
        not Path("/sys/fs/cgroup/memory").is_dir()
        and not Path("/sys/fs/cgroup/cgroup.controllers").exists()
    ):
        raise ClusterError("no cgroup hierarchy the kubelet can use under /sys/fs/cgroup")


# ------------------------------------------------------------------------------------ network


def _network_up(state: Path) -> None:
    """The bridge, its forwarding, the service route and our nftables table."""
    if _run("ip", "link", "show", BRIDGE, check=False).returncode != 0:
        _run("ip", "link", "add", BRIDGE, "type", "bridge")
    prefix = ipaddress.ip_network(POD_CIDR).prefixlen
    _run("ip", "addr", "replace", f"{NODE_IP}/{prefix}", "dev", BRIDGE)
    _run("ip", "link", "set", BRIDGE, "up")
    # forwarding for packets that arrive on our bridge only (a pod reaching a Service whose
    # endpoint is another pod goes through the host's routing); the host-wide switch stays off
    _sysctl_path(f"net/ipv4/conf/{BRIDGE}/forwarding").write_text("1")
    # the service network is the bridge's: a ClusterIP that no rule translates stays on it
    # instead of taking the default route out of the machine
    _run(
        "ip", "route", "replace", controlplane.SERVICE_CIDR, "dev", BRIDGE, "src", NODE_IP
    )  # fmt: skip
    (state / "nft.conf").write_text(
        f"""table inet {NFT_TABLE} {{
  chain forward {{
    type filter hook forward priority filter; policy accept;
    # pods talk to each other and to the node, never past it
    iifname "{BRIDGE}" oifname != "{BRIDGE}" counter drop
    oifname "{BRIDGE}" iifname != "{BRIDGE}" counter drop
  }}
}}
"""
    )
    _run("nft", "delete", "table", "inet", NFT_TABLE, check=False)
    _run("nft", "-f", str(state / "nft.conf"))


def _kubelet_iptables_leftovers() -> None:
    """Remove the kubelet's iptables chains where a kubelet that found ``iptables`` made them
    (ours cannot: :func:`_node_env`), by name, leaving whatever else the tables hold."""
    for exe in ("iptables", "ip6tables"):
        if shutil.which(exe) is None:
            continue
        for chain in ("INPUT", "OUTPUT"):
            _run(exe, "-D", chain, "-j", "KUBE-FIREWALL", check=False)
        _run(exe, "-F", "KUBE-FIREWALL", check=False)
        _run(exe, "-X", "KUBE-FIREWALL", check=False)
        for table in ("mangle", "nat", "filter"):
            _run(exe, "-t", table, "-X", "KUBE-KUBELET-CANARY", check=False)
        _run(exe, "-t", "mangle", "-X", "KUBE-IPTABLES-HINT", check=False)


def _network_down() -> None:
    _kubelet_iptables_leftovers()
    for family in ("ip", "ip6"):
        _run("nft", "delete", "table", family, "kube-proxy", check=False)
    _run("nft", "delete", "table", "inet", NFT_TABLE, check=False)
    # deleting the bridge takes its address and routes with it
    _run("ip", "link", "delete", BRIDGE, check=False)


# ------------------------------------------------------------------------------- certificates


def _write_cert(folder: Path, name: str, pair: tuple[bytes, bytes]) -> tuple[Path, Path]:
    cert, key = folder / f"{name}.crt", folder / f"{name}.key"
    cert.write_bytes(pair[0])
    key.write_bytes(pair[1])
    key.chmod(0o600)
    return cert, key


def _kubeconfig(plane_url: str, ca_file: Path, cert: Path, key: Path, path: Path) -> Path:
    path.write_text(
        controlplane._kubeconfig(
            plane_url, ca_file, {"client-certificate": str(cert), "client-key": str(key)}
        )
    )
    return path


# -------------------------------------------------------------------------------- containerd


def _containerd_config(state: Path) -> Path:
    run = state / "run"
    cni = state / "cni"
    (cni / "net.d").mkdir(parents=True, exist_ok=True)
    (cni / "net.d" / "10-tfrs.conflist").write_text(
        json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": "tfrs",
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": BRIDGE,
                        # not the gateway: the plugin would then switch on the host-wide
                        # ip_forward; the bridge already has the node's address
                        "isGateway": False,
                        "ipMasq": False,
                        "hairpinMode": True,
                        "ipam": {
                            "type": "host-local",
                            "dataDir": str(cni / "ipam"),
                            "ranges": [
                                [{"subnet": POD_CIDR, "rangeStart": "10.244.0.10",
                                  "gateway": NODE_IP}]
                            ],
                            # no default route: a pod reaches pods, Services and the node only
                            "routes": [{"dst": controlplane.SERVICE_CIDR, "gw": NODE_IP}],
                        },
                    }
                ],
            },
            indent=2,
        )
    )  # fmt: skip
    pause_tag = (part("pause") / "TAG").read_text().strip()
    config = state / "containerd.toml"
    config.write_text(
        f"""version = 3
root = "{state / "containerd"}"
state = "{run / "containerd"}"
temp = "{state / "tmp"}"

[grpc]
  address = "{run / "containerd.sock"}"

[ttrpc]
  address = "{run / "containerd.sock.ttrpc"}"

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = "{state / "opt"}"
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "registry.k8s.io/pause:{pause_tag}"
  [plugins.'io.containerd.cri.v1.runtime']
    netns_mounts_under_state_dir = true
    # no CAP_SYS_RESOURCE here (a sandboxed VM): the kubelet's negative oom_score_adj for
    # sandboxes and Guaranteed pods would fail in runc ("failed to update
    # /proc/self/oom_score_adj: Permission denied"); containerd raises them to its own
    restrict_oom_score_adj = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = "{part("runc") / "bin" / "runc"}"
          Root = "{run / "runc"}"
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["{part("cni-plugins") / "bin"}"]
      conf_dir = "{cni / "net.d"}"
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
"""
    )
    return config


# ---------------------------------------------------------------------------------- the node


def _kubelet_config(state: Path, pki: Path, ca_file: Path, port: int, healthz: int) -> Path:
    (state / "resolv.conf").write_text("# pods get cluster DNS only (nothing is forwarded)\n")
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # cgroup v1 (this machine's hierarchy): deprecated, still supported when asked for
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "address": NODE_IP,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz,
        "tlsCertFile": str(pki / "kubelet-serving.crt"),
        "tlsPrivateKeyFile": str(pki / "kubelet-serving.key"),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_file)},
        },
        "authorization": {"mode": "Webhook"},
        "clusterDomain": controlplane.CLUSTER_DOMAIN,
        "clusterDNS": [DNS_IP],
        "resolvConf": str(state / "resolv.conf"),
        "containerRuntimeEndpoint": f"unix://{state / 'run' / 'containerd.sock'}",
        "podLogsDir": str(state / "pod-logs"),
        "failSwapOn": False,
        "serializeImagePulls": False,
        # the disk is shared with other work: never evict pods or delete the images loaded
        # here because someone else's files fill it
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "maxPods": 60,
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
    }
    path = state / "kubelet.yaml"
    path.write_text(json.dumps(config, indent=2))
    return path


def _kube_proxy_config(state: Path, kubeconfig: Path) -> Path:
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "nftables",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": NODE_NAME,
        "clusterCIDR": POD_CIDR,
        "healthzBindAddress": f"127.0.0.1:{controlplane._free_port()}",
        "metricsBindAddress": f"127.0.0.1:{controlplane._free_port()}",
        # NodePorts on the bridge's address only, not on the machine's other interfaces
        "nodePortAddresses": [f"{NODE_IP}/32"],
        # zero: leave the host's conntrack limits and timeouts as they are
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
    }
    path = state / "kube-proxy.yaml"
    path.write_text(json.dumps(config, indent=2))
    return path


def _node_ready(cluster: Cluster) -> bool:
    from kubernetes import client

    node = client.CoreV1Api(cluster.api_client()).read_node(NODE_NAME)
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


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
        if not images.exists(image):
            binary, path, user = binaries[key]
            images.build_static(image, binary, path, user)
    # not a system image: the tests' network probe, small enough to load with them
    names["probe"] = images.build_probe()
    return names


# -------------------------------------------------------------------------------------- up


def up(state: Path | None = None, trainer: bool = True, suite_images: tuple[str, ...] = ()):
    """Bring the cluster up (or return the one already running from ``state``)."""
    state = state or state_dir()
    running = Cluster.load(state)
    if running is not None:
        if all(running.alive().values()):
            if suite_images:
                running.load_images(list(suite_images))
            if trainer:
                install_trainer(running)
            return running
        down(state)
    preflight()
    started = time.monotonic()
    for sub in ("logs", "run", "pki", "tmp", "pod-logs"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    sysctls = _read_sysctls()
    (state / "sysctls.json").write_text(json.dumps(sysctls))
    names = build_system_images()
    _network_up(state)

    pki = state / "pki"
    ca = controlplane._CA()
    apiserver_kubelet = _write_cert(
        pki,
        "apiserver-kubelet-client",
        ca.issue("kube-apiserver-kubelet-client", ("system:masters",)),
    )
    plane = controlplane.start(
        state / "control-plane",
        part("kubernetes"),
        part("etcd"),
        address=NODE_IP,
        ca=ca,
        extra_args={
            "kube-apiserver": [
                f"--kubelet-client-certificate={apiserver_kubelet[0]}",
                f"--kubelet-client-key={apiserver_kubelet[1]}",
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
    cluster = Cluster(
        state,
        plane,
        {name: p.pid for name, p in plane.processes.items()},
        names,
    )
    cluster.save()
    try:
        _start_node(cluster, ca, pki, sysctls)
        _install_dns(cluster)
        if suite_images:
            cluster.load_images(list(suite_images))
        if trainer:
            install_trainer(cluster)
    except BaseException:
        cluster.save()
        raise
    cluster.save()
    print(f"cluster up in {time.monotonic() - started:.0f} s; KUBECONFIG={plane.admin_kubeconfig}")
    return cluster


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


def _start_node(cluster: Cluster, ca: Any, pki: Path, sysctls: dict[str, str]) -> None:
    state, plane = cluster.state, cluster.plane
    env = _node_env(state)
    cluster.pids["containerd"] = _spawn(
        state, "containerd", [str(part("containerd") / "bin" / "containerd"),
                              "--config", str(_containerd_config(state))], env,
    )  # fmt: skip
    _wait(
        "containerd",
        lambda: cluster.containerd_socket.exists() and bool(cluster.ctr("version")),
        60,
        lambda: cluster.alive()["containerd"],
        lambda: _tail(state, "containerd"),
    )
    cluster.save()
    cluster.load_images(list(cluster.system_images.values()))

    kubelet_client = _write_cert(
        pki, "kubelet-client", ca.issue(f"system:node:{NODE_NAME}", ("system:nodes",))
    )
    _write_cert(
        pki, "kubelet-serving", ca.issue(NODE_NAME, hosts=(NODE_IP, NODE_NAME), server=True)
    )
    kubelet_kubeconfig = _kubeconfig(plane.url, plane.ca_file, *kubelet_client,
                                     state / "kubelet.kubeconfig")  # fmt: skip
    config = _kubelet_config(state, pki, plane.ca_file, controlplane._free_port(),
                             controlplane._free_port())  # fmt: skip
    cluster.pids["kubelet"] = _spawn(
        state,
        "kubelet",
        [
            str(part("kubernetes-node") / "bin" / "kubelet"),
            f"--config={config}",
            f"--kubeconfig={kubelet_kubeconfig}",
            f"--root-dir={state / 'kubelet'}",
            f"--hostname-override={NODE_NAME}",
            f"--node-ip={NODE_IP}",
            "--v=1",
        ],
        env,
    )
    cluster.save()
    try:
        _wait(
            "the kubelet's node",
            lambda: _node_ready(cluster),
            180,
            lambda: cluster.alive()["kubelet"],
            lambda: _tail(state, "kubelet"),
        )
    finally:
        # the kubelet has set its kernel tunables by now: the host gets its own back
        _restore_sysctls(sysctls)

    proxy_cert = _write_cert(pki, "kube-proxy", ca.issue("system:kube-proxy"))
    proxy_kubeconfig = _kubeconfig(plane.url, plane.ca_file, *proxy_cert,
                                   state / "kube-proxy.kubeconfig")  # fmt: skip
    cluster.pids["kube-proxy"] = _spawn(
        state,
        "kube-proxy",
        [
            str(part("kubernetes-node") / "bin" / "kube-proxy"),
            f"--config={_kube_proxy_config(state, proxy_kubeconfig)}",
            "--v=1",
        ],
        env,
    )
    cluster.save()
    _wait(
        "kube-proxy's rules for the kubernetes Service",
        lambda: "10.96.0.1" in _run("nft", "list", "table", "ip", "kube-proxy").stdout,
        90,
        lambda: cluster.alive()["kube-proxy"],
        lambda: _tail(state, "kube-proxy"),
    )


# -------------------------------------------------------------------------------------- DNS


def _install_dns(cluster: Cluster) -> None:
    text = (HERE / "manifests" / "coredns.yaml").read_text()
    text = text.replace("@IMAGE@", cluster.system_images["coredns"]).replace("@DNS_IP@", DNS_IP)
    cluster.kubectl("apply", "--server-side", "--field-manager=tfrs-cluster", "-f", "-",
                    stdin=text)  # fmt: skip
    cluster.kubectl("-n", "kube-system", "rollout", "status", "deployment/coredns",
                    "--timeout=180s")  # fmt: skip


# ---------------------------------------------------------------------------------- Trainer


def trainer_manifests(cluster: Cluster) -> str:
    """The Trainer's standalone install (its ``overlays/manager``, JobSet included) as one stream.

    The overlay takes JobSet from a GitHub release URL, which cannot be reached here; that
    release file is JobSet's ``config/default`` built with its image set, and JobSet's module
    holds that kustomization. So both modules' manifests are copied out of the module cache and
    the overlay's one remote resource is pointed at the copy; nothing else differs.
    """
    pins = controlplane.versions()
    root = cluster.state / "manifests"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(
        _module_dir(f"github.com/kubeflow/trainer/v2@{pins['TRAINER_VERSION']}") / "manifests",
        root / "trainer",
    )
    shutil.copytree(_module_dir(f"sigs.k8s.io/jobset@{pins['JOBSET_VERSION']}") / "config",
                    root / "jobset")  # fmt: skip
    for path in root.rglob("*"):
        path.chmod(path.stat().st_mode | 0o200)
    third_party = root / "trainer" / "third-party" / "jobset" / "kustomization.yaml"
    text = third_party.read_text()
    release = (
        "https://github.com/kubernetes-sigs/jobset/releases/download/"
        f"{pins['JOBSET_VERSION']}/manifests.yaml"
    )
    if release not in text:
        raise ClusterError(f"{third_party} no longer names {release}: see what it installs")
    name, tag = cluster.system_images["jobset"].rsplit(":", 1)
    text = text.replace(release, "../../../jobset/default").replace(
        "images:\n",
        # config/default names its image controller:latest (the release sets it)
        f"images:\n  - name: controller\n    newName: {name}\n    newTag: {tag}\n",
        1,
    )
    third_party.write_text(text)
    return cluster.kubectl("kustomize", str(root / "trainer" / "overlays" / "manager")).stdout


def _module_dir(module: str) -> Path:
    out = subprocess.run(
        ["go", "mod", "download", "-json", module],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "GOFLAGS": "-mod=mod"},
    ).stdout
    return Path(json.loads(out)["Dir"])


def install_trainer(cluster: Cluster) -> None:
    """JobSet, the Trainer's controller and CRDs, and our ClusterTrainingRuntime; wait for them."""
    stream = trainer_manifests(cluster)
    cluster.kubectl("apply", "--server-side", "--force-conflicts",
                    "--field-manager=tfrs-cluster", "-f", "-", stdin=stream)  # fmt: skip
    for deployment in ("jobset-controller-manager", "kubeflow-trainer-controller-manager"):
        cluster.kubectl("-n", "kubeflow-system", "rollout", "status", f"deployment/{deployment}",
                        "--timeout=300s")  # fmt: skip
    runtime = cluster.kubectl("kustomize", str(REPO / "k8s" / "trainer-runtime")).stdout
    # the webhooks answer a little after the deployments are ready
    _wait(
        "the TensorFlow ClusterTrainingRuntime (the Trainer's webhook)",
        lambda: cluster.kubectl("apply", "--server-side", "--field-manager=tfrs-cluster",
                                "-f", "-", stdin=runtime).returncode == 0,
        120,
    )  # fmt: skip


# ------------------------------------------------------------------------------------- down


def _kill(pid: int, name: str, timeout: float = 20) -> None:
    if not _running(pid, name):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _running(pid, name) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _running(pid, name):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    # reap it where it is our child (a test session that brought the cluster up)
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _cgroup_roots() -> list[Path]:
    """``/sys/fs/cgroup/<controller>/kubepods`` (v1) or ``/sys/fs/cgroup/kubepods`` (v2)."""
    base = Path("/sys/fs/cgroup")
    roots = [d / "kubepods" for d in base.iterdir() if (d / "kubepods").is_dir()]
    if (base / "kubepods").is_dir():
        roots.append(base / "kubepods")
    return roots


def _kill_pods() -> None:
    """SIGKILL every process in the kubelet's pod cgroups, then remove those cgroups."""
    for _ in range(20):
        pids = set()
        for root in _cgroup_roots():
            for procs in root.rglob("cgroup.procs"):
                with contextlib.suppress(OSError):
                    pids.update(int(p) for p in procs.read_text().split())
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
    for root in _cgroup_roots():
        for folder in sorted(
            (p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
        ):
            with contextlib.suppress(OSError):
                folder.rmdir()
        with contextlib.suppress(OSError):
            root.rmdir()


#: What the cluster runs (anything else naming the state folder, a `tail -f` of a log, is left).
_PROGRAMS = {*PROCESSES, "containerd-shim-runc-v2"}


def _ours(state: Path) -> dict[int, str]:
    """``pid -> program`` of the processes whose command line names the state folder: the
    shims of our containerd (its socket), and any part of ours that a failed start did not get
    to record (etcd's data folder, the API server's certificates are under it)."""
    needle = str(state.resolve()).encode()
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            program = Path(argv[0].decode()).name
            if program in _PROGRAMS and any(needle in arg for arg in argv[1:]):
                found[int(proc.name)] = program
    return found


def _unmount_under(folder: Path) -> None:
    """Unmount everything mounted under ``folder`` (deepest first)."""
    prefix = str(folder.resolve()) + "/"
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point.startswith(prefix):
            mounts.append(point)
    for point in sorted(set(mounts), key=len, reverse=True):
        _run("umount", "--lazy", point, check=False)


def down(state: Path | None = None) -> None:
    """Stop everything :func:`up` started and remove what it made; safe to repeat."""
    state = state or state_dir()
    cluster = Cluster.load(state)
    pids = cluster.pids if cluster else {}
    for name in ("kube-proxy", "kubelet"):
        if name in pids:
            _kill(pids[name], name)
    _kill_pods()
    if "containerd" in pids:
        _kill(pids["containerd"], "containerd")
    for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
        if name in pids:
            _kill(pids[name], name)
    for pid, program in _ours(state).items():  # shims, and what a failed start left
        _kill(pid, program, timeout=5)
    _kill_pods()
    _network_down()
    saved = state / "sysctls.json"
    if saved.exists():
        _restore_sysctls(json.loads(saved.read_text()))
    if state.exists():
        _unmount_under(state)
        shutil.rmtree(state, ignore_errors=True)
