"""Multi-node training through the Kubeflow Training Operator v1: the ``kubeflow.org/v1`` TFJob.

One chief and ``workers - 1`` worker replicas run the same image and ``tfrecord-suite train``
arguments; the operator sets ``TF_CONFIG`` in each, and the trainer picks
``MultiWorkerMirroredStrategy`` from it. The chief writes the model and ``metrics.json``. The
lifecycle (create, adopt, watch, logs, cancel) is :mod:`tfrecord_suite.launch.job`'s.
"""

from __future__ import annotations

from typing import Any

from tfrecord_suite.launch.job import (
    FINISHED_TTL_SECONDS,
    NODE_GRACE_SECONDS,
    JobConfig,
    JobKind,
    last_true_condition,
)
from tfrecord_suite.launch.kube import container_security, pod_security

#: The Training Operator only manages the container with this name.
CONTAINER = "tensorflow"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"


def render_tfjob(config: JobConfig) -> dict[str, Any]:
    """The ``TFJob`` object: a chief and ``workers - 1`` workers, each placed the same way."""
    placement = config.placement
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": config.image,
        "command": ["tfrecord-suite", "train"],
        "args": list(config.trainer_args),
        "env": [
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "TF_CPP_MIN_LOG_LEVEL", "value": "2"},
        ],
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
        "securityContext": container_security(),
        "resources": placement.resources(),
    }
    pod_spec: dict[str, Any] = {
        **config.pod_identity(),
        # nodes train; only the launcher (the step's pod) calls the Kubernetes API
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": NODE_GRACE_SECONDS,
        "securityContext": pod_security(),
        "containers": [container],
        "volumes": [
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": placement.shm_size}}
        ],
    }
    if placement.node_selector():
        pod_spec["nodeSelector"] = placement.node_selector()
    if placement.tolerations():
        pod_spec["tolerations"] = placement.tolerations()
    if placement.priority_class:
        pod_spec["priorityClassName"] = placement.priority_class
    config.credentials.apply(pod_spec, [container])

    def replica(count: int) -> dict[str, Any]:
        return {
            "replicas": count,
            "restartPolicy": "OnFailure",
            "template": {"metadata": config.node_pod_metadata(), "spec": pod_spec},
        }

    replicas = {"Chief": replica(1)}
    if config.workers > 1:
        replicas["Worker"] = replica(config.workers - 1)
    return {
        "apiVersion": f"{TFJob.group}/{TFJob.version}",
        "kind": "TFJob",
        "metadata": config.metadata(),
        "spec": {
            "runPolicy": {
                "backoffLimit": config.backoff_limit,
                "activeDeadlineSeconds": int(config.timeout_seconds),
                "ttlSecondsAfterFinished": FINISHED_TTL_SECONDS,
                # when the job ends (its deadline too) the operator deletes the pods still
                # running; finished ones stay, with their logs, until the job is deleted
                "cleanPodPolicy": "Running",
            },
            "tfReplicaSpecs": replicas,
        },
    }


class TFJobKind(JobKind):
    """The Training Operator's TFJob."""

    kind = "TFJob"
    group, version, plural = "kubeflow.org", "v1", "tfjobs"
    container = CONTAINER

    def render(self, config: JobConfig) -> dict[str, Any]:
        """See :func:`render_tfjob`."""
        return render_tfjob(config)

    def pod_selector(self, name: str) -> str:
        """The operator labels each replica pod with its job's name."""
        return f"{JOB_NAME_LABEL}={name}"

    def node_name(self, labels: dict[str, str]) -> str:
        """``chief-0``, ``worker-2``."""
        return f"{labels.get(REPLICA_TYPE_LABEL, '?')}-{labels.get(REPLICA_INDEX_LABEL, '?')}"

    def state(self, job: dict[str, Any]) -> tuple[str, str]:
        """The last true condition (``Created``, ``Running``, ``Succeeded``, ``Failed``...)."""
        last = last_true_condition(job)
        if last is None:
            return "Pending", ""
        kind, message = last
        if kind in ("Succeeded", "Failed", "Running"):
            return kind, message
        return "Pending", message

    def progress(self, job: dict[str, Any]) -> str:
        """``Chief: active=1, Worker: active=3``."""
        replicas = (job.get("status") or {}).get("replicaStatuses") or {}
        return ", ".join(
            f"{rtype}: " + " ".join(f"{s}={n}" for s, n in sorted(counts.items()) if n)
            for rtype, counts in sorted(replicas.items())
        )

    def describe(self, config: JobConfig) -> str:
        """``1 chief + 3 workers``."""
        return f"1 chief + {config.workers - 1} workers"


TFJob = TFJobKind()
