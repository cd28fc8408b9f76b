"""Helpers the tests import by name (a module of its own: with conftest.py files in both tests/
and components/, ``from conftest import ...`` would find whichever pytest loaded last)."""

from __future__ import annotations

import contextlib
import csv
import os
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest

# the one copy of it is realparts.processes; tests import it from here too
from realparts.processes import WaitError, wait_for
from realparts.processes import free_port as free_port
from realparts.processes import free_ports as free_ports

#: ``make test`` runs the suite on three workers (pytest-xdist, ``--dist loadgroup``). The tests of
#: one group run on one worker, one after another: those that share what only one process may
#: drive at a time, or that would each start it again on every worker. ``marker -> group``:
#: podman's default storage, where the ``containers`` tests build the images and run them; the
#: real control plane (``k8s``: etcd and four servers, started once per worker that needs them);
#: Beam's Flink and Spark job servers (``runners``: a JVM each). The components' own tests share
#: their session's kfp.local runs (components/conftest.py), a group of their own too.
XDIST_GROUPS = {"containers": "podman", "k8s": "k8s", "runners": "runners"}
COMPONENTS_GROUP = "components"
#: ``make test-cluster`` runs the ``cluster`` tests on two workers, one group each, sharing the
#: one cluster (its add-ons installed by one worker at a time: ``bringup.Cluster.exclusive``).
#: While one test waits on the cluster (a pod scheduled, a run's next step, the Trainer), the
#: CPU idles most of the time: two at once keep it busy. What must not overlap is in one group:
#: the runs that launch TrainJobs from Kubeflow Pipelines (the profile's namespace) and
#: ``test_cluster_training.py``, which gives the one ClusterTrainingRuntime a claim that only its
#: own namespaces have (a TrainJob made meanwhile in the profile waits on that claim forever).
#: The groups are about equally long: that, the profile's other runs and the launcher's in one;
#: in the other, the node's own tests, the NetworkPolicy's, the UI's, the deploy page's walk
#: (its own profile) and the profile's recurring and CronJob runs. ``test file`` or
#: ``test file::test`` -> group; the rest of the ``cluster`` tests are in
#: :data:`CLUSTER_NODE_GROUP`.
CLUSTER_NODE_GROUP = "cluster-node"
CLUSTER_GROUPS = {
    "test_kfp.py": "kfp-runs",
    "test_cluster_training.py": "kfp-runs",
    "test_kfp.py::test_the_cronjob_starts_a_run_and_its_role_denies_the_rest": CLUSTER_NODE_GROUP,
    "test_kfp.py::test_a_recurring_run_starts_runs_on_its_schedule": CLUSTER_NODE_GROUP,
}


def cluster_group(item: pytest.Item) -> str:
    """The group of a ``cluster`` test (:data:`CLUSTER_GROUPS`)."""
    return cluster_group_of(item.path.name, item.originalname)  # type: ignore[attr-defined]


def cluster_group_of(file: str, test: str) -> str:
    """The group of the ``cluster`` test ``test`` of the test file ``file``."""
    return CLUSTER_GROUPS.get(f"{file}::{test}") or CLUSTER_GROUPS.get(file) or CLUSTER_NODE_GROUP


def unavailable(reason: str) -> NoReturn:
    """Skip the test for want of a part, or fail it under CI (``CI=true``), where every part
    must be there: a check that cannot run must not pass unseen."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"cannot run under CI: {reason}")
    pytest.skip(reason)


def stop_process(process: subprocess.Popen, timeout: float) -> None:
    """Terminate a server process; kill it if it has not ended after ``timeout`` seconds."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def wait_for_fake_gcs(url: str, process: subprocess.Popen, log: Callable[[], str],
                      timeout: float) -> None:  # fmt: skip
    """Wait until fake-gcs-server at ``url`` lists its buckets.

    Raises:
        RuntimeError: The server exited first (its log's end in the message).
        WaitError: It did not answer within ``timeout`` seconds.

    """

    def answers() -> bool:
        with urllib.request.urlopen(f"{url}/storage/v1/b", timeout=2):
            return True

    try:
        wait_for(answers, timeout, "fake-gcs-server", alive=lambda: process.poll() is None,
                 interval=0.1)  # fmt: skip
    except WaitError:
        if process.poll() is not None:
            raise RuntimeError(f"fake-gcs-server exited: {log()[-2000:]}") from None
        raise


def stored_job(api_client: Any, kind: Any, namespace: str, name: str) -> dict[str, Any] | None:
    """A training job as the API server holds it (``kind``: ``TFJob`` or ``TrainJob`` of
    tfrecord_suite.launch), or None once it is gone."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        return client.CustomObjectsApi(api_client).get_namespaced_custom_object(
            kind.group, kind.version, namespace, kind.plural, name
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def emulator_env(url: str) -> contextlib.AbstractContextManager[None]:
    """The GCS client pointed at the emulator at ``url`` meanwhile."""
    from tfrecord_suite.io import storage

    return storage.environment({"STORAGE_EMULATOR_HOST": url})


def s3_env(env: dict[str, str]) -> contextlib.AbstractContextManager[None]:
    """boto3's environment set to ``env`` (an S3 server's endpoint and credentials) meanwhile."""
    from tfrecord_suite.io import storage

    return storage.environment(env, unset=storage.S3_ENDPOINT_ENV)


def unsized_reader(**fields: Any) -> Any:
    """A ReaderConfig whose layout reads no file to size itself (blocks and windows given, no
    shuffle): for checks of the layout on paths that do not exist."""
    from tfrecord_suite.train.reader_config import ReaderConfig

    return ReaderConfig(**{"block_length": 1, "parse_window": 8, "shuffle_buffer": 0, **fields})


def launcher_job_config(placement: Any, service_account: str, **overrides: Any) -> Any:
    """The job a launcher test renders or runs (a ``JobConfig``): the GPU image training a
    registered dataset on four workers for run ``run-123``, owned by its step's pod, with
    ``placement`` and ``service_account`` (TrainJob's and TFJob's tests differ there) and any
    field of ``overrides`` replaced."""
    from tfrecord_suite.launch.job import JobConfig

    base = dict(
        name="tfrs-train-abc",
        namespace="ml",
        image="ghcr.io/tfrecord-suite/tfrecord-suite-gpu:0.1.0",
        trainer_args=["--dataset", "gs://b/reg/digits@1.0.0", "--model-dir", "gs://b/m"],
        workers=4,
        placement=placement,
        run_id="run-123",
        service_account=service_account,
        owner={"apiVersion": "v1", "kind": "Pod", "name": "train-op-pod", "uid": "u-1"},
        poll_seconds=0,
    )
    base.update(overrides)
    return JobConfig(**base)


def write_csv(path: str, header: list[str], rows: list[list[object]]) -> str:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def served_probabilities(export_dir: str, files: list[str], batch: int) -> np.ndarray:  # noqa: F821
    """What the exported model's serving signature answers for every record of ``files``."""
    import numpy as np
    import tensorflow as tf

    serve = tf.saved_model.load(export_dir).signatures["serving_default"]
    return np.concatenate(
        [
            serve(examples=b)["probabilities"].numpy()
            for b in tf.data.TFRecordDataset(files).batch(batch)
        ]
    )


def multi_worker_train(
    args: list[str], workers: int = 2, timeout: float = 600, env: dict[str, str] | None = None
) -> list[dict]:
    """``tfrecord-suite train ARGS --strategy multi_worker --json`` as ``workers`` processes
    forming one MultiWorkerMirroredStrategy cluster on 127.0.0.1 (``TF_CONFIG``), with ``env``
    added to this environment; each one's JSON summary, after all succeeded."""
    import json
    import sys

    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(workers)]}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tfrecord_suite.cli",
                "train",
                *args,
                "--strategy",
                "multi_worker",
                "--json",
            ],
            env={
                **os.environ,
                **(env or {}),
                "TF_CONFIG": json.dumps(
                    {"cluster": cluster, "task": {"type": "worker", "index": i}}
                ),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(workers)
    ]
    outs = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, stderr[-3000:]
        outs.append(json.loads(stdout))
    return outs


def cached_against_policy(pipeline_yaml: str) -> list[str]:
    """Tasks of the suite's components that a compiled pipeline lets Kubeflow cache although
    their policy (tfrecord_suite.kfp.step_policies.STEPS) says not to: a cached resolve_dataset, for
    one, keeps training on the version an alias named when it first ran."""
    import yaml

    from tfrecord_suite.kfp.step_policies import STEPS

    with open(pipeline_yaml) as fh:
        spec = next(yaml.safe_load_all(fh))
    uncached = {f"comp-{n.replace('_', '-')}" for n, p in STEPS.items() if not p.cache}
    wrong = []

    def walk(dag: dict) -> None:
        for name, task in dag.get("tasks", {}).items():
            ref = task["componentRef"]["name"]
            inner = spec["components"].get(ref, {})
            if "dag" in inner:
                walk(inner["dag"])
            # kfp numbers repeated uses of one component: comp-train-2
            base = ref.rsplit("-", 1)[0] if ref.rsplit("-", 1)[-1].isdigit() else ref
            if base in uncached and task.get("cachingOptions", {}).get("enableCache"):
                wrong.append(name)

    walk(spec["root"]["dag"])
    return wrong


def launcher_account(plane: Any, namespace: str, kubeconfig: Path, account: str = "runner") -> Any:
    """A run's account in ``namespace`` on a real control plane (tests/realparts), holding only
    the launcher's Role (k8s/base/role.yaml), bound as k8s/base binds it.

    Returns an object with ``namespace``, ``account``, ``api`` (an ApiClient presenting the
    account's own token from the TokenRequest API, as a pod's projected token), ``kubeconfig``
    (a kubeconfig of that token, for code that loads one) and ``user`` (its name in the audit
    log, ``ControlPlane.requests_by``).
    """
    import types

    import yaml

    role = yaml.safe_load((Path(__file__).parents[1] / "k8s" / "base" / "role.yaml").read_text())
    role["metadata"]["namespace"] = namespace
    plane.apply([
        role,
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": account, "namespace": namespace}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": account, "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": role["metadata"]["name"]},
         "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]},
    ])  # fmt: skip
    token = plane.token(namespace, account)
    return types.SimpleNamespace(
        namespace=namespace,
        account=account,
        api=plane.api_client(token=token),
        kubeconfig=plane.kubeconfig_for_token(token, kubeconfig, namespace),
        user=f"system:serviceaccount:{namespace}:{account}",
    )


def api_calls(plane: Any, user: str, resource: str = "") -> list[tuple[str, int, str]]:
    """``(verb, response code, request URI)`` of each call ``user`` made to a real control plane
    (its audit log), on ``resource`` (e.g. ``trainjobs``, ``pods/log``) where given."""
    calls = []
    for event in plane.requests_by(user):
        ref = event.get("objectRef") or {}
        name = ref.get("resource", "") + (
            f"/{ref['subresource']}" if ref.get("subresource") else ""
        )
        if not resource or name == resource:
            calls.append((event["verb"], event["responseStatus"]["code"], event["requestURI"]))
    return calls


def launch_as(monkeypatch: Any, tmp_path: Path, runner: Any) -> None:
    """Make code that launches from a pod (the train step) do it here as ``runner``
    (:func:`launcher_account`): its kubeconfig, and its namespace as the pod's own."""
    from tfrecord_suite.launch import kube

    path = tmp_path / "namespace"
    path.write_text(runner.namespace)
    monkeypatch.setattr(kube, "NAMESPACE_FILE", str(path))
    monkeypatch.setenv("KUBECONFIG", str(runner.kubeconfig))


def kept(sent: Any, stored: Any, path: str = "") -> list[str]:
    """Where ``stored`` (an object as an API server returned it, defaults added) lost or changed
    what was ``sent``: each path whose value differs; empty when all of it was kept."""
    if isinstance(sent, dict):
        if not isinstance(stored, dict):
            return [path or "."]
        return [p for k, v in sent.items() for p in kept(v, stored.get(k), f"{path}.{k}")]
    if isinstance(sent, list):
        if not isinstance(stored, list) or len(stored) != len(sent):
            return [path or "."]
        return [
            p
            for i, (a, b) in enumerate(zip(sent, stored, strict=True))
            for p in kept(a, b, f"{path}[{i}]")
        ]
    return [] if sent == stored else [path or "."]
