"""A real Kubernetes control plane on 127.0.0.1 for the tests: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler, built from their published Go modules by build.sh.

The API server runs as a cluster's does: TLS with a CA of its own, client certificates, RBAC and
Node authorization (no AlwaysAllow), the default admission plugins plus NodeRestriction
(NamespaceLifecycle, ServiceAccount, LimitRanger, ResourceQuota, Priority, PodSecurity, ...)
and OwnerReferencesPermissionEnforcement,
and service-account tokens signed by a key of its own, so a token made with the TokenRequest API
is exactly what a pod's projected token would be. The controller manager runs every default
controller (garbage collector, namespaces, StatefulSets, Jobs, quotas, service accounts), each
with its own credentials, as kubeadm sets it up; the scheduler binds pods to the nodes a test
registers. There is no kubelet: pods are scheduled but never start.

Everything lives under one work folder; :func:`start` returns a :class:`ControlPlane` and
``stop()`` ends the processes.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json
import os
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

from realparts import processes
from realparts.certificates import CertificateAuthority, new_key, pem_cert, pem_key
from realparts.parts import part_dir
from realparts.processes import free_port, free_ports, wait_for

CLUSTER_DOMAIN = "cluster.local"
SERVICE_CIDR = "10.96.0.0/16"
ISSUER = f"https://kubernetes.default.svc.{CLUSTER_DOMAIN}"


# -------------------------------------------------------------------------------- the processes


@dataclasses.dataclass
class ControlPlane:
    """A running control plane: where it is, how to reach it as whom, and its processes."""

    url: str
    workdir: Path
    bin_dir: Path
    ca_file: Path
    admin_kubeconfig: Path
    processes: dict[str, subprocess.Popen] = dataclasses.field(default_factory=dict)

    # ------------------------------------------------------------------------ clients and users

    def api_client(self, token: str | None = None, impersonate: str | None = None) -> Any:
        """A ``kubernetes.client.ApiClient``: the admin's, or one presenting ``token``, or the
        admin's impersonating the user ``impersonate``."""
        from kubernetes import client, config

        if token is None:
            api = config.new_client_from_config(config_file=str(self.admin_kubeconfig))
        else:
            configuration = client.Configuration()
            configuration.host = self.url
            configuration.ssl_ca_cert = str(self.ca_file)
            configuration.api_key = {"authorization": f"Bearer {token}"}
            api = client.ApiClient(configuration)
        if impersonate:
            api.set_default_header("Impersonate-User", impersonate)
        return api

    def token(self, namespace: str, service_account: str, seconds: int = 3600) -> str:
        """A token of ``service_account`` from the TokenRequest API, as a pod's projected token."""
        from kubernetes import client

        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[ISSUER], expiration_seconds=seconds)
        )
        core = client.CoreV1Api(self.api_client())
        return core.create_namespaced_service_account_token(
            service_account, namespace, request
        ).status.token

    def kubeconfig_for_token(self, token: str, path: Path, namespace: str = "default") -> Path:
        """Write a kubeconfig that presents ``token`` (what ``kubectl`` or a launcher outside a
        pod would use) and return its path."""
        path.write_text(
            kubeconfig_text(self.url, self.ca_file, {"token": token}, namespace=namespace)
        )
        return path

    def kubectl(
        self,
        *args: str,
        stdin: str | None = None,
        kubeconfig: Path | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess:
        """Run the built ``kubectl`` against this server (the admin's kubeconfig by default)."""
        env = {**os.environ, "KUBECONFIG": str(kubeconfig or self.admin_kubeconfig)}
        result = subprocess.run(
            [str(self.bin_dir / "kubectl"), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} exited {result.returncode}:\n{result.stderr}"
            )
        return result

    def apply(self, documents: list[dict[str, Any]], *extra: str, check: bool = True) -> Any:
        """``kubectl apply --server-side`` of these objects (as the admin)."""
        return self.kubectl(
            "apply",
            "--server-side",
            "--field-manager=tfrs-tests",
            "-f",
            "-",
            *extra,
            stdin="\n---\n".join(json.dumps(d) for d in documents),
            check=check,
        )

    def wait_established(self, crd_names: list[str], timeout: float = 60.0) -> None:
        """Wait until these CRDs are served."""
        self.kubectl(
            "wait",
            "--for=condition=Established",
            f"--timeout={int(timeout)}s",
            *[f"crd/{n}" for n in crd_names],
        )

    def add_node(
        self,
        name: str,
        cpu: str,
        memory: str,
        labels: dict[str, str] | None = None,
        allocatable: dict[str, str] | None = None,
    ) -> None:
        """Register a Node object (no kubelet behind it) with this capacity (and, where given,
        less ``allocatable``), Ready, so the scheduler places pods on it as it would on a real
        node of that size."""
        from kubernetes import client

        core = client.CoreV1Api(self.api_client())
        capacity = {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "100Gi"}
        node = client.V1Node(
            metadata=client.V1ObjectMeta(
                name=name,
                labels={"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
                | (labels or {}),
            ),
        )
        core.create_node(node)
        now = datetime.datetime.now(datetime.UTC).isoformat()
        status = {
            "status": {
                "capacity": capacity,
                "allocatable": capacity | (allocatable or {}),
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "stand-in node: no kubelet",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ],
            }
        }
        core.patch_node_status(name, status)
        # the TaintNodesByCondition admission plugin gives a new node the not-ready taint; the
        # node lifecycle controller (off here: no kubelet heartbeats) lifts it once Ready
        core.patch_node(name, {"spec": {"taints": None}})

    def requests_by(self, user: str) -> list[dict[str, Any]]:
        """The audit log's events of every request ``user`` made (e.g.
        ``system:serviceaccount:kubeflow:pipeline-runner``): verb, objectRef (apiGroup,
        resource, subresource, namespace, name), requestURI and the response code."""
        path = self.workdir / "audit.log"
        events = []
        for line in path.read_text().splitlines() if path.exists() else []:
            event = json.loads(line)
            if event.get("user", {}).get("username") == user:
                events.append(event)
        return events

    # -------------------------------------------------------------------------------- lifecycle

    def alive(self) -> dict[str, int | None]:
        """Each process's exit code (None while it runs)."""
        return {name: p.poll() for name, p in self.processes.items()}

    def running(self) -> bool:
        """Whether every process still runs."""
        return all(code is None for code in self.alive().values())

    def failure_log(self, waited_on: str) -> str:
        """For a failed start: the log of the first process that exited (with its code), or
        else of the one waited on."""
        for name, code in self.alive().items():
            if code is not None:
                return f"{name} exited {code}:\n{self.log(name)}"
        return self.log(waited_on)

    def log(self, name: str, lines: int = 40) -> str:
        """The last lines of one process's log."""
        path = self.workdir / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """End every process, the API server last."""
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            process = self.processes.get(name)
            if process is None or process.poll() is not None:
                continue
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def kubeconfig_text(
    url: str, ca_file: Path, user: dict[str, str], namespace: str = "default"
) -> str:
    """A kubeconfig (JSON) for the API server at ``url`` as ``user`` (its client certificate
    and key, or a token), trusting ``ca_file``."""
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "tfrs", "cluster": {"server": url, "certificate-authority": str(ca_file)}}
            ],
            "users": [{"name": "user", "user": user}],
            "contexts": [
                {
                    "name": "tfrs",
                    "context": {"cluster": "tfrs", "user": "user", "namespace": namespace},
                }
            ],
            "current-context": "tfrs",
        }
    )


def _client_kubeconfig(
    url: str,
    workdir: Path,
    ca: CertificateAuthority,
    ca_file: Path,
    name: str,
    cn: str,
    orgs: tuple[str, ...],
) -> Path:
    cert, key = ca.issue(cn, orgs)
    (workdir / f"{name}.crt").write_bytes(cert)
    (workdir / f"{name}.key").write_bytes(key)
    path = workdir / f"{name}.kubeconfig"
    path.write_text(
        kubeconfig_text(
            url,
            ca_file,
            {
                "client-certificate": str(workdir / f"{name}.crt"),
                "client-key": str(workdir / f"{name}.key"),
            },
        )
    )
    return path


def _override(argv: list[str], extra: list[str]) -> list[str]:
    """``argv`` with ``extra`` flags added; each replaces a flag of the same name in ``argv``
    (list flags such as ``--controllers`` would otherwise take both values)."""
    names = {flag.split("=", 1)[0] for flag in extra}
    return [a for a in argv if a.split("=", 1)[0] not in names] + list(extra)


def _wait_ready(plane: ControlPlane, path: str, timeout: float, who: str) -> None:
    import ssl

    context = ssl.create_default_context(cafile=str(plane.ca_file))
    context.load_cert_chain(str(plane.workdir / "admin.crt"), str(plane.workdir / "admin.key"))

    def answers() -> bool:
        with urllib.request.urlopen(plane.url + path, context=context, timeout=5) as response:
            return response.status == 200

    wait_for(answers, timeout, who, alive=plane.running, log=lambda: plane.failure_log(who))


def start(
    workdir: Path,
    kubernetes_dir: Path,
    etcd_dir: Path,
    timeout: float = 180.0,
    address: str = "127.0.0.1",
    ca: CertificateAuthority | None = None,
    extra_args: dict[str, list[str]] | None = None,
    die_with_parent: bool = True,
):
    """Start etcd, the API server, the controller manager and the scheduler; wait for them.

    ``address`` is where the API server listens and what it advertises (a one-node cluster's
    pods reach it at its bridge's address: tests/cluster/); ``ca`` the authority to sign with
    (a new one by default); ``extra_args`` more flags per process name, each replacing the flag
    of the same name. With ``die_with_parent`` (tests) the processes are killed when this one
    dies; ``make cluster-up`` leaves them running after it exits.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    bin_dir = kubernetes_dir / "bin"
    extra = extra_args or {}
    ca = ca or CertificateAuthority()

    def spawn(name: str, argv: list[str]) -> subprocess.Popen:
        # every process alike, etcd included: with die_with_parent=False (make cluster-up) none
        # may be tied to the process that started it
        argv = _override(argv, extra.get(name, []))
        return processes.spawn(argv, workdir / f"{name}.log", die_with_parent=die_with_parent)

    ca_file = workdir / "ca.crt"
    ca_file.write_bytes(pem_cert(ca.cert))
    (workdir / "ca.key").write_bytes(pem_key(ca.key))
    serving_cert, serving_key = ca.issue(
        "kube-apiserver",
        hosts=(
            *dict.fromkeys(("127.0.0.1", address)),
            "localhost",
            "10.96.0.1",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            f"kubernetes.default.svc.{CLUSTER_DOMAIN}",
        ),
        server=True,
    )
    (workdir / "apiserver.crt").write_bytes(serving_cert)
    (workdir / "apiserver.key").write_bytes(serving_key)
    sa_key = new_key()
    (workdir / "sa.key").write_bytes(pem_key(sa_key))
    from cryptography.hazmat.primitives import serialization

    (workdir / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )

    # every request, with who made it and on what (no bodies): tests read it to see exactly
    # which calls an account made (ControlPlane.requests_by)
    (workdir / "audit-policy.yaml").write_text(
        json.dumps(
            {
                "apiVersion": "audit.k8s.io/v1",
                "kind": "Policy",
                "omitStages": ["RequestReceived", "ResponseStarted"],
                "rules": [{"level": "Metadata"}],
            }
        )
    )
    etcd_port, etcd_peer, api_port = free_ports(3)
    url = f"https://{address}:{api_port}"
    admin = _client_kubeconfig(
        url, workdir, ca, ca_file, "admin", "tfrs-admin", ("system:masters",)
    )
    plane = ControlPlane(
        url=url, workdir=workdir, bin_dir=bin_dir, ca_file=ca_file, admin_kubeconfig=admin
    )
    etcd_url = f"http://127.0.0.1:{etcd_port}"
    plane.processes["etcd"] = spawn(
        "etcd",
        [
            str(etcd_dir / "bin" / "etcd"),
            "--name=tfrs",
            f"--data-dir={workdir / 'etcd'}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
            f"--initial-cluster=tfrs=http://127.0.0.1:{etcd_peer}",
            # a test cluster's data is thrown away: no fsync on every write
            "--unsafe-no-fsync",
            "--log-level=warn",
        ],
    )
    plane.processes["kube-apiserver"] = spawn(
        "kube-apiserver",
        [
            str(bin_dir / "kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            f"--bind-address={address}",
            f"--advertise-address={address}",
            f"--secure-port={api_port}",
            f"--tls-cert-file={workdir / 'apiserver.crt'}",
            f"--tls-private-key-file={workdir / 'apiserver.key'}",
            f"--client-ca-file={ca_file}",
            "--authorization-mode=Node,RBAC",
            # beyond the defaults: NodeRestriction (kubeadm's), and the ownerReference check
            # OpenShift enables (setting blockOwnerDeletion needs update on the owner)
            "--enable-admission-plugins=NodeRestriction,OwnerReferencesPermissionEnforcement",
            "--anonymous-auth=false",
            f"--service-account-issuer={ISSUER}",
            f"--service-account-key-file={workdir / 'sa.pub'}",
            f"--service-account-signing-key-file={workdir / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # the advertised address is loopback, which an Endpoints object may not hold
            "--endpoint-reconciler-type=none",
            f"--cert-dir={workdir / 'certs'}",
            "--profiling=false",
            f"--audit-policy-file={workdir / 'audit-policy.yaml'}",
            f"--audit-log-path={workdir / 'audit.log'}",
            "--audit-log-format=json",
            # written as requests end, not in batches: a test reads it right after its calls
            "--audit-log-mode=blocking",
            "--v=0",
        ],
    )
    _wait_ready(plane, "/readyz", timeout, "kube-apiserver")
    manager = _client_kubeconfig(
        url, workdir, ca, ca_file, "controller-manager", "system:kube-controller-manager", ()
    )
    plane.processes["kube-controller-manager"] = spawn(
        "kube-controller-manager",
        [
            str(bin_dir / "kube-controller-manager"),
            f"--kubeconfig={manager}",
            f"--authentication-kubeconfig={manager}",
            f"--authorization-kubeconfig={manager}",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            "--leader-elect=false",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={workdir / 'sa.key'}",
            f"--root-ca-file={ca_file}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # the garbage collector and namespace controller act within seconds, not minutes
            "--concurrent-gc-syncs=5",
            # a quota made seconds after a CRD counts its objects only from the quota
            # controller's next full resync (5 min by default); until then the API server
            # refuses those objects ("status unknown for quota")
            "--resource-quota-sync-period=10s",
            # nodes here have no kubelet to renew their lease: the node lifecycle controller
            # would mark them unreachable and evict what the scheduler placed on them
            "--controllers=*,-node-lifecycle-controller",
            "--v=0",
        ],
    )
    scheduler = _client_kubeconfig(
        url, workdir, ca, ca_file, "scheduler", "system:kube-scheduler", ()
    )
    plane.processes["kube-scheduler"] = spawn(
        "kube-scheduler",
        [
            str(bin_dir / "kube-scheduler"),
            f"--kubeconfig={scheduler}",
            f"--authentication-kubeconfig={scheduler}",
            f"--authorization-kubeconfig={scheduler}",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            "--leader-elect=false",
            "--v=0",
        ],
    )
    _wait_for_default_account(plane, timeout)
    return plane


def _wait_for_default_account(plane: ControlPlane, timeout: float) -> None:
    """The controller manager is working once it has made ``default``'s service account."""
    from kubernetes import client

    core = client.CoreV1Api(plane.api_client())
    wait_for(
        lambda: core.read_namespaced_service_account("default", "default"),
        timeout,
        "the controller manager's first service account (default/default)",
        alive=plane.running,
        log=lambda: plane.failure_log("kube-controller-manager"),
    )


def decode_jwt_claims(token: str) -> dict[str, Any]:
    """The claims of a service-account token (for assertions; the signature is the server's)."""
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def crd_documents(part: str = "crds") -> list[dict[str, Any]]:
    """The pinned releases' CRDs (build.sh ``crds``): TrainJob, TrainingRuntime,
    ClusterTrainingRuntime (Kubeflow Trainer v2) and TFJob (the Training Operator v1); with
    ``part="crds-old"``, the older Trainer's (``TRAINER_OLD_VERSION``)."""
    import yaml

    docs = []
    for path in sorted(part_dir(part).glob("*/*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def install_crds(plane: ControlPlane) -> list[str]:
    """Install :func:`crd_documents` and wait until they are served; return their names."""
    docs = crd_documents()
    plane.apply(docs)
    names = [d["metadata"]["name"] for d in docs]
    plane.wait_established(names)
    return names
