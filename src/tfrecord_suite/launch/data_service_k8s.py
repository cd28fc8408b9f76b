"""A tf.data service on Kubernetes: its objects, and a run's own service beside its trainers.

One function, :func:`objects`, makes what a service is: a headless Service giving every pod a
stable name (``<pod>.<name>``); a dispatcher StatefulSet whose journal is on a volume claim (a
restarted dispatcher resumes its jobs from it) and a worker StatefulSet whose pods advertise
those names, the fixed list the dispatcher takes (the reader's static sharding refuses any other
worker, and a worker restarted by its StatefulSet comes back under its name, which lets the
epoch go on); a PodDisruptionBudget that lets a drain take one worker at a time; and a
NetworkPolicy that admits only the service's own pods and its clients to its ports (the servers
have no authentication): a run's service, only that run's trainers
(:func:`~tfrecord_suite.launch.kube.run_trainers`); a shared one, every trainer pod of its
namespace (:data:`~tfrecord_suite.launch.kube.TRAINER_LABELS`).

The pods run under a named service account with no API token mounted, as non-root with no
capabilities, a read-only root filesystem (``/tmp`` is an emptyDir) and the runtime's seccomp
profile, and request what fits a 4 vCPU / 16 GB node (:data:`WORKER_RESOURCES`); the workers
prefer nodes of their own.

``k8s/data-service`` is these objects for a shared, long-lived service (``tfrecord-suite
data-service manifests`` writes it, with a service account of its own); the train step's
``--input-service cluster:N`` makes them for its run with :class:`DataServiceLauncher`, owned
by the step's lease (:mod:`tfrecord_suite.launch.lease`), running as the run's account, and
deletes them when training ends.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tfrecord_suite import flags
from tfrecord_suite.launch.credentials import Credentials
from tfrecord_suite.launch.kube import (
    NO_SIDECAR,
    RUN_LABEL,
    TRAINER_LABELS,
    JobError,
    container_security,
    create_or_adopt,
    current_namespace,
    label_value,
    log_unschedulable,
    pod_security,
    retrying,
    run_trainers,
    unschedulable,
)
from tfrecord_suite.train.served import SERVED_DIR, ShareOptions
from tfrecord_suite.train.service import DISPATCHER_PORT, WORKER_PORT

_NAME_LABEL = "app.kubernetes.io/name"
_COMPONENT_LABEL = "app.kubernetes.io/component"
JOURNAL = "/journal"
JOURNAL_SIZE = "1Gi"
READY_FILE = "/tmp/tfrs-data-service.ready"
#: What one worker asks for and may use: it reads, parses and decodes, so CPU is what it is
#: for. Requests fit a 4 vCPU / 16 GB node after the kubelet's reservation and the daemon sets
#: (about 3.5 CPUs and 12 GiB free); no CPU limit (idle cores are the input's to use), a memory
#: limit so that a runaway buffer ends the worker, not its node.
WORKER_RESOURCES = {"requests": {"cpu": "3", "memory": "8Gi"}, "limits": {"memory": "10Gi"}}
DISPATCHER_RESOURCES = {"requests": {"cpu": "500m", "memory": "1Gi"},
                        "limits": {"memory": "2Gi"}}  # fmt: skip
_USER = 10001
#: How long a worker may take to stage its share of the shards before it serves.
STAGE_SECONDS = 3600


def dispatcher_address(name: str) -> str:
    """The dispatcher of the service ``name``, as ``--input-service`` takes it."""
    return f"grpc://{name}-dispatcher-0.{name}:{DISPATCHER_PORT}"


def worker_resources(requests: dict[str, str]) -> dict[str, dict[str, str]]:
    """A worker container's ``resources``: :data:`WORKER_RESOURCES` with ``requests`` over its own.

    The memory limit rises to the memory requested where that is larger (a limit below the
    request is refused by the API server).
    """
    from kubernetes.utils.quantity import parse_quantity

    out = {key: dict(value) for key, value in WORKER_RESOURCES.items()}
    out["requests"].update(requests)
    memory, limit = out["requests"]["memory"], out["limits"]["memory"]
    if parse_quantity(memory) > parse_quantity(limit):
        out["limits"]["memory"] = memory
    return out


def worker_names(name: str, workers: int) -> list[str]:
    """Every worker's ``host:port``, as each advertises itself: the dispatcher's fixed list."""
    return [f"{name}-worker-{i}.{name}:{WORKER_PORT}" for i in range(workers)]


def objects(
    name: str,
    workers: int,
    image: str,
    *,
    service_account: str = "",
    own_service_account: bool = False,
    labels: dict[str, str] | None = None,
    owner: dict[str, Any] | None = None,
    credentials: Credentials | None = None,
    clients: list[dict[str, str]] | None = None,
    worker_requests: dict[str, str] | None = None,
    stage: ShareOptions | None = None,
) -> list[dict[str, Any]]:
    """The objects of the tf.data service ``name``.

    Args:
        name: The Service's name; the StatefulSets are ``<name>-dispatcher`` and
            ``<name>-worker``.
        workers: Worker pods.
        image: The suite's image (it runs ``tfrecord-suite data-service``).
        service_account: The pods' account (the workers must read the dataset's bucket);
            empty: ``name`` when ``own_service_account``, else the namespace's default.
        own_service_account: Also make a ServiceAccount ``name`` (no token mounted) for the
            pods (a long-lived service; annotate it for Workload Identity or IRSA).
        labels: Added to every object and pod (e.g. the run's label).
        owner: An ownerReference every object carries (deleted with its owner).
        credentials: Secrets the pods get (image pull Secrets; the storage Secret, workers
            only: the dispatcher reads no data).
        clients: Label selectors of the pods the NetworkPolicy admits besides the service's
            own: a run's trainers (:func:`~tfrecord_suite.launch.kube.run_trainers`); None:
            every trainer pod of the namespace (:data:`~tfrecord_suite.launch.kube.TRAINER_LABELS`,
            a long-lived service shared by every run).
        worker_requests: CPU and/or memory each worker requests instead of
            :data:`WORKER_RESOURCES`' (the train step's ``--service-cpu-request`` and
            ``--service-memory-request``); the memory limit rises to a larger request.
        stage: The version whose shards each worker stages its share of before it serves
            (shards on ``s3://``: :mod:`~tfrecord_suite.train.served`), into
            :data:`~tfrecord_suite.train.served.SERVED_DIR` on its ``/tmp``; its list of
            workers is this service's. A startup probe then gives the download time (up to
            :data:`STAGE_SECONDS`) before the liveness probe counts.

    Returns:
        [ServiceAccount,] Service, dispatcher StatefulSet, worker StatefulSet,
        PodDisruptionBudget, NetworkPolicy.

    """
    if workers < 1:
        raise ValueError(f"a tf.data service needs at least one worker, got {workers}")
    labels = dict(labels or {})
    credentials = credentials or Credentials()
    selector = {_NAME_LABEL: name}
    account = service_account or (name if own_service_account else "")

    def metadata(object_name: str) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": object_name}
        if labels:
            meta["labels"] = dict(labels)
        if owner:
            meta["ownerReferences"] = [owner]
        return meta

    def pods_of(component: str) -> dict[str, str]:
        return {**selector, _COMPONENT_LABEL: component}

    def stateful_set(component: str, replicas: int, args: list[str], **extra: Any) -> dict:
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
            # a server that stops accepting connections is restarted at its name (a worker
            # then reads its share again); a minute for TensorFlow's import and the journal
            "livenessProbe": {
                "tcpSocket": {"port": component},
                "initialDelaySeconds": 60,
                "periodSeconds": 20,
                "failureThreshold": 3,
            },
            # a worker staging its share opens its port only once it has it
            **(
                {
                    "startupProbe": {
                        "exec": {"command": ["test", "-e", READY_FILE]},
                        "periodSeconds": 5,
                        "failureThreshold": STAGE_SECONDS // 5,
                    }
                }
                if extra.pop("startup", False)
                else {}
            ),
            "resources": dict(extra.pop("resources")),
            "securityContext": container_security(readOnlyRootFilesystem=True),
            # the root filesystem is read-only: HOME and the ready file live in /tmp
            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}, *extra.pop("mounts", [])],
        }
        pod_spec: dict[str, Any] = {
            "automountServiceAccountToken": False,
            # the journal volume is writable by the group
            "securityContext": pod_security(runAsUser=_USER, runAsGroup=_USER, fsGroup=_USER),
            "containers": [container],
            "volumes": [{"name": "tmp", "emptyDir": {}}],
            **extra.pop("pod", {}),
        }
        if account:
            pod_spec["serviceAccountName"] = account
        extra.pop("credentials").apply(pod_spec, [container])
        spec: dict[str, Any] = {
            "serviceName": name,
            "replicas": replicas,
            # start and replace pods independently: a killed worker must come back at its name
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": pods_of(component)},
            "template": {
                "metadata": {
                    "labels": {**labels, **pods_of(component), **NO_SIDECAR},
                    "annotations": dict(NO_SIDECAR),
                },
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

    dispatcher = stateful_set(
        "dispatcher",
        1,
        [
            f"--port={DISPATCHER_PORT}",
            f"--work-dir={JOURNAL}",
            f"--worker-addresses={','.join(worker_names(name, workers))}",
        ],
        resources=DISPATCHER_RESOURCES,
        credentials=dataclasses.replace(credentials, storage_secret=""),
        mounts=[{"name": "journal", "mountPath": JOURNAL}],
        # the journal outlives the pod: a dispatcher restarted at its name resumes every job
        volumeClaimTemplates=[
            {
                "metadata": {"name": "journal"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": JOURNAL_SIZE}},
                },
            }
        ],
        # ... and goes with the StatefulSet (Kubernetes 1.27 and later; before, the claim stays)
        persistentVolumeClaimRetentionPolicy={"whenDeleted": "Delete", "whenScaled": "Retain"},
    )
    staging: list[str] = []
    if stage is not None:
        staging = flags.to_args(
            dataclasses.replace(
                stage, stage_workers=",".join(worker_names(name, workers)), stage_folder=SERVED_DIR
            )
        )
    worker = stateful_set(
        "worker",
        workers,
        [
            f"--dispatcher={name}-dispatcher-0.{name}:{DISPATCHER_PORT}",
            f"--port={WORKER_PORT}",
            f"--address=$(POD_NAME).{name}:{WORKER_PORT}",
            *[f"{a}={b}" for a, b in zip(staging[::2], staging[1::2], strict=True)],
        ],
        env=[{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        resources=worker_resources(worker_requests or {}),
        credentials=credentials,
        startup=stage is not None,
        # workers on nodes of their own where there are enough: a node lost takes one worker
        pod={
            "affinity": {
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 100,
                            "podAffinityTerm": {
                                "labelSelector": {"matchLabels": pods_of("worker")},
                                "topologyKey": "kubernetes.io/hostname",
                            },
                        }
                    ]
                }
            }
        },
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
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(f"{name}-worker"),
        # a drain takes one worker at a time: it comes back at its name and re-reads its share
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": pods_of("worker")}},
    }
    policy = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(name),
        "spec": {
            "podSelector": {"matchLabels": selector},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    # the trainers, and the service's own pods (workers register with the
                    # dispatcher); nothing else reaches the unauthenticated servers
                    "from": [
                        *(
                            {"podSelector": {"matchLabels": dict(c)}}
                            for c in (clients or [TRAINER_LABELS])
                        ),
                        {"podSelector": {"matchLabels": selector}},
                    ],
                    "ports": [
                        {"protocol": "TCP", "port": DISPATCHER_PORT},
                        {"protocol": "TCP", "port": WORKER_PORT},
                    ],
                }
            ],
        },
    }
    made = [service, dispatcher, worker, budget, policy]
    if own_service_account:
        made.insert(
            0,
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": metadata(account),
                # the servers never call the Kubernetes API
                "automountServiceAccountToken": False,
            },
        )
    return made


class DataServiceLauncher:
    """Creates a run's tf.data service, waits until its pods are ready, deletes it after.

    The objects are :func:`objects`' (no service account of their own: the pods run as the
    run's), created in order, each adopted instead when a retried step's earlier attempt made
    it (same run label), and deleted in reverse order on leaving, whatever happened; an object
    of another run holding a name is refused and left alone, with all after it. With
    ``owner`` the step's lease, they go within minutes of the step even when it cannot delete
    them (killed, or its node lost).
    """

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
        self.policy = client.PolicyV1Api(api_client)
        self.networking = client.NetworkingV1Api(api_client)
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
        credentials: Credentials | None = None,
        clients: list[dict[str, str]] | None = None,
        worker_requests: dict[str, str] | None = None,
        stage: ShareOptions | None = None,
    ) -> Iterator[str]:
        """The dispatcher's address while the service ``name`` runs; deleted on leaving.

        Only the pods of ``clients`` (label selectors; by default the trainers of ``run_id``,
        :func:`~tfrecord_suite.launch.kube.run_trainers`) and the service's own reach it. With
        ``stage``, each worker stages its share of that version's shards first (:func:`objects`),
        and the pods are ready once they have.

        Raises:
            JobError: An object could not be created, belongs to another run, or the pods were
                not ready within ``timeout_seconds``.

        """
        namespace = namespace or current_namespace()
        labels = {RUN_LABEL: label_value(run_id)} if run_id else {}
        made = objects(
            name,
            workers,
            image,
            service_account=service_account,
            labels=labels,
            owner=owner,
            credentials=credentials,
            clients=clients or (run_trainers(run_id) if run_id else None),
            worker_requests=worker_requests,
            stage=stage,
        )
        ours: list[dict[str, Any]] = []  # created or adopted: never another run's
        try:
            for body in made:
                self._create_or_adopt(namespace, body)
                ours.append(body)
            self._wait_ready(namespace, [b for b in made if b["kind"] == "StatefulSet"])
            yield dispatcher_address(name)
        finally:
            for body in reversed(ours):
                self._delete(namespace, body)

    def _calls(self, kind: str) -> tuple[Callable[..., Any], Callable[..., Any], Callable]:
        """``(create, read, delete)`` of one kind of object."""
        api, suffix = {
            "Service": (self.core, "service"),
            "StatefulSet": (self.apps, "stateful_set"),
            "PodDisruptionBudget": (self.policy, "pod_disruption_budget"),
            "NetworkPolicy": (self.networking, "network_policy"),
        }[kind]
        return tuple(  # type: ignore[return-value]
            getattr(api, f"{verb}_namespaced_{suffix}") for verb in ("create", "read", "delete")
        )

    def _create_or_adopt(self, namespace: str, body: dict[str, Any]) -> None:
        """Create one object, or adopt this run's from an earlier attempt (``create_or_adopt``)."""
        from kubernetes.client.exceptions import ApiException

        create, read, _ = self._calls(body["kind"])
        name = body["metadata"]["name"]
        owners = body["metadata"].get("ownerReferences") or [None]
        try:
            create_or_adopt(
                lambda: create(namespace, body),
                lambda: read(name, namespace),
                what=f"{body['kind']} {namespace}/{name}",
                run_label=(body["metadata"].get("labels") or {}).get(RUN_LABEL, ""),
                owner=owners[0],
                sleep=self._sleep,
                clock=self._clock,
            )
        except ApiException as exc:
            raise JobError(
                f"could not create the tf.data service's {body['kind']} {namespace}/{name}: "
                f"{exc.status} {exc.reason}"
            ) from exc

    def _wait_ready(self, namespace: str, sets: list[dict[str, Any]]) -> None:
        deadline = self._clock() + self.timeout_seconds
        _, read, _ = self._calls("StatefulSet")
        told: dict[str, str] = {}
        while True:
            waiting = []
            for body in sets:
                status = retrying(read)(body["metadata"]["name"], namespace).status
                ready = (status.ready_replicas if status else 0) or 0
                if ready < body["spec"]["replicas"]:
                    waiting.append(f"{body['metadata']['name']} {ready}/{body['spec']['replicas']}")
            if not waiting:
                return
            pending: dict[str, str] = {}
            for body in sets:
                selector = ",".join(
                    f"{k}={v}" for k, v in body["spec"]["selector"]["matchLabels"].items()
                )
                pending |= unschedulable(self.core, namespace, selector)
            log_unschedulable(pending, told)
            if self._clock() >= deadline:
                reasons = "".join(f"; {pod} is Pending: {why}" for pod, why in pending.items())
                raise JobError(
                    "the tf.data service's pods were not ready after "
                    f"{self.timeout_seconds:.0f} s: {', '.join(waiting)} ready{reasons}"
                    + (" (a dispatcher's journal claim binds only where the namespace has a "
                       "default StorageClass)" if "PersistentVolumeClaim" in reasons else "")
                )  # fmt: skip
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
#: written by hand), by object kind (a StatefulSet: by component).
MANIFEST_FILES = {
    "ServiceAccount": "serviceaccount.yaml",
    "Service": "service.yaml",
    "dispatcher": "dispatcher.yaml",
    "worker": "workers.yaml",
    "PodDisruptionBudget": "poddisruptionbudget.yaml",
    "NetworkPolicy": "networkpolicy.yaml",
}
_HEADER = (
    "# Generated by `tfrecord-suite data-service manifests` (launch/data_service.py, the objects\n"
    "# the train step's --input-service cluster:N makes for its run); regenerate, do not edit:\n"
    "#   tfrecord-suite data-service manifests --name {name} --workers {workers} --output DIR\n"
)


def manifest_texts(name: str, workers: int, image: str) -> dict[str, str]:
    """``file name -> YAML`` of a long-lived service, with a service account of its own."""
    import yaml

    out = {}
    for doc in objects(name, workers, image, own_service_account=True):
        key = doc["kind"]
        if key == "StatefulSet":
            key = doc["metadata"]["name"].rsplit("-")[-1]
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
