"""A tf.data service on Kubernetes: its objects, and a run's own service beside its trainers.

One function, :func:`objects`, makes the three objects a service is: a headless Service giving
every pod a stable name (``<pod>.<name>``), a dispatcher StatefulSet and a worker StatefulSet
whose pods advertise those names, the fixed list the dispatcher takes (the reader's static
sharding refuses any other worker, and a worker restarted by its StatefulSet comes back under
its name, which lets the epoch go on). ``k8s/data-service`` is these objects for a shared,
long-lived service (``tfrecord-suite data-service manifests`` writes it); the train step's
``--input-service cluster:N`` makes them for its run with :class:`DataServiceLauncher`, owned
by the step's pod, and deletes them when training ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tfrecord_suite.launch.job import (
    NO_SIDECAR,
    RUN_LABEL,
    JobError,
    current_namespace,
    label_value,
    retrying,
)
from tfrecord_suite.train.service import DISPATCHER_PORT, WORKER_PORT

_NAME_LABEL = "app.kubernetes.io/name"
_COMPONENT_LABEL = "app.kubernetes.io/component"
JOURNAL = "/journal"
READY_FILE = "/tmp/tfrs-data-service.ready"
#: What one worker asks for: it reads, parses and decodes, so CPU is what it is for.
WORKER_REQUESTS = {"cpu": "4", "memory": "8Gi"}
DISPATCHER_REQUESTS = {"cpu": "1", "memory": "2Gi"}
_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": 10001,
    "runAsGroup": 10001,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def dispatcher_address(name: str) -> str:
    """The dispatcher of the service ``name``, as ``--input-service`` takes it."""
    return f"grpc://{name}-dispatcher-0.{name}:{DISPATCHER_PORT}"


def worker_names(name: str, workers: int) -> list[str]:
    """Every worker's ``host:port``, as each advertises itself: the dispatcher's fixed list."""
    return [f"{name}-worker-{i}.{name}:{WORKER_PORT}" for i in range(workers)]


def objects(
    name: str,
    workers: int,
    image: str,
    *,
    journal_claim: bool = True,
    service_account: str = "",
    labels: dict[str, str] | None = None,
    owner: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The Service and the two StatefulSets of the tf.data service ``name``.

    Args:
        name: The Service's name; the StatefulSets are ``<name>-dispatcher`` and
            ``<name>-worker``.
        workers: Worker pods.
        image: The suite's image (it runs ``tfrecord-suite data-service``).
        journal_claim: Keep the dispatcher's journal on a volume claim, which outlives its pod
            (a long-lived service); otherwise on an emptyDir, which outlives a restart of its
            container (a run's own service: a StatefulSet leaves its claims behind).
        service_account: The pods' account (it must read the dataset's bucket); empty: the
            namespace's default.
        labels: Added to every object and pod (e.g. the run's label).
        owner: An ownerReference every object carries (deleted with its owner).

    """
    if workers < 1:
        raise ValueError(f"a tf.data service needs at least one worker, got {workers}")
    labels = dict(labels or {})
    selector = {_NAME_LABEL: name}

    def metadata(object_name: str) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": object_name}
        if labels:
            meta["labels"] = dict(labels)
        if owner:
            meta["ownerReferences"] = [owner]
        return meta

    def stateful_set(component: str, replicas: int, args: list[str], **extra: Any) -> dict:
        pod_labels = {**labels, **selector, _COMPONENT_LABEL: component, **NO_SIDECAR}
        port = DISPATCHER_PORT if component == "dispatcher" else WORKER_PORT
        container: dict[str, Any] = {
            "name": component,
            "image": image,
            # the image has no entrypoint (Kubeflow gives every step its whole command)
            "command": ["tfrecord-suite"],
            "args": ["data-service", component, *args, f"--ready-file={READY_FILE}"],
            "env": [*extra.pop("env", []), {"name": "HOME", "value": "/tmp"}],
            "ports": [{"containerPort": port, "name": component}],
            # the file appears once the server serves (a worker: once it has registered; its
            # port opens a moment earlier)
            "readinessProbe": {
                "exec": {"command": ["test", "-e", READY_FILE]},
                "periodSeconds": 2,
            },
            "resources": {
                "requests": dict(
                    DISPATCHER_REQUESTS if component == "dispatcher" else WORKER_REQUESTS
                )
            },
            **extra.pop("container", {}),
        }
        pod_spec: dict[str, Any] = {
            "automountServiceAccountToken": False,
            "securityContext": dict(_SECURITY),
            "containers": [container],
            **extra.pop("pod", {}),
        }
        if service_account:
            pod_spec["serviceAccountName"] = service_account
        spec: dict[str, Any] = {
            "serviceName": name,
            "replicas": replicas,
            # start and replace pods independently: a killed worker must come back at its name
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {**selector, _COMPONENT_LABEL: component}},
            "template": {
                "metadata": {"labels": pod_labels, "annotations": dict(NO_SIDECAR)},
                "spec": pod_spec,
            },
            **extra,
        }
        return {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": metadata(f"{name}-{component}"),
            "spec": spec,
        }

    journal_volume = {"name": "journal", "mountPath": JOURNAL}
    dispatcher_extra: dict[str, Any] = {"container": {"volumeMounts": [journal_volume]}}
    if journal_claim:
        dispatcher_extra["volumeClaimTemplates"] = [
            {
                "metadata": {"name": "journal"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            }
        ]
    else:
        dispatcher_extra["pod"] = {"volumes": [{"name": "journal", "emptyDir": {}}]}
    dispatcher = stateful_set(
        "dispatcher",
        1,
        [
            f"--port={DISPATCHER_PORT}",
            f"--work-dir={JOURNAL}",
            f"--worker-addresses={','.join(worker_names(name, workers))}",
        ],
        **dispatcher_extra,
    )
    dispatcher["spec"]["template"]["spec"]["securityContext"]["fsGroup"] = 10001
    worker = stateful_set(
        "worker",
        workers,
        [
            f"--dispatcher={name}-dispatcher-0.{name}:{DISPATCHER_PORT}",
            f"--port={WORKER_PORT}",
            f"--address=$(POD_NAME).{name}:{WORKER_PORT}",
        ],
        env=[{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
    )
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(name),
        "spec": {
            "clusterIP": "None",
            # the names must resolve while the pods start: workers register before they are ready
            "publishNotReadyAddresses": True,
            "selector": selector,
            "ports": [
                {"name": "dispatcher", "port": DISPATCHER_PORT},
                {"name": "worker", "port": WORKER_PORT},
            ],
        },
    }
    return [service, dispatcher, worker]


class DataServiceLauncher:
    """Creates a run's tf.data service, waits until its pods are ready, deletes it after."""

    def __init__(
        self,
        api_client: Any,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        timeout_seconds: float = 900.0,
    ):
        from kubernetes import client

        self.apps = client.AppsV1Api(api_client)
        self.core = client.CoreV1Api(api_client)
        self._sleep = sleep
        self._clock = clock
        self.timeout_seconds = timeout_seconds

    @contextmanager
    def running(
        self,
        name: str,
        workers: int,
        image: str,
        *,
        run_id: str = "",
        service_account: str = "",
        owner: dict[str, Any] | None = None,
        namespace: str = "",
    ) -> Iterator[str]:
        """The dispatcher's address while the service ``name`` runs; deleted on leaving."""
        namespace = namespace or current_namespace()
        labels = {RUN_LABEL: label_value(run_id)} if run_id else {}
        made = objects(
            name,
            workers,
            image,
            journal_claim=False,
            service_account=service_account,
            labels=labels,
            owner=owner,
        )
        try:
            for body in made:
                self._create_or_adopt(namespace, body)
            self._wait_ready(namespace, made[1:])
            yield dispatcher_address(name)
        finally:
            for body in reversed(made):
                self._delete(namespace, body)

    def _calls(self, kind: str) -> tuple[Callable[..., Any], Callable[..., Any], Callable]:
        if kind == "Service":
            return (
                self.core.create_namespaced_service,
                self.core.read_namespaced_service,
                self.core.delete_namespaced_service,
            )
        return (
            self.apps.create_namespaced_stateful_set,
            self.apps.read_namespaced_stateful_set,
            self.apps.delete_namespaced_stateful_set,
        )

    def _create_or_adopt(self, namespace: str, body: dict[str, Any]) -> None:
        from kubernetes.client.exceptions import ApiException

        create, read, _ = self._calls(body["kind"])
        name = body["metadata"]["name"]
        try:
            retrying(create)(namespace, body)
            return
        except ApiException as exc:
            if exc.status != 409:
                raise JobError(
                    f"could not create the tf.data service's {body['kind']} {namespace}/{name}: "
                    f"{exc.status} {exc.reason}"
                ) from exc
        existing = retrying(read)(name, namespace)
        theirs = (existing.metadata.labels or {}).get(RUN_LABEL)
        ours = (body["metadata"].get("labels") or {}).get(RUN_LABEL)
        if not ours or theirs != ours:
            raise JobError(
                f"{body['kind']} {namespace}/{name} already exists and belongs to another run "
                f"({theirs})"
            )

    def _wait_ready(self, namespace: str, sets: list[dict[str, Any]]) -> None:
        deadline = self._clock() + self.timeout_seconds
        _, read, _ = self._calls("StatefulSet")
        while True:
            waiting = []
            for body in sets:
                status = retrying(read)(body["metadata"]["name"], namespace).status
                ready = (status.ready_replicas if status else 0) or 0
                if ready < body["spec"]["replicas"]:
                    waiting.append(f"{body['metadata']['name']} {ready}/{body['spec']['replicas']}")
            if not waiting:
                return
            if self._clock() >= deadline:
                raise JobError(
                    "the tf.data service's pods were not ready after "
                    f"{self.timeout_seconds:.0f} s: {', '.join(waiting)} ready"
                )
            self._sleep(5.0)

    def _delete(self, namespace: str, body: dict[str, Any]) -> None:
        from kubernetes.client.exceptions import ApiException

        _, _, delete = self._calls(body["kind"])
        try:
            retrying(delete)(body["metadata"]["name"], namespace, propagation_policy="Foreground")
        except ApiException as exc:
            if exc.status != 404:
                raise


#: The files of ``k8s/data-service`` :func:`write_manifests` writes (kustomization.yaml is
#: written by hand), by object kind and component.
MANIFEST_FILES = {"Service": "service.yaml", "dispatcher": "dispatcher.yaml",
                  "worker": "workers.yaml"}  # fmt: skip
_HEADER = (
    "# Generated by `tfrecord-suite data-service manifests` (launch/data_service.py, the objects\n"
    "# the train step's --input-service cluster:N makes for its run); regenerate, do not edit:\n"
    "#   tfrecord-suite data-service manifests --name {name} --workers {workers} --output DIR\n"
)


def manifest_texts(name: str, workers: int, image: str) -> dict[str, str]:
    """``file name -> YAML`` of a long-lived service (its journal on a volume claim)."""
    import yaml

    out = {}
    for doc in objects(name, workers, image):
        key = doc["kind"] if doc["kind"] == "Service" else doc["metadata"]["name"].rsplit("-")[-1]
        body = yaml.safe_dump(doc, sort_keys=False, width=100)
        out[MANIFEST_FILES[key]] = _HEADER.format(name=name, workers=workers) + body
    return out


def write_manifests(folder: str, name: str, workers: int, image: str, check: bool = False) -> list:
    """Write the service's manifests into ``folder``; with ``check``, only list those that differ.

    Returns:
        The files written (or, with ``check``, the files whose content differs).

    """
    import os

    from tfrecord_suite.io.generated import write_generated

    texts = manifest_texts(name, workers, image)
    return write_generated({os.path.join(folder, f): t for f, t in texts.items()}, check)
