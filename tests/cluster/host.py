"""What the one-node cluster changes on this machine, and how :func:`node.down` undoes it.

The pod bridge (:data:`BRIDGE`, :data:`NODE_IP` on :data:`POD_CIDR`) with forwarding switched on
for it alone (``net.ipv4.conf.tfrs0.forwarding``; the host-wide ``ip_forward`` is left alone) and
a route for the service network through it; the nftables table of ``config/nft.conf``
(:data:`NFT_TABLE`: whatever a pod sends towards any other interface is dropped) and
kube-proxy's own tables; the kubelet's ``/kubepods`` cgroups; the kernel tunables the kubelet
sets when it starts (put back as soon as the node is up, and again when it goes); mounts under
the state folder.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import signal
import string
import subprocess
import time
from pathlib import Path

from realparts import controlplane
from realparts.processes import WaitError, wait_for

CONFIG = Path(__file__).resolve().parent / "config"
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


class ClusterError(RuntimeError):
    """The cluster could not be brought up (the failing step and its log are in the message)."""


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run a host command; raise :class:`ClusterError` with its stderr when it fails."""
    proc = subprocess.run(list(argv), capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise ClusterError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


def substitute(text: str, **values: object) -> str:
    """``text`` with its ``${NAME}`` placeholders filled in (each one must be given)."""
    return string.Template(text).substitute({key: str(value) for key, value in values.items()})


def render(source: Path, target: Path, **values: object) -> Path:
    """Write the file ``source`` (under ``config/`` where relative) to ``target`` with its
    ``${NAME}`` placeholders filled in."""
    target.write_text(substitute((CONFIG / source).read_text(), **values))
    return target


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


def network_up(state: Path) -> None:
    """The bridge, its forwarding, the service route and our nftables table."""
    if run("ip", "link", "show", BRIDGE, check=False).returncode != 0:
        run("ip", "link", "add", BRIDGE, "type", "bridge")
    prefix = ipaddress.ip_network(POD_CIDR).prefixlen
    run("ip", "addr", "replace", f"{NODE_IP}/{prefix}", "dev", BRIDGE)
    run("ip", "link", "set", BRIDGE, "up")
    # forwarding for packets that arrive on our bridge only (a pod reaching a Service whose
    # endpoint is another pod goes through the host's routing); the host-wide switch stays off
    _sysctl_path(f"net/ipv4/conf/{BRIDGE}/forwarding").write_text("1")
    # the service network is the bridge's: a ClusterIP that no rule translates stays on it
    # instead of taking the default route out of the machine
    run("ip", "route", "replace", controlplane.SERVICE_CIDR, "dev", BRIDGE, "src", NODE_IP)
    rules = render(Path("nft.conf"), state / "nft.conf", TABLE=NFT_TABLE, BRIDGE=BRIDGE)
    run("nft", "delete", "table", "inet", NFT_TABLE, check=False)
    run("nft", "-f", str(rules))


def _kubelet_iptables_leftovers() -> None:
    """Remove the kubelet's iptables chains where a kubelet that found ``iptables`` made them
    (ours cannot: ``node._node_env``), by name, leaving whatever else the tables hold."""
    for exe in ("iptables", "ip6tables"):
        if shutil.which(exe) is None:
            continue
        for chain in ("INPUT", "OUTPUT"):
            run(exe, "-D", chain, "-j", "KUBE-FIREWALL", check=False)
        run(exe, "-F", "KUBE-FIREWALL", check=False)
        run(exe, "-X", "KUBE-FIREWALL", check=False)
        for table in ("mangle", "nat", "filter"):
            run(exe, "-t", table, "-X", "KUBE-KUBELET-CANARY", check=False)
        run(exe, "-t", "mangle", "-X", "KUBE-IPTABLES-HINT", check=False)


#: nftables tables other parts make: kube-proxy's, and the NetworkPolicy engine's
#: (kube-network-policies names its table after itself)
FOREIGN_TABLES = (("ip", "kube-proxy"), ("ip6", "kube-proxy"), ("inet", "kube-network-policies"))


def network_down() -> None:
    """Undo :func:`network_up` and what kube-proxy and the policy engine added."""
    _kubelet_iptables_leftovers()
    for family, table in FOREIGN_TABLES:
        run("nft", "delete", "table", family, table, check=False)
    run("nft", "delete", "table", "inet", NFT_TABLE, check=False)
    # deleting the bridge takes its address and routes with it
    run("ip", "link", "delete", BRIDGE, check=False)


# ----------------------------------------------------------------------------- kernel tunables


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name


def read_sysctls() -> dict[str, str]:
    """The values of :data:`KUBELET_SYSCTLS` now."""
    return {name: _sysctl_path(name).read_text().strip() for name in KUBELET_SYSCTLS}


def restore_sysctls(saved: dict[str, str]) -> None:
    """Put back what :func:`read_sysctls` read."""
    for name, value in saved.items():
        with contextlib.suppress(OSError):
            if _sysctl_path(name).read_text().strip() != value:
                _sysctl_path(name).write_text(value)


# ----------------------------------------------------------------------------- processes, pods


def running(pid: int, name: str) -> bool:
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


def kill(pid: int, name: str, timeout: float = 20) -> None:
    """SIGTERM, then SIGKILL after ``timeout`` seconds, the process ``name`` at ``pid``."""
    if not running(pid, name):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    with contextlib.suppress(WaitError):  # SIGKILL below
        wait_for(lambda: not running(pid, name), timeout, name, interval=0.2)
    if running(pid, name):
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


def _cgroups_below(root: Path) -> list[Path]:
    """Every cgroup folder below ``root``, deepest first. ``os.walk`` skips a folder that goes
    while it is read (a pod's cgroup the kubelet or the runtime removes meanwhile), where
    ``Path.rglob`` raises."""
    return [Path(folder) for folder, _, _ in os.walk(root, topdown=False)]


def kill_pods() -> None:
    """SIGKILL every process in the kubelet's pod cgroups, then remove those cgroups."""
    for _ in range(20):
        pids = set()
        for root in _cgroup_roots():
            for folder in _cgroups_below(root):
                with contextlib.suppress(OSError):
                    pids.update(int(p) for p in (folder / "cgroup.procs").read_text().split())
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
    for root in _cgroup_roots():
        for folder in _cgroups_below(root):  # root itself last
            with contextlib.suppress(OSError):
                folder.rmdir()


def processes_naming(state: Path, programs: set[str]) -> dict[int, str]:
    """``pid -> program`` of the processes of ``programs`` whose command line names the state
    folder: the shims of our containerd (its socket), and any part of ours that a failed start
    did not get to record (etcd's data folder, the API server's certificates are under it)."""
    needle = str(state.resolve()).encode()
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            program = Path(argv[0].decode()).name
            if program in programs and any(needle in arg for arg in argv[1:]):
                found[int(proc.name)] = program
    return found


def unmount_under(folder: Path) -> None:
    """Unmount everything mounted under ``folder`` (deepest first)."""
    prefix = str(folder.resolve()) + "/"
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point.startswith(prefix):
            mounts.append(point)
    for point in sorted(set(mounts), key=len, reverse=True):
        run("umount", "--lazy", point, check=False)
