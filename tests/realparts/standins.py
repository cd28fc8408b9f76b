"""The status writes of the two programs the real control plane here lacks: the kubelet (no node
runs containers) and the job operators (no Trainer or Training Operator controller runs).

Everything else is real: objects are created, authorized, admitted, validated, scheduled and
garbage-collected by the real API server and controllers. These helpers only write, as the
admin, the status those programs would write, so the code under test (the launcher) sees a job
move along. They never answer for the API server.
"""

from __future__ import annotations

import contextlib
import datetime
import threading
from typing import Any

from realparts.processes import WaitError, wait_for

JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
#: The label of what a stand-in made (a volume) or runs (a pod).
STAND_IN = "tfrecord-suite/stand-in"


def utc_now() -> str:
    """Now, as the API server writes a time (RFC 3339, UTC, whole seconds)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def container_status(name: str, exit_code: int | None, ready: bool = True) -> dict[str, Any]:
    """A container status as the kubelet reports it: running, or terminated with ``exit_code``."""
    state: dict[str, Any]
    if exit_code is None:
        state = {"running": {"startedAt": utc_now()}}
    else:
        state = {
            "terminated": {
                "exitCode": exit_code,
                "reason": "Completed" if exit_code == 0 else "Error",
                "startedAt": utc_now(),
                "finishedAt": utc_now(),
            }
        }
    return {
        "name": name,
        "ready": ready and exit_code is None,
        "restartCount": 0,
        "image": "stand-in",
        "imageID": "",
        "started": exit_code is None,
        "state": state,
    }


def write_pod_status(
    core: Any, namespace: str, pod: dict[str, Any] | Any, exit_code=None, ready: bool = True
):
    """Write ``pod``'s status as its kubelet would: Running and Ready (``exit_code`` None; not
    Ready with ``ready=False``), or Succeeded / Failed with that exit code for every container."""
    meta = pod["metadata"] if isinstance(pod, dict) else pod.metadata
    spec = pod["spec"] if isinstance(pod, dict) else pod.spec
    name = meta["name"] if isinstance(meta, dict) else meta.name
    containers = [
        c["name"] if isinstance(c, dict) else c.name
        for c in (spec["containers"] if isinstance(spec, dict) else spec.containers)
    ]
    phase = "Running" if exit_code is None else ("Succeeded" if exit_code == 0 else "Failed")
    ready = "True" if exit_code is None and ready else "False"
    status = {
        "phase": phase,
        "conditions": [
            {
                "type": t,
                "status": ready if t in ("Ready", "ContainersReady") else "True",
                "lastTransitionTime": utc_now(),
            }
            for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ],
        "containerStatuses": [container_status(c, exit_code, ready) for c in containers],
        "startTime": utc_now(),
    }
    core.patch_namespaced_pod_status(name, namespace, {"status": status})


class Kubelet:
    """Marks every pod the scheduler bound to a node in ``namespace`` (None: in every
    namespace) Running and Ready, as the
    node's kubelet would once its containers started, and removes the pods being deleted, as it
    would once their containers stopped (a background thread, while in its ``with`` block).

    It also plays a volume provisioner: each pending claim in ``namespace`` gets a volume made
    for it (a hostPath no container ever mounts, labelled ``tfrecord-suite/stand-in``), which
    the real volume binder then binds, as a cluster's default StorageClass would do.

    With ``ready=False`` the containers start but never pass their readiness check (pods
    Running, not Ready); with ``provision=False`` no claim is ever bound (a cluster without a
    default StorageClass). Pods labelled ``tfrecord-suite/stand-in`` are another stand-in's
    (realparts/local_operator.py runs them) and left alone.
    """

    def __init__(
        self,
        api_client: Any,
        namespace: str | None = None,
        interval: float = 0.3,
        ready: bool = True,
        provision: bool = True,
    ):
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace
        self.interval = interval
        self.ready = ready
        self.provision = provision
        self.started: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Kubelet:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        # finish what is being deleted: a pod left Terminating would hold its node's resources
        # for the rest of the session
        with contextlib.suppress(WaitError):  # what is still dying after 30 s is left
            wait_for(self._finish_dying, 30, "pods being deleted", interval=self.interval)

    def _finish_dying(self) -> bool:
        """Delete at once the pods being deleted from a node; True where there are none."""
        dying = [p for p in self._pods() if p.metadata.deletion_timestamp and p.spec.node_name]
        for pod in dying:
            with contextlib.suppress(Exception):
                self.core.delete_namespaced_pod(
                    pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0
                )
        return not dying

    def _pods(self) -> list[Any]:
        if self.namespace:
            return self.core.list_namespaced_pod(self.namespace).items
        return self.core.list_pod_for_all_namespaces().items

    def _provision(self) -> None:
        from kubernetes.client.exceptions import ApiException

        if self.namespace:
            claims = self.core.list_namespaced_persistent_volume_claim(self.namespace).items
        else:
            claims = self.core.list_persistent_volume_claim_for_all_namespaces().items
        for claim in claims:
            if claim.spec.volume_name or claim.metadata.deletion_timestamp:
                continue
            name = f"pv-{claim.metadata.uid}"
            volume = {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": name, "labels": {STAND_IN: "provisioner"}},
                "spec": {
                    "capacity": {"storage": claim.spec.resources.requests["storage"]},
                    "accessModes": claim.spec.access_modes,
                    "persistentVolumeReclaimPolicy": "Retain",
                    "hostPath": {"path": f"/tmp/tfrs-stand-in-volumes/{name}"},
                    "claimRef": {"namespace": claim.metadata.namespace,
                                 "name": claim.metadata.name,
                                 "uid": claim.metadata.uid},
                },
            }  # fmt: skip
            try:
                self.core.create_persistent_volume(volume)
            except ApiException as exc:
                if exc.status != 409:
                    raise

    def _loop(self) -> None:
        from kubernetes.client.exceptions import ApiException

        while not self._stop.wait(self.interval):
            if self.provision:
                with contextlib.suppress(ApiException, OSError):
                    self._provision()
            try:
                pods = self._pods()
            except (ApiException, OSError):
                continue
            for pod in pods:
                if not pod.spec.node_name or STAND_IN in (pod.metadata.labels or {}):
                    continue
                try:
                    if pod.metadata.deletion_timestamp:
                        # the containers stopped: the kubelet removes the pod for good
                        self.core.delete_namespaced_pod(
                            pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0
                        )
                    elif (pod.status.phase or "Pending") == "Pending":
                        write_pod_status(self.core, pod.metadata.namespace, pod, ready=self.ready)
                        self.started.add(pod.metadata.name)
                except ApiException:
                    pass  # deleted meanwhile


# ---------------------------------------------------------------------------- job operators


def nodes(job: dict[str, Any]) -> list[tuple[str, str, int]]:
    """``(pod name, replica type, index)`` of each node of a TFJob or TrainJob, named as JobSet
    (``<jobset>-<replicated job>-<job index>-<completion index>-<suffix>``) and the Training
    Operator (``<job>-<replica type>-<index>``) name them."""
    name = job["metadata"]["name"]
    if job["kind"] == "TrainJob":
        count = job["spec"]["trainer"]["numNodes"]
        return [(f"{name}-node-0-{i}-x{i}", "node", i) for i in range(count)]
    out = []
    for rtype, spec in job["spec"]["tfReplicaSpecs"].items():
        for i in range(spec["replicas"]):
            out.append((f"{name}-{rtype.lower()}-{i}", rtype.lower(), i))
    return out


def node_pod(job: dict[str, Any], pod: str, rtype: str, index: int) -> dict[str, Any]:
    """The pod object of one node, labelled as the operator labels it and owned by the job."""
    name = job["metadata"]["name"]
    if job["kind"] == "TrainJob":
        labels = {
            JOBSET_NAME: name,
            "jobset.sigs.k8s.io/replicatedjob-name": "node",
            "jobset.sigs.k8s.io/job-index": "0",
            "batch.kubernetes.io/job-completion-index": str(index),
        }
        container = "node"
    else:
        labels = {
            "training.kubeflow.org/job-name": name,
            "training.kubeflow.org/replica-type": rtype,
            "training.kubeflow.org/replica-index": str(index),
        }
        container = "tensorflow"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod,
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": job["apiVersion"],
                    "kind": job["kind"],
                    "name": name,
                    "uid": job["metadata"]["uid"],
                }
            ],
        },
        "spec": {
            # no scheduler of that name: the pod stays unbound, so deleting it needs no kubelet
            "schedulerName": "tfrs-unscheduled",
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "containers": [{"name": container, "image": "stand-in", "command": ["true"]}],
        },
    }


#: JobSet's reason and message of a finished JobSet (sigs.k8s.io/jobset pkg/constants), which
#: Trainer v2 copies into the TrainJob's condition
JOBSET_FINISHED = {
    "Succeeded": ("AllJobsCompleted", "jobset completed successfully"),
    "Failed": ("FailedJobs", "jobset failed due to one or more job failures"),
}


def trainjob_status(state: str, reason: str = "", message: str = "") -> dict[str, Any]:
    """A TrainJob's status as Trainer v2 copies it from its JobSet, for ``state`` (Running,
    Succeeded or Failed): a finished one's ``Complete`` or ``Failed`` condition with ``reason``
    and ``message``, and the Job counts of its one replicated job (``node``, every node one of
    its completions)."""
    conditions = []
    if state in ("Succeeded", "Failed"):
        kind = "Complete" if state == "Succeeded" else "Failed"
        conditions.append(
            {"type": kind, "status": "True", "reason": reason, "message": message,
             "lastTransitionTime": utc_now()}
        )  # fmt: skip
    running = state == "Running"
    return {
        "conditions": conditions,
        "jobsStatus": [
            {"name": "node", "active": int(running), "ready": int(running),
             "succeeded": int(state == "Succeeded"), "failed": int(state == "Failed"),
             "suspended": 0}
        ],
    }  # fmt: skip


def job_status(job: dict[str, Any], state: str, message: str) -> dict[str, Any]:
    """The status the operator writes for ``state`` (Running, Succeeded or Failed): TrainJob's
    conditions (Complete/Failed) and jobsStatus; TFJob's conditions and replicaStatuses."""
    if job["kind"] == "TrainJob":
        reason = "JobsCompleted" if state == "Succeeded" else "JobsFailed"
        return trainjob_status(state, reason, message)
    conditions = [{"type": "Created", "status": "True", "reason": "TFJobCreated",
                   "message": "TFJob created", "lastUpdateTime": utc_now(),
                   "lastTransitionTime": utc_now()}]  # fmt: skip
    if state != "Created":
        conditions.append(
            {"type": state, "status": "True", "reason": f"TFJob{state}", "message": message,
             "lastUpdateTime": utc_now(), "lastTransitionTime": utc_now()}
        )  # fmt: skip
    return {
        "conditions": conditions,
        "replicaStatuses": {
            rtype: {
                "active": spec["replicas"] if state == "Running" else 0,
                "succeeded": spec["replicas"] if state == "Succeeded" else 0,
                "failed": 1 if state == "Failed" and rtype == "Worker" else 0,
            }
            for rtype, spec in job["spec"]["tfReplicaSpecs"].items()
        },
    }


def play_operator(
    api_client: Any,
    kind: Any,
    namespace: str,
    name: str,
    state: str,
    message: str = "",
    failing_node: str | None = None,
) -> list[str]:
    """Do what the operator and the kubelets do for a job that ran to ``state``: create its
    node pods (owned by the job), write their exit codes (1 for ``failing_node``, e.g.
    ``worker-1``, else 0; still running for ``Running``) and the job's status. Returns the pods."""
    from kubernetes import client

    custom = client.CustomObjectsApi(api_client)
    core = client.CoreV1Api(api_client)
    job = custom.get_namespaced_custom_object(
        kind.group, kind.version, namespace, kind.plural, name
    )
    made = []
    for pod, rtype, index in nodes(job):
        body = node_pod(job, pod, rtype, index)
        created = core.create_namespaced_pod(namespace, body)
        code = None
        if state in ("Succeeded", "Failed"):
            code = 1 if failing_node == f"{rtype}-{index}" else 0
        write_pod_status(core, namespace, created, exit_code=code)
        made.append(pod)
    custom.patch_namespaced_custom_object_status(
        kind.group, kind.version, namespace, kind.plural, name,
        {"status": job_status(job, state, message)},
    )  # fmt: skip
    return made
