"""The Pod Security Standards' ``restricted`` profile, restated: what a pod must be to be admitted
where a namespace enforces it. No package on PyPI implements these rules (the real one is
k8s.io/pod-security-admission, Go, which the API server runs); they are written once here from
https://kubernetes.io/docs/concepts/security/pod-security-standards/ (the ``baseline`` controls,
then the ``restricted`` ones), for unit tests that need no API server. The real admission judges
the same pod templates on the real API server (tests/integration/test_pod_security.py, marker
``k8s``), and the one-node cluster runs them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

#: Kubeflow's own manifests of the release the docs target (schemas/kubeflow-pipelines/SOURCE.md)
KUBEFLOW_MANIFESTS = (
    Path(__file__).resolve().parent
    / "schemas"
    / "kubeflow-pipelines"
    / "kubeflow-manifests-v1.10.2"
)

#: Capabilities ``baseline`` lets a container add; ``restricted`` allows only NET_BIND_SERVICE.
RESTRICTED_ADDABLE = {"NET_BIND_SERVICE"}
#: Volume types ``restricted`` allows.
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                      "persistentVolumeClaim", "projected", "secret"}  # fmt: skip
#: Sysctls ``baseline`` allows (the "safe" set).
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"}  # fmt: skip
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
APPARMOR_TYPES = {"RuntimeDefault", "Localhost"}
SECCOMP_TYPES = {"RuntimeDefault", "Localhost"}


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for key in ("initContainers", "containers", "ephemeralContainers")
            for c in spec.get(key) or []]  # fmt: skip


def violations(template: dict[str, Any]) -> list[str]:
    """What keeps the pod template (``metadata`` and ``spec``, or a bare spec) out of a
    ``restricted`` namespace: one line per control it breaks; empty when it is admitted."""
    spec = template.get("spec", template)
    pod = spec.get("securityContext") or {}
    out = []
    # ---- baseline
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            out.append(f"host namespaces: {field}")
    if (pod.get("windowsOptions") or {}).get("hostProcess"):
        out.append("HostProcess: the pod")
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if "hostPath" in kinds:
            out.append(f"hostPath volume {volume['name']}")
        if not kinds <= RESTRICTED_VOLUMES:
            out.append(f"volume types: {volume['name']} is {sorted(kinds)}")
    for sysctl in pod.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            out.append(f"sysctls: {sysctl.get('name')}")
    if pod.get("runAsUser") == 0:
        out.append("running as non-root user: the pod's runAsUser is 0")
    for where in (pod, *(c.get("securityContext") or {} for c in _containers(spec))):
        selinux = where.get("seLinuxOptions") or {}
        if (
            selinux.get("type", "") not in SELINUX_TYPES
            or selinux.get("user")
            or selinux.get("role")
        ):
            out.append(f"SELinux: {selinux}")
        apparmor = (where.get("appArmorProfile") or {}).get("type")
        if apparmor is not None and apparmor not in APPARMOR_TYPES:
            out.append(f"AppArmor: {apparmor}")
    pod_seccomp = (pod.get("seccompProfile") or {}).get("type")
    if pod_seccomp is not None and pod_seccomp not in SECCOMP_TYPES:
        out.append(f"seccomp: the pod's profile is {pod_seccomp}")
    pod_non_root = pod.get("runAsNonRoot")
    if pod_non_root is False:
        out.append("running as non-root: the pod's runAsNonRoot is false")
    for c in _containers(spec):
        security = c.get("securityContext") or {}
        name = c.get("name")
        if security.get("privileged"):
            out.append(f"privileged: container {name}")
        if (security.get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"HostProcess: container {name}")
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                out.append(f"host ports: container {name} port {port['hostPort']}")
        if security.get("procMount", "Default") != "Default":
            out.append(f"/proc mount type: container {name}")
        # ---- restricted
        if security.get("allowPrivilegeEscalation") is not False:
            out.append(f"privilege escalation: container {name} must set it false")
        non_root = security.get("runAsNonRoot")
        if non_root is False or (non_root is None and pod_non_root is not True):
            out.append(f"running as non-root: container {name} (nor the pod) sets runAsNonRoot")
        if security.get("runAsUser") == 0:
            out.append(f"running as non-root user: container {name}'s runAsUser is 0")
        seccomp = (security.get("seccompProfile") or {}).get("type")
        if seccomp is not None and seccomp not in SECCOMP_TYPES:
            out.append(f"seccomp: container {name}'s profile is {seccomp}")
        if seccomp is None and pod_seccomp is None:
            out.append(f"seccomp: container {name} (nor the pod) sets a profile")
        capabilities = security.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            out.append(f"capabilities: container {name} must drop ALL")
        added = set(capabilities.get("add") or []) - RESTRICTED_ADDABLE
        if added:
            out.append(f"capabilities: container {name} adds {sorted(added)}")
    return out


def kubeflow_profile_labels() -> dict[str, str]:
    """The labels Kubeflow's profile controller puts on a profile's namespace in its release's
    default install (kubeflow/manifests v1.10.2 ``example/``): its ConfigMap
    ``namespace-labels-data``, the base file with ``applications/profiles/pss``'s merged over it
    (``pod-security.kubernetes.io/enforce: baseline``). An empty value removes a label, as the
    controller reads it."""
    labels: dict[str, str] = {}
    for name in ("profiles-namespace-labels.yaml", "profiles-pss-namespace-labels.yaml"):
        labels.update(yaml.safe_load((KUBEFLOW_MANIFESTS / name).read_text()))
    return {key: value for key, value in labels.items() if value}
