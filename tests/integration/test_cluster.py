"""The one-node cluster (tests/cluster/, ``make cluster-up``) works as a cluster: the node runs
pods, cluster DNS resolves Services by name, Service addresses reach their pods, the API server
is reachable from pods as ``kubernetes.default``, and nothing the pods send leaves the bridge.
Marker ``cluster``: ``make test-cluster`` runs these."""

from __future__ import annotations

import json
from typing import Any

import pytest

from realparts.processes import WaitError, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]


def _restricted() -> dict[str, Any]:
    """A container securityContext the restricted Pod Security level admits."""
    return {
        "allowPrivilegeEscalation": False,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def wait_pod(core: Any, namespace: str, name: str, phases: set[str], timeout: float = 180) -> Any:
    """Wait until the pod reaches one of ``phases``; fail with its state and events if not."""
    pod = None

    def reached() -> Any:
        nonlocal pod
        pod = core.read_namespaced_pod(name, namespace)
        return pod if pod.status.phase in phases else None

    try:
        return wait_for(reached, timeout, f"pod {namespace}/{name}", interval=1)
    except WaitError:
        pass
    events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}")
    raise AssertionError(
        f"pod {namespace}/{name} is {pod and pod.status.phase}, not {phases}:\n"
        + "\n".join(f"{e.reason}: {e.message}" for e in events.items)
    )


def pod_log(core: Any, namespace: str, name: str) -> str:
    """A pod's log as text (the client would parse a JSON log line into a dict's repr)."""
    return core.read_namespaced_pod_log(name, namespace, _preload_content=False).data.decode()


def test_a_pod_resolves_a_service_by_name_and_reaches_it(one_node_cluster, cluster_namespace):
    """A Deployment behind a Service, and a client pod that finds it by its short name (the
    pod's search path), by its full name, and through its ClusterIP: the answer comes from the
    server pod, and the names resolve to the Service's ClusterIP (CoreDNS, kube-proxy)."""
    from kubernetes import client

    cluster, ns = one_node_cluster, cluster_namespace
    probe = cluster.system_images["probe"]
    cluster.kubectl(
        "apply", "-n", ns, "-f", "-",
        stdin=json.dumps({
            "apiVersion": "v1", "kind": "List", "items": [
                {
                    "apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "echo"},
                    "spec": {
                        "selector": {"matchLabels": {"app": "echo"}},
                        "template": {
                            "metadata": {"labels": {"app": "echo"}},
                            "spec": {"containers": [{
                                "name": "echo", "image": probe,
                                "imagePullPolicy": "Never",
                                "args": ["serve", ":8080"],
                                "securityContext": _restricted(),
                            }]},
                        },
                    },
                },
                {
                    "apiVersion": "v1", "kind": "Service", "metadata": {"name": "echo"},
                    "spec": {"selector": {"app": "echo"},
                             "ports": [{"port": 80, "targetPort": 8080}]},
                },
            ],
        }),
    )  # fmt: skip
    cluster.kubectl("-n", ns, "rollout", "status", "deployment/echo", "--timeout=120s")
    core = client.CoreV1Api(cluster.api_client())
    cluster_ip = core.read_namespaced_service("echo", ns).spec.cluster_ip
    server = core.list_namespaced_pod(ns, label_selector="app=echo").items[0].metadata.name

    urls = {
        "short": "http://echo/",
        "full": f"http://echo.{ns}.svc.cluster.local/",
        "ip": f"http://{cluster_ip}/",
    }
    for key, url in urls.items():
        core.create_namespaced_pod(
            ns,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"client-{key}"},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "client",
                            "image": probe,
                            "imagePullPolicy": "Never",
                            "args": ["get", url],
                            "securityContext": _restricted(),
                        }
                    ],
                },
            },
        )
    for key in urls:
        pod = wait_pod(core, ns, f"client-{key}", {"Succeeded", "Failed"})
        log = pod_log(core, ns, f"client-{key}")
        assert pod.status.phase == "Succeeded", log
        answer = json.loads(log.strip().splitlines()[-1])
        assert answer["body"] == f"hello from {server}"
        assert answer["addresses"] == [cluster_ip], answer


def test_pods_reach_the_api_server_as_kubernetes_default(one_node_cluster):
    """CoreDNS is Ready only once it has listed the cluster's Services through
    ``kubernetes.default`` (10.96.0.1, kube-proxy's rule to the API server on the bridge)."""
    from kubernetes import client

    core = client.CoreV1Api(one_node_cluster.api_client())
    pods = core.list_namespaced_pod("kube-system", label_selector="k8s-app=kube-dns").items
    assert pods and all(
        any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        for p in pods
    )
    slices = client.DiscoveryV1Api(one_node_cluster.api_client()).list_namespaced_endpoint_slice(
        "default", label_selector="kubernetes.io/service-name=kubernetes"
    )
    from cluster.host import NODE_IP

    assert [a for s in slices.items for e in s.endpoints for a in e.addresses] == [NODE_IP]


def test_the_node_is_the_pinned_release_on_containerd(one_node_cluster):
    """The kubelet and containerd that joined are the pinned builds."""
    from kubernetes import client

    from realparts import parts

    pins = parts.versions()
    (node,) = client.CoreV1Api(one_node_cluster.api_client()).list_node().items
    info = node.status.node_info
    assert info.kubelet_version == pins["KUBERNETES_VERSION"]
    assert info.container_runtime_version == f"containerd://{pins['CONTAINERD_VERSION'][1:]}"
    assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)


def test_the_cluster_outlives_the_process_that_brought_it_up(one_node_cluster):
    """`make cluster-up` exits once the cluster is up; every process it started, etcd
    included, keeps running for the `kubectl` and test sessions that come after. The session
    (conftest's ``pytest_sessionstart``) brought this cluster up in a process of its own that
    has ended (as `make cluster-up` does), and this test reads it from another (a worker): each
    process is alive and the API server answers (it did not when etcd was tied to the process
    that started it)."""
    from cluster import bringup, node

    cluster = bringup.Cluster.load()
    assert cluster is not None
    assert set(cluster.alive()) == set(node.PROCESSES)
    assert all(cluster.alive().values()), cluster.alive()
    nodes = cluster.kubectl("get", "nodes", "-o", "name", "--request-timeout=20s").stdout
    assert nodes.split() == ["node/tfrs-node"]
    assert list(cluster.steps)[: len(node.STEPS)] == [s.name for s in node.STEPS]
